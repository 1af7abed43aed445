"""``--perf-history URL``: the session's results kept in the results database, beside every earlier session's.

A database that cannot be written (unreachable, locked past its timeout, someone else's) costs the history one
session, never the verdicts: the problem is a warning, and the gate's outcome stands.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from perfgate.git import branch
from perfgate.launch import environment
from perfgate.launch.hardware import git_commit
from perfgate.report.tables import HISTORY_HEADER, history_rows
from perfgate.report.terminal import table
from perfgate.result import Result
from perfgate.trend.analysis import Series, series
from perfgate.trend.database import Context, DatabaseError, ResultsDatabase

if TYPE_CHECKING:
    from perfgate.config.settings import Settings


def standing(one: Series) -> dict[str, Any]:
    """Where the newest result of a series stands: its segment, and the change point that began it."""
    start, end, mean = one.segments()[-1]
    change = one.changes[-1] if one.changes else None
    first = one.points[start]
    return {"metric": one.metric, "unit": one.unit, "results": len(one.points), "segment_results": end - start,
            "segment_mean": mean, "since_commit": (first.commit or "?") if change else None,
            "since": f"{first.recorded_at:%Y-%m-%d %H:%M}", "change": change.change if change else None,
            "pvalue": change.pvalue if change else None}


class HistoryRecorder:
    """A ResultSink: every result of the session into ``url``, then each one's standing in its history set as
    ``result.history`` for the sinks after it; ``say(text, warning)`` reports what happened."""

    def __init__(self, url: str, root: Path, say: Callable[[str, bool], None],
                 session_environment: dict[str, Any] | None) -> None:
        self.url = url
        self.root = root
        self.say = say
        self.environment = session_environment

    def write(self, results: Sequence[Result], settings: Settings) -> None:
        if not results:
            return
        commit = git_commit(self.root)
        context = Context(session=uuid.uuid4().hex, commit=None if commit == "unknown" else commit,
                          branch=branch(self.root), launcher=settings.launcher,
                          nodes=len(settings.hosts) if settings.hosts else settings.nodes,
                          environment=self.environment or environment.describe())
        try:
            database = ResultsDatabase(self.url)
            try:
                written = database.record(results, context)
                for result in results:
                    points = [p for p in database.points([result.case], result.hardware_class) if p.gated]
                    result.history = [standing(one) for one in series(points)]
            finally:
                database.close()
        except DatabaseError as exc:
            self.say(f"perfgate: WARNING: the results were not kept: {exc}. The verdicts above stand.", True)
            return
        self.say(f"perfgate: kept {written} result(s) in {database.shown}", False)
        for line in table(history_rows(results), HISTORY_HEADER):
            self.say(line, False)
