"""The gate's decisions on fake measurements: no torchrun, a measurer that hands out chosen values."""

import dataclasses
import json
import math
import re
import warnings

import pytest
from fakes import DETECTED, METRIC, FakeMeasurer, LaunchClock, make_plan

from perfgate.config.cases import Case, CaseRun, Flavour
from perfgate.config.settings import Settings
from perfgate.judge import baselines
from perfgate.judge.ab import UnprovenPassWarning
from perfgate.judge.baselines import Baseline, MetricBaseline, StoredBaseline
from perfgate.judge.gate import Gate, StaleBaselineWarning, UnresolvedVerdictWarning
from perfgate.judge.gated import HostSpinWarning, UngatedMetricWarning
from perfgate.launch.hardware import Hardware
from perfgate.launch.plan import Plan
from perfgate.launch.spec import LaunchSpec
from perfgate.outcome import CaseFailed, CaseSkipped
from perfgate.records import host_wait
from perfgate.report import tables

CPU = "cpu_seconds_per_sample"


def store(plan, value=100.0, runs=(98.0, 99.0, 100.0, 101.0, 102.0), version="1", detected=DETECTED, measured=None):
    baseline = Baseline(plan.run.key, "k", {METRIC: MetricBaseline(value, "higher", 0.05, "samples/s", runs)},
                        provenance={"hardware": {"detected_class": detected}, "measured": measured or {}},
                        workload_version=version)
    baselines.write(plan.baseline_file, baseline)
    return plan.baseline_file.read_text()


def gate(plan, values, probe=None, **settings):
    measurer = FakeMeasurer(plan, values, probe)
    settings = Settings(**{"repeats": 3, "baseline_repeats": 3, **settings})
    return Gate(plan, settings, measurer, StoredBaseline(plan.baseline_file), root=plan.spec.workdir,
                nvml=lambda: (None, "no NVML here")), measurer


def test_a_run_like_its_baseline_passes_without_extra_runs(tmp_path):
    plan = make_plan(tmp_path)
    store(plan)
    checker, measurer = gate(plan, [100.0, 99.5, 100.5, 0.0])
    assert checker.check().verdict == "pass"
    assert measurer.launches == 3
    assert measurer.result.metrics[0]["verdict"] == "pass"


def test_a_significant_regression_fails_with_the_baseline_command_and_logs(tmp_path):
    plan = make_plan(tmp_path)
    store(plan)
    checker, measurer = gate(plan, [70.0, 71.0, 69.0], inject_slowdown=0.5)
    with pytest.raises(CaseFailed) as failed:
        checker.check()
    message = str(failed.value)
    assert message.startswith("w-c-cpu: performance regression on k (with a PLANTED slowdown of 50%)\n")
    assert f"  {METRIC}: -30.0% against the baseline, +42.9% slower by the model (interval" in message
    assert f"baseline: {plan.baseline_file}" in message and "command: python -m torch.distributed.run" in message
    assert f"logs kept in {plan.spec.workdir}" in message
    assert measurer.result.verdict == "FAIL"


WIDE = (80.0, 90.0, 100.0, 110.0, 120.0)
"""Baseline runs so spread that one run 12 % slower is not yet significant."""


def test_an_undecided_verdict_launches_again_where_a_launch_can_still_decide_it(tmp_path):
    """Against launches this wide, one launch 30 % slower leaves the interval straddling the tolerance, and a second
    decides it; 12 % slower is as far from the tolerance as the spread between sessions reaches, which no launch
    narrows, so no second one is launched."""
    plan = make_plan(tmp_path)
    store(plan, runs=WIDE)
    checker, measurer = gate(plan, [70.0, 70.0, 70.0], repeats=1, max_repeats=3)
    with pytest.raises(CaseFailed, match=f"{METRIC}: -30.0% against the baseline"):
        checker.check()
    assert measurer.launches == 2
    checker, measurer = gate(plan, [88.0, 88.0, 88.0], repeats=1, max_repeats=3)
    with pytest.warns(UnresolvedVerdictWarning, match="the spread between sessions here keeps it so however many"):
        assert checker.check().verdict == "unresolved"
    assert measurer.launches == 1


def test_a_fail_on_one_metric_ends_the_case_while_another_is_still_undecided(tmp_path):
    """The CPU clock 60 % worse, a FAIL at the first look; the wall clock 12 % worse but inside its wide baseline
    (unresolved). More launches could settle the wall clock, not the case's FAIL, so none is launched."""
    plan = make_plan(tmp_path, gated=(METRIC, CPU))
    baseline = Baseline(plan.run.key, "k", {METRIC: MetricBaseline(100.0, "higher", 0.05, "samples/s", WIDE),
                                            CPU: MetricBaseline(1.0, "lower", 0.02, "CPU s/sample",
                                                                (0.99, 1.0, 1.01, 1.0, 1.0))},
                        provenance={"hardware": {"detected_class": DETECTED}}, workload_version="1")
    baselines.write(plan.baseline_file, baseline)
    runs = [{METRIC: 88.0, CPU: 1.60}, {METRIC: 88.0, CPU: 1.61}, {METRIC: 88.0, CPU: 1.59}]
    checker, measurer = gate(plan, runs * 2, repeats=3, max_repeats=6)
    with pytest.raises(CaseFailed, match=f"{CPU}: \\+60.0% against the baseline"):
        checker.check()
    assert measurer.launches == 3
    assert {row["metric"]: row["verdict"] for row in measurer.result.metrics} == {METRIC: "unresolved", CPU: "FAIL"}


