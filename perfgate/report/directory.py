"""``--perf-report DIR``: the summary as markdown with its plots, for people reading results in CI and review.

DIR gets ``summary.md`` (linking the PNGs beside it) and the PNGs. When ``$GITHUB_STEP_SUMMARY`` is
set, the same markdown, less the pictures (a job summary cannot show files of the job), is appended
to it, ending with where the plots are.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from perfgate.report import markdown, plots
from perfgate.result import Result

if TYPE_CHECKING:
    from perfgate.config.settings import Settings


class ReportDirectory:
    """A ResultSink writing DIR/summary.md and DIR/*.png, and appending to the CI step summary."""

    def __init__(self, directory: Path, step_summary: str | None = None, create_baselines: str | None = None) -> None:
        self.directory = directory
        self.step_summary = Path(step_summary) if step_summary else None
        self.create_baselines = create_baselines

    def write(self, results: Sequence[Result], settings: Settings) -> None:
        if not results:
            return
        pictures = plots.draw(results, self.directory)
        (self.directory / "summary.md").write_text(markdown.summary(results, settings, pictures,
                                                                    self.create_baselines))
        if self.step_summary is not None:
            count = sum(len(names) for names in pictures.values())
            with self.step_summary.open("a") as out:
                out.write(markdown.summary(results, settings, create_baselines=self.create_baselines)
                          + f"\n{count} plot(s) and summary.md in "
                          f"`{self.directory}` (keep it as a job artifact)\n\n")
