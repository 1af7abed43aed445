"""A case's baseline values across the git history of the baseline directory (``perfgate baseline-log``).

Every commit that changed a baseline file contributes that file's values as committed then, so a
reviewer sees the trend that led to today's number: a table per case, hardware class and metric
(with the change from the previous commit), and a PNG with one line per case and class.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from perfgate.git import GitError, git
from perfgate.judge import baselines
from perfgate.report import plots


class BaselineLogError(Exception):
    """The baselines' git history cannot be read (not a git checkout, no such cases); the message says what to do."""


@dataclass(frozen=True)
class LoggedValue:
    """One committed value of one metric of a baseline file."""

    date: str
    commit: str
    subject: str
    hardware_class: str
    case: str
    metric: str
    value: float
    unit: str
    tolerance: float

    @property
    def series(self) -> tuple[str, str, str]:
        return self.case, self.hardware_class, self.metric


def points(baseline_dir: Path, patterns: Sequence[str] = ()) -> list[LoggedValue]:
    """The committed values of every baseline file under ``baseline_dir`` whose case matches a pattern
    (a case id or a glob; none: every case), oldest first."""
    baseline_dir = baseline_dir.resolve()
    try:
        root = Path(git(baseline_dir if baseline_dir.is_dir() else Path.cwd(), "rev-parse", "--show-toplevel"))
    except GitError:
        raise BaselineLogError(f"{baseline_dir} is not in a git checkout: the history of baselines is their git history")
    where = baseline_dir.relative_to(root).as_posix()
    try:
        log = git(root, "log", "--reverse", "--format=%x00%H%x09%cI%x09%s", "--name-only", "--", where)
    except GitError as exc:
        raise BaselineLogError(f"the git history of {where} was not read: {exc}") from None
    found = []
    for entry in log.split("\x00")[1:]:
        header, *files = entry.strip("\n").split("\n")
        commit, date, subject = header.split("\t", 2)
        for name in files:
            path = Path(name)
            if path.suffix != ".json" or (patterns and not any(fnmatch.fnmatchcase(path.stem, p) for p in patterns)):
                continue
            found.extend(_file_points(root, commit, date, subject, name))
    return found


def _file_points(root: Path, commit: str, date: str, subject: str, name: str) -> list[LoggedValue]:
    try:
        baseline = baselines.parse(json.loads(git(root, "show", f"{commit}:{name}")), f"{name} at {commit[:12]}")
    except (GitError, ValueError, baselines.BaselineError):
        return []
    return [LoggedValue(date, commit, subject, baseline.hardware_class, baseline.case, metric, ref.value, ref.unit,
                  ref.tolerance) for metric, ref in baseline.metrics.items()]


def table_rows(found: Sequence[LoggedValue]) -> list[list[str]]:
    """One row per committed value, grouped by case, class and metric, with the change from the one before; a commit
    that left the value and tolerance as they were (one that stored sessions beside them) adds no row."""
    rows = []
    for series in sorted({p.series for p in found}):
        previous = None
        for point in (p for p in found if p.series == series):
            if previous is not None and (point.value, point.tolerance) == (previous.value, previous.tolerance):
                continue
            change = "-" if previous is None else f"{point.value / previous.value - 1:+.1%}"
            rows.append([point.case, point.hardware_class, point.metric, point.date[:16].replace("T", " "), point.commit[:12],
                         f"{point.value:,.4g} {point.unit}".strip(), change, f"{point.tolerance:.1%}",
                         point.subject[:50]])
            previous = point
    return rows


HEADER = ("case", "hardware class", "metric", "date", "commit", "value", "change", "tolerance", "commit message")


def figure(found: Sequence[LoggedValue]) -> Any:
    """One axis per metric, one line per case and hardware class, values against commit date."""
    from datetime import datetime

    metrics = sorted({p.metric for p in found})
    fig, axes = plots.panels(len(metrics), 3.6)
    for ax, metric in zip(axes, metrics):
        for case, hardware_class, _ in sorted({p.series for p in found if p.metric == metric}):
            mine = [p for p in found if p.series == (case, hardware_class, metric)]
            ax.plot([datetime.fromisoformat(p.date) for p in mine], [p.value for p in mine], marker="o",
                    label=plots.series_label(case, hardware_class))
        values = [p.value for p in found if p.metric == metric]
        if max(values) > 20 * min(values):
            ax.set_yscale("log")
        unit = next(p.unit for p in found if p.metric == metric)
        ax.set_ylabel(f"{metric} ({unit or '-'})")
        ax.set_xlabel("commit date")
        ax.legend(fontsize="small")
        ax.set_title(f"baseline history of {metric}", fontsize="medium")
    cases = sorted({p.case for p in found})
    fig.suptitle(f"baselines across git history: {', '.join(cases) if len(cases) <= 3 else f'{len(cases)} cases'}")
    fig.autofmt_xdate()
    return fig