def test_a_much_faster_run_warns_that_the_baseline_is_stale_or_fails_under_fail_stale(tmp_path):
    plan = make_plan(tmp_path)
    store(plan)
    checker, _ = gate(plan, [150.0, 151.0, 149.0])
    with pytest.warns(StaleBaselineWarning, match=r"w-c-cpu: stale baseline on k: faster than .* by more than its "
                                                  r"tolerance, by the model"):
        assert checker.check().verdict == "stale"
    checker, _ = gate(plan, [150.0, 151.0, 149.0], fail_stale=True)
    with pytest.raises(CaseFailed, match="re-measure with --update-baselines and review"):
        checker.check()


def test_no_baseline_reports_the_measurement_and_skips_saying_how_to_create_one(tmp_path):
    plan = make_plan(tmp_path)
    checker, measurer = gate(plan, [100.0, 101.0, 99.0])
    with pytest.raises(CaseSkipped) as skipped:
        checker.check()
    assert (f"w-c-cpu: no baseline for hardware class k ({plan.baseline_file} does not exist), so nothing was "
            "gated. Create it: pytest 'suite.py::test[c-cpu]' --update-baselines") in str(skipped.value)
    assert measurer.result.metrics == [{"metric": METRIC, "unit": "samples/s", "measured": 100.5,
                                           "verdict": "no-baseline", "run_values": [100.0, 101.0]}]
    assert measurer.launches == 2, "a case without a baseline measures two launches, not --perf-repeats"
    checker, _ = gate(plan, [100.0, 101.0, 99.0], strict_baselines=True)
    with pytest.raises(CaseFailed, match="no baseline for hardware class k"):
        checker.check()


def test_a_baseline_measured_on_other_vector_extensions_does_not_judge_this_cpu(tmp_path):
    """A class named by hand (--hardware-class) can hold a baseline of a host on avx2 alone; one with avx512_bf16 runs
    other kernels (8x the bf16 throughput on one VM class, issue 71), so its runs are reported, never judged."""
    plan = dataclasses.replace(make_plan(tmp_path), hardware=Hardware(
        "AMD EPYC", 2, cpu_generation="family 25 model 17 avx2 avx512f avx512_bf16"))
    store(plan)
    stored = json.loads(plan.baseline_file.read_text())
    stored["provenance"]["hardware"]["cpu_generation"] = "family 25 model 17 avx2"
    plan.baseline_file.write_text(json.dumps(stored))
    checker, measurer = gate(plan, [800.0, 810.0, 790.0])
    with pytest.raises(CaseSkipped) as skipped:
        checker.check()
    assert str(skipped.value) == (
        f"w-c-cpu: {plan.baseline_file} was measured on a CPU with avx2 kernels (family 25 model 17 avx2) and this "
        "one runs avx512bf16 kernels (family 25 model 17 avx2 avx512f avx512_bf16), which torch and oneDNN pick by "
        "the vector extensions, so its numbers do not judge this machine. Nothing was gated. Measure this machine's "
        f"own: pytest 'suite.py::test[c-cpu]' --update-baselines --hardware-class {DETECTED}, then review and commit "
        "the file.")
    assert measurer.launches == 2 and measurer.result.verdict == "no-baseline"
    stored["provenance"]["hardware"]["cpu_generation"] = "family 25 model 17 avx2 avx512f avx512_bf16"
    plan.baseline_file.write_text(json.dumps(stored))
    checker, _ = gate(plan, [100.0, 99.5, 100.5])
    assert checker.check().verdict == "pass"


def test_no_baseline_names_the_folder_this_processor_had_before_the_class_named_its_vector_extensions(tmp_path):
    """A user's baselines measured before the tier was in the class sit under the older name: they are not read,
    and the message says which folder to rename, and when."""
    plan = make_plan(tmp_path)
    tiered = tmp_path / "b" / "cpu-amd-epyc-f25m17-avx2-2c-n1" / "w-c-cpu.json"
    plan = dataclasses.replace(plan, baseline_file=tiered, hardware_class="cpu-amd-epyc-f25m17-avx2-2c-n1",
                               hardware=Hardware("AMD EPYC", 2, cpu_generation="family 25 model 17 avx2"))
    older = tmp_path / "b" / "cpu-amd-epyc-f25m17-2c-n1" / "w-c-cpu.json"
    store(dataclasses.replace(plan, baseline_file=older))
    checker, _ = gate(plan, [100.0, 101.0])
    with pytest.raises(CaseSkipped) as skipped:
        checker.check()
    assert str(skipped.value).endswith(
        f"{older} is this processor's baseline from before the class named the CPU's vector extensions: where its "
        "provenance's cpu_generation has this machine's (family 25 model 17 avx2), rename its folder to "
        "cpu-amd-epyc-f25m17-avx2-2c-n1 (git mv) instead.")


def test_another_workload_version_or_a_corrupt_file_fails_before_any_launch(tmp_path):
    plan = make_plan(tmp_path, version="2")
    store(plan, version="1")
    checker, measurer = gate(plan, [])
    with pytest.raises(CaseFailed, match="measured with workload version 1, the case is version 2"):
        checker.check()
    plan.baseline_file.write_text('{"schema": 1, "metrics": {')
    with pytest.raises(CaseFailed, match="corrupt baseline, not valid JSON"):
        checker.check()
    assert measurer.launches == 0


