"""What keeps a guarded run's per-run CPU down on the workflow side (bench/guard_overhead.py):
the workflow sandbox runs the workflow module again for every run, and the data converter
resolves a dataclass's type hints on every decode."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

import cronwarden.workflows.scheduled_run
from cronwarden.activities.contract import GuardedRunInput, RunOutcome
from cronwarden.workflows.run_input import ScheduledRunInput

PAYLOADS = [ScheduledRunInput, GuardedRunInput, RunOutcome]


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda c: c.__name__)
def test_payload_dataclasses_hold_resolved_annotations_not_strings(payload: type) -> None:
    # A string annotation is compiled and evaluated again on every typing.get_type_hints call,
    # which Temporal's converter makes on every decode.
    strings = {f.name: f.type for f in dataclasses.fields(payload) if isinstance(f.type, str)}
    assert strings == {}


def _passed_through_imports(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.With) and "imports_passed_through" in ast.unparse(node.items[0]):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    names.update(alias.name for alias in stmt.names)
    return names


def test_the_sandboxed_workflow_module_defines_no_dataclass_and_passes_its_input_through() -> None:
    source = Path(inspect.getfile(cronwarden.workflows.scheduled_run)).read_text()
    tree = ast.parse(source)
    decorated = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    ]
    assert decorated == [], "a dataclass here is rebuilt (its methods compiled) on every run"
    assert "ScheduledRunInput" in _passed_through_imports(tree)
    assert cronwarden.workflows.scheduled_run.ScheduledRunInput is ScheduledRunInput
