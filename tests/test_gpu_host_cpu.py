"""The host's CPU clock gated on a real GPU (opt-in, docs/clocks.md): under ``--host-wait block`` the host sleeps
while it waits for the device, so ``host_cpu_per_step_s`` is the host's own work, a baseline carries it and a
planted slowdown moves it; under CUDA's default the host spins, and gating it warns. Skipped without a CUDA GPU;
run on one with ``pytest tests/test_gpu_host_cpu.py`` (four launches, a few minutes:
docs/measurements.md#why-the-rules-are-what-they-are)."""

import json
import subprocess

import pytest
import torch

from conftest import REPO, leftover_processes
from perfgate.records.host_wait import BLOCKING
from fault_session import baseline_files, pytest_args, results_of

pytestmark = [pytest.mark.launches,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="no CUDA GPU visible: how the host waits for a device needs a real one")]

WORKLOAD = REPO / "workloads" / "resnet50_train.py"
SUITE = f"""
from perfgate import Case, Flavour, parametrize

GPU = {{"device": "cuda", "image-size": 224, "precision": "amp", "loader": "synthetic", "workers": 0,
        "batch-size": 256, "lr-warmup-steps": 10}}
GATED = ("samples_per_second", "host_cpu_per_step_s")
CASES = [
    Case("resnet50", "host-block", ({str(WORKLOAD)!r},),
         gpu=Flavour({{**GPU, "host-wait": "block"}}, steps=60, warmup=10, tolerance=0.15, gated=GATED)),
    Case("resnet50", "host-spin", ({str(WORKLOAD)!r},),
         gpu=Flavour({{**GPU, "host-wait": "auto"}}, steps=60, warmup=10, tolerance=0.15, gated=GATED)),
]

@parametrize(CASES)
def test_host_clock(perfgate, case):
    perfgate.check(case)
"""
PLANT = 0.25


def session(root, *args):
    return subprocess.run(pytest_args(root, "-m", "gpu", "--perf-max-repeats", "1", *args), cwd=root,
                          capture_output=True, text=True, timeout=900)


def test_the_host_clock_is_baselined_gated_and_moved_by_a_plant_only_where_the_host_sleeps(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    written = session(tmp_path, "--update-baselines", "--perf-baseline-repeats", "1")
    assert written.returncode == 0, written.stdout[-3000:]
    assert "HostSpinWarning: resnet50-host-spin-gpu: host_cpu_per_step_s is gated, but the host spun" in written.stdout
    assert "resnet50-host-block-gpu: host_cpu_per_step_s is gated" not in written.stdout
    stored = json.loads(next((tmp_path / "b").rglob("resnet50-host-block-gpu.json")).read_text())
    assert set(stored["metrics"]) == {"samples_per_second", "host_cpu_per_step_s"}
    before = baseline_files(tmp_path)

    unchanged = session(tmp_path, "-k", "host-block")
    assert unchanged.returncode == 0, unchanged.stdout[-3000:]

    planted = session(tmp_path, "-k", "host-block", "--perf-inject-slowdown", str(PLANT))
    result = results_of(tmp_path / "tmp")["resnet50-host-block-gpu"]
    assert planted.returncode == 1, planted.stdout[-3000:]
    changes = {row["metric"]: round(row["measured_change"], 3) for row in result["plant"]}
    assert result["verdict"] == "FAIL", changes
    assert {row["metric"]: row["took"] for row in result["plant"]} == {
        "samples_per_second": True, "host_cpu_per_step_s": True}, changes
    assert result["per_run"][0]["facts"]["start"]["host_wait"] == BLOCKING, result["per_run"][0]["facts"]
    # The host spins for F of the whole step, about twice F of its own work: more than F, as docs/clocks.md says.
    assert changes["host_cpu_per_step_s"] > PLANT, changes
    assert baseline_files(tmp_path) == before
    assert leftover_processes(str(tmp_path)) == []
