"""A/B's statistics, and the noise of a baseline's runs, on synthetic samples with known answers."""

import math
import random

import pytest

from perfgate.measure import stats


def noisy(center, sigma, n, seed):
    rng = random.Random(seed)
    return [rng.gauss(center, sigma * center) for _ in range(n)]


def test_relative_spread_is_robust_to_one_outlier():
    assert stats.relative_spread([100.0, 101.0, 99.0, 100.0, 400.0]) == pytest.approx(1.4826 * 1.0 / 100.0)
    assert stats.relative_spread([5.0]) == 0.0


def pairs(center, sigma, n, seed):
    """A reference of ``n`` launches at 100 and a candidate around ``center``, each launch ``sigma`` off."""
    return noisy(100, sigma, n, seed), noisy(center, sigma, n, seed + 1)


def test_known_shift_is_detected():
    comparison = stats.compare_pairs(*pairs(85, 0.02, 4, 1))
    decision = stats.decide(comparison, "higher", tolerance=0.05)
    assert decision.outcome == "FAIL" and "significantly worse by 1" in decision.reason


def test_lower_is_better_metrics_regress_upwards():
    comparison = stats.compare_pairs(*pairs(120, 0.02, 4, 3))
    assert stats.decide(comparison, "lower", tolerance=0.05).outcome == "FAIL"
    assert stats.decide(comparison, "higher", tolerance=0.05).outcome == "stale"


@pytest.mark.parametrize("seed", range(20))
def test_noise_alone_is_not_flagged(seed):
    comparison = stats.compare_pairs(*pairs(100, 0.02, 3, 10 * seed))
    assert stats.settle(stats.decide(comparison, "higher", tolerance=0.06)).outcome == "pass"


def test_large_but_unproven_change_is_inconclusive_until_the_pairs_run_out_and_more_pairs_decide_it():
    reference, candidate = [100.0] * 6, [88.0, 101.0, 92.0, 93.0, 94.0, 91.0]
    few = stats.decide(stats.compare_pairs(reference[:2], candidate[:2]), "higher", tolerance=0.05)
    many = stats.decide(stats.compare_pairs(reference, candidate), "higher", tolerance=0.05)
    assert (few.outcome, stats.settle(few).outcome, many.outcome) == ("inconclusive", "pass", "FAIL")


def test_a_faster_candidate_beyond_the_tolerance_is_stale():
    decision = stats.decide(stats.compare_pairs(*pairs(130, 0.01, 3, 2)), "higher", tolerance=0.05)
    assert decision.outcome == "stale" and "significantly better" in decision.reason


def test_a_pass_that_cannot_rule_out_the_slowdown_asked_about_is_unresolved_until_its_interval_does():
    """Pairs within 3 % of their reference: a pass at 2 pairs (CI -19.5..+18.8 %), unresolved for 3 % until the fifth
    pair brings the interval's upper end under 3 %; a metric whose tolerance is 3 % or more could not fail at 3 % and
    keeps the default rule."""
    reference, current = [100.0] * 5, [100.0, 97.0, 103.0, 99.0, 101.0]
    outcomes = [stats.decide(stats.compare_pairs(reference[:n], current[:n]), "higher", 0.02, resolve=0.03)
                for n in range(2, 6)]
    assert [d.outcome for d in outcomes] == ["unresolved"] * 3 + ["pass"]
    assert outcomes[2].reason == "+0.3% worse (CI -3.8%..+4.2%): cannot yet rule out a slowdown of 3.0%"
    assert stats.decide(stats.compare_pairs(reference[:2], current[:2]), "higher", 0.02).outcome == "pass"
    for tolerance in (0.03, 0.06):
        assert stats.decide(stats.compare_pairs(reference[:2], current[:2]), "higher", tolerance,
                            resolve=0.03).outcome == "pass"
    assert stats.settle(outcomes[0]).outcome == "unresolved"


