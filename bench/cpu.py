"""CPU time and peak memory of this process and of the embedded servers, to show where a
measurement's time and memory go."""

from __future__ import annotations

import os
import resource
from pathlib import Path


def own_cpu() -> float:
    """Seconds of CPU this process has used (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    """Seconds of CPU this process's reaped children have used (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pid_cpu(pid: int | None) -> float | None:
    """Seconds of CPU another process has used, or None where procfs cannot tell."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces): utime and stime are the 12th and
    # 13th, in clock ticks.
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_peak_rss_mib() -> float | None:
    """This process's peak resident memory in MiB (VmHWM), or None where procfs cannot tell.

    Read by the process itself, not as `ru_maxrss` from its parent's wait4: Linux carries the
    high-water mark of the memory a process had before exec into that figure, and a child
    spawned by Python (vfork) therefore reports at least its parent's peak. A benchmark that
    read a large output back would see every later child as large as itself.
    """
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    return None
