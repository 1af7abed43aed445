"""``perfgate store-sessions``: each case's unchanged sessions from the results history, kept in its baseline file.

The gate judges a stored baseline with the spread between sessions that the results history holds
(judge/session_spread.py). A fresh clone, or a CI job with no shared database, has none, and there a shared runner's
drift between sessions reads as a regression. Stored with the baseline and reviewed with it, the sessions travel with
the clone.

Kept: the case's sessions on its baseline's hardware class and workload version since the baseline was measured (or
``--since``), on ``--branch`` where given, without a planted slowdown, not measured beside an A/B reference, and
judged against the baseline (sessions.JUDGED), whatever the verdict. Unlike the history's own rule, which counts
only what passed, a FAIL is kept: on a shared runner it is the drift that a gate with no history took for a
regression, which is what the spread has to hold. So the sessions must be of the code the baseline measured; the
table printed lists each one against the baseline, so that a step in them (a regression that landed) shows in review.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from perfgate.judge import baselines, session_spread
from perfgate.judge.baselines import Baseline, StoredSession
from perfgate.judge.session_spread import MAX_SESSIONS
from perfgate.report.terminal import table
from perfgate.trend.command import add_history_option
from perfgate.trend.database import DatabaseError, ResultsDatabase
from perfgate.trend.sessions import unchanged_sessions, utc

SESSION_HEADER = ("case", "hardware class", "recorded (UTC)", "commit", "verdict", "metric", "value", "vs baseline")
SPREAD_HEADER = ("case", "hardware class", "metric", "for a probe of", "sessions", "unchanged vs baseline", "spread",
                 "tolerance", "least tolerance", "catches")


A_DAY_PART = datetime.timedelta(hours=12)
"""Stored sessions closer together than this may all fall in one of a shared machine's fast or slow spells: on issue
47's family 25 VM an evening read 4-9 % slower per sample than six afternoon sessions (docs/measurements.md)."""

