"""The layout's rules, checked on the source: where the CLI ends, and what tests may import."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOMAIN = ["activities", "workflows", "schedules", "backfill", "monitor", "store", "examples"]


def imported_names(source: str, module: str, *, is_package: bool = False) -> Iterator[str]:
    """Every module `module` (whose text is `source`) imports, at its top or inside a function,
    and the `module.name` of each `from module import name` (the name may be a module), with
    relative imports resolved."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            imported = ".".join([*base, *([node.module] if node.module else [])])
            yield imported
            yield from (f"{imported}.{alias.name}" for alias in node.names)


def imported_modules(path: Path) -> Iterator[str]:
    """`imported_names` of a file of the checkout."""
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    is_package = parts[-1] == "__init__"
    module = ".".join(parts[:-1] if is_package else parts)
    return imported_names(path.read_text(), module, is_package=is_package)


def offending_imports(files: list[Path], banned: Callable[[str], bool]) -> list[str]:
    """`file: module` for each module of `imported_modules` that is `banned`."""
    return [
        f"{f.relative_to(REPO_ROOT)}: {module}"
        for f in files
        for module in imported_modules(f)
        if banned(module)
    ]


def domain_files() -> list[Path]:
    files = [f for d in DOMAIN for f in (REPO_ROOT / d).rglob("*.py")]
    files += [f for f in (REPO_ROOT / "cronwarden").rglob("*.py") if not f.is_symlink()]
    # rglob does not follow the symlinks under cronwarden/, so each file is seen once.
    return [f for f in files if "cli" not in f.relative_to(REPO_ROOT).parts[:2]]


def test_only_the_cli_package_imports_typer_or_rich() -> None:
    files = domain_files()
    assert len(files) > 50, "the walk found too few modules to mean anything"
    banned = {"typer", "rich", "click"}
    assert offending_imports(files, lambda module: module.split(".")[0] in banned) == []


def test_every_typer_app_lives_in_the_cli_package() -> None:
    defined = [
        f.relative_to(REPO_ROOT).as_posix()
        for f in [*domain_files(), REPO_ROOT / "worker.py"]
        if "typer.Typer(" in f.read_text()
    ]
    assert defined == []
    assert "typer.Typer(" in (REPO_ROOT / "cronwarden" / "cli" / "app.py").read_text()


# What tests may import: helpers live in tests/support (the fault suite's in
# tests/support/faults), never in a test module or a conftest. A test module imported for a
# helper drags its fixtures and its `pytestmark` along, and a conftest is pytest's to load.
TEST_TREES = ["tests", "bench"]
SUITES = ["unit", "integration", "faults"]
MISSING_ON_PURPOSE = {"tests.nowhere"}
"""Module names a test spells out only to see them refused (test_payload_codec.py)."""
DOTTED_TESTS_NAME = re.compile(r"(?<![\w.])tests(?:\.\w+)+")


def tree_files() -> list[Path]:
    return sorted(f for tree in TEST_TREES for f in (REPO_ROOT / tree).rglob("*.py"))


def is_test_or_conftest(module: str) -> bool:
    last = module.rpartition(".")[2]
    return last == "conftest" or last.startswith("test_")


def is_module(name: str, *, or_package: bool = True) -> bool:
    path = REPO_ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (or_package and (path / "__init__.py").is_file())


def test_the_import_reader_sees_every_form_of_import() -> None:
    source = (
        "import tests.integration.test_guard\n"
        "from tests.integration import conftest\n"
        "from .test_worker_faults import x\n"
        "def f() -> None:\n"
        "    from ..integration.test_cli import write\n"
        "from . import tally\n"
    )
    names = set(imported_names(source, "tests.faults.helper"))
    assert {n for n in names if is_test_or_conftest(n)} == {
        "tests.integration.test_guard",
        "tests.integration.conftest",
        "tests.faults.test_worker_faults",
        "tests.integration.test_cli",
    }
    assert "tests.faults.tally" in names
    assert "tests.support.x" in set(
        imported_names("from . import x", "tests.support", is_package=True)
    )


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    files = tree_files()
    assert len(files) > 100, "the walk found too few modules to mean anything"
    offenders = offending_imports(
        files, lambda name: name.split(".")[0] in TEST_TREES and is_test_or_conftest(name)
    )
    assert offenders == []


def test_tests_top_level_and_the_suites_hold_no_helper_module() -> None:
    tests = REPO_ROOT / "tests"
    top = sorted(f.name for f in tests.glob("*.py"))
    assert top == ["__init__.py", "conftest.py"], "helpers belong in tests/support"
    helpers = [
        f.relative_to(REPO_ROOT).as_posix()
        for suite in SUITES
        for f in sorted((tests / suite).rglob("*.py"))
        if f.name not in ("__init__.py", "conftest.py") and not f.name.startswith("test_")
    ]
    assert helpers == [], "helpers belong in tests/support"


def test_every_tests_module_a_string_names_exists() -> None:
    # Subprocesses and settings name modules in strings: `python -m tests.…`, CRONWARDEN_JOBS,
    # CRONWARDEN_PAYLOAD_CODEC. A module moved without its strings would fail only at run time.
    named = {
        (f.relative_to(REPO_ROOT).as_posix(), name)
        for f in tree_files()
        if f != Path(__file__).resolve()  # its strings are the import reader's test cases
        for node in ast.walk(ast.parse(f.read_text(), str(f)))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for name in DOTTED_TESTS_NAME.findall(node.value)
    }
    assert len(named) > 5, "the walk found too few names to mean anything"
    # A module or a package, or an attribute of a module (a package's would be a module).
    dangling = sorted(
        f"{path}: {name}"
        for path, name in named
        if name not in MISSING_ON_PURPOSE
        and not is_module(name)
        and not is_module(name.rpartition(".")[0], or_package=False)
    )
    assert dangling == []
