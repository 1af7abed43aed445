"""Metrics of one run, computed from its step records.

The measured window is every step after the first ``warmup`` steps. Step times chain end to end,
so the window's step times add up to its wall time and samples / seconds is a true throughput.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace
from typing import Sequence

from perfgate.measure import flops
from perfgate.records import startup
from perfgate.records.steps import RunRecords, StepRecord


@dataclass(frozen=True)
class MetricInfo:
    unit: str
    better: str  # "higher" or "lower"
    description: str
    clock: str = "wall"
    """Which clock the metric reads: ``wall``, or ``cpu``: what the rank's CPUs did, its CPU time (records.cpu_time)
    or its instructions retired (records.instructions), with the CPU clock's tolerances."""
    why_absent: str | None = None
    """The start record's fact that says why a run has no value for it, where a host may lack what it reads."""


METRICS: dict[str, MetricInfo] = {
    "samples_per_second": MetricInfo("samples/s", "higher", "global throughput over the measured window"),
    "steady_samples_per_second": MetricInfo(
        "samples/s", "higher", "throughput of the window's fastest half of steps: interference from other tenants "
        "only ever adds time, so this tracks the code's own speed on a shared machine"),
    "fastest_step_samples_per_second": MetricInfo(
        "samples/s", "higher", "throughput of the window's fastest step: the run's speed least touched by other "
        "tenants, as timeit's best-of; any change that slows every step still moves it"),
    "cpu_seconds_per_sample": MetricInfo(
        "CPU s/sample", "lower", "CPU seconds rank 0's process (all threads) and loader workers spent per sample it "
        "trained, over the window: the second clock, blind to the time slices a shared machine gives other work",
        clock="cpu"),
    "least_step_cpu_seconds_per_sample": MetricInfo(
        "CPU s/sample", "lower", "the least CPU seconds per sample of any step of rank 0's process, plus its loader "
        "workers' per sample over the window: the CPU clock's best-of, as the fastest step is the wall clock's. A host "
        "that slows a vCPU's instructions in spells (a neighbour on the physical core, memory bandwidth) adds CPU "
        "time too, and the window's total carries every spell, where the least step keeps the quickest",
        clock="cpu"),
    "instructions_per_sample": MetricInfo(
        "instructions/sample", "lower", "user-space instructions rank 0's process and loader workers retired per "
        "sample it trained, over the window: a count, which a host that runs them slower does not move; where the "
        "host exposes a hardware counter", clock="cpu", why_absent="instruction_clock"),
    "host_cpu_per_step_s": MetricInfo(
        "CPU s", "lower", "median CPU seconds rank 0's process spent per step, loader workers apart: on GPU, the "
        "host's Python and launch overhead, hidden while the GPU is the bottleneck", clock="cpu"),
    "workers_cpu_share": MetricInfo(
        "fraction", "lower", "share of the window's CPU time (rank 0's process and loader workers) the workers spent",
        clock="cpu"),
    "samples_per_second_per_rank": MetricInfo("samples/s", "higher", "throughput per rank (per GPU)"),
    "total_time_secs": MetricInfo("s", "lower", "MMoCLIP total time: every step's time except the first"),
    "step_time_median_s": MetricInfo("s", "lower", "median step time in the measured window"),
    "step_time_p90_s": MetricInfo("s", "lower", "90th percentile step time in the measured window"),
    "data_time_share": MetricInfo("fraction", "lower", "share of the window spent waiting for data"),
    "peak_memory_bytes": MetricInfo("bytes", "lower", "peak memory of the busiest rank"),
    "flops_per_sample": MetricInfo("FLOP", "lower", "training FLOPs per sample (forward + backward)"),
    "tflops": MetricInfo("TFLOP/s", "higher", "achieved model TFLOP/s over all ranks"),
    "mfu": MetricInfo("fraction", "higher", "model FLOPs utilization against the GPUs' dense datasheet peak"),
    "probe_matmul_gflops": MetricInfo("GFLOP/s", "higher", "machine-speed probe: matmul rate of the slowest rank"),
    "probe_copy_gbps": MetricInfo("GB/s", "higher", "machine-speed probe: memory copy rate of the slowest rank"),
    "probe_matmul_cpu_gflops": MetricInfo(
        "GFLOP/s", "higher", "machine-speed probe: matmul GFLOP per CPU second of the slowest rank (CPU only)",
        clock="cpu"),
    "probe_copy_cpu_gbps": MetricInfo(
        "GB/s", "higher", "machine-speed probe: memory copied per CPU second of the slowest rank (CPU only)",
        clock="cpu"),
    "run_queue_turns": MetricInfo(
        "ratio", "lower", "rank 0's CPU time and its threads' wait for a core, over its CPU time, in the window: how "
        "much other tasks held the cores it wanted (a neighbour, and the case's own where they outnumber the cores)"),
    "planted_fraction": MetricInfo(
        "fraction", "higher", "the planted slowdown as applied: seconds planted in the window over its other seconds "
        "(--perf-inject-slowdown F plants F)"),
    "io_samples_per_second": MetricInfo("samples/s", "higher", "benchy IO: the input pipeline alone"),
    "synthetic_samples_per_second": MetricInfo("samples/s", "higher", "benchy SYNTHETIC: the step on a cached batch"),
}


