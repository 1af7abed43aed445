"""benchmarks/detection_power.py tallies each planted size's verdicts."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("otava.analysis", reason="benchmarks/detection_power.py reads spreads from a results history: "
                    "perfgate[trend], which .venv-floor does not have")
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


def test_a_trials_verdict_and_each_runs_probe_are_read_from_its_result(tmp_path):
    (tmp_path / "case").mkdir()
    (tmp_path / "case" / "result.json").write_text(
        '{"verdict": "unresolved", "metrics": [{"metric": "m"}], "plant": [{"metric": "m", "took": false}], '
        '"session_spread": [{"metric": "m", "catchable": 0.12}], "per_run": [{"metrics": {"probe_matmul_gflops": 31.5, '
        '"probe_matmul_cpu_gflops": 33.0, "probe_copy_gbps": 9.0, "probe_copy_cpu_gbps": 9.5}}, {"metrics": {}}]}')
    assert detection_power.judged(tmp_path) == {
        "verdict": "unresolved", "metrics": [{"metric": "m"}], "plant": [{"metric": "m", "took": False}],
        "session_spread": [{"metric": "m", "catchable": 0.12}], "probes": [
            {"probe_matmul_gflops": 31.5, "probe_copy_gbps": 9.0, "probe_matmul_cpu_gflops": 33.0,
             "probe_copy_cpu_gbps": 9.5},
            {"probe_matmul_gflops": None, "probe_copy_gbps": None, "probe_matmul_cpu_gflops": None,
             "probe_copy_cpu_gbps": None}]}
    assert detection_power.judged(tmp_path / "none") == {"verdict": None, "metrics": [], "plant": [],
                                                         "session_spread": [], "probes": []}


def row(metric, unit, tolerance, reference, candidate):
    return {"metric": metric, "unit": unit, "tolerance": tolerance, "baseline": reference[0], "runs": len(candidate),
            "change": 0.0, "baseline_runs": reference, "run_values": candidate}


CAUGHT_BY_THE_CPU_CLOCK = {"slowdown": 0.1, "failed": True, "seconds": 250.0, "verdict": "FAIL", "metrics": [
    row("cpu_seconds_per_sample", "CPU s/sample", 0.02, [1.0] * 5, [1.10, 1.11, 1.09, 1.10, 1.10]),
    row("fastest_step_samples_per_second", "samples/s", 0.06, [100.0] * 5, [80.0, 100.0, 90.0, 100.0, 80.0])]}
"""Pairs that the gate's former rule ran to its 5-pair cap: the CPU clock fails at the third, the wall clock's
fastest step is 10 % worse but not significant."""


def test_rejudging_replays_a_trial_by_the_gates_rules_and_stops_where_they_stop():
    assert detection_power.rejudge(CAUGHT_BY_THE_CPU_CLOCK, paired=True, first=3) == (True, 3)
    unchanged = {**CAUGHT_BY_THE_CPU_CLOCK, "metrics": [
        row("cpu_seconds_per_sample", "CPU s/sample", 0.02, [1.0] * 5, [1.0, 1.01, 0.99, 1.0, 1.0]),
        row("fastest_step_samples_per_second", "samples/s", 0.06, [100.0] * 5, [100.0, 99.0, 101.0, 100.0, 100.0])]}
    assert detection_power.rejudge(unchanged, paired=True, first=3) == (False, 3)
    still_open = {**CAUGHT_BY_THE_CPU_CLOCK, "metrics": CAUGHT_BY_THE_CPU_CLOCK["metrics"][1:]}
    assert detection_power.rejudge(still_open, paired=True, first=3) == (False, 5)


def test_the_rejudged_table_sets_the_recorded_trials_beside_their_replay(tmp_path, capsys):
    results = tmp_path / "dp.json"
    results.write_text(json.dumps({"against": "HEAD", "pytest_args": [], "trials": [CAUGHT_BY_THE_CPU_CLOCK]}))
    detection_power.print_rejudged(results)
    assert capsys.readouterr().out.splitlines()[-1] == "| 10% | 1 | 1 / 1 | 5.0 / 3.0 | 250 s / 150 s |"


def test_the_first_look_comes_after_the_trials_own_perf_repeats():
    assert detection_power.first_runs([]) == 3
    assert detection_power.first_runs(["--perf-steps", "20", "--perf-repeats", "5"]) == 5
    assert detection_power.first_runs(["--perf-repeats=4"]) == 4


def test_the_machine_rules_leave_a_wall_fail_of_a_slowed_machine_unresolved_and_a_planted_cpu_fail_failed():
    def trial(slowdown, wall, cpu, probe):
        return {"slowdown": slowdown, "probes": [{"probe_matmul_gflops": probe}],
                "metrics": [{"metric": "fastest_step_samples_per_second", "change": wall, "tolerance": 0.06,
                             "baseline": 100.0, "verdict": "FAIL" if wall < -0.06 else "pass",
                             "run_values": [100.0 * (1 + wall)]},
                            {"metric": "cpu_seconds_per_sample", "change": cpu, "tolerance": 0.05, "baseline": 0.01,
                             "verdict": "FAIL" if cpu > 0.05 else "pass", "run_values": [0.01 * (1 + cpu)]}]}

    trials = [trial(0, -0.25, 0.01, 60.0), trial(0.1, -0.25, 0.10, 60.0), trial(0, -0.25, 0.01, 100.0)]
    assert detection_power.with_machine_rules(trials, {"probe_matmul_gflops": 100.0}) == [
        (False, True), (True, False), (False, True)], "a steady probe: the wall clock alone, with no spread known yet"
    loaded = [trial(0, -0.15, cpu, 55.0) for cpu in (-0.07, -0.065, -0.075, -0.06, -0.08)]
    decided = detection_power.with_machine_rules(
        [*loaded, trial(0.1, -0.2, 0.017, 55.0), trial(0, 0.0, 0.0, 100.0)], {"probe_matmul_gflops": 100.0})
    assert decided[:5] == [(False, True)] * 5, "the loaded wall clock is the machine's, and the CPU clock held"
    assert decided[5] == (False, True), ("a plant within the tolerance, worse than the loaded sessions beyond theirs on "
                                         "the CPU clock alone: a loaded machine moves that clock alone as far")
    assert decided[6] == (False, False), "a quiet session is judged by none of the loaded ones"


def test_each_plant_is_counted_against_the_smallest_slowdown_the_gate_said_that_session_catches():
    def trial(size, failed, *catchable):
        return {"slowdown": size, "failed": failed, "seconds": 60.0,
                "session_spread": [{"metric": f"m{i}", "catchable": c} for i, c in enumerate(catchable)]}
    trials = [trial(0.10, True, 0.30, 0.08), trial(0.10, False, 0.12, 0.20), trial(0.10, True, 0.15),
              trial(0.0, False, 0.05), {"slowdown": 0.10, "failed": False, "seconds": 60.0}]
    lines = detection_power.promises_kept(trials, [0.0, 0.10])
    assert lines[2:] == ["| 10% | 12.0% | 1 | 1 | 2 | 1 |"]


def test_a_rejudge_reads_the_probes_cpu_time_as_the_gate_does():
    """Both clocks FAILed by about what the probe dropped on each: unresolved against a baseline whose probe read CPU
    time, a FAIL against one from before it."""
    rows = [{"metric": "fastest_step_samples_per_second", "change": -0.08, "tolerance": 0.06, "baseline": 100.0,
             "verdict": "FAIL", "run_values": [92.0]},
            {"metric": "cpu_seconds_per_sample", "change": 0.07, "tolerance": 0.05, "baseline": 0.01,
             "verdict": "FAIL", "run_values": [0.0107]}]
    trial = {"slowdown": 0, "metrics": rows,
             "probes": [{"probe_matmul_gflops": 94.0, "probe_matmul_cpu_gflops": 93.0}]}
    assert detection_power.with_machine_rules([trial], {"probe_matmul_gflops": 100.0,
                                                        "probe_matmul_cpu_gflops": 100.0}) == [(False, True)]
    assert detection_power.with_machine_rules([trial], {"probe_matmul_gflops": 100.0}) == [(True, False)]


def test_a_rejudge_starts_from_the_verdict_against_the_baseline_alone_where_the_row_kept_it():
    row = {"metric": "fastest_step_samples_per_second", "change": -0.07, "tolerance": 0.06, "baseline": 100.0,
           "verdict": "unresolved", "run_values": [93.0]}
    trial = {"slowdown": 0, "probes": [{"probe_matmul_gflops": 100.0}], "metrics": [row]}
    assert detection_power.with_machine_rules([trial], {"probe_matmul_gflops": 100.0}) == [(True, False)], \
        "an older row: left unresolved live, so it had FAILed against the baseline alone"
    kept = {**trial, "metrics": [{**row, "against_baseline": "pass"}]}
    assert detection_power.with_machine_rules([kept], {"probe_matmul_gflops": 100.0}) == [(False, False)]


def test_a_rejudge_reads_the_probes_slower_kernel_on_each_clock():
    """Both clocks FAILed by more than the matmul dropped but no more than the copy did (openclip-fp32-cpu on the
    family 25 model 1 VM a day after its baseline): unresolved where the baseline timed the copy by CPU time too."""
    rows = [{"metric": "fastest_step_samples_per_second", "change": -0.156, "tolerance": 0.06, "baseline": 221.0,
             "verdict": "FAIL", "run_values": [186.6]},
            {"metric": "cpu_seconds_per_sample", "change": 0.256, "tolerance": 0.077, "baseline": 0.01,
             "verdict": "FAIL", "run_values": [0.01256]}]
    now = {"probe_matmul_gflops": 63.6, "probe_copy_gbps": 7.02, "probe_matmul_cpu_gflops": 63.6,
           "probe_copy_cpu_gbps": 7.02}
    then = {"probe_matmul_gflops": 68.0, "probe_copy_gbps": 8.3, "probe_matmul_cpu_gflops": 68.0}
    trial = {"slowdown": 0, "metrics": rows, "probes": [now]}
    assert detection_power.with_machine_rules([trial], then) == [(True, False)], "the CPU clock by the matmul alone"
    assert detection_power.with_machine_rules([trial], {**then, "probe_copy_cpu_gbps": 8.3}) == [(False, True)]
