"""The statistics behind A/B's verdict: robust summaries, the paired interval, the decision; and the noise of a
baseline's runs. (A stored baseline's verdict is the model's: judge/model.py.)

A case's evidence is one value per launch, because on shared machines the launch-to-launch shift dominates
step-to-step jitter. Under A/B each candidate launch is paired with a reference launch beside it, and the decision
reads the pairs' interval of the change:

- ``FAIL`` only when the change is significant (its interval excludes zero) and the point estimate is worse than
  the tolerance;
- ``stale`` when it is significantly *better* by more than the tolerance (an improvement);
- ``inconclusive`` when it is worse than the tolerance but not (yet) significant: the caller runs
  more repeats, up to a cap, before deciding;
- ``unresolved``, only where a resolution R above the tolerance is asked for (A/B's ``--perf-ab-resolve R``), when
  it is neither of the first two but the interval still reaches a slowdown of R: the runs cannot yet tell R from
  nothing, so a pass would say nothing about R; the caller measures more, and what is still open at the cap is
  reported as such, never as a pass (a metric whose tolerance is R or more could not fail at R anyway);
- ``pass`` otherwise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

MAD_TO_SIGMA = 1.4826
"""Scales the median absolute deviation to a standard deviation for normally distributed data."""


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def relative_spread(values: Sequence[float]) -> float:
    """Robust relative noise: MAD scaled to sigma, over the median (0 for fewer than 2 values)."""
    if len(values) < 2:
        return 0.0
    center = median(values)
    mad = median([abs(v - center) for v in values])
    return MAD_TO_SIGMA * mad / abs(center) if center else 0.0


def median_ci_halfwidth(values: Sequence[float], z: float = 1.96) -> float | None:
    """Relative half-width of a distribution-free ~95 % interval of the median (order statistics).

    For n sorted values the interval is [x_j, x_k] with j, k = n/2 -+ z sqrt(n)/2; None while n is too
    small for such an interval to exist.
    """
    n = len(values)
    low = math.floor(n / 2 - z * math.sqrt(n) / 2)
    high = math.ceil(n / 2 + z * math.sqrt(n) / 2)
    if low < 1 or high > n:
        return None
    ordered = sorted(values)
    center = median(ordered)
    return (ordered[high - 1] - ordered[low - 1]) / 2 / center if center else None


@dataclass(frozen=True)
class Comparison:
    """The candidate's runs against the reference's. ``change`` > 0 means the value went up."""

    change: float
    ci_low: float
    ci_high: float

    def worse(self, better: str) -> tuple[float, float, float]:
        """(estimate, low, high) of how much worse, in the metric's bad direction."""
        if better == "higher":
            return -self.change, -self.ci_high, -self.ci_low
        return self.change, self.ci_low, self.ci_high


T_QUANTILES = {
    0.95: (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
           2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
           1.960),
    0.99: (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977, 2.947,
           2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750,
           2.576),
}
"""Two-sided Student's t quantiles for 1..30 degrees of freedom, then the normal's for more, per confidence."""


def t_quantile(confidence: float, degrees_of_freedom: int) -> float:
    """The two-sided Student's t quantile at ``confidence`` (a key of T_QUANTILES), whose one side holds
    (1 + confidence) / 2."""
    if degrees_of_freedom < 1:
        raise ValueError(f"Student's t needs at least one degree of freedom, not {degrees_of_freedom}")
    quantiles = T_QUANTILES[confidence]
    return quantiles[min(degrees_of_freedom, len(quantiles)) - 1]


SEQUENTIAL_CONFIDENCE = 0.99
"""The paired interval's confidence where it is looked at after every pair, up to 20 times (--perf-ab-resolve): 95 % at
each look fails unchanged builds more often than 5 % over 20 looks
(docs/measurements.md#why-the-rules-are-what-they-are); Pocock's constant boundary for 20 looks at 5 % overall is
about 99.1 %."""


def paired_confidence(resolve: float | None) -> float:
    """compare_pairs' confidence for a verdict that resolves ``resolve`` (see decide), or checks a tolerance only."""
    return SEQUENTIAL_CONFIDENCE if resolve is not None else 0.95


