"""benchmarks/detection_power.py tallies each planted size's verdicts."""

import importlib.util
import json
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("detection_power",
                                              Path(__file__).parent.parent / "benchmarks" / "detection_power.py")
detection_power = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(detection_power)


def test_the_table_counts_failed_and_unresolved_trials_apart_and_reads_trials_from_before_the_verdict_was_kept():
    trials = [{"slowdown": 0.05, "failed": True, "seconds": 100.0, "verdict": "FAIL"},
              {"slowdown": 0.05, "failed": False, "seconds": 240.0, "verdict": "unresolved"},
              {"slowdown": 0.05, "failed": False, "seconds": 90.0},
              {"slowdown": 0.0, "failed": False, "seconds": 80.0, "verdict": "pass"}]
    lines = detection_power.summarize(trials, [0.0, 0.05])
    assert lines[0].split(" | ")[4] == "unresolved"
    assert lines[2] == "| 0 % (unchanged) | 1 | 0 | 0% | 0 | 80 s | 80 s |"
    assert lines[3] == "| 5% | 3 | 1 | 33% | 1 | 100 s | 240 s |"


def test_a_trials_verdict_and_each_runs_machine_readings_are_read_from_its_result(tmp_path):
    (tmp_path / "case").mkdir()
    (tmp_path / "case" / "result.json").write_text(
        '{"verdict": "unresolved", "metrics": [{"metric": "m"}], "plant": [{"metric": "m", "took": false}], '
        '"per_run": [{"metrics": {"probe_matmul_gflops": 31.5, "probe_matmul_cpu_gflops": 33.0, '
        '"probe_copy_gbps": 9.0, "probe_copy_cpu_gbps": 9.5, "run_queue_turns": 1.8}}, {"metrics": {}}]}')
    assert detection_power.judged(tmp_path) == {
        "verdict": "unresolved", "metrics": [{"metric": "m"}], "plant": [{"metric": "m", "took": False}],
        "probes": [
            {"probe_matmul_gflops": 31.5, "probe_copy_gbps": 9.0, "probe_matmul_cpu_gflops": 33.0,
             "probe_copy_cpu_gbps": 9.5, "run_queue_turns": 1.8},
            {"probe_matmul_gflops": None, "probe_copy_gbps": None, "probe_matmul_cpu_gflops": None,
             "probe_copy_cpu_gbps": None, "run_queue_turns": None}]}
    assert detection_power.judged(tmp_path / "none") == {"verdict": None, "metrics": [], "plant": [], "probes": []}


def row(metric, unit, tolerance, reference, candidate):
    return {"metric": metric, "unit": unit, "tolerance": tolerance, "baseline": reference[0], "runs": len(candidate),
            "change": 0.0, "baseline_runs": reference, "run_values": candidate}


CAUGHT_BY_THE_CPU_CLOCK = {"slowdown": 0.1, "failed": True, "seconds": 250.0, "verdict": "FAIL", "metrics": [
    row("cpu_seconds_per_sample", "CPU s/sample", 0.02, [1.0] * 5, [1.10, 1.11, 1.09, 1.10, 1.10]),
    row("fastest_step_samples_per_second", "samples/s", 0.06, [100.0] * 5, [80.0, 100.0, 90.0, 100.0, 80.0])]}
"""Pairs that the gate's former rule ran to its 5-pair cap: the CPU clock fails at the third, the wall clock's
fastest step is 10 % worse but not significant."""


def test_rejudging_replays_an_ab_trial_by_the_pairs_rules_and_stops_where_they_stop():
    assert detection_power.rejudge(CAUGHT_BY_THE_CPU_CLOCK, first=3) == (True, 3)
    unchanged = {**CAUGHT_BY_THE_CPU_CLOCK, "metrics": [
        row("cpu_seconds_per_sample", "CPU s/sample", 0.02, [1.0] * 5, [1.0, 1.01, 0.99, 1.0, 1.0]),
        row("fastest_step_samples_per_second", "samples/s", 0.06, [100.0] * 5, [100.0, 99.0, 101.0, 100.0, 100.0])]}
    assert detection_power.rejudge(unchanged, first=3) == (False, 3)
    still_open = {**CAUGHT_BY_THE_CPU_CLOCK, "metrics": CAUGHT_BY_THE_CPU_CLOCK["metrics"][1:]}
    assert detection_power.rejudge(still_open, first=3) == (False, 5)


def test_the_rejudged_table_sets_the_recorded_trials_beside_their_replay(tmp_path, capsys):
    results = tmp_path / "dp.json"
    results.write_text(json.dumps({"against": "HEAD", "pytest_args": [], "trials": [CAUGHT_BY_THE_CPU_CLOCK]}))
    detection_power.print_rejudged(results)
    assert capsys.readouterr().out.splitlines()[-1] == "| 10% | 1 | 1 / 1 | 5.0 / 3.0 | 250 s / 150 s |"
    results.write_text(json.dumps({"against": None, "pytest_args": [], "trials": [CAUGHT_BY_THE_CPU_CLOCK]}))
    with pytest.raises(SystemExit, match="which the verdict's model decides"):
        detection_power.print_rejudged(results)


def test_the_first_look_comes_after_the_trials_own_perf_repeats():
    assert detection_power.first_runs([]) == 3
    assert detection_power.first_runs(["--perf-steps", "20", "--perf-repeats", "5"]) == 5
    assert detection_power.first_runs(["--perf-repeats=4"]) == 4


def test_each_plant_is_counted_against_the_smallest_slowdown_the_gate_said_that_session_catches():
    def trial(size, failed, *catchable):
        return {"slowdown": size, "failed": failed, "seconds": 60.0,
                "metrics": [{"metric": f"m{i}", "catchable": c} for i, c in enumerate(catchable)]}
    trials = [trial(0.10, True, 0.30, 0.08), trial(0.10, False, 0.12, 0.20), trial(0.10, True, 0.15),
              trial(0.0, False, 0.05), {"slowdown": 0.10, "failed": False, "seconds": 60.0}]
    lines = detection_power.promises_kept(trials, [0.0, 0.10])
    assert lines[2:] == ["| 10% | 12.0% | 1 | 1 | 2 | 1 |"]
