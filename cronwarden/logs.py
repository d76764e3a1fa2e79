"""structlog setup: JSON lines when not on a terminal, readable lines on one.

Event names are stable (`run.committed`, `worker.draining`): dashboards and alerts key on them.
Libraries that log through the standard library (the Temporal SDK, aiohttp, asyncio, httpx) are
bridged into the same pipeline, so their lines are redacted like ours (`library.log`).
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


class _StdlibBridge(logging.Handler):
    """The standard library's records as `library.log` events of our own pipeline, redacted
    like every other line. Left to the standard library, the Temporal SDK's "Completing
    activity as failed" (with the job's traceback, which may quote a DSN or a webhook URL),
    aiohttp's request errors and asyncio's "exception was never retrieved" reach stderr raw."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a library's bad format string: its template still says something
            message = str(record.msg)
        fields: dict[str, object] = {"logger": record.name, "message": message}
        if record.exc_info:
            fields["exc_info"] = record.exc_info
        if record.stack_info:
            fields["stack"] = record.stack_info
        get_logger(record.name).log(record.levelno, "library.log", **fields)

    def handleError(self, record: logging.LogRecord) -> None:
        # The default prints the record's message and arguments raw to stderr.
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"cronwarden: a {record.name} log line could not be written\n")


_BRIDGE = _StdlibBridge()
# Quieter than our own lines: these libraries say at INFO what each request did (httpx names
# the URL, a Slack webhook's being its credential), at DEBUG far more.
_LIBRARY_LEVEL = logging.WARNING


def _bridge_stdlib_logging() -> None:
    root = logging.getLogger()
    if _BRIDGE not in root.handlers:
        root.addHandler(_BRIDGE)
    root.setLevel(_LIBRARY_LEVEL)
    for name in ("temporalio", "aiohttp", "asyncio"):
        # Through the root's bridge only, whatever a library or an embedding program set.
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True


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
    _bridge_stdlib_logging()


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    if not _configured:
        configure()
    return structlog.get_logger(name)  # type: ignore[no-any-return]
