"""Shared test setup: a clean environment, whatever the developer's shell exports, and the
fault suite's table, gathered from every test report (in the process that prints the summary,
whether the tests ran there or in worker processes)."""

from __future__ import annotations

import os

import pytest

from tests.faults.tally import FAULT_ROW_PROPERTY, FaultRow, render, scenario_order

_FAULT_ROWS: list[FaultRow] = []


def pytest_configure(config: pytest.Config) -> None:
    # A developer's CRONWARDEN_* variables (or a .env) must not leak into the tests: each test
    # says what it points at.
    for name in list(os.environ):
        if name.startswith("CRONWARDEN_"):
            del os.environ[name]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The fault_table fixture adds its rows as it finishes: they come with the teardown report.
    if report.when != "teardown":
        return
    for name, value in report.user_properties:
        if name == FAULT_ROW_PROPERTY and isinstance(value, dict):
            _FAULT_ROWS.append(FaultRow(**value))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FAULT_ROWS:
        return
    terminalreporter.section("fault suite")
    # Scenario order (1a, 1b, 2a, ... 9), whatever order the files and workers ran them in.
    for line in render(sorted(_FAULT_ROWS, key=scenario_order)).splitlines():
        terminalreporter.write_line(line)
