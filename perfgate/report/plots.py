"""Pictures of a session's results, drawn with matplotlib (``--perf-report``).

Per case: the step-time timeline of its runs (warm-up shaded, measured window marked) and its runs
against the baseline's runs with the tolerance band. Per DDP family: the scaling curve. Per GPU case:
utilisation and power over the measured window. Every figure has a title naming the case (or family),
and axis labels with units. Figures are built with matplotlib's object API (no pyplot state), so this
works headless and from any thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from perfgate.report import tables
from perfgate.result import Result

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WIDTH, HEIGHT = 9.0, 4.8


def _figure(rows: int = 1, columns: int = 1, height: float = HEIGHT) -> tuple[Figure, Any]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH, height), layout="constrained")
    return figure, figure.subplots(rows, columns, squeeze=False)


def panels(count: int, height_each: float = 3.2) -> tuple[Figure, list[Any]]:
    """A figure of ``count`` panels stacked, one per series or metric (``perfgate history`` and ``trend``)."""
    figure, axes = _figure(count, 1, height=height_each * count)
    return figure, list(axes[:, 0])


def series_label(case: str, hardware_class: str, metric: str | None = None) -> str:
    """How a series is named wherever it is shown: ``case @ hardware class`` (``: metric``)."""
    return f"{case} @ {hardware_class}" + (f": {metric}" if metric else "")


def _reference_name(result: Result) -> str:
    return result.reference["revision"] if result.reference else "baseline"


def timeline(result: Result) -> Figure | None:
    """Step time against step number for every run (an A/B reference's runs dashed); None without steps."""
    runs = result.per_run
    if not runs:
        return None
    figure, axes = _figure()
    ax = axes[0][0]
    warmup = int(runs[0]["metrics"].get("warmup_steps") or 0)
    steps = max(len(run["step_times_s"]) for run in runs)
    ax.axvspan(-0.5, warmup - 0.5, color="0.85", label=f"warm-up ({warmup} steps, excluded)")
    ax.axvline(warmup - 0.5, color="0.3", linestyle=":", linewidth=1)
    ax.axvline(steps - 0.5, color="0.3", linestyle=":", linewidth=1, label="measured window")
    for run in runs:
        ax.plot([t * 1000 for t in run["step_times_s"]], marker=".", linewidth=1, label=f"run {run['run'] + 1}")
    for run in (result.reference or {}).get("per_run", []):
        ax.plot([t * 1000 for t in run["step_times_s"]], color="0.5", linestyle="--", linewidth=1,
                label=f"{_reference_name(result)} run {run['run'] + 1}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{result.case}: step times of {len(runs)} run(s) ({result.verdict})")
    ax.legend(fontsize="small", ncols=2)
    return figure


def against_baseline(result: Result) -> Figure | None:
    """Per gated metric, this session's runs beside the baseline's (or the A/B reference's) runs, with the
    band the tolerance allows around the baseline's median; None if no metric has run values."""
    rows = [row for row in result.metrics if row.get("run_values")]
    if not rows:
        return None
    figure, axes = _figure(1, len(rows))
    reference, ab = _reference_name(result), bool(result.reference)
    for ax, row in zip(axes[0], rows):
        unit = row.get("unit") or "-"
        center = row.get("baseline") if row.get("baseline_runs") else row.get("measured")
        tolerance = row.get("tolerance")
        if center is not None and tolerance is not None:
            if row.get("baseline_runs"):
                kind = f"{reference} median" if ab else "baseline"
            else:
                kind = "new baseline"
            ax.axhspan(center * (1 - tolerance), center * (1 + tolerance), color="tab:green", alpha=0.15,
                       label=f"{kind} ± tolerance ({tolerance:.1%})")
            ax.axhline(center, color="tab:green", linewidth=1)
        labels = []
        reference_label = f"{reference} runs"
        if row.get("verdict") == "no-baseline":
            reference_label = f"no {reference}\nfor this class"
        for x, (name, values, color) in enumerate(((reference_label, row.get("baseline_runs") or [], "0.4"),
                                                   ("this session's runs", row["run_values"], "tab:blue"))):
            if values:
                spread = [x + (i - (len(values) - 1) / 2) * 0.04 for i in range(len(values))]
                ax.scatter(spread, values, color=color, zorder=3)
            labels.append(name)
        ax.set_xticks([0, 1], labels)
        ax.set_xlim(-0.6, 1.6)
        ax.set_xlabel("one point per torchrun launch")
        ax.set_ylabel(f"{row['metric']} ({unit})")
        ax.set_title(f"{row['metric']}: {row.get('verdict', result.verdict)}", fontsize="medium")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    against = f"{reference} (A/B, measured beside them)" if ab else "the baseline"
    figure.suptitle(f"{result.case}: runs against {against}")
    return figure


def scaling(family: str, by_size: dict[int, float], cases: Sequence[str]) -> Figure:
    """Throughput against DDP ranks with the ideal (linear) line, and the efficiency on a second axis."""
    figure, axes = _figure()
    ax = axes[0][0]
    sizes = sorted(by_size)
    throughput = [by_size[n] for n in sizes]
    ax.plot(sizes, [by_size[1] * n for n in sizes], color="0.5", linestyle="--", label="ideal (linear)")
    ax.plot(sizes, throughput, marker="o", color="tab:blue", label="measured throughput")
    ax.set_xticks(sizes)
    ax.set_xlabel("DDP ranks")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(bottom=0)
    efficiency = ax.twinx()
    efficiency.plot(sizes, [100 * by_size[n] / (by_size[1] * n) for n in sizes], marker="s", color="tab:orange",
                    label="efficiency")
    efficiency.set_ylabel("efficiency = speedup / ranks (%)")
    efficiency.set_ylim(0, 110)
    handles = ax.get_legend_handles_labels()
    more = efficiency.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize="small", loc="lower right")
    ax.set_title(f"{family}: scaling over DDP size\ncases: {', '.join(cases)}", fontsize="medium")
    return figure