def test_an_update_leaves_a_disturbed_run_out_measures_again_and_records_it(tmp_path):
    plan = make_plan(tmp_path)
    checker, measurer = gate(plan, [100.0, 50.0, 101.0, 99.0], update_baselines=True)
    result = checker.check()
    assert measurer.launches == 4
    assert (result.verdict, result.disturbed_runs) == ("updated", 1)
    stored = json.loads(plan.baseline_file.read_text())
    assert stored["metrics"][METRIC]["runs"] == [100.0, 101.0, 99.0]
    assert stored["metrics"][METRIC]["value"] == 100.0
    assert stored["metrics"][METRIC]["tolerance"] >= 0.05
    assert stored["provenance"]["disturbed_runs"] == [{"run": 1, METRIC: 50.0}]
    assert stored["provenance"]["hardware"]["detected_class"] == DETECTED
    assert stored["provenance"]["measured"][METRIC] == 100.0
    assert result.metrics[0]["baseline"] is None and result.metrics[0]["runs"] == 3


def test_an_update_compares_with_the_old_baseline_and_keeps_a_fixed_tolerance(tmp_path):
    plan = make_plan(tmp_path, tolerance=0.4)
    store(plan, value=80.0)
    checker, _ = gate(plan, [100.0, 100.0, 100.0], update_baselines=True)
    row = checker.check().metrics[0]
    assert (row["baseline"], row["measured"], row["change"], row["tolerance"]) == (80.0, 100.0, 0.25, 0.4)


@pytest.mark.parametrize("version, detected, says", [
    ("0", DETECTED, "it holds workload version 0 (the case is version 1)"),
    ("1", None, "a baseline perfgate did not measure on this kind of machine"),
    ("1", "nvidia-h100-x8-n1", f"it holds hardware class nvidia-h100-x8-n1 (this machine is {DETECTED})"),
])
def test_an_update_refuses_to_overwrite_a_foreign_baseline_unless_forced(tmp_path, version, detected, says):
    plan = make_plan(tmp_path)
    before = store(plan, version=version, detected=detected)
    checker, measurer = gate(plan, [100.0] * 3, update_baselines=True)
    with pytest.raises(CaseFailed, match=f"refusing to overwrite .*{re.escape(says)}.*--force-baseline-update"):
        checker.check()
    assert plan.baseline_file.read_text() == before and measurer.launches == 0
    checker, _ = gate(plan, [100.0] * 3, update_baselines=True, force_baseline_update=True)
    assert checker.check().verdict == "updated"
    assert plan.baseline_file.read_text() != before


def test_the_model_weighs_a_slower_machine_and_as_measured_fails_it(tmp_path):
    """A machine 20 % slower (its probe too), the runs 20 % slower: the model expects most of it from the probe and
    does not FAIL; --perf-verdict as-measured, a procurement check, reads the runs without the machine and FAILs."""
    plan = make_plan(tmp_path)
    store(plan, measured={"probe_matmul_gflops": 100.0})
    checker, measurer = gate(plan, [80.0, 80.5, 79.5], probe=80.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnresolvedVerdictWarning)
        assert checker.check().verdict in ("pass", "unresolved")
    assert measurer.result.metrics[0]["covariates"] == ["probe_matmul_gflops"]
    checker, measurer = gate(plan, [80.0, 80.5, 79.5], probe=80.0, verdict="as-measured")
    with pytest.raises(CaseFailed, match=r"probe_matmul_gflops 80 vs 100 \(-20.0%\)"):
        checker.check()
    assert measurer.result.metrics[0]["covariates"] == []


def ab_gate(plan, reference_values, candidate_values, probes=(None, None), **settings):
    """``probes``: the reference's and the candidate's probe_matmul_gflops."""
    from perfgate.judge.ab import ABGate, RevisionReference
    from perfgate.judge.revision import Revision

    order = []
    candidate = FakeMeasurer(plan, candidate_values, probe=probes[1], log=order, name="candidate")
    reference = FakeMeasurer(plan, reference_values, probe=probes[0], log=order, name="reference")
    revision = Revision("main", "0123456789abcdef", plan.spec.workdir / "tree")
    in_turn = not settings.get("ab_duet")  # each launch in the order the test sees; duet where it asks for it
    gate = ABGate(plan, Settings(**{"repeats": 2, "max_repeats": 4, "ab_in_turn": in_turn, **settings}), candidate,
                  RevisionReference(revision, reference, plan, 0.02), root=plan.spec.workdir, nvml=lambda: (None, ""))
    return gate, candidate, order


def test_a_reference_from_before_the_gated_metrics_fails_the_case_saying_what_to_compare_instead(tmp_path):
    plan = make_plan(tmp_path)
    gate, _, _ = ab_gate(plan, [{"total_time_secs": 10.0}] * 2, [100.0, 100.0])
    with pytest.raises(CaseFailed, match=rf"the reference main reports none of the gated metrics \({METRIC}\): its "
                                         r"workload is from before them. Compare against a newer revision, or gate a "
                                         r"metric both sides measure"):
        gate.check()


def test_ab_launches_abba_and_judges_the_candidate_against_the_reference_runs(tmp_path):
    plan = make_plan(tmp_path)
    gate, candidate, order = ab_gate(plan, [100.0, 101.0], [70.0, 71.0])
    with pytest.raises(CaseFailed, match=r"(?s)performance regression.*baseline: main \(0123456789ab\), measured beside"):
        gate.check()
    assert order == ["reference", "candidate", "candidate", "reference"]
    assert [run["metrics"][METRIC] for run in candidate.result.reference["per_run"]] == [100.0, 101.0]
    assert candidate.result.reference["commit"] == "0123456789abcdef"
    assert candidate.result.time_to_verdict_s >= 0


def test_duet_pairs_judge_as_pairs_in_turn_do_and_the_result_says_duet(tmp_path):
    plan = make_plan(tmp_path)
    gate, candidate, order = ab_gate(plan, [100.0, 101.0], [70.0, 71.0], ab_duet=True)
    with pytest.raises(CaseFailed, match="performance regression"):
        gate.check()
    assert sorted(order) == ["candidate", "candidate", "reference", "reference"]
    assert candidate.result.duet is True


