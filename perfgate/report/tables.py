"""The summary's tables as rows of text, assembled once for every place that shows them: the terminal
(report/terminal.py) and the markdown report (report/markdown.py) render the same ``sections``."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from perfgate.launch import environment
from perfgate.measure.progress import clock
from perfgate.records import startup
from perfgate.result import Result

if TYPE_CHECKING:
    from perfgate.config.settings import Settings

VERDICT_HEADER = ("case", "metric", "measured", "baseline", "change", "verdict")


def summary_rows(results: Sequence[Result]) -> list[list[str]]:
    rows = []
    for result in results:
        metrics = result.metrics or [{}]
        for metric in metrics:
            change = metric.get("change")
            rows.append([
                result.case,
                metric.get("metric", "-"),
                number(metric.get("measured"), metric.get("unit", "")),
                number(metric.get("baseline"), metric.get("unit", "")),
                "-" if change is None else f"{change:+.1%}",
                metric.get("verdict", result.verdict),
            ])
    return rows


def ab_title(paired: Sequence[Result]) -> str:
    """What an A/B session compared: two commits, or this environment and another interpreter."""
    first, ref = paired[0], paired[0].reference
    if ref.get("python"):
        return f", this Python environment vs python {ref['python']} ({(first.candidate_commit or '-')[:12]})"
    return f", {(first.candidate_commit or '?')[:12]} vs {ref['revision']} ({ref['commit'][:12]})"


def environment_lines(paired: Sequence[Result]) -> list[str]:
    """Under --perf-against-python: what each side's interpreter holds."""
    first = paired[0]
    if not first.reference.get("environment") or not first.environment:
        return []
    return [f"this environment: {environment.summary(first.environment)} ({first.environment['executable']})",
            f"reference environment: {environment.summary(first.reference['environment'])} "
            f"({first.reference['python']})"]


AB_HEADER = ("case", "pairs", "time to verdict", "time budget (--perf-ab-budget)")


def ab_rows(paired: Sequence[Result]) -> list[list[str]]:
    """A/B cases: how many pairs each measured, how long its verdict took, and whether --perf-ab-budget cut it short."""
    return [[r.case, str(len(r.reference["per_run"])), clock(r.time_to_verdict_s or 0),
             r.ab_budget_stop or "-"] for r in paired]


BUDGET_HEADING = ("left undecided by --perf-budget (unresolved: more time, fewer cases, or a restored cache directory "
                  "would decide them)")
BUDGET_HEADER = ("case", "launches", "what the budget stopped")


def budget_rows(results: Sequence[Result]) -> list[list[str]]:
    """The cases --perf-budget stopped short of their verdict, and why."""
    return [[r.case, str(r.runs), r.budget_stop] for r in results if r.budget_stop]


UPDATE_HEADER = ("case", "metric", "old", "new", "change", "new tolerance", "noise", "runs")


SLOWER_HEADING = ("what got slower in each FAIL, and in every case under --perf-profile (torch.profiler in a launch "
                  "of each side that is not judged)")
SLOWER_HEADER = ("case", "operator", "ms per step before", "after", "beyond the step's growth", "kind")


def slower_rows(results: Sequence[Result]) -> list[list[str]]:
    """Each profiled case's operators that grew most (judge/profile_diff.py)."""
    return [[r.case, row["op"], f"{row['before_us'] / 1e3:.2f}", f"{row['after_us'] / 1e3:.2f}",
             f"+{row['excess_us'] / 1e3:.2f} ms", row["kind"]]
            for r in results if r.profile for row in r.profile["rows"]]


def update_rows(results: Sequence[Result]) -> list[list[str]]:
    """Rows of the reviewable table that --update-baselines prints: old -> new per metric."""
    rows = []
    for result in results:
        for metric in result.metrics:
            change = metric.get("change")
            rows.append([
                result.case,
                metric["metric"],
                number(metric.get("baseline"), metric.get("unit", "")),
                number(metric.get("measured"), metric.get("unit", "")),
                "new" if change is None else f"{change:+.1%}",
                f"{metric['tolerance']:.1%}",
                f"{metric.get('noise', 0.0):.1%}",
                str(metric.get("runs", "-")),
            ])
    return rows


