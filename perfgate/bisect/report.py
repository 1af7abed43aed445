"""What ``perfgate bisect`` prints and draws: the first bad commit, its change against its parent, every commit
measured, and (``--perf-report DIR``) a plot per case of each commit's medians in first-parent order."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from perfgate.report.terminal import table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from perfgate.bisect.commits import Commit
    from perfgate.bisect.search import Measured, Step

HEADER = ("commit", "subject", "against", "pairs", "change", "CI", "class")


def change_of(row: dict[str, Any]) -> str:
    low, high = row.get("ci") or (None, None)
    interval = "" if low is None else f" [CI {low:+.1%}..{high:+.1%}]"
    return f"{row['metric']} {row['change']:+.1%}{interval}"


def changes(rows: Sequence[dict[str, Any]]) -> str:
    return ", ".join(change_of(row) for row in rows if row.get("change") is not None)


def table_rows(commits: Sequence[Commit], steps: Sequence[Step], measured: Sequence[Measured],
               classes: dict[int, str]) -> list[list[str]]:
    """One row per verdict, in the order they were taken; change and CI of the first blamed metric."""
    rows = []
    for entry in measured:
        row = entry.row(steps[0].metric) if steps else None
        commit = commits[entry.index]
        low, high = (row or {}).get("ci") or (None, None)
        rows.append([commit.short, commit.subject[:40], commits[entry.against].short, str(entry.pairs),
                     "-" if row is None or row.get("change") is None else f"{row['change']:+.1%}",
                     "-" if low is None else f"{low:+.1%}..{high:+.1%}",
                     classes.get(entry.index, entry.verdict)])
    return rows


def answer(case: str, commits: Sequence[Commit], steps: Sequence[Step], measured: Sequence[Measured],
           classes: dict[int, str], suspects: Sequence[int], culprit: int | None) -> list[str]:
    lines = [f"\n{case}: {steps[0].metric if steps else ''} per verdict"]
    lines += table(table_rows(commits, steps, measured, classes), HEADER)
    if culprit is None:
        lines.append(f"{case}: the first bad commit is one of {', '.join(commits[i].short for i in suspects)} "
                     "(the others could not be measured: see their verdicts' logs)")
        return lines
    commit = commits[culprit]
    lines += [f"{case}: first bad commit {commit.sha}", f"  subject: {commit.subject}",
              f"  author:  {commit.author}", f"  date:    {commit.date}"]
    parent = next((m for m in reversed(measured) if m.index == culprit and m.against == culprit - 1), None)
    if parent is not None:
        lines.append(f"  against its parent {commits[culprit - 1].short}: {changes(parent.rows)}")
    else:
        lines.append(f"  its parent {commits[culprit - 1].short} could not be measured; against the last good "
                     f"commit: {changes(next(m for m in reversed(measured) if m.index == culprit).rows)}")
    return lines


def figure(case: str, commits: Sequence[Commit], step: Step, measured: Sequence[Measured],
           classes: dict[int, str]) -> Figure:
    """The blamed metric's median of every commit measured, in first-parent order: both sides of every verdict."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 4.8), layout="constrained")
    ax = fig.subplots()
    colours = {"good": "tab:green", "bad": "tab:red", "skip": "0.6"}
    seen: dict[int, list[float]] = {}
    for entry in measured:
        row = entry.row(step.metric)
        if row is None:
            continue
        for index, value in ((entry.index, row.get("measured")), (entry.against, row.get("baseline"))):
            if value is not None:
                seen.setdefault(index, []).append(value)
    for index, values in sorted(seen.items()):
        ax.scatter([index] * len(values), values, color=colours.get(classes.get(index, ""), "tab:blue"), zorder=3)
    for index in (i for i, verdict in classes.items() if verdict == "skip"):
        ax.axvline(index, color=colours["skip"], linestyle=":", label="skipped (did not run)")
    ax.set_xticks(range(len(commits)), [c.short[:7] for c in commits], rotation=60, fontsize="small")
    ax.set_xlabel("first-parent commit, GOOD to BAD (green good, red bad, grey skipped)")
    ax.set_ylabel(f"{step.metric}\n(median of a verdict's runs)", fontsize="small")
    ax.set_title(f"{case}: bisect of {len(commits) - 1} commit(s)")
    return fig


def write_report(directory: Path, answers: Sequence[tuple[Any, ...]], lines: Sequence[str]) -> Path:
    """DIR/bisect.md with every case's answer (``answer``'s arguments) and a PNG per case; returns the markdown's
    path."""
    directory.mkdir(parents=True, exist_ok=True)
    text = ["# perfgate bisect", "", *[f"- {line}" for line in lines], ""]
    for case, commits, steps, measured, classes, suspects, culprit in answers:
        text += ["```", *answer(case, commits, steps, measured, classes, suspects, culprit), "```", ""]
        if steps:
            png = directory / f"bisect-{case}.png"
            figure(case, commits, steps[0], measured, classes).savefig(png, dpi=100)
            text += [f"![{case}]({png.name})", ""]
    path = directory / "bisect.md"
    path.write_text("\n".join(text) + "\n")
    return path