@pytest.mark.parametrize("kind, launcher, flags, duet", [
    ("cpu", "local", {}, True), ("cpu", "local", {"ab_in_turn": True}, False), ("gpu", "local", {}, False),
    ("cpu", "slurm", {}, False), ("cpu", "ssh", {}, False), ("cpu", "local", {"ab_duet": True}, True),
    ("gpu", "local", {"ab_duet": True}, True)])
def test_duet_is_the_default_for_cpu_flavours_on_the_local_launcher_and_either_flag_decides(kind, launcher, flags,
                                                                                             duet):
    """Duet pairs read steadier than pairs in turn in every condition measured on shared cores; a GPU case's sides
    would share its GPUs, and a remote launcher would start two jobs on the cluster (--perf-ab-duet refuses both)."""
    from perfgate.judge.ab import runs_duet

    assert runs_duet(Settings(launcher=launcher, **flags), kind) is duet


BESIDE_A_NEIGHBOUR = {"probe_matmul_gflops": 66.0, "probe_matmul_cpu_gflops": 100.0}
"""The probe's thread got 34 % less of a core than its CPU time used: two busy processes on a 2-core VM."""
QUIET = {"probe_matmul_gflops": 100.0, "probe_matmul_cpu_gflops": 100.0}
LESS_BUSY = {"probe_matmul_gflops": 80.0, "probe_matmul_cpu_gflops": 100.0}
SLIGHTLY_OFF = {"probe_matmul_gflops": 98.5, "probe_matmul_cpu_gflops": 100.0}
"""1.5 % less of a core: within the 2 % tolerance, no neighbour to speak of; a 3 % FAIL stands though 1.5 % and the
tolerance together would explain it."""


def in_turn_gate(plan, reference, candidate, probes, kind="cpu", **flags):
    """An A/B gate whose sides' runs read ``probes`` (the reference's, the candidate's)."""
    from perfgate.judge.ab import ABGate, RevisionReference
    from perfgate.judge.revision import Revision

    case = dataclasses.replace(plan.run.case, gpu=plan.run.case.cpu)
    plan = dataclasses.replace(plan, run=CaseRun(case, kind))
    sides = [FakeMeasurer(plan, values, probe) for values, probe in zip((reference, candidate), probes)]
    revision = Revision("main", "0123456789abcdef", plan.spec.workdir / "tree")
    settings = Settings(**{"repeats": 2, "max_repeats": 4, "ab_in_turn": not flags.get("ab_duet"), **flags})
    gate = ABGate(plan, settings, sides[1], RevisionReference(revision, sides[0], plan, 0.02), root=plan.spec.workdir,
                  nvml=lambda: (None, ""))
    return gate, sides[1]


STEADY_PAIRS = [100.0, 99.0, 100.0]


@pytest.mark.parametrize("candidate, probes, flags, verdict", [
    ([90.0, 89.0, 90.0], (BESIDE_A_NEIGHBOUR, BESIDE_A_NEIGHBOUR), {}, "unresolved"),
    ([90.0, 89.0, 90.0], (QUIET, QUIET), {}, "FAIL"),
    ([50.0, 49.0, 50.0], (BESIDE_A_NEIGHBOUR, BESIDE_A_NEIGHBOUR), {}, "FAIL"),
    ([90.0, 89.0, 90.0], (BESIDE_A_NEIGHBOUR, BESIDE_A_NEIGHBOUR), {"ab_duet": True}, "FAIL"),
    ([90.0, 89.0, 90.0], (None, None), {}, "FAIL"),
    ([90.0, 89.0, 90.0], (QUIET, BESIDE_A_NEIGHBOUR), {}, "FAIL"),
    ([90.0, 89.0, 90.0], (None, BESIDE_A_NEIGHBOUR), {}, "FAIL"),
    ([90.0, 89.0, 90.0], (BESIDE_A_NEIGHBOUR, None), {}, "FAIL"),
    ([97.0, 96.5, 97.0], (SLIGHTLY_OFF, SLIGHTLY_OFF), {}, "FAIL"),
], ids=["beside-a-neighbour", "quiet", "beyond-the-turns", "duet", "no-probe", "only-the-candidate-off-the-cores",
        "a-reference-without-the-probe", "a-candidate-without-the-probe", "turns-within-the-tolerance"])
def test_pairs_in_turn_beside_a_neighbour_leave_a_slowdown_its_turns_explain_unresolved(tmp_path, candidate, probes,
                                                                                       flags, verdict):
    """A pair's two launches in turn meet a neighbour at different times: 10 % within the 35 % the turns explain is
    unresolved. 50 % beyond them FAILs, and so does 10 % where the probe saw no neighbour, read none on a side, or saw
    one on the candidate's side alone (its own slowdown may keep the probe off the cores), 3 % where the probe's
    thread lost less of a core than the tolerance, and 10 % where the pairs ran at once (duet), meeting it alike."""
    gate, candidate_side = in_turn_gate(make_plan(tmp_path), STEADY_PAIRS, candidate, probes, **flags)
    if verdict == "FAIL":
        with pytest.raises(CaseFailed, match="performance regression"):
            gate.check()
        assert not candidate_side.result.machine_drop
        return
    with pytest.warns(UnresolvedVerdictWarning, match=r"(?s)unresolved on k: worse than the reference, but its pairs "
                                                      r"ran one launch after the other while a neighbour took turns"
                                                      r".*34% less of a core.*worse by more than 35\.3% FAILs.*leave "
                                                      r"--perf-ab-in-turn out"):
        assert gate.check().verdict == "unresolved"
    assert [row["rule"] for row in candidate_side.result.machine_drop] == ["in turn"]
    with pytest.raises(CaseFailed, match="pairs ran one launch after the other"):
        in_turn_gate(make_plan(tmp_path), STEADY_PAIRS, candidate, probes, fail_unresolved=True)[0].check()


