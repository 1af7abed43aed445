"""How far an unchanged case moves between sessions on one machine, and what a stored baseline can tell apart there.

A stored baseline's tolerance comes from the spread of the launches inside the session that measured it. On a shared
runner a case moves further between sessions (caches, clocks, neighbours that come and go), and no statistic inside
one session sees that. The results history (``--perf-history``) holds what the case's earlier sessions read on this
hardware class: their mean says where an unchanged session lands against the baseline, and the wider of their
standard deviation and their robust spread how far it strays. A robust spread alone takes the fewer sessions of a
machine's spell for outliers (on issue 47's family 25 VM two evening sessions read 4-9 % slower per sample than six
afternoon sessions that spread 2.4 %, at the same probe reading), and the spell's next session FAILs; the standard
deviation counts them once they are among the sessions (docs/measurements.md). A session disturbed far off widens
the spread too: a false FAIL costs more than a wider tolerance. A regression the gate would call inside that spread
is left unresolved, never a FAIL; a session worse than the sessions' mean beyond the spread on every gated clock
fails even where the baseline, outrun by the machine since, would pass it; a pass says how large a slowdown the
machine lets a stored baseline catch, and the A/B command that catches a smaller one. Where the history holds too
few such sessions (a fresh clone, a CI job without a shared database), the sessions stored with the baseline
(``perfgate store-sessions``) stand in for it; where neither holds them, a pass on a machine that the probe reads
faster than at the baseline says how large a slowdown hides behind that (hidden_by_speed_up).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Collection, Mapping, Sequence

from perfgate.judge.baselines import StoredSession
from perfgate.measure import stats

FALSE_ALARM = 0.90
"""The two-sided confidence of Student's t whose upper side one unchanged session in 20 reads worse than: a new
session strays around a mean and a spread that are both estimated from the sessions. The normal's 1.645, taking the
spread as known, FAILed 6.8 % of unchanged sessions from 5 normal ones (tests/test_session_spread.py), and Student's
t 3.8 %."""
CATCH = 0.80
"""A slowdown that moves the mean this far (Student's t, two-sided 80 %) past the least tolerance fails 9 sessions in
10."""
CONFIRM = 0.98
"""A session this far worse than the sessions' mean (Student's t, two-sided 98 %) happens to 1 unchanged session in
100: enough to FAIL a session that the stored baseline would pass."""
MIN_SESSIONS = 5
"""Fewer sessions than this say too little about the spread: the stored tolerance alone judges that metric."""
MAX_SESSIONS = 30
"""The newest sessions only: a machine's spread changes as its neighbours do."""
CENTRE_VARIANCE = math.pi / 2
"""The centre's own uncertainty, in units of sigma^2 / n: a median's of normal values. A mean of normal values would
have 1, but sessions with a spell among them are not normal values, and a false FAIL costs more than a wider
tolerance."""
LIKE_MACHINE = 0.25
"""How far a session's probe may read from this one's for its values to count: wide enough for the sessions of one
condition, narrow enough to keep a quiet hour's apart from a loaded one's (docs/measurements.md)."""


