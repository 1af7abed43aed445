"""A/B's comparison of each gated metric, pair by pair (judge/pairs.py)."""

import pytest

from perfgate.judge.baselines import Baseline, MetricBaseline
from perfgate.judge.pairs import PairsError, judge
from perfgate.measure import stats


def reference(runs, better="higher", tolerance=0.03, metric="m"):
    return Baseline("c", "k", {metric: MetricBaseline(stats.median(runs), better, tolerance, "u", tuple(runs))}, {})


def test_each_launch_is_set_against_the_reference_launch_beside_it():
    """The machine slows by 30 % over the session: pairs see the candidate's own 10 % in every pair."""
    drifting = [100.0, 90.0, 80.0, 70.0]
    (slow,) = judge(reference(drifting), {"m": [0.9 * value for value in drifting]}, stats.compare_pairs)
    (same,) = judge(reference(drifting), {"m": [value * (1 + 0.005 * (-1) ** i) for i, value in enumerate(drifting)]},
                    stats.compare_pairs)
    assert (slow.outcome, same.outcome) == ("FAIL", "pass")
    assert slow.runs == 4 and slow.measured == pytest.approx(76.5) and slow.change == pytest.approx(-0.1)


def test_describe_gives_the_reference_measured_runs_change_tolerance_and_reason():
    (verdict,) = judge(reference([200.0, 202.0]), {"m": [100.0, 101.0]}, stats.compare_pairs)
    assert verdict.describe().startswith(
        "m (higher is better): measured 100.5 u (median of 2 runs) vs baseline 201 u: -50.0% (tolerance 3.0%); "
        "significantly worse by 50.0%")


def test_every_gated_metric_is_judged_and_one_the_candidate_did_not_measure_is_refused():
    both = Baseline("c", "k", {"rate": MetricBaseline(100.0, "higher", 0.05, "u", (100.0, 100.0)),
                               "time": MetricBaseline(10.0, "lower", 0.05, "s", (10.0, 10.0))}, {})
    verdicts = judge(both, {"rate": [50.0, 51.0], "time": [10.0, 10.1], "other": [1.0]}, stats.compare_pairs)
    assert [(v.metric, v.outcome) for v in verdicts] == [("rate", "FAIL"), ("time", "pass")]
    with pytest.raises(PairsError, match="gates 'time', which this run did not measure"):
        judge(both, {"rate": [50.0, 51.0]}, stats.compare_pairs)