def test_the_turns_both_sides_show_the_least_of_explain_a_cpu_time_by_the_time_they_add(tmp_path):
    """The side that got more of a core (20 % less of it, not 34 %) bounds what the turns explain; a CPU time (lower
    is better) 1 / (1 - 0.20) - 1 = 25 % longer, on top of the 2 % tolerance: 27.5 %. Every FAIL must be within it."""
    plan = make_plan(tmp_path, gated=("samples_per_second", "cpu_seconds_per_sample"))
    reference = [{"samples_per_second": 100.0, "cpu_seconds_per_sample": 0.0100}] * 3
    within = [{"samples_per_second": 85.0, "cpu_seconds_per_sample": 0.0125}] * 3
    gate, candidate = in_turn_gate(plan, reference, within, (BESIDE_A_NEIGHBOUR, LESS_BUSY))
    with pytest.warns(UnresolvedVerdictWarning, match=r"cpu_seconds_per_sample: \+25\.0%, .*20% less of a core.*worse "
                                                      r"by more than 27\.5% FAILs"):
        assert gate.check().verdict == "unresolved"
    assert {row["metric"] for row in candidate.result.machine_drop} == {"samples_per_second", "cpu_seconds_per_sample"}
    beyond = [{"samples_per_second": 85.0, "cpu_seconds_per_sample": 0.0130}] * 3
    gate, candidate = in_turn_gate(plan, reference, beyond, (BESIDE_A_NEIGHBOUR, LESS_BUSY))
    with pytest.raises(CaseFailed, match="performance regression"):
        gate.check()
    assert not candidate.result.machine_drop
    assert {row["metric"]: row["verdict"] for row in candidate.result.metrics} == {
        "samples_per_second": "FAIL", "cpu_seconds_per_sample": "FAIL"}


def test_a_fail_the_turns_cannot_explain_keeps_every_fail_of_the_case(tmp_path):
    """Instructions per sample do not move with a neighbour's turns: their FAIL stands, and so does the CPU time's
    beside it, which the turns alone would explain (all or nothing)."""
    plan = make_plan(tmp_path, gated=("cpu_seconds_per_sample", "instructions_per_sample"))
    reference = [{"cpu_seconds_per_sample": 0.0100, "instructions_per_sample": 1.0e9}] * 3
    slower = [{"cpu_seconds_per_sample": 0.0110, "instructions_per_sample": 1.1e9}] * 3
    gate, candidate = in_turn_gate(plan, reference, slower, (BESIDE_A_NEIGHBOUR, BESIDE_A_NEIGHBOUR))
    with pytest.raises(CaseFailed, match="performance regression"):
        gate.check()
    assert not candidate.result.machine_drop
    assert {row["verdict"] for row in candidate.result.metrics} == {"FAIL"}


def test_a_gpu_flavours_pairs_in_turn_keep_their_fail_whatever_the_probe_says(tmp_path):
    """The rule is a CPU flavour's: a GPU step's time is the device's."""
    gate, candidate = in_turn_gate(make_plan(tmp_path), STEADY_PAIRS, [90.0, 89.0, 90.0],
                                   (BESIDE_A_NEIGHBOUR, BESIDE_A_NEIGHBOUR), kind="gpu")
    with pytest.raises(CaseFailed, match="performance regression"):
        gate.check()
    assert not candidate.result.machine_drop


def test_pairs_in_turn_on_a_remote_launcher_say_to_a_b_where_no_other_job_shares_the_cores(tmp_path):
    """The slurm and ssh launchers have no duet to offer."""
    gate, _ = in_turn_gate(make_plan(tmp_path), STEADY_PAIRS, [90.0, 89.0, 90.0],
                           (BESIDE_A_NEIGHBOUR, BESIDE_A_NEIGHBOUR), launcher="slurm")
    with pytest.warns(UnresolvedVerdictWarning, match="the slurm launcher launches a pair's sides one after the other: "
                                                      "A/B where no other job shares the nodes' cores"):
        assert gate.check().verdict == "unresolved"


def test_duet_refuses_a_gpu_flavour_before_any_launch(tmp_path):
    """Both sides at once on one GPU would each measure the other's work."""
    plan = make_plan(tmp_path)
    plan = dataclasses.replace(plan, run=CaseRun(plan.run.case, "gpu"))
    gate, _, order = ab_gate(plan, [100.0], [100.0], ab_duet=True)
    with pytest.raises(CaseFailed, match=r"--perf-ab-duet .* would share its GPUs"):
        gate.check()
    assert order == []


def test_a_b_calls_a_much_faster_candidate_an_improvement_not_a_stale_baseline(tmp_path):
    """No baseline is stored under A/B: advising --update-baselines (a usage error with --perf-against) would
    mislead."""
    plan = make_plan(tmp_path)
    gate, _, _ = ab_gate(plan, [100.0, 101.0], [150.0, 151.0])
    with pytest.warns(StaleBaselineWarning, match="(?s)faster than the reference on k: .*improvement") as caught:
        assert gate.check().verdict == "stale"
    assert "--update-baselines" not in str(caught[0].message)


def test_ab_measures_another_pair_while_the_verdict_is_inconclusive(tmp_path):
    """Pairs 1-2 look 12 % worse but the interval spans zero; pair 3 brings the estimate within 2 %: pass."""
    plan = make_plan(tmp_path)
    gate, candidate, order = ab_gate(plan, [100.0, 130.0, 80.0, 100.0], [100.0] * 4)
    assert gate.check().verdict == "pass"
    assert order == ["reference", "candidate", "candidate", "reference", "reference", "candidate"]


