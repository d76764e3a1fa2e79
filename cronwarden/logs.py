"""structlog setup: JSON lines when not on a terminal, readable lines on one.

Event names are stable (`run.committed`, `worker.draining`): dashboards and alerts key on them.
"""

from __future__ import annotations

import logging
import sys

import structlog

_configured = False


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
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    if not _configured:
        configure()
    return structlog.get_logger(name)  # type: ignore[no-any-return]
