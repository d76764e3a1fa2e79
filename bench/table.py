"""One row per measured metric, rendered as the one table `make bench` prints.

Figures on a shared machine are noisy: a row reports the median of several runs, the baseline
measured in the same run where there is one, and the ratio between them, never a lone time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

COLUMNS = ("metric", "ours", "baseline", "ratio", "goal", "verdict")


@dataclass(frozen=True)
class Row:
    metric: str
    ours: str
    baseline: str = "-"
    ratio: str = "-"
    goal: str = "-"
    met: bool | None = None
    """None when the row has no goal (or in --quick mode, where speed means nothing)."""

    @property
    def verdict(self) -> str:
        if self.met is None:
            return "-"
        return "pass" if self.met else "FAIL"

    def cells(self) -> list[str]:
        return [self.metric, self.ours, self.baseline, self.ratio, self.goal, self.verdict]


def render(rows: Iterable[Row]) -> str:
    """A Markdown table: the same text goes to the terminal and into bench/RESULTS.md."""
    body = [row.cells() for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(COLUMNS)]

    def line(cells: list[str] | tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(cells)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(COLUMNS), rule, *(line(r) for r in body)])


def beside(
    metric: str,
    ours: float,
    baseline: float,
    *,
    unit: str,
    baseline_note: str,
    below: float,
    judged: bool,
    digits: int = 2,
) -> Row:
    """A figure beside its baseline and their ratio, judged `ours < below` unless in --quick."""
    return Row(
        metric=metric,
        ours=f"{ours:.{digits}f} {unit}",
        baseline=f"{baseline:.{digits}f} {unit} ({baseline_note})",
        ratio=f"{ours / baseline:.2f}x",
        goal=f"< {below:g} {unit}",
        met=ours < below if judged else None,
    )