class MetricsError(ValueError):
    """Records that cannot give a measurement (too few steps, non-finite loss...)."""


class DivergedError(MetricsError):
    """The loss went NaN or infinite: the run trained nothing, so its timing is no measurement."""


@dataclass(frozen=True)
class RunMetrics:
    samples_per_second: float
    samples_per_second_per_rank: float
    total_time_secs: float
    step_time_median_s: float
    step_time_p90_s: float
    data_time_share: float
    peak_memory_bytes: int | None
    measured_steps: int
    warmup_steps: int
    window_s: float
    flops_per_sample: float | None = None
    tflops: float | None = None
    mfu: float | None = None
    steady_samples_per_second: float | None = None
    fastest_step_samples_per_second: float | None = None
    probe_matmul_gflops: float | None = None
    probe_copy_gbps: float | None = None
    probe_matmul_cpu_gflops: float | None = None
    probe_copy_cpu_gbps: float | None = None
    io_samples_per_second: float | None = None
    synthetic_samples_per_second: float | None = None
    planted_fraction: float | None = None
    cpu_seconds_per_sample: float | None = None
    least_step_cpu_seconds_per_sample: float | None = None
    instructions_per_sample: float | None = None
    host_cpu_per_step_s: float | None = None
    workers_cpu_share: float | None = None
    """Share of the window's CPU time (process and workers) that the loader workers spent; None without workers."""
    run_queue_turns: float | None = None
    """Rank 0's CPU time and its threads' wait for a core, over its CPU time (run_queue_turns()); None on a GPU."""

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


MATMUL_PROBE = "probe_matmul_gflops"
"""The machine-speed reading every stored session has: the slowest rank's matmul rate by the wall clock."""
MACHINE_PROBES = {"wall": ("probe_matmul_gflops", "probe_copy_gbps"),
                  "cpu": ("probe_matmul_cpu_gflops", "probe_copy_cpu_gbps")}
"""The machine-speed readings on each clock, compute and memory: by the wall clock, and by CPU time (how fast the
cores and their memory ran, whatever else took turns on them)."""
RUN_QUEUE_TURNS = "run_queue_turns"
PROBES = (*(name for clock in MACHINE_PROBES.values() for name in clock), RUN_QUEUE_TURNS)
"""Every reading of the machine: the probe's speeds on both clocks, and how much other tasks held the cores during
the window (RUN_QUEUE_TURNS: a neighbour's, and the case's own where they outnumber the cores, which an unchanged case
repeats alike). Facts of the machine, not of the workload's code."""
SPEED_UNITS = ("samples/s", "TFLOP/s", "s", "CPU s/sample", "CPU s")
"""Units of the metrics that move with the machine's speed: rates, times and CPU times; memory, FLOPs or
instructions per sample and shares do not."""


def unit_of(name: str, counted: str = "samples") -> str:
    """A metric's unit, with what the case counts as a sample named: ``tokens/s`` where a case counts tokens."""
    return METRICS[name].unit.replace("samples", counted)


def moves_with_machine(metric: str) -> bool:
    """Whether a slower or faster machine moves the metric: a rate, a time or a CPU time, and MFU (a rate over the
    peak); not a count of work, memory or a share, which the verdict's model reads without the machine's speed."""
    return METRICS[metric].unit in SPEED_UNITS or metric == "mfu"


