"""The schedule file: one `ScheduleDefinition` per entry, all checked before anything is applied.

`load_schedule_file` reports every problem in the file at once, each naming its entry and field,
so a user fixes a file in one pass instead of one error per run.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Hashable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from cronwarden.activities.contract import PER_KEY_LOCK_PREFIX
from cronwarden.activities.jobs import InvalidArgs, JobRegistry, UnknownJob
from cronwarden.errors import InvalidInput, ScheduleFileError
from cronwarden.schedules.cron import validate_cron
from cronwarden.schedules.duplicates import duplicates_in_file
from cronwarden.schedules.durations import parse_duration
from cronwarden.schedules.firing import finished_note, never_fires
from cronwarden.schedules.labels import check_labels
from cronwarden.schedules.maintenance import (
    MaintenanceWindow,
    check_windows,
    covers_every_fire,
    never_ends,
    window_skips,
)
from cronwarden.schedules.spec_parts import SkipCalendar, skip_calendar, utc_instant
from cronwarden.schedules.zones import UTC_NAMES, DstGap, LocalSpec, check_zone_name
from cronwarden.times import format_duration

_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_LOCK_MAX = 200


_WIDEST_WEST_OFFSET = timedelta(hours=12)


class Overlap(StrEnum):
    """What Temporal does when a fire time comes while the previous run is still going."""

    skip = "skip"
    buffer_one = "buffer_one"
    allow_all = "allow_all"


# Floors for the duration fields, with the reason each exists (shown to the user when refused).
_MINIMUMS: dict[str, tuple[timedelta, str]] = {
    "every": (timedelta(seconds=1), "Temporal's interval resolution is one second"),
    "catchup_window": (timedelta(seconds=10), "Temporal's floor for a catchup window"),
    "lock_ttl": (
        timedelta(seconds=5),
        "a shorter lease can lapse between renewals on a busy worker",
    ),
    "timeout": (timedelta(seconds=1), "a run needs at least a second to start"),
    "jitter": (timedelta(seconds=1), "durations are written in whole seconds or more"),
}
# The spec fields added after the first release: left out of the digest while unset, so adding
# them to the model did not change the digest (and re-apply) of every existing schedule.
SPEC_EXTRAS = (
    "start_at",
    "end_at",
    "exclude",
    "jitter",
    "timezone",
    "dst_gap",
    "dst_repeat",
    "labels",
    "expected_duration",
    "late_start",
    "maintenance",
)


# Floors of the run bounds, with the reason each exists (shown to the user when refused).
_DURATION_BOUND_FLOOR = (timedelta(seconds=1), "durations are whole seconds or more")
_LATE_START_FLOOR = (
    timedelta(seconds=30),
    "Temporal starts a fire some seconds after its time on a busy cluster, so a shorter bound "
    "would page on ordinary lag",
)


def _bound_duration(value: object, floor: tuple[timedelta, str]) -> timedelta:
    """A bound's duration, refused below its floor with the floor's reason."""
    duration = _duration(value)
    if duration < floor[0]:
        raise ValueError(
            f"{format_duration(duration)} is below the minimum of "
            f"{format_duration(floor[0])} ({floor[1]})"
        )
    return duration


class ExpectedDuration(BaseModel):
    """How long a run of the schedule should take, judged when it ends: a run done in less than
    `min` (the job did nothing?) or more than `max` pages."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    min: timedelta | None = None
    """A run that ends sooner than this pages `too-fast`."""
    max: timedelta | None = None
    """A run that ends later than this pages `too-slow` (it must be below `timeout`)."""

    @field_validator("min", "max", mode="before")
    @classmethod
    def _parse_bound(cls, value: object) -> object:
        return None if value is None else _bound_duration(value, _DURATION_BOUND_FLOOR)

    @model_validator(mode="after")
    def _check_order(self) -> ExpectedDuration:
        if self.min is None and self.max is None:
            raise ValueError("give `min`, `max` or both (e.g. {min: 5s, max: 10m}), or remove it")
        if self.min is not None and self.max is not None and self.min >= self.max:
            raise ValueError(
                f"min ({format_duration(self.min)}) must be shorter than max "
                f"({format_duration(self.max)})"
            )
        return self


