"""The plugin end to end: pytest runs of a real OpenCLIP case under torchrun with 2 gloo ranks."""

import json

import pytest

from conftest import REPO, leftover_processes

WORKLOAD = REPO / "workloads" / "openclip_train.py"
SUITE = f"""
from perfgate.cases import Case, Flavour, parametrize

TINY = {{"model": "perfgate-ViT-tiny", "device": "cpu", "batch-size": 16, "workers": 0}}
CASES = [
    Case("openclip", "tiny", ({str(WORKLOAD)!r},),
         cpu=Flavour(TINY, steps=12, warmup=2, tolerance=0.4, timeout_s=240),
         gpu=Flavour({{**TINY, "device": "cuda"}})),
    Case("openclip", "bad-model", ({str(WORKLOAD)!r},), cpu=Flavour({{**TINY, "model": "ViT-Nope"}}, timeout_s=120)),
]

@parametrize(CASES)
def test_clip(perfgate, case):
    perfgate.check(case)
"""
CLASS = "pinned-cpu-class"
PINNED = ["--baseline-dir", "b", "--hardware-class", CLASS, "-p", "no:cacheprovider"]


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def run(pytester, *args):
    return pytester.runpytest_subprocess(*PINNED, *args, timeout=600)


def baseline_file(pytester):
    return pytester.path / "b" / CLASS / "openclip-tiny-cpu.json"


def test_missing_baseline_update_pass_and_regression(suite):
    """Tolerance 40 %: the pass survives a loaded machine; against a baseline twice as good the total
    time is ~+100 %, so the regression is caught whatever the load."""
    first = run(suite, "-k", "tiny-cpu", "-rs")
    first.assert_outcomes(skipped=1)
    first.stdout.fnmatch_lines([
        "*openclip-tiny-cpu*samples_per_second*no-baseline*",
        "*no baseline for hardware class pinned-cpu-class*Create it: pytest*--update-baselines*",
    ])

    update = run(suite, "-k", "tiny-cpu", "--update-baselines")
    update.assert_outcomes(passed=1)
    update.stdout.fnmatch_lines(["*openclip-tiny-cpu*samples_per_second*updated*", f"wrote *{CLASS}/openclip-tiny-cpu.json"])
    stored = json.loads(baseline_file(suite).read_text())
    assert stored["metrics"]["samples_per_second"]["better"] == "higher"
    assert stored["metrics"]["total_time_secs"]["better"] == "lower"
    assert stored["metrics"]["samples_per_second"]["tolerance"] == 0.4
    provenance = stored["provenance"]
    assert provenance["versions"]["torch"].startswith("2.")
    assert "torch.distributed.run" in provenance["command"] and "$WORKDIR/steps.jsonl" in provenance["command"]
    assert provenance["measured"]["measured_steps"] == 10

    gate = run(suite, "-k", "tiny-cpu")
    gate.assert_outcomes(passed=1)
    gate.stdout.fnmatch_lines(["*openclip-tiny-cpu*samples_per_second*pass*", "*openclip-tiny-cpu*total_time_secs*pass*"])

    stored["metrics"]["samples_per_second"]["value"] *= 2
    stored["metrics"]["total_time_secs"]["value"] /= 2
    baseline_file(suite).write_text(json.dumps(stored))
    regress = run(suite, "-k", "tiny-cpu")
    regress.assert_outcomes(failed=1)
    regress.stdout.fnmatch_lines([
        "*openclip-tiny-cpu: performance regression on pinned-cpu-class",
        "*total_time_secs (lower is better): measured * s vs baseline * s: +*% (tolerance 40.0%)",
        "*baseline: *openclip-tiny-cpu.json",
        "*command: python -m torch.distributed.run *openclip_train.py*",
        "*logs kept in *test_clip_tiny_cpu_0",
        "*openclip-tiny-cpu*total_time_secs*FAIL*",
    ])
    assert json.loads(baseline_file(suite).read_text()) == stored


def test_two_agents_on_this_host_with_nodes_2(suite):
    result = run(suite, "-k", "tiny-cpu", "--nodes", "2", "--hardware-class", "two-nodes", "--update-baselines")
    result.assert_outcomes(passed=1)
    stored = json.loads((suite.path / "b" / "two-nodes" / "openclip-tiny-cpu.json").read_text())
    assert "--nnodes 2 --nproc-per-node 2" in stored["provenance"]["command"]
    agent_logs = sorted(suite.path.glob("**/test_clip_tiny_cpu_0/agent*.log"))
    assert [p.name for p in agent_logs] == ["agent0.log", "agent1.log"]
    steps = [json.loads(line) for line in next(suite.path.glob("**/test_clip_tiny_cpu_0/steps.jsonl")).open()]
    assert steps[0]["world_size"] == 4 and steps[0]["global_batch"] == 64


def test_strict_baselines_fail_when_none_exists(suite):
    result = run(suite, "-k", "tiny-cpu", "--strict-baselines", "--perf-steps", "4", "--perf-warmup", "1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no baseline for hardware class pinned-cpu-class*"])


def test_corrupt_baseline_fails_before_launching_and_is_left_alone(suite):
    baseline_file(suite).parent.mkdir(parents=True)
    baseline_file(suite).write_text('{"schema": 1, "metrics": {')
    result = run(suite, "-k", "tiny-cpu", "--durations=1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*openclip-tiny-cpu.json: corrupt baseline, not valid JSON*"])
    assert baseline_file(suite).read_text() == '{"schema": 1, "metrics": {'
    assert not list(suite.path.glob("**/test_clip_tiny_cpu_0/agent0.log"))


def test_invalid_workload_setting_fails_with_the_workloads_message(suite):
    result = run(suite, "-k", "bad-model")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*openclip-bad-model-cpu: crashed: rank * failed: exit code 2*",
        "*--model 'ViT-Nope' is not an open_clip config*",
        "*openclip-bad-model-cpu*crashed*",
    ])


def test_timeout_kills_the_case_and_reports_it(suite):
    result = run(suite, "-k", "tiny-cpu", "--perf-timeout", "4")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*openclip-tiny-cpu: timeout: no exit after the 4 s timeout*", "*openclip-tiny-cpu*timeout*"])
    assert leftover_processes(str(suite.path)) == []


def test_gpu_flavour_skips_with_a_reason_without_a_gpu(suite):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    result = run(suite, "-m", "gpu", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*GPU flavour: torch sees no CUDA GPU on this machine*"])
