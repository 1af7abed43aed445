"""Each gated metric's spread between the sessions a results database holds, for the gate (judge.session_spread).

The sessions counted are this case's on this hardware class, at its workload version, that passed (or were
stale), without a planted slowdown and not measured beside an A/B reference (whose cores it shared), since the newest
change point: a step in the history is a change of the code or the machine, not noise.
"""

from __future__ import annotations

from typing import Sequence

from perfgate.judge.session_spread import SessionSpread
from perfgate.trend.analysis import series
from perfgate.trend.database import NoDatabase, Point, ResultsDatabase

PLANT = "planted_fraction"
"""The metric that a result measured with a planted slowdown has."""
ACCEPTED = ("pass", "stale")
"""The verdicts of the sessions counted: those the gate let through. A regression that stays, FAILing or left
unresolved session after session, must not become the sessions' median and pass."""


def learn(url: str, case: str, hardware_class: str, workload_version: str, metrics: Sequence[str],
          branch: str | None = None) -> dict[str, SessionSpread]:
    """The spreads of ``metrics`` in the database at ``url`` (from the sessions on ``branch`` where given); none where
    it holds nothing yet; DatabaseError where it cannot be read. Opened as a reader: the session's recorder makes it,
    at the end."""
    try:
        database = ResultsDatabase(url, create=False)
    except NoDatabase:
        return {}
    try:
        points = database.points([case], hardware_class, branch=branch)
        paired = database.compared_with_a_reference(case, hardware_class)
    finally:
        database.close()
    where = f"{database.shown}, branch {branch}" if branch else database.shown
    return spreads([point for point in points if point.result_id not in paired], case, workload_version, metrics,
                   where)


def spreads(points: Sequence[Point], case: str, workload_version: str, metrics: Sequence[str], where: str
            ) -> dict[str, SessionSpread]:
    planted = {point.result_id for point in points if point.metric == PLANT and point.value > 0}
    kept = [point for point in points if point.case == case and point.metric in metrics
            and point.workload_version == workload_version and point.result_id not in planted
            and point.verdict in ACCEPTED]
    found = {}
    for one in series(kept):
        start, _, _ = one.segments()[-1]
        spread = SessionSpread.of(one.metric, one.values[start:], where)
        if spread is not None:
            found[one.metric] = spread
    return found
