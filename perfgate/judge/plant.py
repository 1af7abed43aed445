"""Whether a planted slowdown (--perf-inject-slowdown) slowed what is gated: a gate proven with a plant that did not
take proves nothing, so such a plant is shown in the record and warned about, never averaged in."""

from __future__ import annotations

from typing import Any, Sequence

from perfgate.measure import stats
from perfgate.result import Result

TAKEN = 0.5
"""A plant has taken once a gated metric moved at least this share of the way it should."""


class PlantNotTakenWarning(UserWarning):
    """A planted slowdown moved a gated metric by less than half of what it should: a gate proven with that plant
    proves nothing."""


def plant_check(fraction: float, changes: Sequence[tuple[str, str, float]],
                planted_fractions: list[float]) -> list[dict[str, Any]]:
    """Did each gated metric (``changes``: its name, which way is better and its relative change) move as a planted
    slowdown of ``fraction`` should (a rate to 1 / (1 + F), a time by +F)? ``planted_fractions``: what the runs
    applied (RunMetrics.planted_fraction)."""
    rows = []
    for metric, better, change in changes:
        expected = 1 / (1 + fraction) - 1 if better == "higher" else fraction
        rows.append({"metric": metric, "planted": fraction, "expected_change": expected, "measured_change": change,
                     "applied": stats.median(planted_fractions) if planted_fractions else None,
                     "took": change / expected >= TAKEN})
    return rows


def check(result: Result, key: str, fraction: float, changes: Sequence[tuple[str, str, float]],
          planted_fractions: list[float], against: object) -> None:
    """Keeps the plant's rows in ``result`` and warns of each gated metric the plant did not move (``against``:
    where the reference is, for the message)."""
    rows = plant_check(fraction, changes, planted_fractions)
    result.plant = rows
    for row in rows:
        if not row["took"]:
            applied = "" if row["applied"] is None else f" (the runs applied {row['applied']:.1%})"
            result.warn(PlantNotTakenWarning(
                f"{key}: a planted slowdown of {fraction:.0%}{applied} should move {row['metric']} by "
                f"{row['expected_change']:+.1%}, but it moved {row['measured_change']:+.1%} against {against}: the "
                "plant did not take, or the machine got that much faster since (A/B in one job, --perf-against, "
                "answers drift); this verdict proves nothing about the gate"))
