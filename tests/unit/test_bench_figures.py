from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from bench.cpu import own_cpu, own_peak_rss_mib, pid_cpu
from bench.fire_lag import Lags, cpu_rows, rows
from bench.guard_overhead import is_prepare, label_statement
from bench.stack import REPO_ROOT
from bench.stats import median, percentile, ratio
from tests.support.pgwire import WireReader, target_of, via_proxy


def test_percentile_is_nearest_rank_never_interpolated() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([0.3, 0.1, 0.2], 99) == 0.3


def test_percentile_and_median_refuse_no_values() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 0)
    with pytest.raises(ValueError):
        median([])


def test_median_of_an_even_count_is_the_middle_pair_mean() -> None:
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_ratio_handles_a_zero_baseline() -> None:
    assert ratio(8.0, 10.0) == 0.8
    assert ratio(1.0, 0.0) == math.inf
    assert ratio(0.0, 0.0) == 1.0


def _msg(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack("!I", len(payload) + 4) + payload


def _startup() -> bytes:
    body = struct.pack("!I", 196608) + b"user\0postgres\0\0"
    return struct.pack("!I", len(body) + 4) + body


def test_wire_reader_counts_one_round_trip_per_sync_or_simple_query() -> None:
    seen: list[str] = []
    wire = WireReader(seen.append)
    stream = (
        struct.pack("!II", 8, 80877103)  # SSLRequest before the startup message
        + _startup()
        + _msg(b"P", b"s1\0SELECT 1\0\0\0")
        + _msg(b"D", b"Ss1\0")
        + _msg(b"S", b"")
        + _msg(b"B", b"\0s1\0\0\0\0\0\0\0")
        + _msg(b"E", b"\0\0\0\0\0")
        + _msg(b"S", b"")
        + _msg(b"Q", b"RESET ALL;\0")
        + _msg(b"X", b"")
    )
    # Fed in awkward pieces, as TCP delivers it.
    for i in range(0, len(stream), 3):
        wire.feed(stream[i : i + 3])
    assert seen == ["prepare: SELECT 1", "SELECT 1", "RESET ALL;"]


def test_statements_are_labelled_by_what_they_do() -> None:
    assert label_statement("WITH fence AS (\n UPDATE ...") == (
        "commit (fence + outbox + heartbeat + release)"
    )
    assert label_statement("SELECT pg_advisory_unlock_all();\nCLOSE ALL;") == (
        "pool reset on release"
    )
    assert is_prepare(label_statement("prepare: SELECT args_digest FROM cronwarden.outbox x"))
    assert label_statement("SELECT   42") == "SELECT 42"


def test_proxy_dsn_keeps_user_and_database_and_turns_tls_off() -> None:
    dsn = "postgresql://postgres@127.0.0.1:5544/bench%20db?application_name=x"
    assert via_proxy(dsn, 6000) == (
        "postgresql://postgres@127.0.0.1:6000/bench%20db?application_name=x&sslmode=disable"
    )
    assert target_of(dsn) == ("127.0.0.1", 5544)


def test_fire_lag_rows_judge_the_p99_and_count_missing_fires() -> None:
    lags = Lags(
        activity=[0.1] * 98 + [0.5, 2.0],
        job=[0.2] * 99 + [0.9],
        own=[0.01] * 98 + [0.15, 0.2],
        expected=101,
        phases={"Temporal starts the workflow": [0.05] * 100},
    )
    table = {row.metric: row for row in rows(lags, schedules=10, seconds=100, quick=False)}
    assert table["fires run (10 schedules every 10s for 100s)"].ours == "100 of 101"
    assert table["fires run (10 schedules every 10s for 100s)"].met is False
    assert table["fire lag to job start, p50 / p99"].ours == "0.200s / 0.200s"
    assert table["fire lag to job start, p50 / p99"].met is True
    assert table["fire lag to activity start, p50 / p99"].ours == "0.100s / 0.500s"
    assert table["  Temporal starts the workflow, p50 / p99"].met is None
    own = table["cronwarden's share: activity start to commit, p50 / p99"]
    assert own.ours == "0.010s / 0.150s"
    assert own.goal == "p99 < 100ms"
    assert own.met is False
    quick = rows(lags, schedules=10, seconds=100, quick=True)
    assert all(row.met is None for row in quick)


def test_fire_lag_prints_the_same_rows_when_nothing_ran() -> None:
    ran = Lags(
        activity=[0.1],
        job=[0.2],
        own=[0.05],
        expected=1,
        phases={"Temporal starts the workflow": [0.05]},
    )
    nothing = Lags(activity=[], job=[], own=[], expected=3, phases={})
    full = rows(ran, schedules=3, seconds=20, quick=False)
    empty = rows(nothing, schedules=3, seconds=20, quick=False)
    assert [row.metric for row in empty] == [row.metric for row in full]
    by_metric = {row.metric: row for row in empty}
    assert by_metric["fire lag to job start, p50 / p99"].ours == "-"
    # No run at all misses the lag goal; the phases have no goal.
    assert by_metric["fire lag to job start, p50 / p99"].met is False
    assert by_metric["cronwarden's share: activity start to commit, p50 / p99"].met is False
    assert by_metric["  activity waits for the worker, p50 / p99"].ours == "-"


def test_fire_lag_cpu_rows_show_each_fires_share_and_the_floor_it_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    lags = Lags(activity=[], job=[], own=[], expected=0, phases={}, server_cpu=20.0, worker_cpu=5.0)
    table = {row.metric: row.ours for row in cpu_rows(lags, schedules=100, fires=100)}
    assert table["Temporal server CPU per fire / worker CPU per fire"] == "200ms / 50ms"
    # 100 fires at 0.25 s of CPU each on one machine's 2 cores: the last cannot start
    # before 12.5 s.
    assert table["burst floor: server + worker CPU of 100 fires / 2 cores"] == "12.50s"
    unknown = cpu_rows(replace(lags, server_cpu=None), schedules=100, fires=100)
    assert [row.metric for row in unknown] == list(table)
    assert all(row.ours == "-" for row in unknown)


def test_cpu_of_a_process_read_from_procfs_matches_its_own_count() -> None:
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        pass  # burn CPU, so both counts are well above a clock tick
    mine, read = own_cpu(), pid_cpu(os.getpid())
    assert read is not None
    assert abs(mine - read) < 0.05
    assert pid_cpu(None) is None


# A parent holding 200 MiB spawns a child that allocates nothing much: the child's own peak is
# what the backfill bench reports, since wait4 carries the parent's peak into the child's.
_PARENT_OF_A_SMALL_CHILD = """
import os, subprocess, sys
held = bytearray(200 * 1024 * 1024)
held[::4096] = b"x" * len(held[::4096])
child = subprocess.Popen(
    [sys.executable, "-c", "from bench.cpu import own_peak_rss_mib; print(own_peak_rss_mib())"],
    stdout=subprocess.PIPE, text=True,
)
own = float(child.stdout.read())
_, _, usage = os.wait4(child.pid, 0)
print(own, usage.ru_maxrss / 1024)
"""


def test_a_childs_peak_memory_is_its_own_not_its_parents() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PARENT_OF_A_SMALL_CHILD],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
    )
    own, by_wait4 = (float(v) for v in done.stdout.split())
    assert own < 100 and by_wait4 >= 200
    assert (own_peak_rss_mib() or 0) > 0
