"""Change points in a series of results, found by Apache Otava (formerly hunter, MongoDB's E-divisive method).

Otava splits the series in sliding windows, finds candidate change points with E-divisive means and keeps
those whose two sides differ by a two-sided t-test at ``max_pvalue``; a single outlier does not make a change
point. Only its analysis module is used (numpy and scipy), not its importers and notifiers.

Two guards on top, because the t-test's p-value is taken where E-divisive chose the split, so it is optimistic:
a change point must move the mean by ``min_change`` (Otava's ``min_magnitude``), and each of its segments must
hold ``min_segment`` results. On synthetic series they cut false change points in flat series and still find a 3 %
step where it is (benchmarks/change_points.py; docs/measurements.md#why-the-rules-are-what-they-are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from otava.analysis import compute_change_points

MAX_PVALUE = 0.001
"""Otava's default: a change point's two sides differ with p <= 0.001."""
WINDOW = 50
"""Otava's default window, in results."""
MIN_CHANGE = 0.01
"""A change point moves its segment's mean by at least 1 %."""
MIN_SEGMENT = 3
"""Results on each side of a change point: fewer is a spike or an edge, not a new level."""


@dataclass(frozen=True)
class ChangePoint:
    index: int
    """The first result of the new segment."""
    before: float
    """Mean of the segment that ends here."""
    after: float
    """Mean of the segment that starts here."""
    pvalue: float

    @property
    def change(self) -> float:
        return self.after / self.before - 1.0 if self.before else 0.0


def change_points(values: Sequence[float], max_pvalue: float = MAX_PVALUE, window: int = WINDOW,
                  min_change: float = MIN_CHANGE, min_segment: int = MIN_SEGMENT) -> list[ChangePoint]:
    """The change points of ``values`` (oldest first), in order, each with the means of its two segments."""
    if len(values) < 2 * min_segment:
        return []
    found = sorted(compute_change_points(list(values), window_len=window, max_pvalue=max_pvalue,
                                         min_magnitude=min_change)[0], key=lambda point: point.index)
    while True:
        edges = [0, *(point.index for point in found), len(values)]
        short = [point for number, point in enumerate(found)
                 if min(edges[number + 1] - edges[number], edges[number + 2] - edges[number + 1]) < min_segment]
        if not short:
            break
        found.remove(min(short, key=lambda point: point.stats.change_magnitude()))
    means = [mean for _, _, mean in segments(values, [point.index for point in found])]
    return [ChangePoint(int(point.index), means[number], means[number + 1], float(point.stats.pvalue))
            for number, point in enumerate(found)]


def segments(values: Sequence[float], starts: Sequence[int]) -> list[tuple[int, int, float]]:
    """(start, end, mean) of each segment of ``values`` cut where each of ``starts`` begins one."""
    edges = [0, *starts, len(values)]
    return [(start, end, sum(values[start:end]) / (end - start)) for start, end in zip(edges, edges[1:])]