@dataclass(frozen=True)
class SessionSpread:
    """One gated metric's unchanged sessions on this hardware class: their mean, relative spread (the wider of the
    standard deviation and the robust spread) and count. ``unlike``: too few of them ran on a machine like this
    one, so those on a machine at least as fast count, and they may excuse a FAIL but never make one
    (``with_unlike``). ``faster``: how much faster this session's probe read than theirs on average (0 where it
    read slower or either is unknown)."""

    metric: str
    centre: float
    spread: float
    sessions: int
    where: str
    unlike: bool = False
    faster: float = 0.0

    @classmethod
    def of(cls, metric: str, values: Sequence[float], where: str, probes: Sequence[float | None] = (),
           machine: float | None = None) -> SessionSpread | None:
        """From the sessions' values (each a session's median), newest last, and their probes where read; None for
        too few to tell. ``machine``: this session's probe."""
        if probes and len(probes) != len(values):
            raise ValueError(f"{len(probes)} probe readings for {len(values)} sessions")
        kept = list(values)[-MAX_SESSIONS:]
        if len(kept) < MIN_SESSIONS or (centre := statistics.fmean(kept)) <= 0:
            return None
        spread = max(statistics.stdev(kept) / centre, stats.relative_spread(kept))
        return cls(metric, centre, spread, len(kept), where, faster=speed_up(machine, list(probes)[-len(kept):]))

    def quantile(self, confidence: float) -> float:
        """How many widths a new session strays to one side at the two-sided ``confidence``."""
        return stats.t_quantile(confidence, self.sessions - 1)

    @property
    def width(self) -> float:
        """The spread of a new session around the estimated centre: its own spread and the centre's uncertainty."""
        return self.spread * math.sqrt(1.0 + CENTRE_VARIANCE / self.sessions)

    def offset(self, baseline: float, better: str) -> float:
        """How much worse than ``baseline`` an unchanged session typically reads (negative: better)."""
        return worsening(self.centre / baseline - 1.0, better)

    def least_tolerance(self, baseline: float, better: str, tolerance: float) -> float:
        """The least worsening that 19 unchanged sessions in 20 stay within, never under the stored tolerance."""
        return max(tolerance, self.offset(baseline, better) + self.quantile(FALSE_ALARM) * self.width)

    def against(self, value: float, better: str) -> float:
        """How much worse than the unchanged sessions' mean ``value`` is (negative: better)."""
        return worsening(value / self.centre - 1.0, better)

    def confirming(self, tolerance: float) -> float:
        """How much worse than the sessions' mean a session must read to FAIL whatever the baseline says: the
        tolerance (a session's own noise) and CONFIRM's spreads (between sessions) added as independent deviations are,
        in quadrature; the larger of the two alone failed unchanged builds on a loaded machine whose CPU clock had
        drifted, and their sum missed most 10 % plants (docs/measurements.md)."""
        return math.hypot(tolerance, self.quantile(CONFIRM) * self.width)

    def catchable(self, baseline: float, better: str, tolerance: float, past_sessions: float = math.inf) -> float:
        """The smallest slowdown that fails 9 sessions in 10 on this machine: past the least tolerance against
        ``baseline``, or ``past_sessions``, the slowdown that takes every gated metric past its ``confirming``
        margin (``through_sessions``), whichever is smaller; on a machine ``faster`` than the sessions', each that
        much larger, for a slowdown hides behind the speed-up. The figure only grows so: the verdict stays the
        sessions' (scaling values by the probe over-corrected, docs/measurements.md)."""
        past_baseline = self.least_tolerance(baseline, better, tolerance) - self.offset(baseline, better)
        return min(self.hidden(past_baseline + self.quantile(CATCH) * self.width), past_sessions)

    def hidden(self, slowdown: float) -> float:
        """hidden_slowdown on a machine ``faster`` than the sessions'."""
        return hidden_slowdown(slowdown, self.faster)

    def sessions_catch(self, tolerance: float) -> float:
        """The slowdown that takes this metric past its ``confirming`` margin 9 sessions in 10."""
        return self.confirming(tolerance) + self.quantile(CATCH) * self.width


def through_sessions(spreads: Sequence[SessionSpread | None], tolerances: Sequence[float]) -> float:
    """The slowdown that FAILs through the sessions 9 times in 10 (every gated metric past its ``confirming``
    margin, each on a machine as much ``faster`` than its sessions as this one), given each gated metric's spread
    (None: none known) and stored tolerance; infinite where some gated metric has no spread of sessions like this
    one, for then none FAILs that way."""
    if not spreads or any(spread is None or spread.unlike for spread in spreads):
        return math.inf
    return max(spread.hidden(spread.sessions_catch(tolerance)) for spread, tolerance in zip(spreads, tolerances))


