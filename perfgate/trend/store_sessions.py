"""``perfgate store-sessions``: each case's unchanged sessions from the results history, kept in its baseline file.

A gate judges a stored baseline with the spread between sessions that the results history holds (judge/session_spread.py).
A fresh clone, or a CI job with no shared database, has no history, and there a shared runner's drift between sessions
reads as a regression. Stored with the baseline and reviewed with it, the sessions' medians travel with the clone.

The sessions kept are the case's on its baseline's hardware class and workload version since the baseline was measured
(or ``--since``), without a planted slowdown and not measured beside an A/B reference, whatever their verdict: run it over
sessions of the code the baseline measured, whose every move was the machine's. A FAIL among them is the drift that the
gate could not tell from a regression, and the table printed shows each case's sessions against its baseline for review.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from perfgate.judge import baselines
from perfgate.judge.baselines import Baseline, StoredSession
from perfgate.judge.session_spread import MAX_SESSIONS, SessionSpread
from perfgate.measure.metrics import CALIBRATION_PROBE
from perfgate.report.terminal import table
from perfgate.trend.command import DEFAULT_HISTORY
from perfgate.trend.database import DatabaseError, Point, ResultsDatabase
from perfgate.trend.spreads import PLANT

HEADER = ("case", "hardware class", "metric", "sessions", "unchanged vs baseline", "spread", "tolerance",
          "least tolerance", "catches")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfgate store-sessions",
        description="Keep each case's unchanged sessions from the results history (their medians and machine-speed "
        "probe) in its baseline file, so that a clone with no history judges the stored baseline with how far the "
        "case moves between sessions on that hardware class. Run it over sessions of the code the baseline measured; "
        "review the files (git diff) and commit them. --update-baselines drops them again.")
    parser.add_argument("cases", nargs="*", metavar="CASE", help="case ids or globs (default: every case)")
    parser.add_argument("--history", default=DEFAULT_HISTORY, metavar="URL",
                        help=f"the results database: a SQLite path or postgresql://USER@HOST/DB (default: "
                        f"{DEFAULT_HISTORY}, as --perf-history writes)")
    parser.add_argument("--baseline-dir", type=Path, default=Path("baselines"), help="default: ./baselines")
    parser.add_argument("--hardware-class", help="only this hardware class")
    parser.add_argument("--since", type=datetime.datetime.fromisoformat, metavar="YYYY-MM-DD[THH:MM]",
                        help="only sessions recorded since then, UTC (default: since each baseline was measured)")
    return parser


def main(argv: list[str]) -> int:
    """Exit 0 (files written), or 2 (no usable database, no baseline to keep sessions in, a baseline unreadable)."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (DatabaseError, baselines.BaselineError) as exc:
        print(f"perfgate: error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    database = ResultsDatabase(args.history, create=False)
    try:
        points = database.points(args.cases, args.hardware_class)
        groups = defaultdict(list)
        for point in points:
            groups[point.case, point.hardware_class].append(point)
        paired = {key: database.compared_with_a_reference(*key) for key in groups}
    finally:
        database.close()
    rows, written = [], 0
    for (case, hardware_class), found in sorted(groups.items()):
        path = args.baseline_dir / hardware_class / f"{case}.json"
        baseline = baselines.load(path)
        if baseline is None:
            continue
        sessions = unchanged_sessions(found, baseline, paired[case, hardware_class], since(args.since, baseline))
        if not sessions:
            continue
        kept = merged(baseline.sessions, sessions)
        baselines.write(path, dataclasses.replace(baseline, sessions=kept))
        written += 1
        print(f"perfgate store-sessions: {path}: {len(kept)} session(s) stored ({len(sessions)} from "
              f"{database.shown})")
        rows += spread_rows(baseline, kept)
    if not written:
        raise DatabaseError(f"no sessions in {database.shown} of a case with a baseline in {args.baseline_dir} since "
                            "it was measured: run the suite with --perf-history first")
    print("\n".join(table(rows, HEADER)))
    return 0


def since(given: datetime.datetime | None, baseline: Baseline) -> datetime.datetime | None:
    """From when sessions count: ``given`` (UTC where it names no zone), else when the baseline was measured."""
    when = given or (datetime.datetime.fromisoformat(baseline.provenance["date"])
                     if baseline.provenance.get("date") else None)
    return when.replace(tzinfo=datetime.timezone.utc) if when and when.tzinfo is None else when


def unchanged_sessions(points: Sequence[Point], baseline: Baseline, paired: set[int],
                       start: datetime.datetime | None) -> list[StoredSession]:
    """One case's sessions that count, oldest first: its baseline's workload version, since ``start``, no plant, no
    A/B reference beside it (``paired``), with a value of a metric the baseline gates."""
    results: dict[int, list[Point]] = defaultdict(list)
    for point in points:
        results[point.result_id].append(point)
    sessions = []
    for values in results.values():
        first, by_metric = values[0], {point.metric: point.value for point in values}
        medians = {metric: by_metric[metric] for metric in baseline.metrics if metric in by_metric}
        recorded = first.recorded_at if first.recorded_at.tzinfo else first.recorded_at.replace(
            tzinfo=datetime.timezone.utc)
        if (medians and first.workload_version == baseline.workload_version and first.result_id not in paired
                and not by_metric.get(PLANT) and (start is None or recorded >= start)):
            sessions.append(StoredSession(recorded.isoformat(), medians,
                                          by_metric.get(CALIBRATION_PROBE), first.commit))
    return sorted(sessions, key=lambda session: session.recorded_at)


def merged(stored: Sequence[StoredSession], new: Sequence[StoredSession]) -> tuple[StoredSession, ...]:
    """The sessions already stored and the new ones, each once, the newest MAX_SESSIONS (what the gate reads)."""
    by_time = {(session.recorded_at, session.commit): session for session in (*stored, *new)}
    return tuple(sorted(by_time.values(), key=lambda session: session.recorded_at))[-MAX_SESSIONS:]


def spread_rows(baseline: Baseline, sessions: Sequence[StoredSession]) -> list[tuple[str, ...]]:
    """What the stored sessions tell the gate, per metric, whatever the machine's probe (every session counted)."""
    rows = []
    for metric, reference in baseline.metrics.items():
        values = [session.medians[metric] for session in sessions if metric in session.medians]
        spread = SessionSpread.of(metric, values, "")
        if spread is None:
            rows.append((baseline.case, baseline.hardware_class, metric, str(len(values)), "", "", "", "",
                         "too few sessions to tell"))
            continue
        value, better, tolerance = reference.value, reference.better, reference.tolerance
        rows.append((baseline.case, baseline.hardware_class, metric, str(spread.sessions),
                     f"{spread.centre / value - 1:+.1%}", f"{spread.spread:.1%}", f"{tolerance:.1%}",
                     f"{spread.least_tolerance(value, better, tolerance):.1%}",
                     f"{spread.catchable(value, better, tolerance):.1%}"))
    return rows
