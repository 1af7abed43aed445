"""benchmarks/ab_power.py predicts A/B detection power with the gate's own decision rules."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("ab_power", Path(__file__).parent.parent / "benchmarks" / "ab_power.py")
ab_power = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ab_power)


def test_quiet_pairs_decide_at_the_first_look_and_a_slowdown_within_the_tolerance_passes():
    quiet = [0.001, -0.001, 0.0, 0.001, -0.001]
    assert ab_power.verdict(quiet, 0.10, first=3, cap=5, tolerance=0.02) == ("FAIL", 3)
    assert ab_power.verdict(quiet, 0.01, first=3, cap=5, tolerance=0.02) == ("pass", 3)


def test_noisy_pairs_measure_more_until_the_cap_then_an_unproven_slowdown_passes():
    noisy = [0.08, -0.12, 0.10, -0.09, 0.07]
    assert ab_power.verdict(noisy, 0.05, first=3, cap=5, tolerance=0.02) == ("pass", 5)


def test_a_wall_clock_beside_the_cpu_clock_is_decided_with_it_and_a_fail_on_either_ends_the_case():
    """The CPU clock's quiet pairs fail a 10 % plant at the third pair, while the wall clock's noisy ones are still
    open: the case ends there. Where the CPU clock passes, the wall clock's open verdict measures on to the cap."""
    quiet, noisy = [0.001, -0.001, 0.0, 0.001, -0.001], [0.08, -0.12, 0.10, -0.09, 0.07]
    assert ab_power.verdict(quiet, 0.10, first=3, cap=5, tolerance=0.02, wall=(noisy, 0.06)) == ("FAIL", 3)
    assert ab_power.verdict(quiet, 0.0, first=3, cap=5, tolerance=0.02, wall=(noisy, 0.06)) == ("pass", 3)
    assert ab_power.verdict(quiet, 0.0, first=3, cap=5, tolerance=0.02,
                            wall=([0.0, -0.2, -0.15, 0.0, -0.1], 0.06)) == ("pass", 5)


def test_power_grows_with_the_slowdown_and_falls_with_the_pair_noise():
    sizes = [0.0, 0.05, 0.10]
    quiet = ab_power.predict(0.01, sizes, [5], 3, 0.02, 400, seed=1)[5]
    noisy = ab_power.predict(0.08, sizes, [5], 3, 0.02, 400, seed=1)[5]
    assert quiet[0.0][0] <= 0.05 and quiet[0.05][0] >= 0.95 and quiet[0.10][0] == 1.0
    assert noisy[0.05][0] < quiet[0.05][0] and noisy[0.05][0] < noisy[0.10][0]


def test_pair_log_ratios_point_a_slowdown_down_whichever_way_the_metric_is_better():
    def runs(*values):
        return [{"metrics": {"samples_per_second": v, "total_time_secs": 1000 / v}} for v in values]

    result = {"reference": {"per_run": runs(100.0, 100.0)}, "per_run": runs(90.0, 100.0)}
    for metric in ("samples_per_second", "total_time_secs"):
        assert ab_power.pair_log_ratios(result, metric) == pytest.approx([math.log(0.9), 0.0])


def test_metrics_reads_a_recorded_statistic_that_the_session_did_not_gate(tmp_path, monkeypatch, capsys):
    """Every run records each clock's statistics; --metrics reads their pairs from a session that gated another."""
    def runs(*values):
        return [{"metrics": {"fastest_step_samples_per_second": 100.0, "least_step_cpu_seconds_per_sample": v}}
                for v in values]

    result = {"case": "c", "metrics": [{"metric": "fastest_step_samples_per_second", "tolerance": 0.06}],
              "reference": {"per_run": runs(1.0, 1.0, 1.0)}, "per_run": runs(1.0, 1.1, 0.9)}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    monkeypatch.setattr("sys.argv", ["ab_power.py", str(path), "--metrics", "least_step_cpu_seconds_per_sample",
                                     "--caps", "5", "--draws", "50"])
    assert ab_power.main() == 0
    out = capsys.readouterr().out
    assert "c least_step_cpu_seconds_per_sample: 3 pairs, pair sd 10.0%" in out
    assert "fastest_step" not in out and "tolerance 2.0%" in out


def test_resolve_measures_noisy_pairs_to_the_cap_and_counts_what_is_still_open_as_unresolved():
    noisy = [0.08, -0.12, 0.10, -0.09, 0.07]
    assert ab_power.verdict(noisy, 0.0, first=3, cap=5, tolerance=0.02, resolve=0.05) == ("unresolved", 5)
    quiet = [0.001, -0.001, 0.0, 0.001, -0.001]
    assert ab_power.verdict(quiet, 0.0, first=3, cap=5, tolerance=0.02, resolve=0.05) == ("pass", 3)


def test_pair_sd_simulates_a_given_spread_under_resolve(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["ab_power.py", "--pair-sd", "0.07", "--resolve", "0.05", "--caps", "6",
                                     "--sizes", "0", "0.05", "--draws", "200"])
    assert ab_power.main() == 0
    out = capsys.readouterr().out
    assert "pair sd 7.0%, tolerance 2.0%, --perf-ab-resolve 0.05" in out
    row = next(line for line in out.splitlines() if line.startswith("| 3, 6 |"))
    cell = row.split("|")[2].split("(")[0]
    unchanged_failed, unchanged_open = (float(x.strip().rstrip("%")) for x in cell.split(","))
    assert unchanged_failed <= 10 and unchanged_open >= 50, "7 % pairs cannot rule out 5 % within 6 pairs"


def test_narrow_measures_a_wide_pass_on_to_the_cap_where_the_default_rule_passes_it_at_once():
    noisy, quiet = [0.08, -0.12, 0.10, -0.09, 0.07], [0.001, -0.001, 0.0, 0.001, -0.001]
    assert ab_power.verdict(noisy, 0.0, first=3, cap=5, tolerance=0.02) == ("pass", 3)
    assert ab_power.verdict(noisy, 0.0, first=3, cap=5, tolerance=0.02, narrow=0.10) == ("pass", 5)
    assert ab_power.verdict(quiet, 0.0, first=3, cap=5, tolerance=0.02, narrow=0.10) == ("pass", 3)
