"""Fault injection: each deliberate failure ends as its own class in the verdict, fast, with no process
left behind and no baseline touched (a small 3D U-Net case on 2 gloo ranks, synthetic data)."""

import json

import pytest

from conftest import REPO, leftover_processes

WORKLOAD = REPO / "workloads" / "unet3d_train.py"
SUITE = f"""
from perfgate.cases import Case, Flavour, parametrize

SMALL = {{"device": "cpu", "base-channels": 2, "batch-size": 1, "loader": "synthetic", "workers": 0}}
FAULTS = {{"crash": "crash@1:2", "hang": "hang@1:2", "oom": "oom@0:2", "nan": "nan@0:2", "none": None}}
CASES = [Case("unet3d", name, ({str(WORKLOAD)!r},),
              cpu=Flavour({{**SMALL, "inject-fault": fault}}, steps=6, warmup=1, tolerance=0.5, timeout_s=45))
         for name, fault in FAULTS.items()]
CASES.append(Case("unet3d", "bad-option", ({str(WORKLOAD)!r},), cpu=Flavour({{**SMALL, "base-channels": 0}})))

@parametrize(CASES)
def test_fault(perfgate, case):
    perfgate.check(case)
"""


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    """One pytest session over every scenario; returns its output and each case's result.json."""
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("faults")
    (root / "test_suite.py").write_text(SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "test_suite.py", "-p", "no:cacheprovider", "--basetemp", str(root / "tmp"),
         "--baseline-dir", str(root / "b"), "--hardware-class", "faults", "--perf-repeats", "1", "-rA"],
        cwd=root, capture_output=True, text=True, timeout=600,
    )
    results = {}
    for path in (root / "tmp").glob("*/result.json"):
        result = json.loads(path.read_text())
        results[result["case"]] = result
    return root, done.stdout + done.stderr, results


@pytest.mark.parametrize("case, verdict, says", [
    ("crash", "crashed", ["rank 1 (node 0, local rank 1) failed: exit code 13",
                          "perfgate injected fault: crash on rank 1 at step 2"]),
    ("hang", "timeout", ["no exit after the 45 s timeout", "killed every process of the run"]),
    ("oom", "out-of-memory", ["rank 0", "OutOfMemoryError", "configuration: "]),
    ("nan", "diverged", ["loss is not finite from step 2", "configuration: "]),
    ("bad-option", "setup-error", ["--base-channels must be >= 1, got 0"]),
])
def test_each_fault_is_classified_and_explained(outcome, case, verdict, says):
    root, output, results = outcome
    result = results[f"unet3d-{case}-cpu"]
    assert result["verdict"] == verdict, result.get("message")
    for text in says:
        assert text in result["message"]
    assert f"unet3d-{case}-cpu" in output and verdict in output


def test_no_process_of_any_scenario_survives(outcome):
    root, _, _ = outcome
    assert leftover_processes(str(root)) == []


def test_a_healthy_case_still_runs_after_the_faults_and_nothing_became_a_baseline(outcome):
    root, output, results = outcome
    assert results["unet3d-none-cpu"]["verdict"] == "no-baseline"
    assert not (root / "b").exists()
    assert "5 failed" in output and "1 skipped" in output
