from pathlib import Path

import pytest

from perfgate.config.cases import Case, CaseRun, Flavour, parametrize, runs, to_flags
from perfgate.records.sources import LogLines, OpenClipLog, OptimizerSteps

ENTRY = ("workloads/openclip_train.py",)


def test_flags_from_args():
    assert to_flags({"batch-size": 32, "grad-checkpointing": True, "sync-buffers": False, "skip": None}) == [
        "--batch-size", "32", "--grad-checkpointing", "--no-sync-buffers"]


def test_each_flavour_becomes_a_marked_param_with_a_readable_id():
    case = Case("openclip", "fp32", ENTRY, cpu=Flavour({}), gpu=Flavour({}), marks=(pytest.mark.slow,))
    params = runs([case, Case("openclip", "amp", ENTRY, gpu=Flavour({}))])
    assert [p.id for p in params] == ["fp32-cpu", "fp32-gpu", "amp-gpu"]
    assert [sorted(m.name for m in p.marks) for p in params] == [["cpu", "slow"], ["gpu", "slow"], ["gpu"]]
    assert params[0].values[0].key == "openclip-fp32-cpu"


def test_duplicate_case_names_are_rejected():
    case = Case("openclip", "fp32", ENTRY, cpu=Flavour({}))
    with pytest.raises(ValueError, match="repeated: openclip-fp32-cpu"):
        parametrize([case, case])


def test_argv_applies_steps_and_records(tmp_path):
    run = CaseRun(Case("openclip", "fp32", ENTRY, cpu=Flavour({"model": "m", "steps": 7})), "cpu")
    assert run.argv(tmp_path, steps=12, world_size=2) == [
        *ENTRY, "--model", "m", "--steps", "12", "--records", str(tmp_path / "steps.jsonl")]
    assert run.argv(tmp_path, steps=None, world_size=2)[4] == "7"


def test_mmoclip_case_is_the_exact_upstream_command(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "suite_mmoclip", Path(__file__).resolve().parent.parent / "tests_perf" / "test_mmoclip.py")
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    run = CaseRun(suite.MMOCLIP, "gpu")
    assert run.argv(tmp_path, steps=None, world_size=32) == [
        "-m", "open_clip_train.main", "--dataset-type", "synthetic", "--train-num-samples", "3200000",
        "--epochs", "1", "--batch-size", "512", "--model", "ViT-L-14", "--dist-url", "env://",
        "--local-loss", "--gather-with-grad", "--grad-checkpointing", "--log-every-n-steps", "1",
        "--name", "mmoclip",
    ]
    shortened = run.argv(tmp_path, steps=4, world_size=8)
    assert shortened[shortened.index("--train-num-samples") + 1] == str(4 * 8 * 512)
    assert isinstance(suite.MMOCLIP.records, OpenClipLog)
    assert {m.name for m in suite.MMOCLIP.marks} == {"slow", "multinode"}


def test_adaptive_flavour_passes_its_interval_target_to_the_workload(tmp_path):
    flavour = Flavour({"model": "m"}, steps=200, warmup=5, target_ci=0.01, min_steps=30)
    argv = CaseRun(Case("openclip", "adaptive", ENTRY, cpu=flavour), "cpu").argv(tmp_path, 200, 2, warmup=5)
    assert argv[3:11] == ["--steps", "200", "--target-ci", "0.01", "--min-steps", "30", "--warmup", "5"]


def test_planted_slowdown_reaches_only_workloads_that_take_it(tmp_path):
    ours = CaseRun(Case("openclip", "x", ENTRY, cpu=Flavour({})), "cpu")
    upstream = CaseRun(Case("mmoclip", "x", ("-m", "open_clip_train.main"), cpu=Flavour({}), inject_flag=None), "cpu")
    assert ours.argv(tmp_path, 4, 2, inject_slowdown=0.25)[-2:] == ["--inject-slowdown", "0.25"]
    assert "--inject-slowdown" not in upstream.argv(tmp_path, 4, 2, inject_slowdown=0.25)


