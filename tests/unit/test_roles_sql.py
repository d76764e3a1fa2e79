"""deploy/sql/roles.sql repeats two pieces of `cronwarden migrate`, for a database prepared before
any migration ran: the ledger table, and the runtime role's exceptions to its default grants.
Each copy must stay what migrate runs."""

from __future__ import annotations

import re
from pathlib import Path

from cronwarden.store.migrate import LEDGER_DDL, RUNTIME_EXCEPTIONS

ROLES_SQL = Path(__file__).resolve().parents[2] / "deploy" / "sql" / "roles.sql"


def squeezed(sql: str) -> str:
    return " ".join(re.sub(r"--[^\n]*", "", sql).split())


def revokes(sql: str) -> set[str]:
    return {" ".join(r.split()) for r in re.findall(r"REVOKE [^;]+cronwarden_runtime", sql)}


def test_roles_sql_creates_the_ledger_with_the_statement_migrate_runs() -> None:
    assert squeezed(LEDGER_DDL) in squeezed(ROLES_SQL.read_text())


def test_roles_sql_revokes_what_migrate_revokes_from_the_runtime_role() -> None:
    ours = revokes(RUNTIME_EXCEPTIONS)
    assert len(ours) == 3, ours
    assert ours == revokes(ROLES_SQL.read_text())
