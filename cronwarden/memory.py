"""Bound glibc's malloc arenas in every cronwarden process.

glibc gives threads arenas of their own (up to 8 per core): the Temporal SDK's core runs a pool
of native threads, and a long command's memory (a year of backfill keys, streamed) is spread
over arenas that each keep their freed pages, so its peak RSS grows with the threads rather
than with what it holds. The image sets MALLOC_ARENA_MAX for the same reason; this makes the
bound hold wherever cronwarden runs (a pip install, `cronwarden dev`, CI).
"""

from __future__ import annotations

import ctypes
import os

ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap the arenas before any thread allocates; True if glibc took it. An explicit
    MALLOC_ARENA_MAX (or its glibc tunable) wins, and a libc without mallopt (musl, macOS,
    Windows) is left as it is."""
    if os.environ.get("MALLOC_ARENA_MAX") or "malloc.arena_max" in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # TypeError: Windows takes no CDLL(None)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))