def speed_up(machine: float | None, probes: Sequence[float | None]) -> float:
    """How much faster ``machine`` (this session's probe) read than the sessions' probes on average: 0 where slower,
    or where it or any of theirs is unknown. On the family 25 model 17 VM an hour whose matmul read 14-16 % faster
    than the quiet sessions stored passed 20 % plants that the sessions' figure (11.8-17.4 %) promised to catch
    (docs/measurements.md)."""
    if machine is None or not probes or any(probe is None for probe in probes):
        return 0.0
    return max(0.0, machine / statistics.fmean(probes) - 1.0)


def like(probe: float | None, machine: float) -> bool:
    """Whether a session whose probe read ``probe`` ran on a machine like this one (``machine``)."""
    return probe is not None and abs(probe / machine - 1.0) <= LIKE_MACHINE


def no_slower(probe: float | None, machine: float) -> bool:
    """Whether a session whose probe read ``probe`` ran on a machine at least as fast as this one (``machine``)."""
    return probe is not None and probe >= machine


def counts(probe: float | None, machine: float | None, unlike: bool) -> bool:
    """Whether a session whose probe read ``probe`` counts for this one (``machine``: its probe, None for any): like
    it, or, for ``unlike`` spreads (with_unlike), at least as fast."""
    return machine is None or (no_slower if unlike else like)(probe, machine)


def stored(sessions: Sequence[StoredSession], metrics: Sequence[str], machine: float | None, where: object,
           unlike: bool = False) -> dict[str, SessionSpread]:
    """Each metric's spread between the ``sessions`` stored with the baseline at ``where`` that count for this one
    (given its probe, ``machine``; ``counts``)."""
    kept = [session for session in sessions if counts(session.probe, machine, unlike)]
    found = {}
    for metric in metrics:
        having = [session for session in kept if metric in session.medians][-MAX_SESSIONS:]
        if len(having) < MIN_SESSIONS:
            continue
        span = f"{having[0].recorded_at[:16]} to {having[-1].recorded_at[:16]} UTC"
        spread = SessionSpread.of(metric, [session.medians[metric] for session in having], f"{where}, stored, {span}",
                                  [session.probe for session in having], machine)
        if spread is not None:
            found[metric] = spread
    return found


def with_unlike(like_spreads: Mapping[str, SessionSpread], no_slower_spreads: Mapping[str, SessionSpread]
                ) -> dict[str, SessionSpread]:
    """Each metric's spread from the sessions like this one (``like_spreads``), else from those that ran on a
    machine at least as fast (``no_slower_spreads``), marked ``unlike``. A loaded session judged by its tolerance alone
    FAILed the CPU clock within how far the quiet sessions stored strayed (issue 47's family 25 VM,
    docs/measurements.md). Sessions on a faster machine say how far the machine strays over time, and where a
    session lands at best, not how far a slower hour moves it: they may leave a FAIL unresolved, never make one.
    Sessions on a slower machine (loaded ones, for a quiet session) read worse than this one should, and would
    excuse a regression: they never count."""
    return {**{metric: replace(spread, unlike=True) for metric, spread in no_slower_spreads.items()
               if metric not in like_spreads}, **like_spreads}


def stored_judging(sessions: Sequence[StoredSession], metrics: Sequence[str], machine: float | None, where: object
                   ) -> dict[str, SessionSpread]:
    """What the ``sessions`` stored at ``where`` judge a session by, given its probe (``machine``): those like it,
    else those on a machine at least as fast, to excuse only (with_unlike)."""
    found = stored(sessions, metrics, machine, where)
    return found if machine is None else with_unlike(found, stored(sessions, metrics, machine, where, unlike=True))


def like_only(spreads: Mapping[str, SessionSpread]) -> set[str]:
    """The metrics whose spread sessions like this one tell: the ones the wall-alone rule and the hidden slowdown's
    warning leave to this module (the neighbour rule reads the wall clock whatever they tell)."""
    return {metric for metric, spread in spreads.items() if not spread.unlike}


def worsening(change: float, better: str) -> float:
    """A relative change as how much worse it is (negative: better)."""
    return -change if better == "higher" else change


