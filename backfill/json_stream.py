"""A JSON document written piece by piece: the `--json` of `backfill` and `audit` on a year's
window lists hundreds of thousands of keys, and building them as one list, then as one string,
costs a Python object per key and the whole text at once.

`dump` writes exactly what `json.dumps(value, indent=2, ensure_ascii=False)` would, plus a
newline, except that any iterator in the value (a generator, not a list) is written as a JSON
array while it is consumed: only one element of it exists at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

# Pieces written per call: one `write` per key would be most of the time on a big document,
# and the buffer stays a few hundred KiB at most.
_FLUSH_EVERY = 8192


def dump(value: Any, write: Callable[[str], object]) -> None:
    """Write `value` as an indented JSON document (and a final newline) through `write`."""
    pieces: list[str] = []

    def emit(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) >= _FLUSH_EVERY:
            write("".join(pieces))
            pieces.clear()

    _write(value, emit, "")
    pieces.append("\n")
    write("".join(pieces))


def _write(value: Any, emit: Callable[[str], None], indent: str) -> None:
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            emit("{}")
            return
        opening = "{"
        for key, item in value.items():
            emit(f"{opening}\n{inner}{json.dumps(key, ensure_ascii=False)}: ")
            _write(item, emit, inner)
            opening = ","
        emit(f"\n{indent}}}")
    elif isinstance(value, list | tuple | Iterator):
        opening = "["
        for item in value:
            emit(f"{opening}\n{inner}")
            _write(item, emit, inner)
            opening = ","
        emit("[]" if opening == "[" else f"\n{indent}]")
    else:
        emit(json.dumps(value, ensure_ascii=False))
