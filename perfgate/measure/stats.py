"""The statistics behind a verdict: robust summaries, a rank test, bootstrap intervals, the decision.

A case's evidence is one value per run (whole torchrun launches), because on shared machines the
run-to-run shift dominates step-to-step jitter: steps of one run are not independent samples of the
next run. The decision compares the current runs with the baseline's runs:

- ``FAIL`` only when the change is statistically significant (the bootstrap confidence interval of
  the change excludes zero and, where the run counts let it reach p < alpha, the exact Mann-Whitney
  test agrees) and the point estimate is worse than the tolerance;
- ``stale`` when it is significantly *better* by more than the tolerance (a stored baseline is out of date;
  under A/B, an improvement);
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
import random
import statistics
from dataclasses import dataclass
from functools import lru_cache
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


def bootstrap_change_ci(
    baseline: Sequence[float], current: Sequence[float], *, confidence: float = 0.95, resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(current) / median(baseline) - 1, resampling each side.

    A baseline with a single value (a published reference) is taken as exact. Seeded, so a verdict
    is reproducible from the same numbers.
    """
    rng = random.Random(seed)
    changes = []
    for _ in range(resamples):
        base = median(rng.choices(baseline, k=len(baseline)))
        cur = median(rng.choices(current, k=len(current)))
        changes.append(cur / base - 1.0)
    changes.sort()
    tail = (1.0 - confidence) / 2.0
    low = changes[int(math.floor(tail * (resamples - 1)))]
    high = changes[int(math.ceil((1.0 - tail) * (resamples - 1)))]
    return low, high


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


@lru_cache(maxsize=256)
def _u_distribution(n1: int, n2: int) -> tuple[int, ...]:
    """Counts of each U value over all C(n1+n2, n1) orderings (no ties), by recursion on the largest item."""
    if n1 == 0 or n2 == 0:
        return (1,)
    with_first_largest = _u_distribution(n1 - 1, n2)  # largest belongs to sample 1: adds n2 to U
    with_second_largest = _u_distribution(n1, n2 - 1)
    counts = [0] * (n1 * n2 + 1)
    for u, count in enumerate(with_first_largest):
        counts[u + n2] += count
    for u, count in enumerate(with_second_largest):
        counts[u] += count
    return tuple(counts)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided exact p-value of the Mann-Whitney U test (ties count half), for small samples."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    u = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)
    counts = _u_distribution(n1, n2)
    total = sum(counts)
    extreme = min(u, n1 * n2 - u)
    tail = sum(count for value, count in enumerate(counts) if value <= extreme + 1e-9) / total
    return min(1.0, 2.0 * tail)


def min_p_value(n1: int, n2: int) -> float:
    """The smallest two-sided p-value the exact test can give for these sample sizes."""
    return 2.0 / math.comb(n1 + n2, n1)


@dataclass(frozen=True)
class Comparison:
    """Current runs against baseline runs. ``change`` > 0 means the value went up."""

    change: float
    ci_low: float
    ci_high: float
    p_value: float | None
    p_floor: float = 0.0
    """The smallest p-value the exact test can give at these run counts (1.0 when it cannot run)."""

    def worse(self, better: str) -> tuple[float, float, float]:
        """(estimate, low, high) of how much worse, in the metric's bad direction."""
        if better == "higher":
            return -self.change, -self.ci_high, -self.ci_low
        return self.change, self.ci_low, self.ci_high


def compare_runs(baseline: Sequence[float], current: Sequence[float], confidence: float = 0.95) -> Comparison:
    if not baseline or not current:
        raise ValueError("both the baseline and the current measurement need at least one run")
    low, high = bootstrap_change_ci(baseline, current, confidence=confidence)
    if len(baseline) > 1:
        p_value, p_floor = mann_whitney_p(baseline, current), min_p_value(len(baseline), len(current))
    else:
        p_value, p_floor = None, 1.0
    return Comparison(median(current) / median(baseline) - 1.0, low, high, p_value, p_floor)


T_QUANTILES = {
    0.80: (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372, 1.363, 1.356, 1.350, 1.345, 1.341,
           1.337, 1.333, 1.330, 1.328, 1.325, 1.323, 1.321, 1.319, 1.318, 1.316, 1.315, 1.314, 1.313, 1.311, 1.310,
           1.282),
    0.90: (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
           1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
           1.645),
    0.95: (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
           2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
           1.960),
    0.98: (31.821, 6.965, 4.541, 3.747, 3.365, 3.143, 2.998, 2.896, 2.821, 2.764, 2.718, 2.681, 2.650, 2.624, 2.602,
           2.583, 2.567, 2.552, 2.539, 2.528, 2.518, 2.508, 2.500, 2.492, 2.485, 2.479, 2.473, 2.467, 2.462, 2.457,
           2.326),
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
    (``confidence``: 0.95 or 0.99); there is no rank test (``p_floor`` 1.0), the interval alone decides
    significance. Fewer than two pairs give no interval.
    """
    pairs = list(zip(reference, current))
    if not pairs:
        raise ValueError("an A/B comparison needs at least one pair of runs")
    logs = [math.log(cur / ref) for ref, cur in pairs]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return Comparison(math.exp(mean) - 1.0, -math.inf, math.inf, None, 1.0)
    half = t_quantile(confidence, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return Comparison(math.exp(mean) - 1.0, math.exp(mean - half) - 1.0, math.exp(mean + half) - 1.0, None, 1.0)


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


def decide(comparison: Comparison, better: str, tolerance: float, alpha: float = 0.05,
           resolve: float | None = None) -> Decision:
    worse, worse_low, worse_high = comparison.worse(better)
    rank_test_can_decide = comparison.p_value is not None and comparison.p_floor < alpha
    rank_test_agrees = not rank_test_can_decide or comparison.p_value < alpha
    significant = (worse_low > 0 or worse_high < 0) and rank_test_agrees
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

    One sigma is enough: noise is already answered by requiring significance (the interval and the rank
    test); the tolerance only says how large a significant change must be to matter. At two sigmas a noisy
    baseline hides a 10 % slowdown below its own tolerance; one sigma catches it without more false alarms
    (docs/measurements.md#why-the-rules-are-what-they-are)."""
    return max(floor, factor * relative_spread(runs))