def compare_pairs(reference: Sequence[float], current: Sequence[float], confidence: float = 0.95) -> Comparison:
    """Runs measured in pairs, back to back (A/B): the i-th current run against the i-th reference run.

    A machine's drift moves both runs of a pair alike, so the pairs' log ratios carry only the
    difference and the short-term noise. The change is their geometric mean, with a paired t interval
    (``confidence``: 0.95 or 0.99), which alone decides significance. Fewer than two pairs give no interval.
    """
    pairs = list(zip(reference, current))
    if not pairs:
        raise ValueError("an A/B comparison needs at least one pair of runs")
    logs = [math.log(cur / ref) for ref, cur in pairs]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return Comparison(math.exp(mean) - 1.0, -math.inf, math.inf)
    half = t_quantile(confidence, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return Comparison(math.exp(mean) - 1.0, math.exp(mean - half) - 1.0, math.exp(mean + half) - 1.0)


def pairs_to_resolve(reference: Sequence[float], current: Sequence[float], better: str, bound: float,
                     confidence: float = SEQUENTIAL_CONFIDENCE) -> int | None:
    """About how many pairs would bring the upper end of compare_pairs' interval of how much worse below ``bound``, at
    the spread and change the pairs show so far (normal approximation); None where their change already reaches it."""
    sign = 1.0 if better == "lower" else -1.0
    logs = [sign * math.log(cur / ref) for ref, cur in zip(reference, current)]
    room = math.log(1.0 + bound) - max(0.0, statistics.fmean(logs))
    if len(logs) < 2 or room <= 0:
        return None
    return max(len(logs) + 1, math.ceil((T_QUANTILES[confidence][-1] * statistics.stdev(logs) / room) ** 2))


@dataclass(frozen=True)
class Decision:
    outcome: str  # "pass", "FAIL", "stale", "inconclusive" or "unresolved"
    reason: str


def decide(comparison: Comparison, better: str, tolerance: float, resolve: float | None = None) -> Decision:
    worse, worse_low, worse_high = comparison.worse(better)
    significant = worse_low > 0 or worse_high < 0
    interval = f"CI {worse_low:+.1%}..{worse_high:+.1%}"
    if significant and worse > tolerance:
        return Decision("FAIL", f"significantly worse by {worse:.1%} ({interval}), beyond the {tolerance:.1%} tolerance")
    if significant and -worse > tolerance:
        return Decision("stale", f"significantly better by {-worse:.1%} (CI {-worse_high:+.1%}..{-worse_low:+.1%}), "
                                 f"beyond the {tolerance:.1%} tolerance")
    if resolve is not None and tolerance < resolve <= worse_high:
        return Decision("unresolved", f"{worse:+.1%} worse ({interval}): cannot yet rule out a slowdown of "
                                      f"{resolve:.1%}")
    if worse > tolerance:
        return Decision("inconclusive", f"{worse:.1%} worse, beyond the {tolerance:.1%} tolerance, "
                                        f"but not significant yet ({interval})")
    return Decision("pass", f"{worse:+.1%} worse ({interval}), within what the tolerance and noise allow")


def settle(decision: Decision) -> Decision:
    """The final word once no more repeats are allowed: an open question is not a regression."""
    if decision.outcome != "inconclusive":
        return decision
    return Decision("pass", f"{decision.reason}; no repeats left, so not a significant regression")


DISTURBED_SIGMAS = 4.0


def disturbed(values: Sequence[float], better: str, floor: float, sigmas: float = DISTURBED_SIGMAS) -> list[int]:
    """Indices of runs worse than the median by more than ``sigmas`` robust standard deviations and more
    than ``floor``: on a shared machine, interference only ever makes a run worse, so such a run measured
    the neighbours, not the code. Fewer than 3 runs have no median to stand out from."""
    if len(values) < 3:
        return []
    center = median(values)
    allowed = max(sigmas * relative_spread(values), floor)
    sign = 1.0 if better == "higher" else -1.0
    return [i for i, value in enumerate(values) if sign * (center - value) / center > allowed]


def noise_tolerance(runs: Sequence[float], floor: float, factor: float = 1.0) -> float:
    """A tolerance from the measured noise: ``factor`` x the robust relative spread, never under ``floor``.

    One sigma is enough: noise is already answered by requiring significance (the interval); the tolerance only
    says how large a significant change must be to matter. At two sigmas a noisy
    baseline hides a 10 % slowdown below its own tolerance; one sigma catches it without more false alarms
    (docs/measurements.md#why-the-rules-are-what-they-are)."""
    return max(floor, factor * relative_spread(runs))
