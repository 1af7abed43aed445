"""The machine-speed probe measures the machine, not the workload's settings."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import WORKLOADS

torch = pytest.importorskip("torch")
spec = importlib.util.spec_from_file_location("machine_probe", WORKLOADS / "machine_probe.py")
machine_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(machine_probe)


def test_the_probe_runs_on_one_thread_whatever_the_workload_set_and_gives_its_threads_back(monkeypatch):
    """A change that cut a workload's threads would otherwise slow the probe as much as the steps, and the gate's
    verdict's model (judge.model), which weighs the probe, would take the regression for a slower machine."""
    seen = []
    matmul = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b: seen.append(torch.get_num_threads()) or matmul(a, b))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        reading = machine_probe.read_probe(torch.device("cpu"), matmul_repeats=1, copy_repeats=1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {1}
    assert reading["matmul_gflops"] > 0 and reading["copy_gbps"] > 0


@pytest.mark.parametrize("kernel, owner, name", [("matmul_%sgflops", torch, "mm"), ("copy_%sgbps", torch.Tensor, "copy_")])
def test_time_off_the_cpu_slows_each_kernels_wall_clock_rate_only(monkeypatch, kernel, owner, name):
    """A neighbour that takes turns on the cores keeps the probe's thread off the CPU, as a sleep does: the kernel's
    wall-clock rate falls and its CPU-time rate holds, as the CPU clock's metrics do beside it."""
    real = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *args: (real(*args), machine_probe.time.sleep(0.1))[0])
    reading = machine_probe.read_probe(torch.device("cpu"), matmul_repeats=2, copy_repeats=1)
    assert reading[kernel % "cpu_"] > 2 * reading[kernel % ""] > 0, \
        "100 ms asleep per call: a product takes about 0.5 ms here, a 64 MiB copy 15-25 ms"
