"""What the verdict's model reads of the results history (--perf-history): a case's unchanged sessions on this class
since its baseline, as ``perfgate store-sessions`` keeps them in a baseline file (trend/sessions.py: one rule for
both), and what its newest launches cost, for --perf-budget's plan.
"""

from __future__ import annotations

import datetime
import warnings
from typing import Callable

from perfgate.judge.baselines import Baseline, StoredSession
from perfgate.measure.budget import launch_costs
from perfgate.trend.database import DatabaseError, NoDatabase, ResultsDatabase
from perfgate.trend.sessions import unchanged_sessions, utc

NEWEST_COSTED = 20
"""How many of a case's newest sessions --perf-budget's plan reads for the newest one with launch times: before every
case, so not the whole history, whose records are each validated as they are read."""
COUNTED = ("pass", "stale", "unresolved")
"""The verdicts of the sessions the model reads: all but a FAIL, so that a regression that stays, FAILing session
after session, does not become the sessions' level, while the sessions an interval left undecided still tell how
far the case strays (passes alone would understate it)."""


class HistoryUnreadWarning(UserWarning):
    """The results history could not be read: the sessions stored with the baseline judge alone."""


class SessionHistory:
    """What the gate asks the results history of a case. A history that cannot be read is one warning for the case
    and is not read again for it, even if it was only locked for a moment: the sessions stored with the baseline
    judge."""

    def __init__(self, url: str, branch: str | None, case: str, hardware_class: str,
                 warn: Callable[[Warning], None] = warnings.warn) -> None:
        """``warn``: how the unread history is said (the case's Result.warn, which keeps it in the record)."""
        self.url, self.branch, self.case, self.hardware_class = url, branch, case, hardware_class
        self.warn = warn
        self.unreadable = False

    def sessions(self, baseline: Baseline) -> list[StoredSession]:
        """The case's unchanged sessions here since ``baseline`` was measured, for the verdict's model (COUNTED), as
        ``perfgate store-sessions`` keeps them; none where the history cannot be read, which is said once. A FAIL is
        left out here, unlike in a reviewed baseline file: a regression that stays would otherwise become the
        sessions' level."""
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
                if verdict in COUNTED]

    def _unread(self, exc: Exception) -> None:
        self.unreadable = True
        self.warn(HistoryUnreadWarning(f"{self.case}: the sessions in the results history were not read ({exc}); "
                                       "the sessions stored with the baseline judge"))

    def launch_costs(self) -> dict[str, float] | None:
        """What the case's launches cost in its newest session here, for --perf-budget's plan; None where none is
        kept or the history cannot be read."""
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