def judge(spreads: Mapping[str, SessionSpread], verdicts: Sequence[Any], outcomes: Sequence[str]
          ) -> tuple[list[str], list[dict[str, Any]]]:
    """The outcomes once each metric's session spread is known, and a row per metric that has one.

    A session worse than the unchanged sessions' mean by more than ``confirming`` on every gated metric FAILs, even
    where the baseline, outrun by the machine since, would pass it: slower code does more work or waits longer, and
    moves every clock it is gated on. Worse than them on some metrics only, it is unresolved: a loaded machine moves
    its CPU clock alone by as much (docs/measurements.md). A FAIL against the baseline stays a FAIL beyond the least
    tolerance and is unresolved within it. An ``unlike`` spread does that last only. ``verdicts``: the gate's
    MetricVerdicts, ``outcomes`` their settled outcomes."""
    settled, rows = list(outcomes), []
    found = {index: spreads[verdict.metric] for index, verdict in enumerate(verdicts) if verdict.metric in spreads}
    against = {index: spread.against(verdicts[index].baseline * (1.0 + verdicts[index].change), verdicts[index].better)
               for index, spread in found.items()}
    beyond = {index: not spread.unlike and against[index] > spread.confirming(verdicts[index].tolerance)
              for index, spread in found.items()}
    every_clock = len(beyond) == len(verdicts) and all(beyond.values())
    past_sessions = through_sessions([found.get(index) for index in range(len(verdicts))],
                                     [verdict.tolerance for verdict in verdicts])
    for index, verdict in enumerate(verdicts):
        spread = found.get(index)
        if spread is None:
            continue
        least = spread.least_tolerance(verdict.baseline, verdict.better, verdict.tolerance)
        against_sessions = against[index]
        if every_clock:
            settled[index] = "FAIL"
        elif settled[index] == "FAIL" and worsening(verdict.change, verdict.better) > least:
            pass
        elif settled[index] == "FAIL" or beyond[index]:
            settled[index] = "unresolved"
        rows.append({
            "metric": verdict.metric, "change": verdict.change, "tolerance": verdict.tolerance,
            "sessions": spread.sessions, "session_spread": spread.spread,
            "unchanged_change": spread.centre / verdict.baseline - 1.0, "least_tolerance": least,
            "confirming": spread.confirming(verdict.tolerance),
            "catchable": spread.catchable(verdict.baseline, verdict.better, verdict.tolerance, past_sessions),
            "against_sessions": against_sessions, "outcome": settled[index], "history": spread.where,
            "outran_baseline": (not spread.unlike
                                and spread.offset(verdict.baseline, verdict.better) < -verdict.tolerance),
            "unlike": spread.unlike, "faster": spread.faster,
        })
    return settled, rows


def held(rows: Sequence[Mapping[str, Any]]) -> set[str]:
    """The metrics ``judge`` left unresolved (its ``rows``): a FAIL against the baseline among them is within how far
    unchanged sessions stray, no sign that the code does more work."""
    return {row["metric"] for row in rows if row["outcome"] == "unresolved"}


UNLIKE = ("; too few ran on a machine like this one by the probe, so these, on machines as fast or faster, may leave a "
          "FAIL unresolved, never make one")


def describe(row: Mapping[str, Any]) -> str:
    """One metric's standing against its session spread, for a verdict's message."""
    unlike = row.get("unlike")
    confirming = "" if unlike else f" or {row['confirming']:.1%} against the sessions"
    faster = (f" (this session's probe read {row['faster']:.1%} faster than theirs, and a slowdown hides behind that)"
              if row.get("faster") else "")
    catches = "" if unlike else f"; a stored baseline catches a slowdown of {row['catchable']:.1%} or more here{faster}"
    return (f"{row['metric']}: {row['against_sessions']:+.1%} worse than the unchanged sessions; those read "
            f"{row['unchanged_change']:+.1%} against the baseline, "
            f"spread {row['session_spread']:.1%} ({row['sessions']} sessions in {row['history']}"
            f"{UNLIKE if unlike else ''}), so a change counts only beyond {row['least_tolerance']:.1%} against the "
            f"baseline (one unchanged session in 20 strays further){confirming}{catches}")


