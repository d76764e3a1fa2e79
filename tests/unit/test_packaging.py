"""What installing cronwarden puts on a machine: one import name, `cronwarden`, and nothing that
could shadow an application's own `activities`, `workflows` or `schedules` package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# What a checkout holds that the build never reads: caches, the virtualenv, state of `make dev`.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", ".cronwarden", "*.egg-info", "build", "dist", "__pycache__", ".*_cache"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[zipfile.ZipFile, str]:
    # The build runs on a copy: an in-tree build would leave build/ and *.egg-info in the
    # checkout while other tests read it.
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO_ROOT, source, ignore=NOT_SOURCES, symlinks=True)
    built = subprocess.run(
        [
            sys.executable,
            *("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-v"),
            *("--wheel-dir", str(root / "dist"), str(source)),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr
    (path,) = (root / "dist").glob("cronwarden-*.whl")
    return zipfile.ZipFile(path), built.stdout + built.stderr


@pytest.fixture(scope="module")
def wheel(built: tuple[zipfile.ZipFile, str]) -> zipfile.ZipFile:
    return built[0]


def test_the_build_warns_of_no_package_left_out(built: tuple[zipfile.ZipFile, str]) -> None:
    # setuptools names a folder of package data it finds outside `packages` (the status page's
    # templates were one): a 35-line warning on every install.
    assert "is absent from the `packages` configuration" not in built[1]


def test_the_wheel_installs_one_import_name(wheel: zipfile.ZipFile) -> None:
    top = {name.split("/")[0] for name in wheel.namelist()}
    assert {t for t in top if not t.endswith(".dist-info")} == {"cronwarden"}


def test_the_lifecycle_folders_are_installed_under_cronwarden(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for module in [
        "activities/guard.py",
        "workflows/scheduled_run.py",
        "schedules/apply.py",
        "backfill/plan.py",
        "monitor/passes.py",
        "monitor/process.py",
        "store/outbox.py",
        "examples/ledger.py",
        "cli/app.py",
        "worker.py",
    ]:
        assert f"cronwarden/{module}" in names, module
    migrations = sorted(p.name for p in (REPO_ROOT / "store" / "migrations").glob("*.sql"))
    assert migrations, "no migration found in the checkout"
    assert {f"cronwarden/store/migrations/{m}" for m in migrations} <= names
    assert "cronwarden/examples/schedules.yaml" in names
    # The status page renders from templates shipped as package data.
    templates = sorted(p.name for p in (REPO_ROOT / "monitor" / "templates").glob("*.html"))
    assert templates and {f"cronwarden/monitor/templates/{t}" for t in templates} <= names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "cronwarden/tests/"))]


def test_the_console_script_is_the_cli_app(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "cronwarden = cronwarden.cli.app:main" in text
