"""The docs name the test behind each claim (`test_guard.py::test_…`): every name must still be a
test, or a claim would point at nothing after a test is renamed or moved."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "README.md"]
# `path/test_file.py::test_name`, then `, ::test_other` for more tests of the same file.
REFERENCE = re.compile(r"(?:([\w/]*test_\w+\.py)|(?<=`))::(test_\w+)")


def defined_tests() -> dict[str, set[str]]:
    """Each test file's name (and its path under the repo) → the tests it defines."""
    found: dict[str, set[str]] = {}
    for path in (REPO_ROOT / "tests").rglob("test_*.py"):
        names = set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.M))
        for key in (path.name, path.relative_to(REPO_ROOT).as_posix()):
            found.setdefault(key, set()).update(names)
    return found


def references(text: str) -> list[tuple[str, str]]:
    """(file, test) pairs; a bare `::test_x` belongs to the last file named before it."""
    pairs: list[tuple[str, str]] = []
    current = ""
    for match in REFERENCE.finditer(text):
        current = match[1] or current
        pairs.append((current, match[2]))
    return pairs


def test_the_reference_reader_carries_the_file_over_to_bare_names() -> None:
    text = "`test_a.py::test_one`, `::test_two`; `tests/unit/test_b.py::test_three`"
    assert references(text) == [
        ("test_a.py", "test_one"),
        ("test_a.py", "test_two"),
        ("tests/unit/test_b.py", "test_three"),
    ]


def test_every_test_the_docs_name_exists() -> None:
    defined = defined_tests()
    named = [(page.name, f, t) for page in PAGES for f, t in references(page.read_text())]
    assert len(named) > 50, "the reader found too few references to mean anything"
    dangling = [f"{page}: {f}::{t}" for page, f, t in named if t not in defined.get(f, set())]
    assert dangling == []