def test_cpu_flavours_gate_both_clocks_gpu_flavours_mean_throughput_unless_the_case_or_flavour_says():
    both = Case("w", "c", ("x.py",), cpu=Flavour({}), gpu=Flavour({}))
    assert CaseRun(both, "cpu").gated == ("fastest_step_samples_per_second", "cpu_seconds_per_sample")
    assert CaseRun(both, "gpu").gated == ("samples_per_second", "total_time_secs")
    own = Case("w", "c", ("x.py",), cpu=Flavour({}), gated=("total_time_secs",))
    assert CaseRun(own, "cpu").gated == ("total_time_secs",)
    host = Case("w", "c", ("x.py",), gpu=Flavour({}, gated=("samples_per_second", "host_cpu_per_step_s")),
                gated=("total_time_secs",))
    assert CaseRun(host, "gpu").gated == ("samples_per_second", "host_cpu_per_step_s")


def test_a_source_that_reads_logs_has_no_cpu_clock_to_gate():
    logged = Case("w", "c", ("x.py",), cpu=Flavour({}), records=LogLines(r"(?P<step_s>[\d.]+)", samples_per_step=1))
    assert CaseRun(logged, "cpu").gated == ("fastest_step_samples_per_second",)


def test_the_cpu_clock_has_its_own_tolerance_floor_and_fixed_tolerance():
    flavour = Flavour({}, tolerance_floor=0.07)
    assert (flavour.least_tolerance("wall", "cpu"), flavour.least_tolerance("cpu", "cpu")) == (0.07, 0.05)
    assert (Flavour({}).least_tolerance("wall", "cpu"), Flavour({}).least_tolerance("wall", "gpu")) == (0.06, 0.02)
    fixed = Flavour({}, tolerance=0.1, cpu_tolerance=0.03)
    assert (fixed.least_tolerance("wall", "gpu"), fixed.least_tolerance("cpu", "gpu")) == (0.1, 0.03)
    assert Flavour({}, tolerance=0.5).fixed_tolerance("cpu") == 0.5, "a fixed tolerance holds for both clocks"


def test_later_runs_skip_what_a_case_measures_once(tmp_path):
    flavour = Flavour({"model": "m"}, benchy_steps=6)
    run = CaseRun(Case("openclip", "once", ENTRY, cpu=flavour, later_runs_args=("--no-count-flops",)), "cpu")
    first, later = run.argv(tmp_path, 4, 2), run.argv(tmp_path, 4, 2, first_run=False)
    assert "--benchy-steps" in first and "--no-count-flops" not in first
    assert "--benchy-steps" not in later and later[-1] == "--no-count-flops"
    assert CaseRun(Case("openclip", "plain", ENTRY, cpu=flavour), "cpu").argv(tmp_path, 4, 2, first_run=False)[-1] != (
        "--no-count-flops")


@pytest.mark.parametrize("make, message", [
    (lambda: Case("w", "c", ("x.py",), cwd="sub", cpu=Flavour({})),
     r"w-c: cwd= is for unmodified scripts \(records=OptimizerSteps\(...\)\); perfgate's own workloads start in the "
     r"run's directory"),
    (lambda: Case("w", "c", ("x.py",), records=OptimizerSteps(8), cpu=Flavour({}, steps=None)),
     r"w-c-cpu: an unmodified script's length is a number of optimizer steps: give Flavour\(steps=N\), without "
     r"target_ci or benchy_steps"),
    (lambda: OptimizerSteps(samples_per_step=0), r"OptimizerSteps\(samples_per_step=...\) must be >= 1, got 0"),
], ids=["cwd-for-a-workload", "unmodified-script-without-steps", "no-samples-per-step"])
def test_a_case_a_suite_cannot_run_is_refused_where_it_is_declared(make, message):
    with pytest.raises(ValueError, match=message):
        make()