def test_ab_resolve_measures_pairs_until_the_interval_rules_out_the_slowdown_asked_about(tmp_path):
    """The candidate within 3 % of the reference, pair by pair: without --perf-ab-resolve 2 pairs pass (CI
    -19.5..+18.8 %); with 0.03 the pairs go on, past the default cap of 4, until the seventh brings the 99 % interval
    (it is looked at after every pair) under 3 %."""
    plan = make_plan(tmp_path)
    candidate_values = [100.0, 97.0, 103.0, 99.0, 101.0, 98.5, 101.5, 100.0]
    gate, candidate, order = ab_gate(plan, [100.0] * 8, candidate_values, max_repeats=None)
    assert gate.check().verdict == "pass" and len(order) == 4
    gate, candidate, order = ab_gate(plan, [100.0] * 8, candidate_values, max_repeats=None, ab_resolve=0.03)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gate.check().verdict == "pass"
    assert len(order) == 14 and gate.repeat_cap() == 20
    assert candidate.result.metrics[0]["reason"].startswith("+0.0% worse (CI -2.9%..+2.8%)")


def test_ab_resolve_reports_what_it_could_not_rule_out_when_the_pairs_run_out(tmp_path):
    """Pairs 10 % apart cannot rule out 5 % within 4 pairs: the case warns, unresolved, with how large a slowdown it
    could have missed and about how many pairs would settle it; --fail-unresolved fails it."""
    plan = make_plan(tmp_path)
    spread = [90.0, 110.0, 92.0, 108.0]
    gate, candidate, order = ab_gate(plan, [100.0] * 4, spread, ab_resolve=0.05)
    with pytest.warns(UnresolvedVerdictWarning, match=r"after 4 pairs a slowdown of up to 26.7% on samples_per_second "
                                                      r"cannot be ruled out, more than the 5.0% that --perf-ab-resolve "
                                                      r"asks to rule out: about 37 pairs would settle it"):
        assert gate.check().verdict == "unresolved"
    assert len(order) == 8
    assert candidate.result.unresolved == [{"metric": METRIC, "pairs": 4, "pairs_needed": 37,
                                               "could_miss": pytest.approx(0.267, abs=1e-3)}]
    assert candidate.result.metrics[0]["verdict"] == "unresolved"
    gate, candidate, _ = ab_gate(plan, [100.0] * 4, spread, ab_resolve=0.05, fail_unresolved=True)
    with pytest.raises(CaseFailed, match=r"w-c-cpu: unresolved on k\n  samples_per_second"):
        gate.check()


def test_ab_resolve_does_not_hold_up_a_regression(tmp_path):
    """A significant slowdown fails at once: ruling out a smaller one is moot."""
    plan = make_plan(tmp_path)
    gate, _, order = ab_gate(plan, [100.0, 101.0, 100.0, 101.0], [70.0, 71.0, 70.0, 71.0], ab_resolve=0.05)
    with pytest.raises(CaseFailed, match="performance regression"):
        gate.check()
    assert len(order) == 4


@pytest.mark.parametrize("budget, pairs", [(None, 5), (200, 3), (239, 3), (240, 4)])
def test_ab_budget_starts_no_pair_that_would_end_past_it(tmp_path, budget, pairs):
    """30 s launches, so 60 s pairs; the verdict stays inconclusive (the candidate at 90, 90, 110, 90, 110 against
    100: 2.5-5.5 % worse, never significant), so only the cap of 5 pairs or the budget stops it, and it settles as a
    pass that says so."""
    plan = make_plan(tmp_path)
    gate, candidate, order = ab_gate(plan, [100.0] * 6, [90.0, 90.0, 110.0, 90.0, 110.0, 90.0], repeats=3, max_repeats=5,
                                     ab_budget=budget)
    clock = LaunchClock(30.0)
    gate.clock = clock
    clock.wrap(gate.measurer)
    clock.wrap(gate.reference.measurer)
    with pytest.warns(UnprovenPassWarning, match=rf"passed on k, but {METRIC} read .*% worse, beyond its 2.0% "
                                                 rf"tolerance, and {pairs} pairs could not tell that from noise"
                                                 r"(.|\n)*more pairs would settle it \(raise --perf-max-repeats or "
                                                 r"--perf-ab-budget\)"):
        assert gate.check().verdict == "pass"
    assert len(order) == 2 * pairs
    assert candidate.result.time_to_verdict_s == 60.0 * pairs <= (budget or math.inf)
    stop = candidate.result.ab_budget_stop
    assert stop == (None if budget is None else f"no pair {pairs + 1}: it would end {60 * pairs + 60} s after the "
                                                f"case began, past --perf-ab-budget {budget} s")
    assert tables.ab_rows([candidate.result])[0][1:] == [str(pairs), f"{pairs}:00", stop or "-"]


def test_ab_judges_pairs_so_drift_over_the_session_does_not_hide_a_slowdown(tmp_path):
    """The machine slows 30 % over the session and the candidate is 5 % slower in every pair: caught, though the
    candidate's runs and the reference's overlap as independent samples."""
    plan = make_plan(tmp_path)
    reference = [100.0, 90.0, 80.0, 70.0]
    candidate = [0.95 * value for value in reference]
    gate, result, _ = ab_gate(plan, reference, candidate, max_repeats=None)
    with pytest.raises(CaseFailed, match=r"significantly worse by 5.0% \(CI \+5.0%..\+5.0%\)"):
        gate.check()