def why_blunted(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why a stored baseline cannot catch here what its tolerance promises, if it cannot: the sessions spread wider
    than the tolerance; this session's probe read faster than theirs by more than the tolerance; or the machine
    outran the baseline and its unchanged sessions read better than it by more than the tolerance (a slowdown that
    large passes against the baseline alone: in issue 47 a machine sped up 18 % and a planted 25 % passed). Sessions
    unlike this one tell none of these."""
    rows = [row for row in rows if not row.get("unlike")]
    reasons = []
    if any(row["least_tolerance"] > row["tolerance"] for row in rows):
        reasons.append("this machine's sessions spread wider than the stored tolerance")
    if any(row.get("faster", 0.0) > row["tolerance"] for row in rows):
        reasons.append("this session's probe read faster than the unchanged sessions' by more than the stored "
                       "tolerance, so a slowdown that large passes")
    if any(row.get("outran_baseline") for row in rows):
        reasons.append("its unchanged sessions read better than the baseline by more than the stored tolerance, so "
                       "a slowdown that large passes against the baseline alone (refresh it: --update-baselines)")
    return reasons


def hidden_by_speed_up(faster: Mapping[str, float | None], verdicts: Sequence[Any], judged: Collection[str]
                       ) -> list[str]:
    """Why a pass against the baseline alone may hide a slowdown beyond the tolerance: no gated metric is one that
    sessions like this one judge (``judged``, like_only), and each whose speed-up was read ran on a machine
    ``faster`` than when the baseline was measured (machine_drop.speed_up_on) by more than its stored tolerance. A
    slowdown reads smaller by the speed-up: one up to the least of their (1 + tolerance)(1 + speed-up) - 1 reads as
    within the tolerance, and one a little larger passes within noise too. A fresh clone with neither history nor
    stored sessions on the family 25 model 17 VM, whose matmul read 20 % faster than at its baselines, would have
    passed a planted 20 % with nothing said (docs/measurements.md). Empty where sessions judge (why_blunted speaks
    for them), where no speed-up was read, or where a gated metric still catches a slowdown within about twice its
    tolerance."""
    read = [verdict for verdict in verdicts if faster.get(verdict.metric) is not None]
    if (not read or any(verdict.metric in judged for verdict in verdicts)
            or any(faster[verdict.metric] <= verdict.tolerance for verdict in read)):
        return []
    readings = ", ".join(f"{verdict.metric} {faster[verdict.metric]:.1%}" for verdict in read)
    hides = min(hidden_slowdown(verdict.tolerance, faster[verdict.metric]) for verdict in read)
    return [f"this session's probe read faster than when the baseline was measured, on each gated metric's clock by "
            f"more than its stored tolerance ({readings}), and no unchanged sessions like this one say how far the "
            f"case strays here, so a slowdown of up to {hides:.1%} reads as within the tolerance against the baseline "
            "alone, and only a larger one can FAIL (record unchanged sessions, --perf-history, and keep them with the "
            "baseline: perfgate store-sessions; or refresh it: --update-baselines)"]


def hidden_slowdown(slowdown: float, faster: float) -> float:
    """The slowdown that reads as ``slowdown`` on a machine ``faster`` than the one compared with (for a rate the
    exact figure, (1 + faster) / (1 - slowdown) - 1, is a little larger: this one errs low)."""
    return (1.0 + slowdown) * (1.0 + faster) - 1.0


def ab_instead(test_id: str) -> str:
    """The command that judges a smaller change on this machine: both sides in one job, measured at once."""
    return (f"to judge a smaller change here, A/B it in one job: pytest '{test_id}' --perf-against REF (a CPU flavour "
            "on the local launcher measures both sides at once: docs/ab.md)")
