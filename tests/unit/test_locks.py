"""Every virtualenv is built from a lock: a fresh machine runs the versions the tests last passed
with, whatever the package index serves that day. The runtime lock's own check (the Docker image
installs exactly it) is in test_deploy.py."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.locks import (
    CHECKOV_LOCK,
    CHECKOV_VENV,
    DEV_LOCK,
    LOCKS,
    OTEL_LOCK,
    RUNTIME_LOCK,
    VENV,
    closure,
    lock_pins,
    read_lock,
)
from tests.support.paths import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
# Seeded by `python -m venv` (setuptools up to Python 3.11), unless the lock pins them too.
SEEDED = {"pip", "setuptools"}


def unseeded(installed: dict[str, str], pins: dict[str, str]) -> dict[str, str]:
    return {name: v for name, v in installed.items() if name in pins or name not in SEEDED}


def makefile_variable(name: str) -> str:
    [value] = re.findall(rf"^{name} := (\S+)$", (REPO_ROOT / "Makefile").read_text(), re.M)
    return str(value)


def test_every_lock_pins_exact_versions_and_nothing_else() -> None:
    for lock in LOCKS:
        assert read_lock(lock), f"{lock.name} pins nothing"
        assert "make lock" in lock.read_text().splitlines()[1], f"{lock.name}: made by make lock"


def test_a_lock_refuses_an_open_range_a_marker_or_an_extra() -> None:
    for line in ("temporalio>=1.35", "uvloop==0.21.0; sys_platform != 'win32'", "httpx[http2]==1"):
        with pytest.raises(AssertionError):
            lock_pins(line + "\n")


def test_the_test_virtualenv_holds_exactly_the_dev_lock() -> None:
    pins = read_lock(DEV_LOCK)
    installed: dict[str, str] = {
        canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()
    }
    installed.pop("cronwarden")
    assert unseeded(installed, pins) == pins


def test_every_declared_requirement_is_pinned_within_its_range_in_the_dev_lock() -> None:
    # `pip check` (run by the Makefile) sees only the base dependencies; the extras are checked
    # here, so a tool added to `dev` without `make lock` fails the suite, naming it.
    pins = read_lock(DEV_LOCK)
    extras = PYPROJECT["optional-dependencies"]
    declared = [*PYPROJECT["dependencies"], *(r for group in extras.values() for r in group)]
    for requirement in map(Requirement, declared):
        name = canonicalize_name(requirement.name)
        if name == "cronwarden":
            continue
        assert name in pins, f"{name} is declared in pyproject.toml but not in {DEV_LOCK.name}"
        assert requirement.specifier.contains(pins[name]), (name, pins[name])


def test_the_runtime_and_otel_locks_hold_the_dev_versions_of_exactly_what_they_install() -> None:
    dev = read_lock(DEV_LOCK)
    runtime = read_lock(RUNTIME_LOCK)
    otel = read_lock(OTEL_LOCK)
    # The same versions everywhere: the image runs what the tests ran.
    assert {name: dev.get(name) for name in runtime} == runtime
    assert {name: dev.get(name) for name in otel} == otel
    declared = PYPROJECT["dependencies"]
    assert set(runtime) == closure(declared)
    assert set(otel) == closure([*declared, *PYPROJECT["optional-dependencies"]["otel"]])
    assert set(runtime) < set(otel)


def test_checkov_runs_from_its_own_lock() -> None:
    pins = read_lock(CHECKOV_LOCK)
    name, version = makefile_variable("CHECKOV").split("==")
    assert pins[name] == version
    listing = subprocess.run(
        [str(CHECKOV_VENV / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    installed: dict[str, str] = {
        canonicalize_name(p["name"]): p["version"] for p in json.loads(listing.stdout)
    }
    assert unseeded(installed, pins) == pins


def make_dry_run(target: str, *, changed: str) -> str:
    """The commands `make` would run for `target` if `changed` had just been edited."""
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "-W", changed, f"VENV={VENV}", target],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


@pytest.mark.parametrize(
    "changed", ["requirements-dev.lock", "requirements.lock", "pyproject.toml"]
)
def test_the_virtualenv_is_rebuilt_from_scratch_when_a_lock_changes(changed: str) -> None:
    commands = make_dry_run(f"{VENV}/.installed-stamp", changed=changed)
    assert f"venv --clear {VENV}\n" in commands
    assert "pip install --quiet --no-deps -r requirements-dev.lock" in commands
    assert "pip check" in commands


def test_checkovs_virtualenv_is_rebuilt_when_its_lock_changes() -> None:
    commands = make_dry_run(f"{CHECKOV_VENV}/.installed-stamp", changed="requirements-checkov.lock")
    assert f"venv --clear {CHECKOV_VENV}\n" in commands
    assert "--no-deps -r requirements-checkov.lock" in commands


def test_an_unchanged_lock_rebuilds_nothing() -> None:
    result = subprocess.run(
        [
            "make",
            "-q",
            f"VENV={VENV}",
            f"{VENV}/.installed-stamp",
            f"{CHECKOV_VENV}/.installed-stamp",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, "make would rebuild a virtualenv whose locks did not change"
