"""What the live sessions of benchmarks/live_sessions.sh decided: per condition (plant, quiet or loaded), the
case-sessions, their verdicts, the share of unchanged ones that FAILed, the share of planted ones that FAILed, the
smallest slowdown each verdict said it catches (the model's figure, its median), and how many plants at or above that
figure FAILed.

    python benchmarks/live_summary.py results/live

    python benchmarks/live_summary.py results/live --rejudge baselines

judges every kept session again with the model of this checkout (its priors, say), against the baseline file and the
case's other unchanged sessions (all of them but the one judged: a replay, which knows the sessions after it too;
with ``--before-only``, those before it alone, as the live gate knew them), from the launches each recorded; the table
is then the one above, for that judge. ``--first-look K`` judges each as a gate that looks first after K launches and
launches again while the model says one more pays (up to the launches recorded): the launches it would have spent are
then in the table (the sessions it is judged against keep all of theirs). ``--turns-slopes`` prints how each case's
wall-clock metric moved with the window's run-queue turns over the unchanged sessions: what the prior's
``run_queue_slope`` should hold.

It also keeps each session's records for the script (``--keep``, ``--newest-record``)."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfgate.judge import baselines, model  # noqa: E402
from perfgate.measure.metrics import METRICS, PROBES, RUN_QUEUE_TURNS  # noqa: E402
from perfgate.trend.database import ResultsDatabase  # noqa: E402

ORDER = ("FAIL", "unresolved", "stale", "pass")
TOLERANCES = {"wall": 0.06, "cpu": 0.05}
"""A CPU flavour's default least tolerances (config/cases.py), as the live sessions' cases have them."""


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


def probes_of(runs: list[dict]) -> dict[str, float]:
    """A session's probe readings: each one's median over its launches."""
    found: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for name in PROBES:
            if run["metrics"].get(name):
                found[name].append(run["metrics"][name])
    return {name: statistics.median(values) for name, values in found.items()}


def rejudged(sessions: list[dict], baseline_dir: Path, before_only: bool = False, first_look: int | None = None
             ) -> list[dict]:
    """The sessions, each case's record judged again by the model (leave one out among the unchanged sessions, or
    ``before_only``: the unchanged sessions before it). With ``first_look``, as a gate that looks first after that many
    launches and then launches again while the model says one more pays, from the launches the record holds."""
    again = []
    for index, session in enumerate(sessions):
        cases = {}
        for case, record in session["cases"].items():
            baseline = baselines.load(baseline_dir / record["hardware_class"] / f"{case}.json")
            if baseline is None or not record.get("per_run"):
                continue
            others = [other["cases"][case] for number, other in enumerate(sessions)
                      if (number < index if before_only else number != index) and not other["plant"]
                      and case in other["cases"]]
            recorded = len(record["per_run"])
            launches = min(first_look or recorded, recorded)
            while True:
                effects = judged(record, baseline, others, launches)
                verdicts = {effect.verdict for effect in effects}
                if "FAIL" in verdicts or launches >= recorded or not any(e.another_launch_pays() for e in effects):
                    break
                launches += 1
            verdict = next(v for v in ORDER if v in verdicts)
            rows = [{"verdict": effect.verdict, "catchable": effect.catchable} for effect in effects]
            cases[case] = {**record, "verdict": verdict, "metrics": rows, "launches": launches}
        again.append({**session, "cases": cases})
    return again


def judged(record: dict, baseline: baselines.Baseline, others: list[dict], launches: int) -> list[model.Effect]:
    """Each gated metric's effect from the record's first ``launches`` launches."""
    measured, runs = baseline.provenance.get("measured", {}), record["per_run"][:launches]
    effects = []
    for metric, reference in baseline.metrics.items():
        info = METRICS[metric]
        values = [run["metrics"][metric] for run in runs if run["metrics"].get(metric)]
        if not values:
            continue
        own = model.session_of(list(reference.samples), info.better, {k: measured.get(k) for k in PROBES})
        this = model.session_of(values, info.better, probes_of(runs))
        stored = [model.stored_session(statistics.median(run["metrics"][metric] for run in other["per_run"]),
                                       info.better, probes_of(other["per_run"])) for other in others]
        effects.append(model.estimate(this, own, stored, clock=info.clock, kind="cpu",
                                      tolerance=TOLERANCES[info.clock], metrics=len(baseline.metrics)))
    return effects


def turns_slopes(sessions: list[dict]) -> str:
    """Per case and wall-clock gated metric, how its launches' log values moved with their log run-queue turns over the
    unchanged sessions, quiet and loaded (least squares, one point a launch): the slope the model's prior for the
    turns should hold (judge/model.py PRIORS), with its standard error."""
    points: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for session in sessions:
        if session["plant"]:
            continue
        for case, record in session["cases"].items():
            for row in record.get("metrics") or []:
                info = METRICS[row["metric"]]
                if info.clock != "wall":
                    continue
                for run in record["per_run"]:
                    turns, value = run["metrics"].get(RUN_QUEUE_TURNS), run["metrics"].get(row["metric"])
                    if turns and value:
                        points[case, row["metric"]].append((math.log(turns), model.oriented(value, info.better)))
    lines = ["| case | metric | launches | run-queue turns (range) | slope | its standard error |",
             "|---|---|---|---|---|---|"]
    slopes = []
    for (case, metric), found in sorted(points.items()):
        x, y = (np.array(values) for values in zip(*found))
        if len(found) < 3 or np.ptp(x) == 0:
            continue
        fit = scipy_stats.linregress(x, y)
        slopes.append(fit.slope)
        lines.append(f"| {case} | {metric} | {len(found)} | {math.exp(x.min()):.2f}-{math.exp(x.max()):.2f} | "
                     f"{fit.slope:.2f} | {fit.stderr:.2f} |")
    if len(slopes) > 1:
        lines.append(f"\nmean {statistics.fmean(slopes):.2f}, sd {statistics.stdev(slopes):.2f} over "
                     f"{len(slopes)} cases")
    return "\n".join(lines)


def summarise(sessions: list[dict]) -> str:
    verdicts: dict[tuple[float, str], Counter] = defaultdict(Counter)
    figures: dict[tuple[float, str], list[float]] = defaultdict(list)
    caught_above: dict[tuple[float, str], list[bool]] = defaultdict(list)
    launches: dict[tuple[float, str], list[int]] = defaultdict(list)
    counted: Counter = Counter()
    for session in sessions:
        key = (session["plant"], session["load"])
        counted[key] += 1
        for record in session["cases"].values():
            verdicts[key][record["verdict"]] += 1
            launches[key].append(record.get("launches") or len(record["per_run"]))
            stated = figure(record)
            if stated is not None:
                figures[key].append(stated)
                if session["plant"] and session["plant"] >= stated:
                    caught_above[key].append(record["verdict"] == "FAIL")
    lines = ["| plant | load | sessions | case-sessions | launches a case | verdicts | FAIL | stated figure (median) | "
             "plants at or above it: FAIL |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(verdicts):
        counts = verdicts[key]
        total = sum(counts.values())
        shown = ", ".join(f"{count} {verdict}" for verdict, count in counts.most_common())
        median = f"{statistics.median(figures[key]):.0%}" if figures[key] else "-"
        above = caught_above[key]
        lines.append(f"| {key[0]:.0%} | {key[1]} | {counted[key]} | {total} | {statistics.mean(launches[key]):.1f} | "
                     f"{shown} | "
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
    parser.add_argument("--before-only", action="store_true",
                        help="with --rejudge, judge each session by the unchanged sessions before it alone")
    parser.add_argument("--turns-slopes", action="store_true",
                        help="print how each case's wall-clock metric moved with the window's run-queue turns")
    parser.add_argument("--first-look", type=int, metavar="K",
                        help="with --rejudge, judge each session as a gate that looks first after K launches, then "
                             "launches again while one more pays")
    parser.add_argument("--rejudge", type=Path, metavar="BASELINE_DIR",
                        help="judge the sessions again with this checkout's model against these baselines")
    args = parser.parse_args()
    if args.newest_record:
        print(max(records_after(args.path, 0), default=0))
    elif args.keep:
        args.history = args.path
        keep(args)
    else:
        sessions = [json.loads(path.read_text()) for path in sorted(args.path.glob("*.json"))]
        if args.first_look is not None and (args.first_look < 1 or not args.rejudge):
            parser.error("--first-look K needs --rejudge and K >= 1")
        if args.turns_slopes:
            print(turns_slopes(sessions))
            return 0
        judged = rejudged(sessions, args.rejudge, args.before_only, args.first_look) if args.rejudge else sessions
        print(summarise(judged))
    return 0


if __name__ == "__main__":
    sys.exit(main())
