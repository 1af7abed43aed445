"""A wall-clock regression that the machine-speed probe's drop covers, while the CPU clock held, is left unresolved:
the rule on chosen numbers, and the gate on a fake measurer whose runs record a probe."""

import pytest
from fakes import FakeMeasurer, make_plan

from perfgate.config.settings import Settings
from perfgate.judge import baselines, machine_drop
from perfgate.judge.baselines import Baseline, MetricBaseline
from perfgate.judge.gate import Gate, StaleBaselineWarning, StoredBaseline, UnresolvedVerdictWarning
from perfgate.outcome import CaseFailed

WALL, CPU = "fastest_step_samples_per_second", "cpu_seconds_per_sample"


class Verdict:
    def __init__(self, metric, change, better, tolerance=0.05):
        self.metric, self.change, self.better, self.tolerance = metric, change, better, tolerance


def decide(verdicts, outcomes, machine, raw=None):
    worse = [-v.change if v.better == "higher" else v.change for v in verdicts]
    return machine_drop.judge(verdicts, outcomes, machine, raw=raw or outcomes, worse=worse)


def test_a_wall_clock_fail_as_large_as_the_probes_drop_is_unresolved_while_the_cpu_clock_holds():
    verdicts = [Verdict(WALL, -0.25, "higher"), Verdict(CPU, +0.01, "lower")]
    outcomes, rows = decide(verdicts, ["FAIL", "pass"], machine=-0.22)
    assert outcomes == ["unresolved", "pass"], "within the tolerance of the probe's drop: the probe is a snapshot"
    assert rows == [{"metric": WALL, "change": -0.25, "probe_change": -0.22}]


def test_the_cpu_clock_held_is_read_before_any_other_rule_left_it_unresolved():
    verdicts = [Verdict(WALL, -0.25, "higher"), Verdict(CPU, +0.20, "lower")]
    assert decide(verdicts, ["FAIL", "unresolved"], -0.40, raw=["FAIL", "FAIL"]) == (["FAIL", "unresolved"], [])


@pytest.mark.parametrize("outcomes, machine, why", [
    (["FAIL", "FAIL"], -0.40, "the CPU clock failed too: the work per sample grew"),
    (["FAIL", "pass"], -0.10, "the probe dropped less than the wall clock did, by more than the tolerance"),
    (["FAIL", "pass"], +0.05, "the machine ran faster"),
    (["FAIL", "pass"], None, "no probe to read"),
])
def test_otherwise_a_fail_stays_a_fail(outcomes, machine, why):
    verdicts = [Verdict(WALL, -0.25, "higher"), Verdict(CPU, +0.20, "lower")]
    assert decide(verdicts, outcomes, machine) == (outcomes, []), why


def test_a_case_that_gates_no_cpu_clock_keeps_its_fail_as_a_procurement_check_needs():
    assert decide([Verdict(WALL, -0.25, "higher")], ["FAIL"], -0.40) == (["FAIL"], [])


def test_the_probe_change_reads_the_runs_median_against_the_baselines():
    assert machine_drop.probe_change({"probe_matmul_gflops": 100.0}, {"probe_matmul_gflops": 60.0}) == \
        pytest.approx(-0.4)
    assert machine_drop.probe_change({}, {"probe_matmul_gflops": 60.0}) is None


def gate(tmp_path, probe, **settings):
    """A CPU flavour's two clocks: the wall clock 25 % slower, the CPU clock as in the baseline."""
    plan = make_plan(tmp_path, gated=(WALL, CPU))
    baselines.write(plan.baseline_file, Baseline(plan.run.key, "k", {
        WALL: MetricBaseline(100.0, "higher", 0.05, "samples/s", (98.0, 99.0, 100.0, 101.0, 102.0)),
        CPU: MetricBaseline(0.02, "lower", 0.05, "CPU s/sample", (0.0199, 0.02, 0.02, 0.0201, 0.02))},
        provenance={"measured": {"probe_matmul_gflops": 100.0}}, workload_version="1"))
    measurer = FakeMeasurer(plan, [{WALL: 75.0, CPU: 0.02}, {WALL: 76.0, CPU: 0.0201}, {WALL: 74.0, CPU: 0.0199}],
                            probe=probe)
    return Gate(plan, Settings(repeats=3, **settings), measurer, StoredBaseline(plan.baseline_file),
                root=plan.spec.workdir, nvml=lambda: (None, "no NVML here"))


def test_the_gate_leaves_a_session_on_a_slowed_machine_unresolved_saying_why(tmp_path):
    with pytest.warns(UnresolvedVerdictWarning) as warned:
        result = gate(tmp_path, probe=55.0).check()
    assert result.verdict == "unresolved" and result.machine_drop[0]["probe_change"] == pytest.approx(-0.45)
    message = str(warned[0].message)
    assert "worse than the baseline, but the machine ran slower by as much while the CPU clock held" in message
    assert "the machine-speed probe ran -45.0% against the baseline's" in message
    assert "--perf-against REF" in message


def test_a_steady_probe_leaves_the_fail_and_calibration_replaces_the_rule(tmp_path):
    with pytest.raises(CaseFailed, match="performance regression"):
        gate(tmp_path / "steady", probe=99.0).check()
    with pytest.warns(StaleBaselineWarning):
        calibrated = gate(tmp_path / "calibrated", probe=55.0, calibrate=True).check()
    assert not calibrated.machine_drop and calibrated.verdict == "stale", "scaled by 100/55, it over-corrects"
