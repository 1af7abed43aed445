"""Faults on a real GPU, through the plugin: a CUDA out-of-memory and a crashed CUDA rank are classified and explained
as on CPU. Skipped without a CUDA GPU; run on one with `pytest tests/test_gpu_faults.py` (about a minute and a half:
docs/measurements.md#why-the-rules-are-what-they-are)."""

import subprocess

import pytest
import torch

from conftest import REPO, leftover_processes
from fault_session import pytest_args, results_of

pytestmark = [pytest.mark.launches,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="no CUDA GPU visible: these cases need a real device to run out of memory")]

WORKLOAD = REPO / "workloads" / "resnet50_train.py"
SUITE = f"""
from perfgate import Case, Flavour, parametrize

GPU = {{"device": "cuda", "image-size": 224, "precision": "amp", "loader": "synthetic", "workers": 0,
        "lr-warmup-steps": 2}}
CASES = [
    # 4096 images of 224 px: about 230 GiB of activations, more than any GPU holds.
    Case("resnet50", "real-oom", ({str(WORKLOAD)!r},),
         gpu=Flavour({{**GPU, "batch-size": 4096}}, steps=10, warmup=2, tolerance=0.5, timeout_s=150)),
    Case("resnet50", "crash", ({str(WORKLOAD)!r},),
         gpu=Flavour({{**GPU, "batch-size": 64, "inject-fault": "crash@0:3"}}, steps=10, warmup=2, tolerance=0.5,
                     timeout_s=150)),
]

@parametrize(CASES)
def test_gpu_fault(perfgate, case):
    perfgate.check(case)
"""


def test_a_cuda_out_of_memory_and_a_crashed_cuda_rank_are_classified_and_explained(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "b" / "faults").mkdir(parents=True)
    done = subprocess.run(pytest_args(tmp_path, "-m", "gpu"), cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    results = results_of(tmp_path / "tmp")
    assert done.returncode == 1, done.stdout[-3000:]
    oom, crash = results["resnet50-real-oom-gpu"], results["resnet50-crash-gpu"]
    assert oom["verdict"] == "out-of-memory", oom["message"]
    assert "rank 0 (node 0, local rank 0)" in oom["message"] and "CUDA out of memory" in oom["message"]
    assert crash["verdict"] == "crashed", crash["message"]
    assert "rank 0 (node 0, local rank 0) failed: exit code 13" in crash["message"]
    assert "perfgate injected fault: crash on rank 0 at step 3" in crash["message"]
    assert not any((tmp_path / "b").rglob("*.json"))
    assert leftover_processes(str(tmp_path)) == []
