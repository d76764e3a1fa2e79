"""The requirement locks (requirements*.lock), read as {canonical name: version}."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.paths import REPO_ROOT

RUNTIME_LOCK = REPO_ROOT / "requirements.lock"
OTEL_LOCK = REPO_ROOT / "requirements-otel.lock"
DEV_LOCK = REPO_ROOT / "requirements-dev.lock"
CHECKOV_LOCK = REPO_ROOT / "requirements-checkov.lock"
LOCKS = (RUNTIME_LOCK, OTEL_LOCK, DEV_LOCK, CHECKOV_LOCK)

# The virtualenv the tests run in, and checkov's, which the Makefile builds beside it.
VENV = Path(sys.executable).parents[1]
CHECKOV_VENV = VENV.with_name(VENV.name + "-checkov")


def lock_pins(text: str) -> dict[str, str]:
    """A lock's pins; every line that is not a comment must be `name==version`, nothing more."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        [spec] = req.specifier
        assert spec.operator == "==" and not req.extras and req.marker is None, line
        pins[canonicalize_name(req.name)] = spec.version
    return pins


def read_lock(path: Path) -> dict[str, str]:
    return lock_pins(path.read_text())


def closure(requirements: list[str]) -> set[str]:
    """The installed distributions `requirements` pull in, markers evaluated, extras followed."""
    seen: set[tuple[str, str]] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        for asked in ["", *sorted(req.extras)]:
            if (name, asked) not in seen:
                seen.add((name, asked))
                todo.extend((Requirement(r), asked) for r in metadata.requires(name) or [])
    return {name for name, _ in seen}