def number(value: float | None, unit: str) -> str:
    """A value with its unit, to four significant digits; - for none."""
    return "-" if value is None else f"{value:,.4g} {unit}".strip()


TIME_HEADING = "where the launches' time went (seconds, summed over each case's launches; window: the measured steps)"
TIME_PHASES = ("startup_s", "warmup_s", "window_s", "after_window_s", "teardown_s")
TIME_HEADER = ("case", "launches", "start-up", "warm-up (compile)", "window", "after window", "teardown", "total",
               "window share")


def launch_times(result: Result) -> list[dict[str, float]]:
    """Each launch's time accounting (metrics.time_accounting), the reference side's too under A/B."""
    runs = [*result.per_run, *(result.reference or {}).get("per_run", [])]
    return [run["time_s"] for run in runs if run.get("time_s")]


def time_rows(results: Sequence[Result]) -> list[list[str]]:
    """Where each case's launches spent their time, summed over them: what the measured window was of what it cost."""
    rows = []
    for result in results:
        times = launch_times(result)
        if not times:
            continue
        total = sum(t["total_s"] for t in times)
        phases = [_seconds(sum(t[phase] for t in times)) for phase in TIME_PHASES]
        rows.append([result.case, str(len(times)), *phases, _seconds(total),
                     _share(sum(t["window_s"] for t in times), total)])
    return rows


STARTUP_HEADING = "where start-up went (seconds per launch, the mean of each case's launches; phases: docs/ci.md)"
STARTUP_HEADER = ("case", "launches", *(phase.replace("_", " ") for phase in startup.PHASES), "start-up")


def startup_rows(results: Sequence[Result]) -> list[list[str]]:
    """Each case's start-up by phase, where its workload marked the points (records.startup)."""
    rows = []
    for result in results:
        times = [t for t in launch_times(result) if any(f"startup_{phase}_s" in t for phase in startup.PHASES)]
        if not times:
            continue
        phases = [_seconds(sum(t.get(f"startup_{phase}_s", 0.0) for t in times) / len(times))
                  for phase in startup.PHASES]
        rows.append([result.case, str(len(times)), *phases,
                     _seconds(sum(t["startup_s"] for t in times) / len(times))])
    return rows


def window_share_line(results: Sequence[Result]) -> str | None:
    """The session's launches together: how much of their time the measured windows were."""
    times = [t for result in results for t in launch_times(result)]
    if not times:
        return None
    total, window = sum(t["total_s"] for t in times), sum(t["window_s"] for t in times)
    return (f"window share: {_share(window, total)} of the session's launch time ({_seconds(window)} measured of "
            f"{_seconds(total)} in {len(times)} launch(es)); the rest is start-up, warm-up, after-window and teardown")


def _seconds(value: float) -> str:
    return f"{value:,.1f} s"


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "-"


PROFILE_HEADER = ("case", "samples/s", "TFLOP/s", "MFU", "CPU ms/sample", "IO / SYNTHETIC samples/s", "bottleneck")


def bottleneck(io: float | None, synthetic: float | None) -> str:
    """benchy's reading: the slower of the input pipeline alone and the step on a cached batch bounds FULL."""
    if io is None or synthetic is None:
        return "-"
    if io < synthetic:
        return f"input-bound: IO {io:,.0f}/s < compute {synthetic:,.0f}/s"
    return f"compute-bound: compute {synthetic:,.0f}/s <= IO {io:,.0f}/s"


def profile_rows(results: Sequence[Result]) -> list[list[str]]:
    """What each measured case achieved: throughput, model TFLOP/s and MFU, the CPU time it took per sample (with the
    loader workers' share), and its benchy bottleneck."""
    rows = []
    for result in results:
        measured = result.measured
        if measured.get("samples_per_second") is None:
            continue
        io, synthetic = measured.get("io_samples_per_second"), measured.get("synthetic_samples_per_second")
        tflops, mfu = measured.get("tflops"), measured.get("mfu")
        rows.append([
            result.case,
            f"{measured['samples_per_second']:,.1f}",
            "-" if tflops is None else f"{tflops:,.3g}",
            "-" if mfu is None else f"{mfu:.1%}",
            cpu_per_sample(measured),
            "-" if io is None and synthetic is None else f"{_rate(io)} / {_rate(synthetic)}",
            bottleneck(io, synthetic),
        ])
    return rows


