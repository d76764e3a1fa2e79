"""What every `cronwarden` command shares: the consoles, settings loading and the error boundary.

Exit codes: 0 ok, 1 operation failed, 2 invalid input or usage. Every expected failure is a
`CronwardenError` rendered as one sentence on stderr; a traceback means a bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import signal
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.segment import Segment

from cronwarden.config import (
    DEFAULT_DATABASE_URL,
    DEV_ENV_FILE,
    Settings,
    settings_error_message,
)
from cronwarden.errors import CronwardenError, DatabaseUnreachable, InvalidInput
from cronwarden.redact import redact, redact_value
from cronwarden.schedules.durations import parse_duration

T = TypeVar("T")
_ZERO = re.compile(r"0+[smhd]")


class _Console(Console):
    """rich's console, with every secret of the process blanked out of what it writes."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        # The one point every print, table and JSON dump passes through as plain text.
        return redact(super()._render_buffer(buffer))

    def on_broken_pipe(self) -> None:
        """The reader went away (`cronwarden dev | tee dev.log`, then Ctrl-C kills tee too).
        rich would raise SystemExit(1) from inside print(): a finally block that reports what
        it stops would then skip the stopping (Temporal was left running). Go quiet instead,
        and point the stream at /dev/null so later plain writes to it succeed too: the command
        finishes its work and keeps its own exit code."""
        self.quiet = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
            os.close(devnull)

    def write_text(self, text: str) -> None:
        """Plain text straight to the stream, past rich's renderer, which parses and styles
        every token (seconds for a large JSON document), yet blanked of secrets and quiet
        after a broken pipe like every print."""
        if self.quiet:
            return
        try:
            self.file.write(redact(text))
            # Flushed now so a reader that left fails this write, not the interpreter's exit.
            self.file.flush()
        except BrokenPipeError:
            self.on_broken_pipe()


out = _Console(highlight=False, soft_wrap=True)
err = _Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(data: Any) -> None:
    """A `--json` document: exactly `rich.print_json`'s text (indent 2, no ASCII escapes),
    without its cost; never highlighted, for colour codes would break the scripts reading it."""
    # Secrets are blanked in the values first: one holding a quote or a backslash would no
    # longer match once JSON escaped it.
    out.write_text(json.dumps(redact_value(data), indent=2, ensure_ascii=False) + "\n")


def print_wide(renderable: Any) -> None:
    """A table, each row on one line: off a terminal (a pipe, a log) rich would squeeze it into
    80 columns."""
    if out.is_terminal:
        out.print(renderable)
        return
    wide = _Console(file=out.file, width=400, highlight=False, quiet=out.quiet)
    wide.print(renderable)
    # A reader that went away during the table silences what the command prints after it too.
    out.quiet = wide.quiet


def load_settings() -> Settings:
    from pydantic import ValidationError

    try:
        return Settings()
    except ValidationError as exc:  # a bad CRONWARDEN_* value
        raise InvalidInput(f"invalid configuration: {settings_error_message(exc)}") from exc


def duration_flag(*, minimum: float = 0.0) -> Callable[[str | float], float]:
    """The parser of a duration flag: `5s`, `2m`, `1h`, `1d` as in schedule files, or a bare
    number of seconds, which is what these flags took before they had units. Gives seconds."""

    def parse(value: str | float) -> float:
        if isinstance(value, int | float):  # the flag's default
            seconds = float(value)
        else:
            text = value.strip()
            try:
                seconds = float(text)
            except ValueError:
                try:
                    # parse_duration refuses zero (a schedule's durations never are); a wait is.
                    seconds = 0.0 if _ZERO.fullmatch(text) else parse_duration(text).total_seconds()
                except ValueError:
                    raise typer.BadParameter(
                        f"'{value}' is not a duration: write 30s, 5m, 1h, 1d or a number of seconds"
                    ) from None
        if not math.isfinite(seconds):
            raise typer.BadParameter(f"'{value}' is not a duration")
        if seconds < minimum:
            raise typer.BadParameter(f"'{value}' is shorter than the minimum, {minimum:g}s")
        return seconds

    return parse


def fail(message: str, code: int) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True)
    return typer.Exit(code)


def _dev_hint(dsn: str) -> str:
    # The usual cause: a second shell beside `cronwarden dev`, whose Postgres is on another
    # port, without the settings dev wrote for it.
    if dsn != DEFAULT_DATABASE_URL:
        return ""
    return (
        "; CRONWARDEN_DATABASE_URL is not set, so that is the default. For the stack "
        f"`cronwarden dev` runs, load its settings first: set -a; . {DEV_ENV_FILE}; set +a"
    )


# 128 + SIGTERM, what a shell reports for a process the signal ended.
EXIT_TERMINATED = 128 + signal.SIGTERM


class _Terminated(Exception):
    pass


async def _stoppable(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`make()`, cancelled by SIGTERM. A container's entrypoint is PID 1, and the kernel gives
    PID 1 no default action for SIGTERM: without a handler `kubectl delete`, a rollout or a
    node drain would wait out the whole grace period on an init container's `migrate --check
    --wait`, then SIGKILL it. Commands that stop gracefully (worker, monitor, dev) install their
    own handler in its place while they run."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        terminated = True
        task.cancel()

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        return await make()
    except asyncio.CancelledError:
        if terminated:
            raise _Terminated from None
        raise


def run_command(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one command's coroutine and turn every expected failure into an exit code."""
    from asyncpg import InterfaceError, PostgresError, UndefinedTableError
    from temporalio.service import RPCError

    try:
        return asyncio.run(_stoppable(make))
    except _Terminated:
        raise typer.Exit(EXIT_TERMINATED) from None
    except DatabaseUnreachable as exc:
        raise fail(str(exc) + _dev_hint(exc.dsn), exc.exit_code) from None
    except CronwardenError as exc:
        raise fail(str(exc), exc.exit_code) from None
    # A server that was reachable and then refused or broke off mid-operation: still one
    # sentence, still exit 1, never a traceback.
    except RPCError as exc:
        raise fail(f"Temporal refused the request ({exc.status.name}): {exc.message}", 1) from None
    except UndefinedTableError as exc:
        raise fail(f"{exc}: the database is not migrated; run `cronwarden migrate`", 1) from None
    except (PostgresError, InterfaceError) as exc:
        raise fail(f"Postgres failed the request: {exc}", 1) from None
    except ConnectionError as exc:
        raise fail(f"lost a connection: {exc}", 1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