def slowest_rank(probe: dict | None, kernel: str) -> float | None:
    """The slowest rank's probe reading (mean of before and after the window): DDP steps go at its pace."""
    if not probe or kernel not in probe["before"]:
        return None
    before, after = probe["before"][kernel], probe["after"][kernel]
    return min((b + a) / 2 for b, a in zip(before, after))


def check_finite(records: RunRecords) -> None:
    """Raises DivergedError at the first step whose loss is NaN or infinite."""
    bad = next((s.step for s in records.steps if s.loss is not None and not math.isfinite(s.loss)), None)
    if bad is not None:
        raise DivergedError(f"loss is not finite from step {bad}: the run diverged, its timing is not a measurement")


def compute(records: RunRecords, warmup: int, world_size: int | None = None) -> RunMetrics:
    steps = records.steps
    if warmup < 0:
        raise MetricsError(f"warm-up must be >= 0 steps, got {warmup}")
    if len(steps) <= warmup:
        raise MetricsError(
            f"the run recorded {len(steps)} steps but {warmup} are warm-up: nothing left to measure; "
            "run more steps (--perf-steps) or fewer warm-up steps (--perf-warmup)"
        )
    check_finite(records)
    window = steps[warmup:]
    window_s = sum(s.step_s for s in window)
    if window_s <= 0:
        raise MetricsError(f"the measured window has zero duration: its {len(window)} step times sum to 0 s (a log "
                           "that rounds them away? have the script print them with more digits)")
    world = world_size or int(records.start.get("world_size", 1))
    throughput = sum(s.samples for s in window) / window_s
    times = [s.step_s for s in window]
    fastest_half = sorted(times)[:max(1, len(times) // 2)]
    end = records.end or {}
    per_sample = (records.flops or {}).get("flops_per_sample")
    gpus = world if records.start.get("device") == "cuda" else 0
    planted = [s.planted_s for s in window if s.planted_s is not None]
    return RunMetrics(
        samples_per_second=throughput,
        samples_per_second_per_rank=throughput / world,
        total_time_secs=sum(s.step_s for s in steps[1:]),
        step_time_median_s=statistics.median(times),
        step_time_p90_s=percentile(times, 90),
        data_time_share=sum(s.data_s for s in window) / window_s,
        peak_memory_bytes=end.get("peak_memory_bytes"),
        measured_steps=len(window),
        warmup_steps=warmup,
        window_s=window_s,
        flops_per_sample=per_sample,
        tflops=per_sample * throughput / 1e12 if per_sample else None,
        mfu=flops.mfu(per_sample, throughput, str(records.start.get("device_name", "")),
                      str(records.start.get("precision", "")), gpus) if per_sample else None,
        steady_samples_per_second=sum(s.samples for s in window) / len(window) / statistics.mean(fastest_half),
        fastest_step_samples_per_second=max(s.samples / s.step_s for s in window if s.step_s > 0),
        probe_matmul_gflops=slowest_rank(records.probe, "matmul_gflops"),
        probe_copy_gbps=slowest_rank(records.probe, "copy_gbps"),
        probe_matmul_cpu_gflops=slowest_rank(records.probe, "matmul_cpu_gflops"),
        probe_copy_cpu_gbps=slowest_rank(records.probe, "copy_cpu_gbps"),
        io_samples_per_second=records.phases.get("io", {}).get("samples_per_second"),
        synthetic_samples_per_second=records.phases.get("synthetic", {}).get("samples_per_second"),
        planted_fraction=sum(planted) / (window_s - sum(planted)) if planted and window_s > sum(planted) else None,
        **cpu_clock(window, world),
        instructions_per_sample=instructions_per_sample(window, world),
        run_queue_turns=run_queue_turns(window),
    )


WINDOWED = ("samples_per_second", "steady_samples_per_second", "fastest_step_samples_per_second",
            "cpu_seconds_per_sample", "least_step_cpu_seconds_per_sample", "instructions_per_sample")
"""The metrics a window of a launch has on its own: the verdict's model reads a launch's windows as its lowest level
(judge/model.py), so it can tell the spread within a launch from the spread between launches."""


def windows(records: RunRecords, warmup: int, world_size: int | None, count: int) -> list[dict[str, float]]:
    """The measured window split into ``count`` consecutive windows of whole steps (the last takes what is left, so
    their times add up to the window's), each with its WINDOWED metrics; none where there are fewer steps than
    two per window, or where a window has no time to measure (a log that stamps several steps at once)."""
    steps = records.steps[warmup:]
    size = len(steps) // count if count > 1 else 0
    if size < 2:
        return []
    parts = [steps[i * size:(i + 1) * size] for i in range(count - 1)] + [steps[(count - 1) * size:]]
    found = []
    for part in parts:
        try:
            measured = compute(replace(records, steps=part, probe=None), 0, world_size).as_dict()
        except (MetricsError, ValueError):
            return []
        found.append({name: measured[name] for name in WINDOWED if measured[name] is not None})
    return found


def cpu_clock(window: Sequence[StepRecord], world: int) -> dict[str, float | None]:
    """The second clock's metrics over the window; None where a step has no CPU time (a source that reads logs)."""
    if not window or any(s.cpu_s is None for s in window):
        return {"cpu_seconds_per_sample": None, "least_step_cpu_seconds_per_sample": None,
                "host_cpu_per_step_s": None, "workers_cpu_share": None}
    process = sum(s.cpu_s or 0.0 for s in window)
    workers = sum(s.workers_cpu_s or 0.0 for s in window)
    samples_per_rank = sum(s.samples for s in window) / world
    per_step = [(s.cpu_s or 0.0) * world / s.samples for s in window if s.samples]
    return {
        "cpu_seconds_per_sample": (process + workers) / samples_per_rank if samples_per_rank else None,
        # workers' CPU comes in clock ticks, so only its window total is precise: it is added per sample, not per step
        "least_step_cpu_seconds_per_sample": min(per_step) + workers / samples_per_rank if per_step else None,
        "host_cpu_per_step_s": statistics.median(s.cpu_s or 0.0 for s in window),
        "workers_cpu_share": workers / (process + workers) if workers > 0 else None,
    }


def run_queue_turns(window: Sequence[StepRecord]) -> float | None:
    """Rank 0's CPU time in the window and its threads' wait for a core while runnable, over its CPU time: 1 where
    no other task wanted its cores, 2 where others ran as long as it did. None where a step has no count."""
    if not window or any(s.run_queue_s is None or s.cpu_s is None for s in window):
        return None
    process = sum(s.cpu_s or 0.0 for s in window)
    return (process + sum(s.run_queue_s or 0.0 for s in window)) / process if process > 0 else None


def instructions_per_sample(window: Sequence[StepRecord], world: int) -> float | None:
    """The third clock over the window: None where a step has no count (no hardware counter, or a log source)."""
    samples_per_rank = sum(s.samples for s in window) / world
    if not window or not samples_per_rank or any(s.instructions is None for s in window):
        return None
    return sum(s.instructions or 0.0 for s in window) / samples_per_rank


def time_accounting(records: RunRecords, warmup: int, launched_at: float,
                    finished_at: float) -> dict[str, float] | None:
    """Where one launch's wall-clock time went, in seconds: start-up (launch to the first step: torchrun,
    imports, model build, FLOP count, compile set-up), split into its phases where the rank marked them
    (``startup_<phase>_s``, records.startup), warm-up steps, the measured window, after the window
    (machine-speed probe, benchy phases, end record) and teardown (end record to every process gone).
    None when the records carry no timestamps (upstream logs, older records)."""
    steps, end = records.steps, records.end or {}
    if not steps or steps[-1].t is None or end.get("t") is None:
        return None
    first_started = steps[-1].t - sum(s.step_s for s in steps)  # steps chain end to end; the last one is flushed
    window = steps[warmup:]
    split = startup.phases(launched_at, end.get("startup") or {}, first_started)
    return {
        "startup_s": round(first_started - launched_at, 3),
        **{f"startup_{phase}_s": seconds for phase, seconds in split.items()},
        "warmup_s": round(sum(s.step_s for s in steps[:warmup]), 3),
        "window_s": round(sum(s.step_s for s in window), 3),
        "after_window_s": round(float(end["t"]) - steps[-1].t, 3),
        "teardown_s": round(finished_at - float(end["t"]), 3),
        "total_s": round(finished_at - launched_at, 3),
    }
