"""Which definition was in force when: the pieces of a window, each with its own spec.

`schedules apply` records each definition it writes with the time Temporal gives for the write
(store/definitions.py). A fire at or before that second was judged by the previous spec (Temporal
had processed it already, or would judge it late against the spec it held then); a later one by
the new spec. Fire times are whole seconds, so the boundary is the applied time's second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import TypeAdapter

from cronwarden.backfill.window import Window
from cronwarden.schedules.model import ScheduleDefinition

_DURATIONS = ("every", "catchup_window", "heartbeat_grace", "lock_ttl", "timeout", "jitter")
# Written by the definitions that set duration bounds (absent from the others).
_BOUND_DURATIONS = ("late_start",)
_TIMEDELTA = TypeAdapter(timedelta)
# What `definition_json` adds to a definition's own fields (schedules/mapping.py).
_MAPPING_KEYS = ("task_queue", "workflow", "mapping_version", "zone_compiled")


ENDED = "ended"
UNRECORDED = "unrecorded"


@dataclass(frozen=True)
class Applied:
    """One recorded apply of a definition."""

    applied_at: datetime
    digest: str
    definition: dict[str, Any]
    deleted: bool = False
    """A delete: the schedule's life ended here, no fire is due until the next row."""
    inferred: str | None = None
    """Not a row of the history: `ENDED` (a life's end where no delete was recorded) or
    `UNRECORDED` (the definition Temporal holds, whose row was lost); see
    backfill/plan.py `effective_history`."""

    def rebuilt(self) -> ScheduleDefinition:
        """The definition again, without the "can it still fire" check: it is history."""
        fields = {k: v for k, v in self.definition.items() if k not in _MAPPING_KEYS}
        for name in (*_DURATIONS, *_BOUND_DURATIONS):
            # JSON writes durations in ISO 8601 (PT1M); the file's parser takes 1m only.
            if isinstance(fields.get(name), str):
                fields[name] = _TIMEDELTA.validate_python(fields[name])
        bounds = fields.get("expected_duration")
        if isinstance(bounds, dict):
            fields["expected_duration"] = {
                k: _TIMEDELTA.validate_python(v) if isinstance(v, str) else v
                for k, v in bounds.items()
            }
        return ScheduleDefinition.model_validate(fields, context={"history": True})

    @property
    def task_queue(self) -> str:
        return str(self.definition.get("task_queue", ""))


@dataclass(frozen=True)
class Segment:
    window: Window
    applied: Applied | None
    """The definition in force; None: before any recorded apply (the live spec is all we know);
    a deleted row: between two lives of the id, when nothing was due."""


def segments(history: Sequence[Applied], window: Window) -> list[Segment]:
    """The window cut at each apply inside it, oldest first; `history` sorted by applied_at."""
    out: list[Segment] = []
    in_force: Applied | None = None
    start = window.start
    for applied in history:
        # The last second the previous definition decided.
        boundary = applied.applied_at.replace(microsecond=0)
        if boundary < start:
            in_force = applied
            continue
        if boundary >= window.end:
            break
        out.append(Segment(Window(start, boundary), in_force))
        start = boundary + timedelta(seconds=1)
        in_force = applied
    if start <= window.end:
        out.append(Segment(Window(start, window.end), in_force))
    return out
