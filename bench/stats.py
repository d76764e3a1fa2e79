"""Small, pure helpers for benchmark figures (medians, percentiles, ratios)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: the smallest value with at least `pct` % of values at or
    below it. Never interpolates, so a p99 is a lag that actually happened."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < pct <= 100:
        raise ValueError(f"percentile must be in (0, 100], not {pct}")
    ordered = sorted(values)
    rank = math.ceil(pct / 100 * len(ordered))
    return ordered[rank - 1]


def ratio(ours: float, baseline: float) -> float:
    """ours / baseline; infinite when the baseline is zero and ours is not."""
    if baseline == 0:
        return math.inf if ours else 1.0
    return ours / baseline
