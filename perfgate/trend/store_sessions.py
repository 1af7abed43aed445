"""``perfgate store-sessions``: each case's unchanged sessions from the results history, kept in its baseline file.

The verdict's model (judge/model.py) learns how far a case moves between sessions, and how it moves with the
machine's speed, from the sessions the results history holds. A fresh clone, or a CI job with no shared database,
has none, and there only the flavour's prior tells it. Stored with the baseline and reviewed with it, the sessions
travel with the clone.

Kept: the case's sessions on its baseline's hardware class and workload version since the baseline was measured (or
``--since``), on ``--branch`` where given, without a planted slowdown, not measured beside an A/B reference, and
judged against the baseline (sessions.JUDGED), whatever the verdict. Unlike what the gate reads of the history,
which leaves a FAIL out, a FAIL is kept: on a shared runner it may be the drift that a gate took for a regression,
which is what the sessions' spread has to hold. So the sessions must be of the code the baseline measured; the
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

from perfgate.judge import baselines, estimates, model
from perfgate.judge.baselines import Baseline, StoredSession
from perfgate.measure.metrics import METRICS
from perfgate.report.terminal import table
from perfgate.trend.command import add_history_option
from perfgate.trend.database import DatabaseError, ResultsDatabase
from perfgate.trend.sessions import unchanged_sessions, utc

SESSION_HEADER = ("case", "hardware class", "recorded (UTC)", "commit", "verdict", "metric", "value", "vs baseline")
SPREAD_HEADER = ("case", "hardware class", "metric", "sessions", "unchanged vs baseline", "between sessions",
                 "slopes", "catches")
MAX_SESSIONS = 30
"""The most sessions a baseline file keeps, the newest: enough for the model's slopes, few enough to review."""


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
    """What the stored sessions tell the verdict's model, per metric: the newest session judged against the baseline
    and the others (model.estimate), with the between-session spread, the slopes on the machine-speed readings it
    fitted or took from the prior, and the slowdown a session like it catches. Against the file's stored tolerance,
    since the flavour's, which the gate takes, is not in the file; a class whose name starts ``cpu-`` takes a CPU
    flavour's prior, any other a GPU one's."""
    rows, measured = [], baseline.provenance.get("measured", {})
    kind = "cpu" if baseline.hardware_class.startswith("cpu-") else "gpu"
    for metric, reference in baseline.metrics.items():
        found = [session for session in sessions if metric in session.medians]
        if not found:
            continue
        info = METRICS[metric]
        own = model.session_of(list(reference.samples), info.better, estimates.readings(metric, measured))
        *others, newest = estimates.stored_sessions(metric, found)
        effect = model.estimate(newest, own, others, clock=info.clock, kind=kind, tolerance=reference.tolerance,
                                metrics=len(baseline.metrics))
        centre = sorted(session.medians[metric] for session in found)[len(found) // 2]
        slopes = ", ".join(f"{name} {slope:+.2f}" for name, slope in zip(effect.covariates, effect.slopes)) or "none"
        rows.append((baseline.case, baseline.hardware_class, metric, str(len(found)),
                     f"{centre / reference.value - 1:+.1%}", f"{effect.components.between_sessions ** 0.5:.1%}",
                     slopes, f"{effect.catchable:.1%}"))
    return rows
