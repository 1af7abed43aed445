"""``perfgate trend``: the change points of every series in the results database, and, with
``--fail-on-regression``, a non-zero exit when a series' newest segment is a regression (the nightly job)."""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from perfgate.report.terminal import table
from perfgate.trend import changepoints
from perfgate.trend.analysis import CHANGE_HEADER, change_rows, figure, series
from perfgate.trend.database import DatabaseError, ResultsDatabase

DEFAULT_HISTORY = "results/history.db"


def add_history_option(parser: argparse.ArgumentParser) -> None:
    """--history, as every command that reads the results database takes it."""
    parser.add_argument("--history", default=DEFAULT_HISTORY, metavar="URL",
                        help=f"the results database: a SQLite path or postgresql://USER@HOST/DB (default: "
                        f"{DEFAULT_HISTORY}, as --perf-history and make perf write)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfgate trend",
        description="Find the change points of each case's results (case x hardware class x metric) in the results "
        "database with Apache Otava's E-divisive method, print each one (commit, date, mean before -> after, change, "
        "p-value), draw the series, and with --fail-on-regression exit 1 when a series' newest segment is a "
        "regression.")
    parser.add_argument("cases", nargs="*", metavar="CASE", help="case ids or globs (default: every case)")
    add_history_option(parser)
    parser.add_argument("--hardware-class", help="only this hardware class")
    parser.add_argument("--metric", help="only this metric (default: the metrics the gate judged)")
    parser.add_argument("--since", type=datetime.date.fromisoformat, metavar="YYYY-MM-DD",
                        help="only results recorded since this date")
    parser.add_argument("--png", type=Path, help="draw each series with its change points and segment means")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="exit 1 when a series' newest segment is significantly worse than the one before")
    parser.add_argument("--max-pvalue", type=float, default=changepoints.MAX_PVALUE,
                        help=f"significance of a change point (default {changepoints.MAX_PVALUE})")
    parser.add_argument("--min-change", type=float, default=changepoints.MIN_CHANGE,
                        help="smallest change of the mean that counts, as a fraction "
                             f"(default {changepoints.MIN_CHANGE})")
    parser.add_argument("--min-segment", type=int, default=changepoints.MIN_SEGMENT,
                        help=f"results needed on each side of a change point (default {changepoints.MIN_SEGMENT})")
    return parser


def main(argv: list[str]) -> int:
    """Exit 0, 1 (--fail-on-regression found one) or 2 (no usable database)."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except DatabaseError as exc:
        print(f"perfgate: error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    database = ResultsDatabase(args.history, create=False)
    try:
        since = (datetime.datetime.combine(args.since, datetime.time(), datetime.timezone.utc)
                 if args.since else None)
        points = database.points(args.cases, args.hardware_class, args.metric, since)
    finally:
        database.close()
    if not args.metric:
        points = [point for point in points if point.gated]
    if not points:
        raise DatabaseError(f"no results{' matching ' + ' '.join(args.cases) if args.cases else ''} in "
                            f"{database.shown}: run the suite with --perf-history {database.shown} first")
    found = series(points, max_pvalue=args.max_pvalue, min_change=args.min_change, min_segment=args.min_segment)
    print(f"perfgate trend: {len(found)} series, {len({p.result_id for p in points})} result(s) in {database.shown}")
    older = len({p.result_id for p in points}) - len({p.result_id for one in found for p in one.points})
    if older:
        print(f"perfgate trend: {older} result(s) of earlier workload versions left out: they measured other work")
    rows = change_rows(found)
    print("\n".join(table(rows, CHANGE_HEADER)) if rows else "no change point in any series")
    if args.png:
        args.png.parent.mkdir(parents=True, exist_ok=True)
        figure(found).savefig(args.png, dpi=100)
        print(f"wrote {args.png}")
    regressions = [(one, one.newest_regression) for one in found if one.newest_regression]
    for one, change in regressions:
        first = one.points[change.index]
        print(f"perfgate trend: {one.name} regressed {change.change:+.1%} ({change.before:,.4g} -> "
              f"{change.after:,.4g} {one.unit}, p {change.pvalue:.1e}) since commit {first.commit or '?'}, result "
              f"#{change.index + 1} of {len(one.points)} recorded {first.recorded_at:%Y-%m-%d %H:%M}")
    return 1 if regressions and args.fail_on_regression else 0