def gpu(result: Result) -> Figure | None:
    """Each GPU's utilisation and power over each run's measured window (NVML samples); None without samples."""
    runs = [run for run in result.per_run if run.get("gpu_samples")]
    if not runs:
        return None
    figure, axes = _figure(2, 1, height=HEIGHT * 1.3)
    utilization, power = axes[0][0], axes[1][0]
    for run in runs:
        for index in sorted({s["gpu"] for s in run["gpu_samples"]}):
            mine = [s for s in run["gpu_samples"] if s["gpu"] == index]
            label = f"run {run['run'] + 1}, GPU {index}"
            utilization.plot([s["t_s"] for s in mine if s["utilization"] is not None],
                             [100 * s["utilization"] for s in mine if s["utilization"] is not None], label=label)
            power.plot([s["t_s"] for s in mine if s["power_w"] is not None],
                       [s["power_w"] for s in mine if s["power_w"] is not None], label=label)
    utilization.set_ylabel("GPU utilisation (%)")
    utilization.set_ylim(0, 105)
    utilization.set_title(f"{result.case}: GPU utilisation and power over the measured window")
    power.set_ylabel("power (W)")
    power.set_ylim(bottom=0)
    power.set_xlabel("time since the measured window opened (s)")
    utilization.legend(fontsize="small", ncols=2)
    return figure


def draw(results: Sequence[Result], directory: Path) -> dict[str, list[str]]:
    """Draws every picture the results allow into ``directory``; returns subject -> PNG names."""
    directory.mkdir(parents=True, exist_ok=True)
    pictures: dict[str, list[str]] = {}

    def save(subject: str, name: str, figure: Figure | None) -> None:
        if figure is not None:
            figure.savefig(directory / name, dpi=100)
            pictures.setdefault(subject, []).append(name)

    for result in sorted(results, key=lambda r: r.case):
        case = result.case
        save(case, f"{case}-timeline.png", timeline(result))
        save(case, f"{case}-runs.png", against_baseline(result))
        save(case, f"{case}-gpu.png", gpu(result))
    for family, by_size in tables.scaling_families(results).items():
        cases = sorted(r.case for r in results if tables.scaling_family(r) == family)
        save(family, f"{family}-scaling.png", scaling(family, by_size, cases))
    return pictures
