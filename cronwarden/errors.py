"""Errors that reach a user. Each carries the exit code the CLI turns it into."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2


class CronwardenError(Exception):
    """An expected failure, rendered as one sentence by the CLI (never a traceback)."""

    exit_code = EXIT_FAILED


class InvalidInput(CronwardenError):
    """The user gave us something we refuse: a bad schedule file, duration, argument or setting."""

    exit_code = EXIT_INVALID


class ScheduleFileError(InvalidInput):
    """A schedule file with one or more bad entries; nothing of it is applied."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{path}: {len(problems)} problem(s), nothing applied:\n{lines}")


class Unreachable(CronwardenError):
    """A server we depend on (Temporal, Postgres) did not answer."""


class DatabaseUnreachable(Unreachable):
    """Postgres did not answer at `dsn` (kept to tell a default DSN from a configured one)."""

    def __init__(self, message: str, *, dsn: str) -> None:
        super().__init__(message)
        self.dsn = dsn


class PortInUse(CronwardenError):
    """A port the embedded stack wants is taken by another process."""