class ScheduleDefinition(BaseModel):
    """One entry of a schedule file, validated on its own (job checks need a registry)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    id: str
    """Schedule id in Temporal and every table: 1-63 lowercase letters, digits and dashes."""
    job: str
    """Name of the registered job the schedule runs."""
    cron: str | list[str] | None = None
    """When to fire, in UTC or the `timezone`'s wall time: a cron expression of 5 fields, 6 (the
    6th is the year) or 7 (seconds first, year last), or a list of them (the schedule fires at
    each one's times)."""
    every: timedelta | None = None
    """When to fire, as a fixed interval from the epoch (e.g. 15m); set this or `cron`."""
    overlap: Overlap = Overlap.skip
    """What to do with a fire time that arrives while the previous run is still going."""
    catchup_window: timedelta = timedelta(hours=1)
    """How late a missed fire time (server down, schedule paused) may still run."""
    pause_on_failure: bool = Field(default=True, strict=True)
    """Pause the schedule after a run fails, so a broken job is looked at instead of retried."""
    heartbeat_grace: timedelta = timedelta(minutes=15)
    """How long after an expected run its absence pages someone."""
    lock: str | None = None
    """Shared lock name, for schedules that must never run at the same time as each other."""
    lock_ttl: timedelta = timedelta(seconds=60)
    """Lease lifetime between renewals: a dead worker blocks the lock at most this long."""
    timeout: timedelta = timedelta(minutes=15)
    """Longest a single attempt of the job may run before it is cancelled."""
    max_attempts: int = Field(default=3, ge=1, le=100, strict=True)
    """How many times the activity is tried before the run counts as failed."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Arguments handed to the job, checked against its `args_model` when it has one."""
    allow_duplicate: bool = Field(default=False, strict=True)
    """Let this schedule share job, trigger and args with another one (refused by default)."""
    start_at: datetime | None = None
    """No fire before this instant (ISO 8601 with a zone, kept in UTC)."""
    end_at: datetime | None = None
    """No fire after this instant; once it has passed the schedule is finished, not late."""
    exclude: tuple[SkipCalendar, ...] = ()
    """Dates (2026-12-25) or calendar entries ({day_of_week: sat,sun}) on which nothing fires."""
    maintenance: tuple[MaintenanceWindow, ...] = ()
    """Recurring windows ({days: sun, from: "02:00", to: "04:00"}) on the schedule's wall clock
    in which fires are skipped, so nothing is due and nothing pages."""
    jitter: timedelta | None = None
    """Each fire starts up to this much after its nominal time; the logical key stays nominal."""
    expected_duration: ExpectedDuration | None = None
    """How long a run should take ({min: 5s, max: 10m}): a run that ends outside it pages."""
    late_start: timedelta | None = None
    """A live run whose job starts this long after its nominal fire time pages `late-start`;
    counted from the nominal time, so jitter counts and `late_start` must exceed it."""

    @field_validator("expected_duration", mode="before")
    @classmethod
    def _check_expected_duration(cls, value: object) -> object:
        if value is not None and not isinstance(value, dict | ExpectedDuration):
            raise ValueError(f"expected a mapping such as {{min: 5s, max: 10m}}, got {value!r}")
        return value

    @field_validator("late_start", mode="before")
    @classmethod
    def _parse_late_start(cls, value: object) -> object:
        return None if value is None else _bound_duration(value, _LATE_START_FLOOR)

    @model_validator(mode="after")
    def _check_run_bounds(self) -> ScheduleDefinition:
        bounds = self.expected_duration
        if bounds is not None and bounds.max is not None and bounds.max >= self.timeout:
            # The guard cancels the job at its timeout, and a cancelled run records no duration.
            raise ValueError(
                f"`expected_duration.max` ({format_duration(bounds.max)}) must be shorter "
                f"than `timeout` ({format_duration(self.timeout)}): a run is cancelled at its "
                "timeout, so it could never end later than max"
            )
        if bounds is not None and bounds.min is not None and bounds.min >= self.timeout:
            raise ValueError(
                f"`expected_duration.min` ({format_duration(bounds.min)}) must be shorter "
                f"than `timeout` ({format_duration(self.timeout)}): every run would page"
            )
        late, jitter = self.late_start, self.jitter
        if late is not None and jitter is not None and late <= jitter:
            raise ValueError(
                f"`late_start` ({format_duration(late)}) must be longer than "
                f"`jitter` ({format_duration(jitter)}): lateness counts from the "
                "nominal fire time, which jitter alone may delay by up to its length"
            )
        return self

    timezone: str | None = None
    """IANA zone (Europe/Berlin) whose wall clock `cron` and `exclude` name; UTC when unset.
    Logical keys stay UTC instants; daylight saving follows the rule in docs/time-zones.md."""
    dst_gap: Literal["shift", "skip"] | None = None
    """A wall time the clocks jump over: `shift` (default) fires it at the end of the gap,
    `skip` does not fire it."""
    dst_repeat: Literal["once", "each"] | None = None
    """A wall time that happens twice: `once` fires the first, `each` both; unset, fixed hours
    fire once and an hour field of `*` or a step fires each."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Up to 16 `key: value` pairs (team: billing) carried into pages, `list --label` and,
    opted in, metrics; keys and values follow Kubernetes' label rules (docs/schedule-file.md)."""

    @field_validator("labels", mode="before")
    @classmethod
    def _check_labels(cls, value: object) -> object:
        return check_labels(value)

    @field_validator("id", mode="after")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not _ID.fullmatch(value):
            raise ValueError(
                f"'{value}' is not a valid id: use 1-63 lowercase letters, digits and dashes, "
                "starting with a letter or digit"
            )
        return value

    @field_validator("cron", mode="after")
    @classmethod
    def _check_cron(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is None or isinstance(value, str):
            return None if value is None else validate_cron(value)
        if not value:
            raise ValueError("the cron list is empty; give at least one expression or use `every`")
        checked = []
        for index, expr in enumerate(value):
            try:
                checked.append(validate_cron(expr))
            except ValueError as exc:
                raise ValueError(f"cron[{index}]: {exc}") from None
        repeated = sorted({e for e in checked if checked.count(e) > 1})
        if repeated:
            raise ValueError(f"the cron list repeats {', '.join(repr(e) for e in repeated)}")
        return checked

    @model_validator(mode="before")
    @classmethod
    def _interval_zone(cls, data: object) -> object:
        # An interval counts real time: a zone means something to it only through its
        # exclusions. Without any, it is a UTC schedule (no compiled entries, no horizon to
        # re-apply before), wherever the zone came from (the entry or the file's default).
        if (
            isinstance(data, dict)
            and data.get("every") is not None
            and data.get("cron") is None
            and not data.get("exclude")
            and not data.get("maintenance")
            and data.get("dst_gap") is None
            and data.get("dst_repeat") is None
        ):
            return {k: v for k, v in data.items() if k != "timezone"}
        return data

    @field_validator("timezone", mode="before")
    @classmethod
    def _check_timezone(cls, value: object) -> object:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(
                f"expected an IANA time zone name such as Europe/Berlin, got {value!r}"
            )
        name = check_zone_name(value)
        # A UTC name is no zone at all: nothing to compile, and the digest stays that of a plain
        # UTC schedule, so writing `timezone: UTC` changes nothing.
        return None if name in UTC_NAMES else name

    @field_validator("start_at", "end_at", mode="before")
    @classmethod
    def _parse_instant(cls, value: object, info: ValidationInfo) -> object:
        return None if value is None else utc_instant(value, field=info.field_name or "")

    @field_validator("maintenance", mode="wrap")
    @classmethod
    def _check_windows(
        cls, value: object, read: ValidatorFunctionWrapHandler
    ) -> tuple[MaintenanceWindow, ...]:
        # Each window is read on its own first (its errors name it); then all of them together
        # must leave some time outside.
        windows: tuple[MaintenanceWindow, ...] = read(check_windows(value))
        reason = never_ends(windows)
        if reason is not None:
            raise ValueError(reason)
        return windows

    @field_validator("exclude", mode="before")
    @classmethod
    def _parse_exclusions(cls, value: object) -> object:
        if value is None:
            return ()
        if not isinstance(value, list | tuple):
            raise ValueError("`exclude` must be a list of dates (2026-12-25) or calendar mappings")
        return [skip_calendar(item) for item in value]

    @field_validator(
        "every",
        "catchup_window",
        "heartbeat_grace",
        "lock_ttl",
        "timeout",
        "jitter",
        mode="before",
    )
    @classmethod
    def _parse_duration(cls, value: object, info: ValidationInfo) -> object:
        if value is None and info.field_name in ("every", "jitter"):
            return None
        duration = _duration(value)
        floor = _MINIMUMS.get(info.field_name or "")
        if floor is not None and duration < floor[0]:
            raise ValueError(
                f"{format_duration(duration)} is below the minimum of "
                f"{format_duration(floor[0])} ({floor[1]})"
            )
        return duration

    @field_validator("lock", mode="after")
    @classmethod
    def _check_lock(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            # An empty name would silently fall back to nothing shared; say so instead.
            raise ValueError("the lock name is empty; remove `lock` to use schedule:{id}")
        if len(value) > _LOCK_MAX:
            raise ValueError(f"the lock name is {len(value)} characters; the limit is {_LOCK_MAX}")
        if value.startswith(PER_KEY_LOCK_PREFIX):
            # allow_all's per-fire-time leases live there; a shared lock must never be one.
            raise ValueError(
                f"the lock name '{value}' starts with '{PER_KEY_LOCK_PREFIX}', which is reserved "
                "for allow_all's per-fire-time leases; choose another name"
            )
        return value

    @field_validator("args", mode="after")
    @classmethod
    def _check_args_are_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Args travel as JSON (Temporal payloads, the digest); YAML can also produce dates, sets and
        # the like, which would fail far from the file, so refuse them here with their path.
        _require_json(value, "args")
        return value

    @model_validator(mode="after")
    def _check_one_trigger(self) -> ScheduleDefinition:
        if self.cron is not None and self.every is not None:
            raise ValueError("set exactly one of `cron` and `every`: this entry sets both")
        if self.cron is None and self.every is None:
            raise ValueError("set exactly one of `cron` and `every`: this entry sets neither")
        return self

    @model_validator(mode="after")
    def _check_daylight_saving_fields(self) -> ScheduleDefinition:
        for name in ("dst_gap", "dst_repeat"):
            if getattr(self, name) is None:
                continue
            if self.timezone is None:
                raise ValueError(
                    f"`{name}` applies only to a schedule with a `timezone`: a UTC schedule has "
                    "no daylight saving; remove it or set `timezone`"
                )
            if self.cron is None:
                raise ValueError(
                    f"`{name}` applies to cron wall times; an `every` interval counts real "
                    "time and never meets daylight saving; remove it"
                )
        return self

    @model_validator(mode="after")
    def _check_allow_all_has_no_shared_lock(self) -> ScheduleDefinition:
        # allow_all takes one lease per logical key, so its runs never hold a shared lock:
        # accepting `lock` would let them run while another schedule holds it.
        if self.overlap is Overlap.allow_all and self.lock is not None:
            raise ValueError(
                f"overlap allow_all cannot share the lock '{self.lock}': its runs take one lease "
                "per fire time and would run while another schedule holds that lock; remove "
                "`lock`, or use skip or buffer_one"
            )
        return self

    @model_validator(mode="after")
    def _check_it_fires(self, info: ValidationInfo) -> ScheduleDefinition:
        # Temporal would take such a spec and never run it; the monitor would then wait for a
        # first heartbeat that cannot come. `now` comes from the validation context in tests.
        context = info.context if isinstance(info.context, dict) else {}
        if context.get("history"):
            # A definition read back from the history judged past fires; that it cannot fire
            # any more is expected, not a problem.
            return self
        now = context.get("now") or datetime.now(UTC)
        reason = never_fires(
            crons=self.crons,
            every=self.every,
            start_at=self.start_at,
            end_at=self.end_at,
            skips=self.skip_calendars,
            now=self._wall_now(now),
        )
        if reason is None:
            reason = covers_every_fire(
                self.maintenance,
                crons=self.crons,
                every=self.every,
                zoned=self.timezone is not None,
            )
        if reason is not None:
            raise ValueError(f"this schedule never fires: {reason}")
        return self

    def finished(self, now: datetime) -> str | None:
        """Why the schedule fires no more (its end_at has passed, or its cron's years have), or
        None while it may fire.

        A finished entry still passes validation (it could fire in its life); apply keeps it
        and reports it, and never creates it anew.
        """
        if self.end_at is not None and self.end_at <= now:
            return finished_note(self.end_at, now=now)
        return finished_note(
            self.end_at,
            now=self._wall_now(now),
            crons=self.crons,
            start_at=self.start_at,
            skips=self.skip_calendars,
        )

    def _wall_now(self, now: datetime) -> datetime:
        """`now` for judging a cron's fields, which are checked in UTC: a zoned cron's wall
        times come up to 12 hours later in UTC (UTC-12), so its last year may still fire then.
        Erring late only keeps an ended entry live a few hours more (Temporal fires nothing)."""
        return now - _WIDEST_WEST_OFFSET if self.timezone is not None else now

    @property
    def crons(self) -> list[str]:
        """The cron expressions, a single one as a list of one."""
        if self.cron is None:
            return []
        return [self.cron] if isinstance(self.cron, str) else list(self.cron)

    @property
    def local_spec(self) -> LocalSpec | None:
        """The wall-time intent of a zoned schedule (None: UTC)."""
        if self.timezone is None:
            return None
        return LocalSpec(
            zone=self.timezone,
            crons=tuple(self.crons),
            # The windows follow the wall clock like the exclusions they compile to.
            exclude=self.skip_calendars,
            dst_gap=self.dst_gap or DstGap.SHIFT,
            dst_repeat=self.dst_repeat,
        )

    @property
    def skip_calendars(self) -> tuple[SkipCalendar, ...]:
        """What the spec skips: the file's exclusions, then the maintenance windows' calendars
        (the definition keeps both fields as written)."""
        return self.exclude + window_skips(self.maintenance)

    @property
    def lock_name(self) -> str:
        """The lock a run must hold: the shared one if named, else one private to this schedule."""
        return self.lock or f"schedule:{self.id}"

    def args_digest(self) -> str:
        """A stable fingerprint of the args, independent of key order in the file."""
        return args_digest(self.args)


def args_digest(args: Mapping[str, Any]) -> str:
    """The fingerprint the outbox records for a run's args: the same for a schedule file's args
    and for args given on the command line (`trigger --args`, `backfill run --args-file`), so a
    key done with other args is told apart from one done with these."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        # Lets a definition be rebuilt from its own model_dump(); YAML never produces one.
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected a duration such as 15m, got {value!r}")
    if not isinstance(value, str):
        # A bare number would be seconds to pydantic and minutes to half our users: refuse it.
        raise ValueError(f"{value} has no unit: add s, m, h or d (e.g. '{value}s' or '{value}m')")
    return parse_duration(value)


def _require_json(value: object, path: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{path} is {value}, which JSON cannot carry")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _require_json(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path} has the key {key!r}; keys must be strings (quote it)")
            _require_json(item, f"{path}.{key}")
        return
    raise ValueError(
        f"{path} is a {type(value).__name__} ({value!r}); use strings, numbers, booleans, null, "
        "lists and mappings only (quote dates and times)"
    )


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key repeated in one mapping is an error.

    Plain YAML keeps the last of two `cron:` lines without a word, so the schedule would run on a
    spec the author may not know is there.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found the key {key!r} twice",
                    key_node.start_mark,
                )
            if isinstance(key, Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


# The largest schedule file read, in bytes. An entry takes a few hundred bytes, so this holds
# some ten thousand schedules; the deploy ships the file in a ConfigMap, which Kubernetes caps
# at 1 MiB. Past it the file is refused without reading the rest: its text, its YAML nodes and
# every model built from them grow with it, in each worker pod that applies the file at start.
MAX_FILE_BYTES = 4 * 1024 * 1024
# How many nodes YAML aliases may add to a file once expanded. A count of alias uses would not
# bound anything: each level of aliases nested in aliases multiplies the one below, so ten uses
# a level and nine levels (about 500 bytes) expand to a billion nodes. So the expanded size is
# counted on the parsed node graph, each node once (no expansion), before anything is built
# from it. A legitimate use, one shared block (a holiday list for `exclude`, common args)
# aliased in each entry, adds that block's nodes per entry: 100,000 covers a 20-node block over
# 5,000 entries, and costs a few hundredths of a second to build; a tenfold bomb passes it at
# its fifth level.
ALIAS_EXPANSION_LIMIT = 100_000


class _AliasBomb(Exception):
    """The file's aliases expand past the limit, or an alias is used inside its own anchor."""


def _alias_expansion_problem(root: yaml.Node) -> str | None:
    """Why the document's aliases would expand it too far, or None: counted without expanding."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def expanded(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise _AliasBomb(
                f"the YAML anchor at line {node.start_mark.line + 1} is used inside itself, so "
                "the file would never end; remove that alias"
            )
        open_nodes.add(key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        total = 1 + sum(expanded(child) for child in children)
        open_nodes.discard(key)
        sizes[key] = total
        return total

    try:
        # Each distinct node is one the file spells out; the rest of the total is what the
        # aliases repeat.
        added = expanded(root) - len(sizes)
    except _AliasBomb as exc:
        return str(exc)
    if added > ALIAS_EXPANSION_LIMIT:
        return (
            f"the file's YAML aliases (*name) would add more than {ALIAS_EXPANSION_LIMIT:,} "
            "nodes once expanded (aliases inside aliases multiply), so it is refused unexpanded; "
            "write the repeated fields out, or share one flat block"
        )
    return None


def _read_bounded(path: str | Path) -> str:
    try:
        with Path(path).open("rb") as stream:
            # One byte past the limit tells an oversized file (or a pipe that never ends) from
            # one at the limit, without reading the rest.
            data = stream.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InvalidInput(f"schedule file '{path}' does not exist") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read schedule file '{path}': {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ScheduleFileError(
            str(path),
            [
                f"the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB, the limit for a "
                "schedule file; split it, or look for what made it grow"
            ],
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"schedule file '{path}' is not UTF-8 text") from None


def load_schedule_file(path: str | Path, registry: JobRegistry) -> list[ScheduleDefinition]:
    """The definitions of a schedule file, in file order; ScheduleFileError lists every problem."""
    return parse_schedule_text(_read_bounded(path), registry, source=str(path))


def parse_schedule_text(
    text: str,
    registry: JobRegistry,
    *,
    source: str = "<schedules>",
    now: datetime | None = None,
) -> list[ScheduleDefinition]:
    """Like `load_schedule_file`, for YAML already in memory; `source` names it in errors."""
    document = _load_yaml(text, source)

    entries, problems = _entries(document)
    default_zone, zone_problem = _file_timezone(document)
    if zone_problem is not None:
        problems.append(zone_problem)
    elif default_zone is not None:
        # An entry's own `timezone` (UTC included) wins over the file's.
        entries = [
            {**e, "timezone": default_zone} if isinstance(e, dict) and "timezone" not in e else e
            for e in entries
        ]
    definitions: list[ScheduleDefinition] = []
    for number, entry in enumerate(entries, start=1):
        definition, entry_problems = _check_entry(number, entry, registry, now=now)
        problems.extend(entry_problems)
        if definition is not None:
            definitions.append(definition)
    problems.extend(_duplicate_ids(entries))
    if not problems:
        # Only on a file whose entries are all valid: a broken entry cannot be compared.
        problems.extend(duplicates_in_file(definitions))
    if problems:
        raise ScheduleFileError(source, problems)
    return definitions


def _file_timezone(document: object) -> tuple[str | None, str | None]:
    """The file's default `timezone:` for entries that name none, or the problem with it."""
    if not isinstance(document, dict) or document.get("timezone") is None:
        return None, None
    value = document["timezone"]
    if not isinstance(value, str):
        return None, f"top-level 'timezone': expected an IANA time zone name, got {value!r}"
    try:
        return check_zone_name(value), None
    except ValueError as exc:
        return None, f"top-level 'timezone': {exc}"


def _load_yaml(text: str, source: str) -> object:
    # What yaml.load does, with the alias check between parsing the nodes and building Python
    # objects from them: the objects are where an alias bomb would expand (the models, the
    # args digest and its JSON all walk them as a tree). A SafeLoader subclass: as safe as
    # safe_load, plus the duplicate-key check.
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        problem = _alias_expansion_problem(node)
        if problem is not None:
            raise ScheduleFileError(source, [problem])
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ScheduleFileError(source, [_yaml_problem(exc)]) from None
    except RecursionError:
        # Thousands of nested brackets: the parser recurses once per level.
        raise ScheduleFileError(
            source, ["the file nests lists or mappings too deeply to read"]
        ) from None
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return f"invalid YAML: {problem}"


_TOP_LEVEL_KEYS = ("schedules", "timezone")


def _entries(document: object) -> tuple[list[object], list[str]]:
    # An empty file and a bare `schedules:` are refused rather than read as "no schedules": with
    # `apply --prune`, a file truncated by accident would otherwise delete every schedule.
    shape = "a mapping with a `schedules` list (write `schedules: []` for none)"
    if document is None:
        return [], [f"the file is empty; it must be {shape}"]
    if not isinstance(document, dict):
        return [], [f"the top level is a {_kind(document)}; it must be {shape}"]
    problems = [
        f"unknown top-level key {key!r}{_suggest(str(key), list(_TOP_LEVEL_KEYS))}"
        for key in document
        if key not in _TOP_LEVEL_KEYS
    ]
    if "schedules" not in document:
        return [], [*problems, f"the `schedules` key is missing; the file must be {shape}"]
    entries = document["schedules"]
    if entries is None:
        return [], [*problems, f"`schedules` is empty; the file must be {shape}"]
    if not isinstance(entries, list):
        return [], [*problems, f"`schedules` is a {_kind(entries)}; it must be a list"]
    return entries, problems


def _check_entry(
    number: int, entry: object, registry: JobRegistry, *, now: datetime | None = None
) -> tuple[ScheduleDefinition | None, list[str]]:
    label = _label(number, entry)
    if not isinstance(entry, dict):
        return None, [f"{label} is a {_kind(entry)}; each entry must be a mapping of fields"]
    try:
        definition = ScheduleDefinition.model_validate(entry, context={"now": now})
    except ValidationError as exc:
        problems = [f"{label}{_pydantic_problem(err)}" for err in exc.errors()]
        # Still say when the job is unknown: it is independent of the other fields, and fixing
        # the file in one pass is the point of collecting problems.
        job = entry.get("job")
        if isinstance(job, str) and job not in registry:
            problems.append(f"{label}, field 'job': {_unknown_job(registry, job)}")
        return None, problems

    try:
        spec = registry.get(definition.job)
    except UnknownJob as exc:
        return None, [f"{label}, field 'job': {exc}"]
    problems = []
    if definition.overlap is Overlap.allow_all and not spec.read_only:
        # Only a job that declares itself free of side effects may overlap itself: two runs of
        # anything else could each apply the same change.
        problems.append(
            f"{label}, field 'overlap': overlap allow_all is refused for job '{spec.name}': "
            "it is not read_only, so two concurrent runs could both apply their side effects; "
            "use skip or buffer_one"
        )
    try:
        spec.validate_args(definition.args, unknown_keys=False)
    except InvalidArgs as exc:
        problems.append(f"{label}, field 'args': {exc}")
    return (None if problems else definition), problems


def _unknown_job(registry: JobRegistry, name: str) -> str:
    try:
        registry.get(name)
    except UnknownJob as exc:
        return str(exc)
    return f"unknown job '{name}'"


def _label(number: int, entry: object) -> str:
    if isinstance(entry, dict):
        schedule_id = entry.get("id")
        if isinstance(schedule_id, str) and _ID.fullmatch(schedule_id):
            return f"schedule '{schedule_id}' (entry {number})"
    return f"entry {number}"


def _pydantic_problem(err: ErrorDetails) -> str:
    loc = err["loc"]
    if not loc:
        return f": {_message(err)}"
    field = str(loc[0])
    where = field + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])
    if err["type"] == "extra_forbidden":
        if len(loc) == 1:
            known = list(ScheduleDefinition.model_fields)
            return f": unknown field '{field}'{_suggest(field, known)}"
        # Inside an exclusion or the duration bounds: name the key and where it sits.
        name = str(loc[-1])
        known = {
            "expected_duration": list(ExpectedDuration.model_fields),
            "maintenance": ["days", "from", "to"],
        }.get(field, list(SkipCalendar.model_fields))
        return f", field '{where}': unknown field '{name}'{_suggest(name, known)}"
    return f", field '{where}': {_message(err)}"


def _message(err: ErrorDetails) -> str:
    if err["type"] == "value_error":
        # Our own validators already write a sentence with the offending value.
        return str(err.get("ctx", {}).get("error", err["msg"]))
    if err["type"] == "missing":
        return "is required"
    shown = repr(err["input"])
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{err['msg']} (got {shown})"


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _duplicate_ids(entries: list[object]) -> list[str]:
    # Checked on the raw entries, so an id repeated by an otherwise broken entry is still reported.
    numbers_by_id: dict[str, list[int]] = {}
    for number, entry in enumerate(entries, start=1):
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            numbers_by_id.setdefault(entry["id"], []).append(number)
    problems = []
    for schedule_id, numbers in numbers_by_id.items():
        if len(numbers) > 1:
            listed = ", ".join(str(n) for n in numbers[:-1]) + f" and {numbers[-1]}"
            problems.append(f"id '{schedule_id}' is used by entries {listed}")
    return problems


def _kind(value: object) -> str:
    names = {dict: "mapping", list: "list", str: "string", int: "number", float: "number"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return names.get(type(value), type(value).__name__)
