"""The summary's tables in GitHub-flavoured markdown, for ``summary.md`` and a CI job's step summary: the same
tables as the terminal's (report/tables.py), so both say the same thing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from perfgate.report.tables import create_baselines_line, environment_lines, sections, title, window_share_line
from perfgate.result import Result

if TYPE_CHECKING:
    from perfgate.config.settings import Settings

def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    """A markdown table; a cell's pipes are escaped and its newlines flattened, so every row has the header's columns."""

    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|").replace("\n", " ") for v in values) + " |"

    return [cells(header), "|" + "---|" * len(header), *(cells(row) for row in rows)]


def folded(heading: str, text: str) -> list[str]:
    """``text`` verbatim under a ``heading`` that unfolds it."""
    return [f"<details><summary>{heading}</summary>", "", "```", text, "```", "", "</details>", ""]


def verdict_line(results: Sequence[Result]) -> str:
    counts: dict[str, int] = {}
    for result in results:
        counts[result.verdict] = counts.get(result.verdict, 0) + 1
    return "**Verdicts:** " + ", ".join(f"{count} {verdict}" for verdict, count in sorted(counts.items()))


def summary(results: Sequence[Result], settings: Settings,
            pictures: dict[str, list[str]] | None = None, create_baselines: str | None = None) -> str:
    """The whole summary: the terminal's tables (report/tables.py), each under its heading; each failure's message
    and each case's warnings (a pass or an unresolved verdict says why there);
    ``pictures`` (case or family -> relative PNG paths) linked under their own heading; it ends with the command
    that creates missing baselines."""
    results = sorted(results, key=lambda r: r.case)
    lines = [f"## {title(results, settings)}", "", verdict_line(results), ""]
    paired = [r for r in results if r.reference]
    if paired and environment_lines(paired):
        lines += [*(f"- {line}" for line in environment_lines(paired)), ""]
    for shown in sections(results, settings):
        if shown.rows:
            lines += [f"### {shown.heading[0].upper()}{shown.heading[1:]}", "", *table(shown.rows, shown.header), ""]
    share = window_share_line(results)
    if share:
        lines += [f"**{share[0].upper()}{share[1:]}**", ""]
    for result in results:
        if result.message:
            lines += folded(f"{result.case}: {result.verdict}", result.message)
        for warned in result.warnings:
            lines += folded(f"{result.case}: {result.verdict}, {warned['category']}", warned["message"])
    if pictures:
        lines += ["### Plots", ""]
        for subject, paths in sorted(pictures.items()):
            lines += [f"**{subject}**", "", *(f"![{subject}: {path}]({path})" for path in paths), ""]
    missing = [r for r in results if r.verdict == "no-baseline"]
    if missing:
        text, command = create_baselines_line(missing, settings, create_baselines).split("\n")
        lines += [f"**{text}**", "", "```", command.strip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"