def cpu_per_sample(measured: dict[str, Any]) -> str:
    """``12.3`` CPU milliseconds per sample, ``12.3 (workers 40%)`` with loader workers."""
    per_sample, workers = measured.get("cpu_seconds_per_sample"), measured.get("workers_cpu_share")
    if per_sample is None:
        return "-"
    return f"{per_sample * 1e3:,.3g}" + ("" if not workers else f" (workers {workers:.0%})")


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


GPU_HEADER = ("case", "mean GPU util", "peak memory", "mean power", "throttling", "flag")


def gpu_rows(results: Sequence[Result], min_utilization: float) -> list[list[str]]:
    """What the GPUs did during the measured windows (NVML), with under-used cases flagged."""
    rows = []
    for result in results:
        gpu = result.gpu
        if not gpu:
            continue
        utilization, memory, power = gpu["mean_utilization"], gpu["peak_memory_bytes"], gpu["mean_power_w"]
        low = utilization is not None and utilization < min_utilization
        rows.append([
            result.case, "-" if utilization is None else f"{utilization:.0%}",
            "-" if memory is None else f"{memory / 2**30:.1f} GiB", "-" if power is None else f"{power:.0f} W",
            ", ".join(gpu["throttle"]) or "none", f"LOW UTILISATION (< {min_utilization:.0%})" if low else "",
        ])
    return rows


SCALING_HEADER = ("family", "ranks", "samples/s", "speedup", "efficiency")


def scaling_family(result: Result) -> str | None:
    """The DDP-size family a case flavour belongs to (the family id ends in the flavour: -cpu, -gpu)."""
    return f"{result.family}-{result.case.rsplit('-', 1)[-1]}" if result.family else None


def scaling_families(results: Sequence[Result]) -> dict[str, dict[int, float]]:
    """Throughput by DDP size of each family measured at 1 rank and at least one more."""
    families: dict[str, dict[int, float]] = {}
    for result in results:
        throughput = result.measured.get("samples_per_second")
        family = scaling_family(result)
        if family and throughput:
            families.setdefault(family, {})[int(result.world_size)] = throughput
    return {family: dict(sorted(by_size.items())) for family, by_size in sorted(families.items())
            if len(by_size) >= 2 and 1 in by_size}


def scaling_rows(results: Sequence[Result]) -> list[list[str]]:
    """DDP-size families measured in this session: speedup = thr(N) / thr(1), efficiency = speedup / N."""
    rows = []
    for family, by_size in scaling_families(results).items():
        for size, throughput in by_size.items():
            speedup = throughput / by_size[1]
            rows.append([family, str(size), f"{throughput:,.1f}", f"{speedup:.2f}x", f"{speedup / size:.0%}"])
    return rows


KNOWN_HEADER = ("case", "against", "metric", "this machine", "theirs", "basis", "ratio")
HISTORY_HEADER = ("case", "metric", "results kept", "newest segment", "since the change point")


def history_rows(results: Sequence[Result]) -> list[list[str]]:
    """Where each case's newest result stands in its results history (``result.history``, --perf-history)."""
    rows = []
    for result in results:
        for standing in result.history:
            since = "no change point"
            if standing["since_commit"] is not None:
                since = (f"{standing['since_commit'][:10]}: {standing['change']:+.1%} (p {standing['pvalue']:.1e}, "
                         f"{standing['since']})")
            rows.append([result.case, standing["metric"], str(standing["results"]),
                         f"{standing['segment_results']} result(s), mean {standing['segment_mean']:,.4g} "
                         f"{standing['unit']}".rstrip(), since])
    return rows
KNOWN_HEADING = ("this machine against the ones we know (ratio > 1: this machine is faster; it informs, the verdicts "
                 "use this hardware class's own baselines)")