class NothingToStore(Exception):
    """No session of a case with a baseline to keep: the message says what to run first."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfgate store-sessions",
        description="Keep each case's unchanged sessions from the results history (their medians and every "
        "machine-speed probe reading) in its baseline file, so that a clone with no history judges the stored "
        "baseline with how far the case moves between sessions on that hardware class. Every judged session counts, a "
        "FAIL too: run it over "
        "sessions of the code the baseline measured, review the sessions it lists and the files (git diff), and "
        "commit them. --update-baselines drops them again.")
    parser.add_argument("cases", nargs="*", metavar="CASE", help="case ids or globs (default: every case)")
    add_history_option(parser)
    parser.add_argument("--baseline-dir", type=Path, default=Path("baselines"), help="default: ./baselines")
    parser.add_argument("--hardware-class", help="only this hardware class")
    parser.add_argument("--branch", help="only sessions on this branch (as --perf-history-branch reads them)")
    parser.add_argument("--since", type=datetime.datetime.fromisoformat, metavar="YYYY-MM-DD[THH:MM]",
                        help="only sessions recorded since then, UTC where no zone is given (default: since each "
                        "baseline was measured)")
    return parser


def main(argv: list[str]) -> int:
    """Exit 0 (files written), or 2 (no usable database, nothing to store, a baseline unreadable)."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (DatabaseError, baselines.BaselineError, NothingToStore) as exc:
        print(f"perfgate: error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    database = ResultsDatabase(args.history, create=False)
    try:
        groups = defaultdict(list)
        for point in database.points(args.cases, args.hardware_class, branch=args.branch):
            groups[point.case, point.hardware_class].append(point)
        paired = {key: database.compared_with_a_reference(*key) for key in groups}
    finally:
        database.close()
    session_rows, spread_rows, spans = [], [], []
    for (case, hardware_class), found in sorted(groups.items()):
        path = args.baseline_dir / hardware_class / f"{case}.json"
        baseline = baselines.load(path)
        if baseline is None:
            continue
        sessions = unchanged_sessions(found, baseline, paired[case, hardware_class], since(args.since, baseline, path))
        if not sessions:
            continue
        kept = merged(baseline.sessions, [session for session, _ in sessions])
        baselines.write(path, dataclasses.replace(baseline, sessions=kept))
        before = {identity(session) for session in baseline.sessions}
        print(f"perfgate store-sessions: {path}: {len(kept)} session(s) stored, "
              f"{sum(identity(session) not in before for session in kept)} of them new from {database.shown}")
        spans.append((span(kept), path))
        session_rows += listed(baseline, sessions)
        spread_rows += spread(baseline, kept)
    if not spread_rows:
        raise NothingToStore(f"{database.shown} holds no judged session of a case with a baseline in "
                             f"{args.baseline_dir}{' since ' + args.since.isoformat() if args.since else ''} (by "
                             "default, since the baseline was measured): run the suite with --perf-history first")
    print("\n".join(table(session_rows, SESSION_HEADER)))
    print("\n".join(table(spread_rows, SPREAD_HEADER)))
    short = [(taken, path) for taken, path in spans if taken < A_DAY_PART]
    if short:
        hours, minutes = divmod(int(min(short)[0].total_seconds()) // 60, 60)
        print(f"perfgate store-sessions: the sessions stored in {', '.join(str(path) for _, path in short)} span as "
              f"little as {hours} h {minutes:02} min: a shared machine has spells that sessions of one stretch of "
              "hours do not hold, and a session in one may FAIL; store sessions from other times of day too "
              "(docs/gate.md)")
    return 0


def since(given: datetime.datetime | None, baseline: Baseline, path: Path) -> datetime.datetime:
    """From when sessions count, in UTC: ``given`` (UTC where it names no zone), else when the baseline was
    measured; a baseline with no readable date needs ``given``."""
    if given is None:
        try:
            given = datetime.datetime.fromisoformat(str(baseline.provenance["date"]).replace("Z", "+00:00"))
        except (KeyError, ValueError) as exc:
            raise baselines.BaselineError(f"{path}: no date of measurement to count sessions from ({exc!r} in its "
                                          "provenance): give --since") from None
    return utc(given)


def span(sessions: Sequence[StoredSession]) -> datetime.timedelta:
    """From the first stored session to the last."""
    times = [utc(datetime.datetime.fromisoformat(session.recorded_at)) for session in sessions]
    return max(times) - min(times)


def identity(session: StoredSession) -> tuple[str, str | None]:
    return session.recorded_at, session.commit


def merged(stored: Sequence[StoredSession], new: Sequence[StoredSession]) -> tuple[StoredSession, ...]:
    """The sessions already stored and the new ones, each once, the newest MAX_SESSIONS (what the gate reads)."""
    by_time = {identity(session): session for session in (*stored, *new)}
    return tuple(sorted(by_time.values(), key=lambda session: session.recorded_at))[-MAX_SESSIONS:]


def listed(baseline: Baseline, sessions: Sequence[tuple[StoredSession, str]]) -> list[tuple[str, ...]]:
    """Each new session's gated values against the baseline, for review: a step among them is not drift."""
    return [(baseline.case, baseline.hardware_class, session.recorded_at[:19].replace("T", " "),
             (session.commit or "?")[:12], verdict, metric, f"{value:.4g}",
             f"{value / baseline.metrics[metric].value - 1:+.1%}")
            for session, verdict in sessions for metric, value in session.medians.items()]


def spread(baseline: Baseline, sessions: Sequence[StoredSession]) -> list[tuple[str, ...]]:
    """What the stored sessions tell the gate, per metric, for a session whose probe reads as the fastest of them
    did and for one reading as the slowest (its figure grows by how much faster that reads than the sessions
    counted): the gate counts the sessions like the one it judges (session_spread.like), else, to excuse only, those
    on a machine at least as fast (session_spread.stored_judging), so a quiet hour's and a loaded hour's spreads are
    shown apart. A session with no probe reading counts for neither."""
    rows, metrics = [], list(baseline.metrics)
    tolerances = [reference.tolerance for reference in baseline.metrics.values()]
    for label, machine in machines(sessions):
        found = session_spread.stored_judging(sessions, metrics, machine, "")
        past_sessions = session_spread.through_sessions([found.get(metric) for metric in metrics], tolerances)
        for metric, reference in baseline.metrics.items():
            one = found.get(metric)
            if one is None:
                counted = sum(metric in session.medians and session_spread.counts(session.probe, machine, False)
                              for session in sessions)
                rows.append((baseline.case, baseline.hardware_class, metric, label, str(counted), "", "", "", "",
                             "too few sessions to tell"))
                continue
            value, better, tolerance = reference.value, reference.better, reference.tolerance
            catches = ("none: too few like it, so those as fast or faster excuse only" if one.unlike
                       else f"{one.catchable(value, better, tolerance, past_sessions):.1%}")
            rows.append((baseline.case, baseline.hardware_class, metric, label, str(one.sessions),
                         f"{one.centre / value - 1:+.1%}", f"{one.spread:.1%}", f"{tolerance:.1%}",
                         f"{one.least_tolerance(value, better, tolerance):.1%}", catches))
    return rows


def machines(sessions: Sequence[StoredSession]) -> list[tuple[str, float | None]]:
    """The probe readings to show the stored spread for, each with its label: the fastest session's and the slowest
    one's, or the fastest's alone where the slowest is like it; None (every session) where none read the probe."""
    probes = sorted(session.probe for session in sessions if session.probe is not None)
    if not probes:
        return [("any", None)]
    fastest, slowest = probes[-1], probes[0]
    if session_spread.like(fastest, slowest):
        return [(f"{slowest:,.1f}-{fastest:,.1f} (all alike)", fastest)]
    return [(f"{fastest:,.1f} (the fastest)", fastest), (f"{slowest:,.1f} (the slowest)", slowest)]
