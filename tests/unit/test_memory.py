"""The malloc arena cap every cronwarden command sets first."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys

import pytest

from cronwarden.cli import app as cli
from cronwarden.memory import ARENAS, limit_malloc_arenas

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or not platform.libc_ver()[0].startswith("glibc"),
    reason="malloc arenas are glibc's (an optional platform, not a missing system)",
)

# Eight threads each allocate through malloc at once; glibc's malloc_stats() then names every
# arena it made on stderr.
_PROBE = """
import ctypes, sys, threading
from cronwarden.memory import limit_malloc_arenas
if sys.argv[1] == "limit":
    assert limit_malloc_arenas()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
start = threading.Barrier(8)
def allocate():
    start.wait()
    for _ in range(2000):
        libc.malloc(256)
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc.malloc_stats()
"""


def arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return len(re.findall(r"^Arena \d+:", done.stderr, flags=re.MULTILINE))


def test_threads_allocating_at_once_share_the_capped_arenas() -> None:
    assert arenas("free") > ARENAS  # the probe does spread over arenas when nothing caps them
    assert 1 <= arenas("limit") <= ARENAS


@pytest.mark.parametrize(
    ("name", "value"),
    [("MALLOC_ARENA_MAX", "4"), ("GLIBC_TUNABLES", "glibc.malloc.arena_max=4")],
)
def test_an_explicit_arena_setting_wins(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert limit_malloc_arenas() is False


def test_every_command_caps_the_arenas_before_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def cap() -> bool:
        calls.append("cap")
        return True

    monkeypatch.setattr(cli, "limit_malloc_arenas", cap)
    monkeypatch.setattr(cli, "command", lambda: lambda args: calls.append("command"))
    monkeypatch.setattr(cli, "leave", lambda code: calls.append(f"leave {code}"))

    cli.main(["status"])

    assert calls == ["cap", "command", "leave 0"]
