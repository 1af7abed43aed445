"""What the user sees at the end of a session: the summary's tables (report/tables.py) on the terminal, and each
case in JUnit properties. Results go to every ``ResultSink`` the session has."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from perfgate.report.tables import (VERDICT_HEADER, create_baselines_line, environment_lines, number, sections, title,
                                    window_share_line)
from perfgate.result import Result

if TYPE_CHECKING:
    from perfgate.config.settings import Settings


def table(rows: list[list[str]], header: Sequence[str] = VERDICT_HEADER) -> list[str]:
    """Rows under their header, each column as wide as its widest cell."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths)).rstrip()

    return [fmt(header), fmt(["-" * w for w in widths]), *(fmt(row) for row in rows)]


def junit_properties(result: Result) -> list[tuple[str, str]]:
    """What CI systems show of a case from JUnit XML: its verdict and, per gated metric, the measured and
    baseline values, the change and the tolerance; then each warning it gave."""
    properties = [("perfgate.verdict", result.verdict), ("perfgate.hardware_class", result.hardware_class)]
    if result.budget_stop:
        properties.append(("perfgate.budget", result.budget_stop))
    for row in result.metrics:
        name = f"perfgate.{row['metric']}"
        properties.append((name, number(row.get("measured"), row.get("unit", ""))))
        if row.get("baseline") is not None:
            properties.append((f"{name}.baseline", number(row["baseline"], row.get("unit", ""))))
        if row.get("change") is not None:
            properties.append((f"{name}.change", f"{row['change']:+.1%}"))
        if row.get("tolerance") is not None:
            properties.append((f"{name}.tolerance", f"{row['tolerance']:.1%}"))
        properties.append((f"{name}.verdict", row.get("verdict", result.verdict)))
    properties += [("perfgate.warning", f"{warned['category']}: {warned['message']}") for warned in result.warnings]
    return properties


class ResultSink(Protocol):
    """Where a session's case results go once every case has run."""

    def write(self, results: Sequence[Result], settings: Settings) -> None: ...


class TerminalSummary:
    """The tables at the end of a pytest run: verdicts, baselines written, what each case achieved, the GPUs,
    scaling, and what was not gated. ``write_line(text, **markup)`` is the terminal reporter's."""

    def __init__(self, section: Callable[[str], None], write_line: Callable[..., None],
                 create_baselines: str | None = None) -> None:
        self._section = section
        self._line = write_line
        self._create_baselines = create_baselines
        """The command that creates missing baselines, where the caller knows a better one than pytest's."""

    def write(self, results: Sequence[Result], settings: Settings) -> None:
        if not results:
            return
        results = sorted(results, key=lambda r: r.case)
        self._section(title(results, settings))
        paired = [r for r in results if r.reference]
        for line in environment_lines(paired) if paired else ():
            self._line(line)
        for shown in sections(results, settings):
            if not shown.rows or shown.name == "history":  # the history recorder shows it, once it has recorded
                continue
            if shown.name != "verdicts":
                self._line(f"{shown.heading}:")
            self._table(shown.rows, shown.header)
            if shown.name == "updated":
                self._written([r for r in results if r.verdict == "updated"])
        share = window_share_line(results)
        if share:
            self._line(share)
        missing = [r for r in results if r.verdict == "no-baseline"]
        if missing:
            for line in create_baselines_line(missing, settings, self._create_baselines).splitlines():
                self._line(line, yellow=True)

    def _written(self, updated: Sequence[Result]) -> None:
        for result in updated:
            self._line(f"wrote {result.baseline_file}")
            if result.disturbed_runs:
                self._line(f"  {result.disturbed_runs} disturbed run(s) left out and re-measured (far slower "
                           "than the others: a slow spell of the machine); they are listed in the file's provenance",
                           yellow=True)

    def _table(self, rows: list[list[str]], header: Sequence[str] | None = None) -> None:
        for line in table(rows, header) if header else table(rows):
            self._line(line)
