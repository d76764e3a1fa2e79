"""`CRONWARDEN_JOBS` names modules to import for their `@job`s: one that imports but registers
nothing is a mistake (a typo'd package, the wrong file), named rather than found later as
"known: none registered"."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from cronwarden.activities.jobs import REGISTRY, import_job_modules
from cronwarden.errors import InvalidInput


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _module(directory: Path, body: str) -> str:
    name = f"jobs_{uuid.uuid4().hex[:8]}"
    (directory / f"{name}.py").write_text(body)
    return name


def test_a_module_that_registers_no_job_is_refused_by_name(module_dir: Path) -> None:
    empty = _module(module_dir, "VALUE = 1\n")
    with pytest.raises(InvalidInput) as exc_info:
        import_job_modules([empty])
    assert str(exc_info.value).startswith(
        f"job module '{empty}' named in CRONWARDEN_JOBS imports but registers no job"
    )
    sys.modules.pop(empty, None)


def test_a_module_that_registers_jobs_passes_even_when_imported_before(module_dir: Path) -> None:
    name = f"job-{uuid.uuid4().hex[:8]}"
    module = _module(
        module_dir,
        f"from cronwarden import job\n\n@job({name!r})\nasync def run(ctx):\n    return None\n",
    )
    try:
        assert name in import_job_modules([module]).names()
        # Imported already (a second command in one process): its jobs are still its own.
        assert REGISTRY.from_module(module) == [name]
        assert name in import_job_modules([module]).names()
    finally:
        # The registry is the process's: leave it as other tests expect it.
        REGISTRY._jobs.pop(name, None)
        sys.modules.pop(module, None)
