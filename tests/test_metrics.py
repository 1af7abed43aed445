import math

import pytest

from perfgate.measure import metrics
from perfgate.measure.metrics import MetricsError, compute, moves_with_machine, percentile
from perfgate.records.steps import RunRecords, StepRecord


def run(step_times, samples=64, data=0.01, losses=None, end=None):
    losses = losses or [1.0] * len(step_times)
    steps = tuple(StepRecord(i, samples, t, data, loss) for i, (t, loss) in enumerate(zip(step_times, losses)))
    return RunRecords(start={"world_size": 2}, steps=steps, end=end)


def test_throughput_excludes_warmup_and_uses_window_wall_time():
    metrics = compute(run([5.0, 3.0, 1.0, 1.0, 2.0]), warmup=2)
    assert metrics.window_s == pytest.approx(4.0)
    assert metrics.samples_per_second == pytest.approx(3 * 64 / 4.0)
    assert metrics.samples_per_second_per_rank == pytest.approx(3 * 64 / 4.0 / 2)
    assert metrics.measured_steps == 3


def test_a_window_of_steps_timed_at_zero_is_an_error_saying_what_to_change():
    with pytest.raises(MetricsError, match=r"the measured window has zero duration: its 3 step times sum to 0 s \(a "
                                           r"log that rounds them away\? have the script print them with more digits"):
        compute(run([0.1, 0.0, 0.0, 0.0]), warmup=1)


