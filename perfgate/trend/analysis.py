"""Each series of the results database (case x hardware class x metric) cut at its change points, and what the
newest segment means: a regression, an improvement, or nothing new."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from perfgate.measure.metrics import METRICS
from perfgate.report.plots import panels, series_label
from perfgate.trend.changepoints import ChangePoint, change_points, segments
from perfgate.trend.database import Point


@dataclass(frozen=True)
class Series:
    case: str
    hardware_class: str
    metric: str
    points: tuple[Point, ...]
    changes: tuple[ChangePoint, ...]

    @property
    def name(self) -> str:
        return series_label(self.case, self.hardware_class, self.metric)

    @property
    def values(self) -> list[float]:
        return [point.value for point in self.points]

    @property
    def higher_is_better(self) -> bool:
        info = METRICS.get(self.metric)
        return info is None or info.better == "higher"

    @property
    def unit(self) -> str:
        info = METRICS.get(self.metric)
        return info.unit if info else ""

    def worse(self, change: ChangePoint) -> bool:
        return (change.after < change.before) == self.higher_is_better

    @property
    def newest_regression(self) -> ChangePoint | None:
        """The change point that starts the newest segment, when that segment is worse than the one before."""
        if self.changes and self.worse(self.changes[-1]):
            return self.changes[-1]
        return None

    def segments(self) -> list[tuple[int, int, float]]:
        return segments(self.values, [change.index for change in self.changes])


def series(points: Sequence[Point], **options: Any) -> list[Series]:
    """Every series in ``points`` (oldest first), with its change points (``options``: change_points's). A series
    holds the results of its newest workload version only, as the gate compares a case only with a baseline of its
    version: a workload that measures other work makes a step that is no regression."""
    grouped: dict[tuple[str, str, str], list[Point]] = {}
    for point in points:
        grouped.setdefault(point.series, []).append(point)
    found = {key: same_work(kept) for key, kept in grouped.items()}
    return [Series(*key, tuple(kept), tuple(change_points([p.value for p in kept], **options)))
            for key, kept in sorted(found.items())]


def same_work(points: Sequence[Point]) -> list[Point]:
    """The points of the newest workload version, and those whose version is unknown (kept before it was)."""
    versions = [point.workload_version for point in points if point.workload_version is not None]
    newest = versions[-1] if versions else None
    return [point for point in points if point.workload_version in (None, newest)]


def change_rows(found: Sequence[Series]) -> list[list[str]]:
    """One row per change point: where (result number, date, commit), the means before and after, the change."""
    rows = []
    for one in found:
        for change in one.changes:
            point = one.points[change.index]
            rows.append([one.case, one.hardware_class, one.metric, f"#{change.index + 1} of {len(one.points)}",
                         point.recorded_at.strftime("%Y-%m-%d %H:%M"), (point.commit or "-")[:12],
                         f"{change.before:,.4g} -> {change.after:,.4g} {one.unit}".strip(), f"{change.change:+.1%}",
                         f"{change.pvalue:.1e}", "regression" if one.worse(change) else "improvement"])
    return rows


CHANGE_HEADER = ("case", "hardware class", "metric", "result", "date", "commit", "mean before -> after", "change", "p",
                 "direction")


def figure(found: Sequence[Series]) -> Any:
    """One axis per series: its results in order, each segment's mean, and a dashed line at each change point
    labelled with the commit of its first result."""
    fig, axes = panels(len(found))
    for ax, one in zip(axes, found):
        ax.plot(range(1, len(one.points) + 1), one.values, marker="o", linestyle="-", linewidth=0.8,
                label="results")
        for start, end, mean in one.segments():
            ax.hlines(mean, start + 0.5, end + 0.5, colors="tab:orange", linewidth=2)
        for change in one.changes:
            colour = "tab:red" if one.worse(change) else "tab:green"
            ax.axvline(change.index + 0.5, color=colour, linestyle="--")
            ax.annotate(f"{(one.points[change.index].commit or '?')[:8]} {change.change:+.1%}",
                        (change.index + 0.5, ax.get_ylim()[1]), fontsize="small", color=colour, va="top")
        ax.set_title(one.name, fontsize="medium")
        ax.set_xlabel("result (oldest first)")
        ax.set_ylabel(f"{one.metric} ({one.unit or '-'})", fontsize="small")
    fig.suptitle("results history: change points (dashed; red worse, green better) and segment means (orange)")
    return fig
