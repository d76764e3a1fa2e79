"""What every command prints: `--json` documents written past rich's renderer still read the
same, carry no secret, and a reader that goes away mid-document ends nothing but the output."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from cronwarden import redact
from cronwarden.cli import support as cli_support
from cronwarden.redact import MASK

DOCUMENTS: list[Any] = [
    {},
    {"schedules": []},
    {"schedules": [{"id": "billing-é", "paused": False, "next": None, "lag": 1.5, "n": 3}]},
    {"nested": {"list": [[], [1, {"a": 'q"uote\n'}]], "empty": {}}},
    [],
]


@pytest.fixture
def printed(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    text = io.StringIO()
    monkeypatch.setattr(cli_support.out, "file", text)
    return text


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_json_document_reads_exactly_as_rich_printed_it(
    printed: io.StringIO, document: Any
) -> None:
    # Scripts parse these documents; changing the writer must not change one byte of them.
    rich_text = io.StringIO()
    Console(file=rich_text, highlight=False, soft_wrap=True).print_json(
        data=document, highlight=False
    )
    cli_support.emit_json(document)
    assert printed.getvalue() == rich_text.getvalue()
    assert json.loads(printed.getvalue()) == document


def test_a_json_document_never_shows_a_secret(
    printed: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redact, "_secrets", ())
    # The second holds characters JSON escapes: it must be blanked before it is escaped.
    redact.remember(["hunter2-webhook-token", 'pa"ss\\w0rd'])
    cli_support.emit_json(
        {
            "sink": "https://hooks.example/hunter2-webhook-token",
            "dsn": 'postgresql://a:pa"ss\\w0rd@db',
        }
    )
    assert "hunter2" not in printed.getvalue() and "w0rd" not in printed.getvalue()
    assert json.loads(printed.getvalue()) == {
        "sink": f"https://hooks.example/{MASK}",
        "dsn": f"postgresql://a:{MASK}@db",
    }


def test_a_wide_table_off_a_terminal_keeps_each_row_on_one_line_and_no_secret(
    printed: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redact, "_secrets", ())
    redact.remember(["s3cret-in-a-cell"])
    table = Table("id", "spec")
    long_spec = "cron 0 9 * * MON-FRI at Europe/Amsterdam, jitter 5m " * 3
    table.add_row("payroll", long_spec + "s3cret-in-a-cell")
    cli_support.print_wide(table)
    rows = [line for line in printed.getvalue().splitlines() if "payroll" in line]
    assert len(rows) == 1 and long_spec.strip() in rows[0]
    assert "s3cret" not in printed.getvalue()


def test_a_reader_that_goes_away_ends_the_output_not_the_command() -> None:
    # `cronwarden status --json | head -1`: the rest of the document is dropped, the command
    # still finishes its work and exits with its own code, and no traceback reaches stderr.
    program = textwrap.dedent(
        """
        import sys
        from cronwarden.cli.support import emit_json, out
        from cronwarden.cli.backfill import _print_lines
        document = {"keys": [f"s@2026-12-01T00:{i:06d}Z" for i in range(200_000)]}
        emit_json(document)
        _print_lines(f"  key {i}" for i in range(200_000))
        emit_json(document)
        print("finished", file=sys.stderr)
        sys.exit(7)
        """
    )
    shell = f"{sys.executable} -c '{program}' | head -c 10 >/dev/null"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True, timeout=120
    )
    assert done.stderr.strip() == "finished"
    assert done.returncode == 7
