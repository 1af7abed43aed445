"""What the live sessions of benchmarks/live_sessions.sh decided: per condition (plant, quiet or loaded), the
case-sessions, their verdicts, the share of unchanged ones that FAILed, the share of planted ones that FAILed, the
smallest slowdown each verdict said it catches (the model's figure, its median), and how many plants at or above that
figure FAILed.

    python benchmarks/live_summary.py results/live

It also keeps each session's records for the script (``--keep``, ``--newest-record``)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfgate.trend.database import ResultsDatabase  # noqa: E402


def records_after(history: Path, after: int) -> dict[int, dict]:
    if not history.exists():
        return {}
    database = ResultsDatabase(str(history), create=False)
    try:
        return {key: result.to_json() for key, result in database.records().items() if key > after}
    finally:
        database.close()


def keep(args: argparse.Namespace) -> None:
    records = records_after(args.history, args.after)
    session = {"started": args.started, "plant": args.plant, "load": args.load,
               "cases": {record["case"]: record for record in records.values()}}
    args.keep.write_text(json.dumps(session, indent=1) + "\n")


def figure(record: dict) -> float | None:
    """The smallest slowdown the model's verdict said it catches: the least of its gated metrics' (the case FAILs where
    one of them does), as benchmarks/verdict_model.py states it."""
    found = [row["catchable"] for row in record.get("metrics") or [] if row.get("catchable") is not None]
    return min(found) if found else None


def summarise(directory: Path) -> str:
    verdicts: dict[tuple[float, str], Counter] = defaultdict(Counter)
    figures: dict[tuple[float, str], list[float]] = defaultdict(list)
    caught_above: dict[tuple[float, str], list[bool]] = defaultdict(list)
    sessions: Counter = Counter()
    for path in sorted(directory.glob("*.json")):
        session = json.loads(path.read_text())
        key = (session["plant"], session["load"])
        sessions[key] += 1
        for record in session["cases"].values():
            verdicts[key][record["verdict"]] += 1
            stated = figure(record)
            if stated is not None:
                figures[key].append(stated)
                if session["plant"] and session["plant"] >= stated:
                    caught_above[key].append(record["verdict"] == "FAIL")
    lines = ["| plant | load | sessions | case-sessions | verdicts | FAIL | stated figure (median) | plants at or above it: FAIL |",
             "|---|---|---|---|---|---|---|---|"]
    for key in sorted(verdicts):
        counts = verdicts[key]
        total = sum(counts.values())
        shown = ", ".join(f"{count} {verdict}" for verdict, count in counts.most_common())
        median = f"{statistics.median(figures[key]):.0%}" if figures[key] else "-"
        above = caught_above[key]
        lines.append(f"| {key[0]:.0%} | {key[1]} | {sessions[key]} | {total} | {shown} | "
                     f"{counts['FAIL']} ({counts['FAIL'] / total:.1%}) | {median} | "
                     f"{sum(above)} of {len(above)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="the sessions' directory, or with --keep the results history")
    parser.add_argument("--newest-record", action="store_true", help="print the history's newest record id")
    parser.add_argument("--keep", type=Path, help="write the records after --after to this file")
    parser.add_argument("--after", type=int, default=0)
    parser.add_argument("--started", default="")
    parser.add_argument("--plant", type=float, default=0.0)
    parser.add_argument("--load", default="quiet")
    args = parser.parse_args()
    if args.newest_record:
        print(max(records_after(args.path, 0), default=0))
    elif args.keep:
        args.history = args.path
        keep(args)
    else:
        print(summarise(args.path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
