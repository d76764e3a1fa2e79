"""Args given on the command line instead of a schedule's own: `schedules trigger ID --args
'{...}'` and `backfill run ... --args-file F`.

Each is read and checked before anything starts: JSON, an object, and (against the job
modules of CRONWARDEN_JOBS, as `schedules apply` checks a file) the args model of the job the
schedule runs, unknown keys refused. Any problem is one `InvalidInput` (exit 2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cronwarden.activities.jobs import JobRegistry
from cronwarden.errors import InvalidInput
from cronwarden.schedules.model import args_digest

# Far above any job's args, far below Temporal's payload limit (2 MB by default): the args go
# into the input of every run they start.
MAX_ARGS_BYTES = 256 * 1024


@dataclass(frozen=True)
class OverriddenArgs:
    """Args that replace the schedule's own for the runs one command starts."""

    args: dict[str, Any]
    source: str
    """Where they came from, for messages: `--args` or the file's path."""

    @property
    def digest(self) -> str:
        """What the outbox records for a key run with them (schedules/model.py)."""
        return args_digest(self.args)


def parse_args_text(text: str, *, source: str = "--args") -> OverriddenArgs:
    """`text` as a JSON object; refused with the reason otherwise."""
    if len(text.encode()) > MAX_ARGS_BYTES:
        raise InvalidInput(
            f"{source} is larger than {MAX_ARGS_BYTES // 1024} KiB: nothing started (a run's "
            "args travel in its input)"
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{source} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
            "nothing started"
        ) from None
    if not isinstance(value, dict):
        raise InvalidInput(
            f"{source} must be a JSON object of the job's args, like a schedule's `args:`, "
            f"not {_json_type(value)}: nothing started"
        )
    return OverriddenArgs(value, source)


def read_args_file(path: Path) -> OverriddenArgs:
    """The args of the JSON file at `path`; refused if it is missing, too big or not UTF-8."""
    source = str(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise InvalidInput(f"args file {source} is not a file: nothing started")
        if size > MAX_ARGS_BYTES:
            raise InvalidInput(
                f"args file {source} is larger than {MAX_ARGS_BYTES // 1024} KiB ({size} "
                "bytes): nothing started"
            )
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidInput(f"args file {source} does not exist: nothing started") from None
    except OSError as exc:
        raise InvalidInput(
            f"args file {source} cannot be read ({exc.strerror or exc}): nothing started"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"args file {source} is not UTF-8 (byte {exc.start}): nothing started"
        ) from None
    return parse_args_text(text, source=f"args file {source}")


def check_for_job(given: OverriddenArgs, job: str, registry: JobRegistry | None) -> None:
    """Refuse args the job's model does not take, as `schedules apply` refuses a file's."""
    if registry is None:
        raise InvalidInput(
            f"CRONWARDEN_JOBS is not set: {given.source} needs the job modules to check the "
            f"args against job '{job}'; nothing started"
        )
    try:
        registry.get(job).validate_args(given.args, unknown_keys=False)
    except InvalidInput as exc:
        raise InvalidInput(f"{given.source}: {exc}; nothing started") from None


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"