def test_the_pairs_a_resolution_needs_follow_from_their_spread_and_change():
    reference = [100.0] * 4
    assert stats.pairs_to_resolve(reference, [100.0, 97.0, 103.0, 99.0], "higher", 0.03) == 6
    assert stats.pairs_to_resolve(reference, [100.0, 97.0, 103.0, 99.0], "higher", 0.03, confidence=0.95) == 5
    assert stats.pairs_to_resolve(reference, [90.0, 110.0, 92.0, 108.0], "higher", 0.05) == 37
    assert stats.pairs_to_resolve(reference, [94.0, 96.0, 95.0, 94.0], "higher", 0.05) is None
    assert stats.pairs_to_resolve(reference, [106.0, 104.0, 105.0, 106.0], "lower", 0.05) is None


def test_noise_tolerance_has_a_floor():
    assert stats.noise_tolerance([100.0, 100.0, 100.0], floor=0.03) == 0.03
    assert stats.noise_tolerance([100.0, 104.0, 96.0], floor=0.03) == pytest.approx(1.4826 * 0.04)


def test_median_interval_needs_enough_steps_and_shrinks_with_more():
    assert stats.median_ci_halfwidth([1.0] * 5) is None
    assert stats.median_ci_halfwidth([1.0] * 9) == 0.0
    jitter = [1.0 + 0.02 * (((i * 7) % 11) - 5) / 5 for i in range(400)]
    wide, narrow = stats.median_ci_halfwidth(jitter[:20]), stats.median_ci_halfwidth(jitter)
    assert 0 < narrow < wide <= 0.02


def test_disturbed_runs_are_the_far_worse_ones_only():
    # a real baseline whose two runs fell in slow spells of a shared VM
    # (docs/measurements.md#why-the-rules-are-what-they-are)
    runs = [345.9, 350.5, 264.2, 344.9, 342.2, 338.1, 188.6]
    assert stats.disturbed(runs, "higher", floor=0.06) == [2, 6]
    assert stats.disturbed([1 / v for v in runs], "lower", floor=0.06) == [2, 6]
    assert stats.disturbed([100.0, 101.0, 99.0, 130.0], "higher", floor=0.06) == []  # faster is never disturbed
    assert stats.disturbed([100.0, 101.0, 99.0, 95.0], "higher", floor=0.06) == []  # within the floor
    assert stats.disturbed([100.0, 50.0], "higher", floor=0.06) == []  # two runs: no majority to judge by


def test_a_paired_interval_at_99_percent_is_wider_by_the_ratio_of_the_t_quantiles():
    reference, current = [100.0] * 4, [100.0, 97.0, 103.0, 99.0]
    at_95, at_99 = stats.compare_pairs(reference, current), stats.compare_pairs(reference, current, 0.99)
    ratio = (math.log1p(at_99.ci_high) - math.log1p(at_99.change), math.log1p(at_95.ci_high) - math.log1p(at_95.change))
    assert ratio[0] / ratio[1] == pytest.approx(5.841 / 3.182, rel=1e-3)


def test_paired_comparison_takes_the_geometric_mean_ratio_with_a_t_interval():
    from perfgate.measure.stats import compare_pairs

    comparison = compare_pairs([100.0, 100.0, 100.0], [94.0, 95.0, 96.0])
    assert comparison.change == pytest.approx((0.94 * 0.95 * 0.96) ** (1 / 3) - 1)
    # logs' sd 0.01053, t(2) = 4.303: half-width 2.62 % around -5.0 %
    assert (comparison.ci_low, comparison.ci_high) == pytest.approx((-0.0750, -0.0245), abs=5e-4)
    assert stats.decide(comparison, "higher", 0.02).outcome == "FAIL"


def test_one_pair_gives_no_interval_so_no_verdict_but_inconclusive_or_pass():
    from perfgate.measure.stats import compare_pairs

    comparison = compare_pairs([100.0], [80.0])
    assert comparison.ci_low == -math.inf and comparison.ci_high == math.inf
    assert stats.decide(comparison, "higher", 0.02).outcome == "inconclusive"
