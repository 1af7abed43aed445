"""The summary's tables in GitHub-flavoured markdown, for ``summary.md`` and a CI job's step summary.

The rows are the terminal summary's (terminal.py), so both say the same thing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from perfgate.report import terminal

if TYPE_CHECKING:
    from perfgate.config.settings import Settings

VERDICT_HEADER = ("case", "metric", "measured", "baseline", "change", "verdict")


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    """A markdown table; a cell's pipes are escaped and its newlines flattened, so every row has the header's columns."""

    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|").replace("\n", " ") for v in values) + " |"

    return [cells(header), "|" + "---|" * len(header), *(cells(row) for row in rows)]


def title(results: Sequence[dict[str, Any]], settings: Settings) -> str:
    classes = sorted({r["hardware_class"] for r in results if r.get("hardware_class")})
    text = f"perfgate: {len(results)} case(s) on {', '.join(classes) or '-'}"
    paired = [r for r in results if r.get("reference")]
    if paired:
        text += terminal.ab_title(paired)
    if settings.inject_slowdown:
        text += f", PLANTED SLOWDOWN {settings.inject_slowdown:.0%}"
    return text


def verdict_line(results: Sequence[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for result in results:
        counts[result["verdict"]] = counts.get(result["verdict"], 0) + 1
    return "**Verdicts:** " + ", ".join(f"{count} {verdict}" for verdict, count in sorted(counts.items()))


def summary(results: Sequence[dict[str, Any]], settings: Settings,
            pictures: dict[str, list[str]] | None = None, create_baselines: str | None = None) -> str:
    """The whole summary: verdicts, baselines written, profile, GPUs, scaling, this machine against the known
    ones; ``pictures`` (case or family -> relative PNG paths) are linked under their own heading; it ends with
    the command that creates missing baselines."""
    results = sorted(results, key=lambda r: r["case"])
    lines = [f"## {title(results, settings)}", "", verdict_line(results), ""]
    judged = [r for r in results if r["verdict"] != "updated"]
    updated = [r for r in results if r["verdict"] == "updated"]
    paired = [r for r in results if r.get("reference")]
    if paired and terminal.environment_lines(paired):
        lines += [*(f"- {line}" for line in terminal.environment_lines(paired)), ""]
    sections = [
        ("Verdicts", terminal.summary_rows(judged), VERDICT_HEADER),
        ("A/B pairs and time to verdict", terminal.ab_rows(paired), terminal.AB_HEADER),
        ("Baselines written (review the diff before committing)", terminal.update_rows(updated), terminal.UPDATE_HEADER),
        ("What each case achieved", terminal.profile_rows(results), terminal.PROFILE_HEADER),
        ("GPUs during the measured windows (NVML)", terminal.gpu_rows(results, settings.min_gpu_util), terminal.GPU_HEADER),
        ("Scaling over DDP size", terminal.scaling_rows(results), terminal.SCALING_HEADER),
        ("This machine against the ones we know", terminal.known_rows(results), terminal.KNOWN_HEADER),
        ("Where each result stands in its history", terminal.history_rows(results), terminal.HISTORY_HEADER),
        ("Where the launches' time went", terminal.time_rows(results), terminal.TIME_HEADER),
    ]
    for heading, rows, header in sections:
        if rows:
            lines += [f"### {heading}", "", *table(rows, header), ""]
    share = terminal.window_share_line(results)
    if share:
        lines += [f"**{share[0].upper()}{share[1:]}**", ""]
    for result in results:
        if result.get("message"):
            lines += [f"<details><summary>{result['case']}: {result['verdict']}</summary>", "", "```",
                      result["message"], "```", "", "</details>", ""]
    if pictures:
        lines += ["### Plots", ""]
        for subject, paths in sorted(pictures.items()):
            lines += [f"**{subject}**", "", *(f"![{subject}: {path}]({path})" for path in paths), ""]
    missing = [r for r in results if r["verdict"] == "no-baseline"]
    if missing:
        text, command = terminal.create_baselines_line(missing, settings, create_baselines).split("\n")
        lines += [f"**{text}**", "", "```", command.strip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"
