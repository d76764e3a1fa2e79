"""The layout's rules, checked on the source: where the CLI ends, and what tests may import."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOMAIN = ["activities", "workflows", "schedules", "backfill", "monitor", "store", "examples"]


def imported_modules(path: Path) -> Iterator[str]:
    """Every module a file imports, at its top or inside a function."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def domain_files() -> list[Path]:
    files = [f for d in DOMAIN for f in (REPO_ROOT / d).rglob("*.py")]
    files += [f for f in (REPO_ROOT / "cronwarden").rglob("*.py") if not f.is_symlink()]
    # rglob does not follow the symlinks under cronwarden/, so each file is seen once.
    return [f for f in files if "cli" not in f.relative_to(REPO_ROOT).parts[:2]]


def test_only_the_cli_package_imports_typer_or_rich() -> None:
    files = domain_files()
    assert len(files) > 50, "the walk found too few modules to mean anything"
    offenders = [
        f"{f.relative_to(REPO_ROOT)}: {module}"
        for f in files
        for module in imported_modules(f)
        if module.split(".")[0] in {"typer", "rich", "click"}
    ]
    assert offenders == []


def test_every_typer_app_lives_in_the_cli_package() -> None:
    defined = [
        f.relative_to(REPO_ROOT).as_posix()
        for f in [*domain_files(), REPO_ROOT / "worker.py"]
        if "typer.Typer(" in f.read_text()
    ]
    assert defined == []
    assert "typer.Typer(" in (REPO_ROOT / "cronwarden" / "cli" / "app.py").read_text()
