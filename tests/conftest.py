"""Shared test setup: a clean environment, whatever the developer's shell exports, and the
fault suite's table, gathered from every test report (in the process that prints the summary,
whether the tests ran there or in worker processes)."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog

# The shared helpers' asserts explain themselves as a test's do. This must come before anything
# imports them: a helper module imported earlier keeps its plain asserts.
pytest.register_assert_rewrite("tests.support")

from cronwarden import logs  # noqa: E402
from tests.support.faults.tally import (  # noqa: E402
    FAULT_ROW_PROPERTY,
    FaultRow,
    render,
    scenario_order,
)

_FAULT_ROWS: list[FaultRow] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fault-results",
        metavar="PATH",
        help="also write the fault suite's table to PATH (`make faults` writes the one the "
        "docs include), with the date, the commit and the machine",
    )


def pytest_configure(config: pytest.Config) -> None:
    # A developer's CRONWARDEN_* variables (or a .env) must not leak into the tests: each test
    # says what it points at.
    for name in list(os.environ):
        if name.startswith("CRONWARDEN_"):
            del os.environ[name]


@pytest.fixture(autouse=True)
def _logging_as_found() -> Iterator[None]:
    """Each test ends with structlog configured as it found it. The configuration is the whole
    process's, and a pytest process runs many test files: a test that runs the CLI in process
    (`command()(args=[..., "--help"])` runs the root callback, which sets WARNING for the commands
    that print their result) would otherwise leave every later test of that process without its
    INFO events, `capture_logs` seeing only warnings and errors. Which files share a process
    depends on how fast the workers go, so such a leak fails a test only now and then."""
    # Configured first, as importing any module of ours does: what is restored is our setup.
    logs.get_logger(__name__)
    saved = structlog.get_config()
    processors = list(saved["processors"])
    yield
    # Into the same list: loggers bound before hold it (as `capture_logs` keeps it too).
    current = structlog.get_config()["processors"]
    current[:] = processors
    structlog.configure(**{**saved, "processors": current})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The fault_table fixture adds its rows as it finishes: they come with the teardown report.
    if report.when != "teardown":
        return
    for name, value in report.user_properties:
        if name == FAULT_ROW_PROPERTY and isinstance(value, dict):
            _FAULT_ROWS.append(FaultRow(**value))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if not _FAULT_ROWS:
        return
    terminalreporter.section("fault suite")
    # Scenario order (1a, 1b, 2a, ... 9), whatever order the files and workers ran them in.
    table = render(sorted(_FAULT_ROWS, key=scenario_order))
    for line in table.splitlines():
        terminalreporter.write_line(line)
    path = config.getoption("--fault-results")
    if path:
        Path(path).write_text(_fault_results(table))
        terminalreporter.write_line(f"written to {path}")


def _fault_results(table: str) -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "# Fault suite results\n\n"
        f"`make faults` on {when}, commit `{commit or 'unknown'}`, on {os.cpu_count()} cores, "
        f"Python {platform.python_version()}. One row per injected fault; a scenario fails on "
        "any duplicate effect, any missing fire that `backfill plan` does not list, or a check "
        "of its own.\n\n"
        f"{table}\n"
    )
