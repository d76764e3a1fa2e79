"""The job API: `@job` registers an async function; the guard calls it with a `JobContext`.

A job's long work happens outside any transaction. Its database writes go through
`ctx.transaction()`, which hands out the connection of the run's ONE commit transaction: the
fencing check, the outbox record and the heartbeat commit with those writes or not at all.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import structlog
from pydantic import BaseModel, ValidationError

from cronwarden.errors import InvalidInput

JobResult = Mapping[str, Any] | None
JobFunction = Callable[["JobContext"], Awaitable[JobResult]]


class JobContext(Protocol):
    """What a running job sees. The guard provides the implementation."""

    schedule_id: str
    fire_time: datetime
    """Nominal fire time (aware UTC): the schedule's slot, not when the run actually started."""
    logical_key: str
    """`{schedule_id}@{fire_time}`: names this run everywhere."""
    idempotency_key: str
    """Equal to the logical key. Pass it to every external API the job calls."""
    attempt: int
    args: Any
    """The schedule's args, validated by the job's `args_model` when it has one, else a dict."""
    log: structlog.typing.FilteringBoundLogger

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """The asyncpg connection inside the run's commit transaction. Enter it at most once.

        Never end that transaction from inside the block (`COMMIT`, `ROLLBACK`, a script
        containing one): the guard detects it before its commit statement, fails the attempt
        without retry naming the job, writes no outbox record and releases the lease.
        Savepoints (`async with conn.transaction():` nested inside) are fine.
        """
        ...

    async def heartbeat(self, details: Any = None) -> None:
        """Tell Temporal this run is alive (the guard also does it in the background)."""
        ...


@dataclass(frozen=True)
class JobSpec:
    name: str
    func: JobFunction
    read_only: bool
    args_model: type[BaseModel] | None

    def validate_args(self, args: Mapping[str, Any], *, unknown_keys: bool = True) -> Any:
        """The args as the job will see them; InvalidArgs names each bad field.

        `unknown_keys=False` (apply's check of a file) also refuses a key the job's model does
        not declare, unless the model says `extra="allow"` or `extra="ignore"` itself: pydantic
        drops such a key silently by default, so `tims: 3` for `times` would run with the
        default. A run (the worker) keeps accepting them, so that a schedule applied before
        this check does not start failing on upgrade.
        """
        if self.args_model is None:
            return dict(args)
        problems = [] if unknown_keys else _undeclared_keys(self.args_model, args)
        try:
            validated = self.args_model.model_validate(dict(args))
        except ValidationError as exc:
            problems += [
                f"{'.'.join(str(p) for p in err['loc']) or '(args)'}: {err['msg']}"
                for err in exc.errors()
            ]
            raise InvalidArgs(self._invalid(problems)) from exc
        if problems:
            raise InvalidArgs(self._invalid(problems))
        return validated

    def _invalid(self, problems: list[str]) -> str:
        return f"args for job '{self.name}' are invalid: {'; '.join(problems)}"


def _undeclared_keys(model: type[BaseModel], args: Mapping[str, Any]) -> list[str]:
    """A problem per key of `args` that `model` neither declares nor says it takes."""
    if model.model_config.get("extra") in ("allow", "ignore"):
        return []
    declared: set[str] = set()
    for name, info in model.model_fields.items():
        declared.add(name)
        if isinstance(info.alias, str):
            declared.add(info.alias)
        if isinstance(info.validation_alias, str):
            declared.add(info.validation_alias)
    problems = []
    for key in args:
        if key in declared:
            continue
        close = difflib.get_close_matches(str(key), sorted(declared), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        known = ", ".join(sorted(declared)) or "none"
        problems.append(f"{key}: not an argument of this job{hint}; it takes: {known}")
    return problems


class InvalidArgs(InvalidInput):
    """Args that fail the job's `args_model`: a run with them fails without retrying."""


class UnknownJob(InvalidInput):
    """A schedule names a job no imported module registered."""


class JobRegistry:
    def __init__(self) -> None:
        self._jobs: dict[str, JobSpec] = {}

    def register(self, spec: JobSpec) -> None:
        existing = self._jobs.get(spec.name)
        if existing is not None and existing.func is not spec.func:
            # Two functions under one name would make the schedule's meaning depend on import
            # order: refuse it loudly at import time.
            raise ValueError(
                f"job '{spec.name}' is registered twice "
                f"({existing.func.__module__}.{existing.func.__qualname__} and "
                f"{spec.func.__module__}.{spec.func.__qualname__})"
            )
        self._jobs[spec.name] = spec

    def get(self, name: str) -> JobSpec:
        try:
            return self._jobs[name]
        except KeyError:
            known = ", ".join(sorted(self._jobs)) or "none registered"
            close = difflib.get_close_matches(name, sorted(self._jobs), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise UnknownJob(f"unknown job '{name}' ({hint}known: {known})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def names(self) -> list[str]:
        return sorted(self._jobs)

    def from_module(self, module: str) -> list[str]:
        """The jobs whose function lives in `module` or a module under it."""
        return sorted(
            name
            for name, spec in self._jobs.items()
            if spec.func.__module__ == module or spec.func.__module__.startswith(f"{module}.")
        )


REGISTRY = JobRegistry()


def job(
    name: str, *, read_only: bool = False, args_model: type[BaseModel] | None = None
) -> Callable[[JobFunction], JobFunction]:
    """Register an async job function under `name`.

    `read_only=True` declares that the job has no side effects; only such jobs may use the
    `allow_all` overlap policy.
    """

    def register(func: JobFunction) -> JobFunction:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"job '{name}' must be an async function (async def)")
        REGISTRY.register(JobSpec(name=name, func=func, read_only=read_only, args_model=args_model))
        return func

    return register


def import_job_modules(modules: list[str]) -> JobRegistry:
    """Import the modules of `CRONWARDEN_JOBS` so their `@job` decorators run."""
    # `cronwarden` is a console script, so unlike `python -m` it does not put the working
    # directory on sys.path; job modules of the project it is run from must still import.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for module in modules:
        before = len(REGISTRY.names())
        try:
            importlib.import_module(module)
        except Exception as exc:
            # Any failure (missing module, syntax error, a job registered twice) is a
            # configuration problem to report in one sentence, not a traceback.
            raise InvalidInput(
                f"cannot import job module '{module}' named in CRONWARDEN_JOBS: "
                f"{type(exc).__name__}: {exc}{_installed_name_hint(module, exc)}"
            ) from exc
        # Imported earlier in this process (its jobs registered then), or registering now.
        if len(REGISTRY.names()) == before and not REGISTRY.from_module(module):
            raise InvalidInput(
                f"job module '{module}' named in CRONWARDEN_JOBS imports but registers no job: "
                "decorate its job functions with @job (from cronwarden import job), or take it "
                "out of CRONWARDEN_JOBS"
            )
    return REGISTRY


def _installed_name_hint(module: str, exc: Exception) -> str:
    """Settings written before cronwarden had one import name say `examples.ledger`; the module
    is `cronwarden.examples.ledger` now. Only a module that really exists there is suggested."""
    if not isinstance(exc, ModuleNotFoundError) or module.startswith("cronwarden."):
        return ""
    try:
        found = importlib.util.find_spec(f"cronwarden.{module}") is not None
    except ImportError:
        found = False
    return f" (did you mean 'cronwarden.{module}'?)" if found else ""
