"""benchmarks/verdict_model.py replays stored sessions, each left out in turn, by the verdict's model."""

import importlib.util
import math
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("verdict_model",
                                              Path(__file__).parent.parent / "benchmarks" / "verdict_model.py")
verdict_model = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(verdict_model)

from perfgate.judge import baselines  # noqa: E402
from perfgate.judge.baselines import Baseline, MetricBaseline, StoredSession  # noqa: E402

RUNS = (0.99, 1.0, 1.01, 1.0, 0.995, 1.005, 1.0)


def stored_file(tmp_path, drift):
    """A class's baseline with 10 stored sessions, each on a machine ``drift`` apart, the metric following it."""
    sessions = [StoredSession(f"2026-12-0{1 + i // 5}T0{i % 5}:00:00+00:00",
                              {"cpu_seconds_per_sample": math.exp(-0.5 * speed) * (1 + 0.01 * (-1) ** i)},
                              70.0 * math.exp(speed), "abc")
                for i, speed in enumerate(drift * (i % 5 - 2) for i in range(10))]
    baseline = Baseline("c-cpu", "cpu-x-avx2-2c-n1", {
        "cpu_seconds_per_sample": MetricBaseline(1.0, "lower", 0.05, "CPU s/sample", RUNS)},
        provenance={"measured": {"probe_matmul_gflops": 70.0}}, sessions=tuple(sessions))
    baselines.write(tmp_path / "cpu-x-avx2-2c-n1" / "c-cpu.json", baseline)
    return baselines.load(tmp_path / "cpu-x-avx2-2c-n1" / "c-cpu.json")


def test_a_machine_that_explains_the_drift_leaves_no_false_fail_and_a_large_plant_fails(tmp_path):
    """Sessions on machines up to 30 % apart, the metric moving half as much: unchanged, none FAILs by the model;
    a 50 % slowdown FAILs; both ways are replayed from the same launches."""
    baseline = stored_file(tmp_path, drift=0.15)
    unchanged = [verdict_model.by_the_model(baseline, i, 0.0)[0] for i in range(10)]
    assert "FAIL" not in unchanged
    assert all(verdict_model.by_the_model(baseline, i, 0.5)[0] == "FAIL" for i in range(10))


def test_the_replay_prints_a_row_per_class(tmp_path, capsys):
    stored_file(tmp_path, drift=0.05)
    verdict_model.replay(tmp_path)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| cpu-x-avx2-2c-n1")]
    assert len(rows) == 1 and rows[0].split(" | ")[1] == "10"
