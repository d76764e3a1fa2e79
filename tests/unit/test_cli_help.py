from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.core import TyperCommand, TyperGroup

from cronwarden.cli.app import command


def command_paths(
    cmd: TyperCommand | TyperGroup, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    yield prefix
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from command_paths(sub, (*prefix, name))


def test_no_help_text_labels_a_flag_as_if_it_took_a_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = command()
    paths = list(command_paths(root))
    assert ("schedules", "apply") in paths and ("backfill", "run") in paths
    for path in paths:
        assert root(args=[*path, "--help"], standalone_mode=False) == 0
        text = capsys.readouterr().out
        assert "Usage" in text, path
        assert "<bool>" not in text, (path, text)
        assert "--help" in text


def test_duration_flags_say_they_take_durations(capsys: pytest.CaptureFixture[str]) -> None:
    root = command()
    for path, flag in (
        (("monitor",), "--interval"),
        (("migrate",), "--wait"),
        (("backfill", "run"), "--lock-wait"),
    ):
        root(args=[*path, "--help"], standalone_mode=False)
        line = next(li for li in capsys.readouterr().out.splitlines() if flag in li)
        assert "DURATION" in line, line
