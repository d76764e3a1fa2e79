"""Markdown tables: the same text goes to the terminal and, pasted, into the README."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(
    columns: Sequence[str], rows: Sequence[Sequence[str]], *, right: set[int]
) -> str:
    """`right` are the indexes of the columns aligned right (the counts)."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|"
        + "|".join(
            "-" * (w + 1) + ":" if i in right else "-" * (w + 2) for i, w in enumerate(widths)
        )
        + "|"
    )
    return "\n".join([line(columns), rule, *(line(r) for r in rows)])