def test_a_planted_slowdown_that_did_not_slow_the_gated_metric_is_reported_not_averaged_in(tmp_path):
    from perfgate.judge.plant import PlantNotTakenWarning

    plan = make_plan(tmp_path)
    store(plan)
    checker, measurer = gate(plan, [99.0, 100.0, 101.0], inject_slowdown=0.25)
    with pytest.warns(PlantNotTakenWarning, match=r"a planted slowdown of 25% should move samples_per_second by "
                                                  r"-20.0%, but it moved \+0.0%"):
        checker.check()
    assert [(row["metric"], row["took"]) for row in measurer.result.plant] == [(METRIC, False)]


def test_a_planted_slowdown_that_took_is_recorded_and_fails_without_a_plant_warning(tmp_path):
    plan = make_plan(tmp_path)
    store(plan)
    checker, measurer = gate(plan, [80.0, 80.5, 79.5], inject_slowdown=0.25)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CaseFailed, match="PLANTED slowdown of 25%"):
            checker.check()
    row, = measurer.result.plant
    assert row["took"] is True and row["measured_change"] == pytest.approx(-0.2)


CPU = "cpu_seconds_per_sample"


class TwoClockMeasurer(FakeMeasurer):
    """Hands out runs measured on both clocks: each value is a (samples/s, CPU s/sample) pair, CPU None for a
    source that has no CPU clock."""

    def launch_once(self, planned):
        wall, cpu = self._values[self.launches]
        run_metrics = {METRIC: wall, **({} if cpu is None else {CPU: cpu})}
        self.measurement.runs.append({"run": self.launches, "metrics": run_metrics})
        self.launches += 1


def two_clock_gate(tmp_path, values, **settings):
    case = Case("w", "c", ("w.py",), cpu=Flavour({}, tolerance_floor=0.05, cpu_tolerance_floor=0.01),
                gated=(METRIC, CPU))
    plan = Plan(CaseRun(case, "cpu"), LaunchSpec(entry=(), workdir=tmp_path / "work"), Hardware("cpu", 2),
                "k", DETECTED, 2, 10, 2, tmp_path / "b" / "k" / "w-c-cpu.json", "suite.py::test[c-cpu]")
    measurer = TwoClockMeasurer(plan, values)
    checker = Gate(plan, Settings(repeats=3, baseline_repeats=5, **settings), measurer,
                   StoredBaseline(plan.baseline_file), root=plan.spec.workdir, nvml=lambda: (None, "no NVML here"))
    return plan, checker, measurer


STEADY = [(100.0, 0.0200), (90.0, 0.0201), (104.0, 0.0199), (97.0, 0.0200), (101.0, 0.0202)]
"""Five runs of a shared runner: the wall clock moves by +-7 %, the CPU clock by 1 %."""


def test_update_baselines_stores_each_clock_with_its_own_tolerance_floor(tmp_path):
    plan, checker, _ = two_clock_gate(tmp_path, STEADY, update_baselines=True)
    checker.check()
    stored = baselines.load(plan.baseline_file).metrics
    assert stored[CPU].tolerance == 0.01 and stored[CPU].better == "lower" and stored[CPU].unit == "CPU s/sample"
    assert stored[METRIC].tolerance >= 0.05


def test_a_cpu_time_regression_fails_on_the_cpu_clock_that_the_wall_clock_noise_hides(tmp_path):
    plan, checker, _ = two_clock_gate(tmp_path, STEADY, update_baselines=True)
    checker.check()
    _, checker, measurer = two_clock_gate(tmp_path, [(99.0, 0.0260), (92.0, 0.0261), (103.0, 0.0259)])
    with pytest.raises(CaseFailed, match=r"cpu_seconds_per_sample: \+30\.0% against the baseline") as failed:
        checker.check()
    rows = {row["metric"]: row["verdict"] for row in measurer.result.metrics}
    assert rows == {METRIC: "pass", CPU: "FAIL"}, str(failed.value)


def test_a_baseline_from_before_the_cpu_clock_is_judged_on_what_it_has_saying_what_was_left_out(tmp_path):
    plan, checker, measurer = two_clock_gate(tmp_path, STEADY[:3])
    baselines.write(plan.baseline_file, Baseline(plan.run.key, "k", {METRIC: MetricBaseline(
        100.0, "higher", 0.05, "samples/s", (98.0, 99.0, 100.0, 101.0, 102.0))},
        provenance={"hardware": {"detected_class": DETECTED}}, workload_version="1"))
    with pytest.warns(UngatedMetricWarning, match="cpu_seconds_per_sample not gated: .*re-measure the baseline"):
        assert checker.check().verdict == "pass"
    assert [row["metric"] for row in measurer.result.metrics] == [METRIC]
    assert measurer.result.ungated[0]["metric"] == CPU


def test_records_without_cpu_time_give_a_baseline_of_the_wall_clock_saying_so(tmp_path):
    plan, checker, _ = two_clock_gate(tmp_path, [(100.0, None)] * 5, update_baselines=True)
    with pytest.warns(UngatedMetricWarning, match="the runs did not measure it"):
        checker.check()
    assert list(baselines.load(plan.baseline_file).metrics) == [METRIC]


