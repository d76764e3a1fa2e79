"""structlog setup: JSON lines when not on a terminal, readable lines on one.

Event names are stable (`run.committed`, `worker.draining`): dashboards and alerts key on them.
"""

from __future__ import annotations

import contextlib
import logging
import sys

import structlog

from cronwarden.redact import redact_value

_configured = False


class _Writer(structlog.PrintLogger):
    """A line that cannot be written (a reader that went away: `cronwarden dev | tee` after
    Ctrl-C, a closed terminal) is dropped: logging must never abort the work it reports on,
    least of all a shutdown that still has servers to stop."""

    def msg(self, message: str) -> None:
        # ValueError: the stream was closed under us.
        with contextlib.suppress(OSError, ValueError):
            super().msg(message)

    log = debug = info = warn = warning = fatal = failure = err = error = critical = exception = msg


class _WriterFactory(structlog.PrintLoggerFactory):
    def __call__(self, *args: object) -> _Writer:
        return _Writer(self._file)


def _redact_secrets(
    _logger: object, _method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    # Last before rendering, after the traceback became text: nothing reaches a line unscrubbed.
    return {key: redact_value(value) for key, value in event.items()}


def configure(*, level: str = "INFO", json: bool | None = None) -> None:
    global _configured
    if json is None:
        json = not sys.stderr.isatty()
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=_WriterFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    if not _configured:
        configure()
    return structlog.get_logger(name)  # type: ignore[no-any-return]