def known_rows(results: Sequence[Result]) -> list[list[str]]:
    """Each case against every other class's baseline of it and the matching published figures (perfgate/judge/known.py)."""
    return [[result.case, f"{row['kind']} {row['against']}", row["metric"], number(row["this"], row["unit"]),
             number(row["theirs"], row["unit"]), row["basis"], f"{row['ratio']:.2f}x"]
            for result in results for row in result.known]


def baselines_estimate_s(results: Sequence[Result], repeats: int) -> float:
    """How long measuring these cases' baselines takes: per case its first launch (which also counts FLOPs and
    runs the benchy phases) plus repeats - 1 of its later launches, from the launches just measured."""
    total = 0.0
    for result in results:
        launches = [run["time_s"]["total_s"] for run in result.per_run if run.get("time_s")]
        if launches:
            later = launches[1:] or launches
            total += launches[0] + (repeats - 1) * sum(later) / len(later)
    return total


def create_baselines_line(missing: Sequence[Result], settings: Settings, command: str | None) -> str:
    """The summary's last word when cases had no baseline: the one command that creates them, and how long."""
    seconds = baselines_estimate_s(missing, settings.baseline_repeats)
    command = command or "python -m pytest " + " ".join(shlex.quote(r.test) for r in missing) + " --update-baselines"
    estimate = f", about {clock(seconds)} (m:ss) from the launches just measured" if seconds else ""
    return (f"{len(missing)} case(s) have no baseline for hardware class {missing[0].hardware_class}: nothing was "
            f"gated for them. Create this machine's baselines ({settings.baseline_repeats} launches per case{estimate}), "
            f"review the diff and commit the files under {settings.baseline_dir}:\n  {command}")


@dataclass(frozen=True)
class Table:
    """One table of the summary: ``name`` says which (a renderer adds its own lines after some), ``heading`` what
    it shows, in the terminal's words."""

    name: str
    heading: str
    header: Sequence[str]
    rows: list[list[str]]


def title(results: Sequence[Result], settings: Settings) -> str:
    """What the session ran, on which hardware classes, and what an A/B session compared."""
    classes = sorted({r.hardware_class for r in results if r.hardware_class})
    text = f"perfgate: {len(results)} case(s), hardware class {', '.join(classes) or '-'}"
    paired = [r for r in results if r.reference]
    if paired:
        text += ab_title(paired)
    if settings.inject_slowdown:
        text += f", PLANTED SLOWDOWN {settings.inject_slowdown:.0%}"
    return text


def sections(results: Sequence[Result], settings: Settings) -> list[Table]:
    """Every table of the summary, in order, each with its rows (none where it has nothing to show)."""
    paired = [r for r in results if r.reference]
    return [
        Table("verdicts", "verdicts", VERDICT_HEADER, summary_rows([r for r in results if r.verdict != "updated"])),
        Table("budget", BUDGET_HEADING, BUDGET_HEADER, budget_rows(results)),
        Table("slower", SLOWER_HEADING, SLOWER_HEADER, slower_rows(results)),
        Table("ab", "A/B: pairs of launches (reference, candidate) and the time to each verdict", AB_HEADER,
              ab_rows(paired)),
        Table("updated", "baselines written (review the diff before committing)", UPDATE_HEADER,
              update_rows([r for r in results if r.verdict == "updated"])),
        Table("profile", "what each case achieved (medians over runs; IO / SYNTHETIC from the first run)",
              PROFILE_HEADER, profile_rows(results)),
        Table("gpus", "GPUs during the measured windows (NVML)", GPU_HEADER, gpu_rows(results, settings.min_gpu_util)),
        Table("scaling", "scaling over DDP size (efficiency = speedup / ranks)", SCALING_HEADER, scaling_rows(results)),
        Table("known", KNOWN_HEADING, KNOWN_HEADER, known_rows(results)),
        Table("history", "where each result stands in its history", HISTORY_HEADER, history_rows(results)),
        Table("time", TIME_HEADING, TIME_HEADER, time_rows(results)),
        Table("startup", STARTUP_HEADING, STARTUP_HEADER, startup_rows(results)),
    ]