def test_a_gated_instruction_count_the_host_cannot_count_is_left_out_saying_why(tmp_path):
    """A flavour that asks for the third clock, on a VM without a hardware counter: the wall clock is gated, and the
    warning carries the runs' own reason (their start records' instruction_clock)."""
    refused = "not counted: this host exposes no hardware counter of instructions"

    class UncountedMeasurer(FakeMeasurer):
        def launch_once(self, planned):
            self.measurement.runs.append({"run": self.launches, "metrics": {METRIC: self._values[self.launches]},
                                          "facts": {"start": {"instruction_clock": refused}}})
            self.launches += 1

    case = Case("w", "c", ("w.py",), cpu=Flavour({}, tolerance_floor=0.05), gated=(METRIC, "instructions_per_sample"))
    plan = Plan(CaseRun(case, "cpu"), LaunchSpec(entry=(), workdir=tmp_path / "work"), Hardware("cpu", 2),
                "k", DETECTED, 2, 10, 2, tmp_path / "b" / "k" / "w-c-cpu.json", "suite.py::test[c-cpu]")
    measurer = UncountedMeasurer(plan, [100.0, 101.0, 99.0, 100.0, 102.0])
    checker = Gate(plan, Settings(repeats=3, baseline_repeats=5, update_baselines=True), measurer,
                   StoredBaseline(plan.baseline_file), root=plan.spec.workdir, nvml=lambda: (None, "no NVML here"))
    with pytest.warns(UngatedMetricWarning, match=f"instructions_per_sample not gated: the runs did not measure it "
                                                  f"\\({refused}\\)"):
        checker.check()
    assert list(baselines.load(plan.baseline_file).metrics) == [METRIC]


@pytest.mark.parametrize("waits, warned", [(host_wait.SPINS, True), (host_wait.BLOCKING, False)])
def test_gating_host_cpu_of_a_host_that_spun_for_the_gpu_warns_that_it_read_the_devices_time(tmp_path, waits, warned):
    """A host that spins while it waits for the GPU reads the step's time as its CPU per step: gated, it adds nothing
    (docs/measurements.md#why-the-rules-are-what-they-are)."""

    class GpuMeasurer(FakeMeasurer):
        def launch_once(self, planned):
            self.measurement.runs.append({"run": self.launches, "facts": {"start": {"host_wait": waits}},
                                          "metrics": {METRIC: 100.0, "host_cpu_per_step_s": 0.0485}})
            self.launches += 1

    case = Case("w", "c", ("w.py",), gpu=Flavour({}, tolerance_floor=0.02), gated=(METRIC, "host_cpu_per_step_s"))
    plan = Plan(CaseRun(case, "gpu"), LaunchSpec(entry=(), workdir=tmp_path / "work"),
                Hardware("cpu", 16, "NVIDIA H200", 1),
                "k", DETECTED, 1, 10, 1, tmp_path / "b" / "k" / "w-c-gpu.json", "suite.py::test[c-gpu]")
    checker = Gate(plan, Settings(repeats=3, baseline_repeats=3, update_baselines=True), GpuMeasurer(plan, []),
                   StoredBaseline(plan.baseline_file), root=plan.spec.workdir, nvml=lambda: (None, "no NVML here"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checker.check()
    said = [str(w.message) for w in caught if issubclass(w.category, HostSpinWarning)]
    assert bool(said) == warned, said
    if warned:
        assert "give the case's GPU flavour {'host-wait': 'block'}" in said[0]
    assert "host_cpu_per_step_s" in baselines.load(plan.baseline_file).metrics


def test_ab_judges_the_cpu_clock_with_the_ab_tolerance_and_the_wall_clock_with_the_flavours_wider_floor(tmp_path):
    """The CPU clock catches more work within 2 %; the wall clock, there for waits, keeps its 5 % floor: a 4 % wall
    change with the CPU clock unmoved passes, a 4 % CPU change fails."""
    from perfgate.judge.ab import ABGate, RevisionReference
    from perfgate.judge.revision import Revision

    def session(reference_values, candidate_values):
        plan, _, candidate = two_clock_gate(tmp_path, candidate_values)
        reference = TwoClockMeasurer(plan, reference_values)
        revision = Revision("main", "0123456789abcdef", plan.spec.workdir / "tree")
        return ABGate(plan, Settings(repeats=4, max_repeats=4, ab_in_turn=True), candidate, RevisionReference(
            revision, reference, plan, 0.02), root=plan.spec.workdir, nvml=lambda: (None, "")), candidate

    steady = [(100.0, 0.0200), (101.0, 0.0201), (99.0, 0.0199), (100.0, 0.0200)]
    slower_wall = [(w / 1.04, c) for w, c in steady]
    checker, candidate = session(steady, slower_wall)
    assert checker.check().verdict == "pass"
    assert {row["metric"]: row["tolerance"] for row in candidate.result.metrics} == {METRIC: 0.05, CPU: 0.02}
    more_work = [(w, c * 1.04) for w, c in steady]
    checker, candidate = session(steady, more_work)
    with pytest.raises(CaseFailed, match=r"cpu_seconds_per_sample .*\+4\.0%"):
        checker.check()


def test_an_a_b_reference_from_before_the_cpu_clock_is_judged_on_the_wall_clock_saying_what_was_left_out(tmp_path):
    """The reference revision's records carry no CPU time, as perfgate's did before the CPU clock."""
    plan = make_plan(tmp_path, gated=(METRIC, CPU))
    gate, candidate, _ = ab_gate(plan, [{METRIC: 100.0}, {METRIC: 101.0}],
                                 [{METRIC: 100.5, CPU: 0.02}, {METRIC: 100.0, CPU: 0.02}])
    with pytest.warns(UngatedMetricWarning, match=r"cpu_seconds_per_sample not gated: its reference \(main "
                                                  r"\(0123456789ab\), measured beside it in .*\) has none \(it is from "
                                                  r"before the metric\); it is gated against a reference revision"):
        assert gate.check().verdict == "pass"
    assert [row["metric"] for row in candidate.result.metrics] == [METRIC]
    assert candidate.result.ungated[0]["metric"] == CPU
