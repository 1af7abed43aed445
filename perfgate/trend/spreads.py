"""Each gated metric's spread between the sessions a results database holds, for the gate (judge.session_spread).

The sessions counted are this case's on this hardware class, at its workload version, without a planted slowdown
and not measured beside an A/B reference (whose cores it shared), since the newest change point: a step in the
history is a change of the code or the machine, not noise. A metric's value counts where that metric passed (or
was stale) in its session, and, given this session's machine-speed probe, only in sessions whose probe read like it:
a machine shared with busy neighbours moves even the CPU clock (docs/gate.md), so sessions of a quiet hour say
nothing of how far a loaded one strays, nor the other way round; where too few are like it, those on a machine at
least as fast may excuse a FAIL, never make one (session_spread.with_unlike).
"""

from __future__ import annotations

import datetime
import warnings
from typing import Callable, Sequence

from perfgate.judge.baselines import Baseline, StoredSession
from perfgate.judge.gate import SessionSpreadWarning
from perfgate.judge.session_spread import MIN_SESSIONS, SessionSpread, counts
from perfgate.measure.budget import launch_costs
from perfgate.measure.metrics import CALIBRATION_PROBE
from perfgate.trend.analysis import series
from perfgate.trend.database import DatabaseError, NoDatabase, Point, ResultsDatabase
from perfgate.trend.sessions import PLANT, unchanged_sessions, utc

NEWEST_COSTED = 20
"""How many of a case's newest sessions --perf-budget's plan reads for the newest one with launch times: before every
case, so not the whole history, whose records are each validated as they are read."""
ACCEPTED = ("pass", "stale")
"""The outcomes of the values counted: those the gate let through. A regression that stays, FAILing or left
unresolved session after session, must not become the sessions' mean and pass."""


class SessionHistory:
    """What the gate asks the results history of a case: given its runs' probe, each gated metric's spread between
    the sessions like it. A history that cannot be read is one warning for the case, however often the gate asks
    (once, and again for sessions unlike this one), and is not read again for that case, even
    if it was only locked for a moment: the sessions stored with the baseline, or else its tolerance alone, judge."""

    def __init__(self, url: str, branch: str | None, case: str, hardware_class: str, workload_version: str,
                 metrics: Sequence[str], warn: Callable[[Warning], None] = warnings.warn) -> None:
        """``warn``: how the unread history is said (the case's Result.warn, which keeps it in the record)."""
        self.url, self.branch, self.case = url, branch, case
        self.hardware_class, self.workload_version, self.metrics = hardware_class, workload_version, metrics
        self.warn = warn
        self.unreadable = False

    def __call__(self, machine: float | None, unlike: bool = False) -> dict[str, SessionSpread]:
        if self.unreadable:
            return {}
        try:
            return learn(self.url, self.case, self.hardware_class, self.workload_version, self.metrics, self.branch,
                         machine, unlike)
        except (DatabaseError, OSError) as exc:
            self.unreadable = True
            self.warn(SessionSpreadWarning(f"{self.case}: the spread between sessions was not read ({exc}); the "
                                           "sessions stored with the baseline, or else its tolerance alone, judge"))
            return {}

    def sessions(self, baseline: Baseline) -> list[StoredSession]:
        """The case's unchanged sessions here since ``baseline`` was measured, for the verdict's model: those the
        gate let through (ACCEPTED), as ``perfgate store-sessions`` keeps them; none where the history cannot be
        read, which is said once, as for the spreads. A FAIL is left out here, unlike in a reviewed baseline file: a
        regression that stays would otherwise become the sessions' level."""
        if self.unreadable:
            return []
        try:
            database = ResultsDatabase(self.url, create=False)
        except NoDatabase:
            return []
        except (DatabaseError, OSError) as exc:
            self._unread(exc)
            return []
        try:
            points = database.points([self.case], self.hardware_class, branch=self.branch)
            paired = database.compared_with_a_reference(self.case, self.hardware_class)
        except (DatabaseError, OSError) as exc:
            self._unread(exc)
            return []
        finally:
            database.close()
        try:
            start = utc(datetime.datetime.fromisoformat(str(baseline.provenance["date"]).replace("Z", "+00:00")))
        except (KeyError, ValueError):
            start = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
        return [session for session, verdict in unchanged_sessions(points, baseline, paired, start)
                if verdict in ACCEPTED]

    def _unread(self, exc: Exception) -> None:
        self.unreadable = True
        self.warn(SessionSpreadWarning(f"{self.case}: the sessions in the results history were not read ({exc}); "
                                       "the sessions stored with the baseline judge"))

    def launch_costs(self) -> dict[str, float] | None:
        """What the case's launches cost in its newest session here, for --perf-budget's plan; None where none is
        kept or the history cannot be read (the spreads say so)."""
        try:
            database = ResultsDatabase(self.url, create=False)
        except (NoDatabase, DatabaseError, OSError):
            return None
        try:
            records = database.records(self.case, self.hardware_class, newest=NEWEST_COSTED)
        except DatabaseError:
            return None
        finally:
            database.close()
        timed = [records[key].per_run for key in sorted(records) if launch_costs(records[key].per_run)]
        return launch_costs(timed[-1]) if timed else None


def learn(url: str, case: str, hardware_class: str, workload_version: str, metrics: Sequence[str],
          branch: str | None = None, machine: float | None = None, unlike: bool = False) -> dict[str, SessionSpread]:
    """The spreads of ``metrics`` in the database at ``url`` (from the sessions on ``branch`` where given, and that
    count for ``machine``, this session's probe, where given: session_spread.counts); none where it holds nothing
    yet; DatabaseError where it cannot be read. Opened as a reader: the session's recorder makes it, at the end."""
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
                   where, machine, unlike)


def spreads(points: Sequence[Point], case: str, workload_version: str, metrics: Sequence[str], where: str,
            machine: float | None = None, unlike: bool = False) -> dict[str, SessionSpread]:
    planted = {point.result_id for point in points if point.metric == PLANT and point.value > 0}
    probes = {point.result_id: point.value for point in points if point.metric == CALIBRATION_PROBE}
    kept = [point for point in points if point.case == case and point.metric in metrics
            and point.workload_version == workload_version and point.result_id not in planted
            and (point.metric_verdict or point.verdict) in ACCEPTED
            and counts(probes.get(point.result_id), machine, unlike)]
    found = {}
    for one in series(kept):
        values, told = since_the_change(one.values, [start for start, _, _ in one.segments()])
        read = [probes.get(point.result_id) for point in one.points][len(one.values) - len(values):]
        spread = SessionSpread.of(one.metric, values, f"{where}{told}", read, machine)
        if spread is not None:
            found[one.metric] = spread
    return found


def since_the_change(values: Sequence[float], starts: Sequence[int]) -> tuple[list[float], str]:
    """The values since the newest change point (each segment's start in ``starts``), and how they were chosen. A
    change point too new for MIN_SESSIONS sessions after it is reached back over, segment by segment: the sessions
    before it are the nearest word on how far this machine strays, and without them the stored tolerance alone would
    judge, quietly, as if the history said nothing (a plant that a faster machine hid then passed with no warning)."""
    newest = starts[-1]
    for start in reversed(starts):
        if len(values) - start >= MIN_SESSIONS:
            break
    told = "" if start == newest else (f", across a change point {len(values) - newest} session(s) ago (too few "
                                       "sessions since it to tell its spread alone)")
    return list(values[start:]), told