def test_the_window_splits_into_consecutive_windows_whose_times_add_up_to_it():
    """9 measured steps in 4 windows: 2, 2, 2 and the 3 left, each with its own rates; the warm-up stays out."""
    records = run([9.0, 9.0, 1.0, 1.0, 2.0, 2.0, 1.0, 4.0, 1.0, 1.0, 2.0])
    parts = metrics.windows(records, warmup=2, world_size=2, count=4)
    assert [part["samples_per_second"] for part in parts] == pytest.approx([64.0, 32.0, 128 / 5, 3 * 64 / 4.0])
    assert [part["fastest_step_samples_per_second"] for part in parts] == [64.0, 32.0, 64.0, 64.0]
    whole = compute(records, warmup=2, world_size=2)
    assert sum(64 * (2 if i < 3 else 3) / part["samples_per_second"] for i, part in enumerate(parts)) \
        == pytest.approx(whole.window_s)
    assert "cpu_seconds_per_sample" not in parts[0], "steps with no CPU time give no CPU clock"
    assert metrics.windows(records, warmup=2, world_size=2, count=5) == [], "fewer than 2 steps a window"
    assert metrics.windows(records, warmup=2, world_size=2, count=1) == []
    stamped = run([9.0, 9.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    assert metrics.windows(stamped, warmup=2, world_size=2, count=3) == [], "a window with no time measures nothing"


def test_total_time_is_the_mmoclip_definition_every_step_but_the_first():
    assert compute(run([100.0, 2.0, 3.0]), warmup=0).total_time_secs == pytest.approx(5.0)


def test_step_time_median_p90_and_data_share():
    metrics = compute(run([1.0, 2.0, 3.0, 4.0, 10.0], data=0.5), warmup=0)
    assert metrics.step_time_median_s == 3.0
    assert metrics.step_time_p90_s == pytest.approx(7.6)
    assert metrics.data_time_share == pytest.approx(2.5 / 20.0)


def test_percentile_matches_linear_interpolation():
    assert percentile([1.0], 90) == 1.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0


def test_peak_memory_comes_from_the_end_record():
    assert compute(run([1.0, 1.0], end={"peak_memory_bytes": 123}), warmup=0).peak_memory_bytes == 123
    assert compute(run([1.0, 1.0]), warmup=0).peak_memory_bytes is None


def test_all_warmup_is_an_error_that_says_what_to_change():
    with pytest.raises(MetricsError, match="3 steps but 3 are warm-up.*--perf-steps"):
        compute(run([1.0, 1.0, 1.0]), warmup=3)


def test_non_finite_loss_is_divergence_not_a_measurement():
    with pytest.raises(MetricsError, match="not finite from step 2"):
        compute(run([1.0, 1.0, 1.0, 1.0], losses=[1.0, 0.5, math.nan, 0.1]), warmup=1)


def test_flops_give_achieved_tflops_and_mfu_on_a_known_gpu():
    steps = tuple(StepRecord(i, 1000, 1.0, 0.0, 1.0) for i in range(3))
    start = {"world_size": 2, "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "precision": "amp_bf16"}
    metrics = compute(RunRecords(start=start, steps=steps, flops={"flops_per_sample": 1e9}), warmup=1)
    assert metrics.tflops == pytest.approx(1.0)
    assert metrics.mfu == pytest.approx(1e12 / (2 * 989.4e12))
    on_cpu = compute(RunRecords(start={"world_size": 2, "device": "cpu"}, steps=steps,
                                flops={"flops_per_sample": 1e9}), warmup=1)
    assert on_cpu.tflops == pytest.approx(1.0) and on_cpu.mfu is None


def test_benchy_phases_become_io_and_synthetic_throughputs():
    phases = {"io": {"samples_per_second": 303.0}, "synthetic": {"samples_per_second": 359.0}}
    metrics = compute(RunRecords(start={"world_size": 1}, steps=run([1.0, 1.0]).steps, phases=phases), warmup=0)
    assert (metrics.io_samples_per_second, metrics.synthetic_samples_per_second) == (303.0, 359.0)
    assert compute(run([1.0, 1.0]), warmup=0).io_samples_per_second is None


def test_steady_throughput_ignores_bursts_of_interference_but_not_a_slower_step():
    quiet = [1.0] * 10
    bursty = [1.0] * 6 + [1.5] * 4
    assert compute(run(bursty), warmup=0).steady_samples_per_second == pytest.approx(64.0)
    assert compute(run(bursty), warmup=0).samples_per_second < 0.9 * 64
    slower = [1.1 * t for t in quiet]
    assert compute(run(slower), warmup=0).steady_samples_per_second == pytest.approx(64 / 1.1)


def test_fastest_step_throughput_is_the_least_disturbed_step_and_moves_with_every_step():
    bursty = [1.2, 1.0, 1.5, 1.1, 3.0]
    assert compute(run(bursty), warmup=0).fastest_step_samples_per_second == pytest.approx(64.0)
    slower = [1.1 * t for t in bursty]
    assert compute(run(slower), warmup=0).fastest_step_samples_per_second == pytest.approx(64 / 1.1)


def test_probe_reading_is_the_slowest_ranks_mean_of_before_and_after():
    probe = {"before": {"matmul_gflops": [80.0, 60.0], "copy_gbps": [10.0, 12.0]},
             "after": {"matmul_gflops": [90.0, 70.0], "copy_gbps": [14.0, 12.0]}}
    records = RunRecords(start={"world_size": 2}, steps=run([1.0, 1.0]).steps, probe=probe)
    metrics = compute(records, warmup=0)
    assert metrics.probe_matmul_gflops == 65.0 and metrics.probe_copy_gbps == 12.0
    assert metrics.probe_matmul_cpu_gflops is None
    assert compute(run([1.0, 1.0]), warmup=0).probe_matmul_gflops is None
    probe["before"]["matmul_cpu_gflops"], probe["after"]["matmul_cpu_gflops"] = [100.0, 96.0], [98.0, 90.0]
    assert compute(records, warmup=0).probe_matmul_cpu_gflops == 93.0
    probe["before"]["copy_cpu_gbps"], probe["after"]["copy_cpu_gbps"] = [9.0, 7.0], [8.0, 6.0]
    assert compute(records, warmup=0).probe_copy_cpu_gbps == 6.5


def test_rates_times_and_cpu_times_move_with_the_machine_and_counts_memory_and_shares_do_not():
    """What the verdict's model weighs with the machine-speed probe, and what it reads without it."""
    moving = ("fastest_step_samples_per_second", "total_time_secs", "cpu_seconds_per_sample", "host_cpu_per_step_s",
              "tflops", "mfu")
    assert all(moves_with_machine(name) for name in moving)
    assert not any(moves_with_machine(name) for name in ("peak_memory_bytes", "flops_per_sample",
                                                          "instructions_per_sample", "data_time_share",
                                                          "workers_cpu_share"))


def test_time_accounting_splits_a_launch_into_startup_warmup_window_after_and_teardown():
    """Launched at 100 s; three steps of 1 s end at 110 s, so the first began at 107 s; end record at 113 s."""
    steps = tuple(StepRecord(step=i, samples=8, step_s=1.0, data_s=0.0, t=108.0 + i) for i in range(3))
    records = RunRecords(start={"t": 101.0}, steps=steps, end={"t": 113.0})
    assert metrics.time_accounting(records, warmup=1, launched_at=100.0, finished_at=115.5) == {
        "startup_s": 7.0, "warmup_s": 1.0, "window_s": 2.0, "after_window_s": 3.0, "teardown_s": 2.5,
        "total_s": 15.5}
    assert metrics.time_accounting(RunRecords(steps=steps), 1, 100.0, 115.5) is None


def test_start_up_splits_into_the_phases_the_rank_marked_and_they_sum_to_it():
    """The same launch (first step at 107 s) with its rank's points marked; the FLOP count was not marked, so its
    time goes to the next marked phase, and a point outside the start-up (another host's clock) is passed over."""
    steps = tuple(StepRecord(step=i, samples=8, step_s=1.0, data_s=0.0, t=108.0 + i) for i in range(3))
    marks = {"process": 101.5, "imports": 104.0, "process_group": 104.25, "model": 105.5, "probe": 106.5}
    records = RunRecords(steps=steps, end={"t": 113.0, "startup": marks})
    accounted = metrics.time_accounting(records, warmup=1, launched_at=100.0, finished_at=115.5)
    split = {key: value for key, value in accounted.items() if key.startswith("startup_") and key != "startup_s"}
    assert split == {"startup_torchrun_s": 1.5, "startup_imports_s": 2.5, "startup_process_group_s": 0.25,
                     "startup_model_s": 1.25, "startup_probe_s": 1.0, "startup_loader_s": 0.5}
    assert sum(split.values()) == accounted["startup_s"] == 7.0
    skewed = RunRecords(steps=steps, end={"t": 113.0, "startup": {**marks, "process": 99.0}})
    assert "startup_torchrun_s" not in metrics.time_accounting(skewed, 1, 100.0, 115.5)
    assert metrics.time_accounting(skewed, 1, 100.0, 115.5)["startup_imports_s"] == 4.0
