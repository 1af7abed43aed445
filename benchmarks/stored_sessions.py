"""How would a clone with no results history have judged each session, had the case's other sessions been stored
with its baseline (``perfgate store-sessions``)?

    python benchmarks/stored_sessions.py --history results/history.db --baseline-dir baselines

Reads every judged stored-baseline session of each case that the history holds, at its baseline's workload version
(``make perf`` sessions since the baseline, say, hours apart, some with ``--perf-inject-slowdown``; give it a
history of sessions since the baseline, as ``perfgate store-sessions`` reads one) and decides each again by the
gate's rules from what it recorded: its runs' verdicts against the baseline alone, its machine-speed probe, and the
case's *other* unchanged sessions (leave one out) as ``perfgate store-sessions`` would have stored them
(judge.session_spread.stored, with its machine filter, and those on a machine as fast or faster, to excuse only,
where too few ran on a like machine: session_spread.stored_judging). Prints, per case, how many unchanged sessions
FAILed as recorded, as decided with no other session stored (a new class's first sessions, today's rules) and as
decided with the others stored, how many planted ones FAILed each way, how many of the plants at least as large as
the figure the gate gave them FAILed, and the smallest slowdown the gate said a stored baseline catches there. A
session's runs are those it recorded: a rule that would have asked for more runs cannot be replayed.

    python benchmarks/stored_sessions.py --history results/history.db --with-stored

also counts the sessions each baseline file already stores (sessions of other hours or days, stored before the
history's) among every session's others: give it the baselines as they were before the history's sessions were
stored, or those sessions count twice.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from detection_power import RecordedVerdict, recorded_alone  # noqa: E402

from perfgate.judge import baselines, machine_drop, session_spread  # noqa: E402
from perfgate.judge.baselines import StoredSession  # noqa: E402
from perfgate.judge.gate import machine_rules  # noqa: E402
from perfgate.measure.metrics import CALIBRATION_PROBE  # noqa: E402
from perfgate.result import Result  # noqa: E402
from perfgate.trend.database import ResultsDatabase  # noqa: E402
from perfgate.trend.sessions import JUDGED  # noqa: E402


def sessions_of(url: str) -> dict[tuple[str, str], list[Result]]:
    """Each case's judged stored-baseline sessions (not A/B, no failed launch), oldest first, by case and class."""
    database = ResultsDatabase(url, create=False)
    try:
        records = database.records()
    finally:
        database.close()
    found = defaultdict(list)
    for _, result in sorted(records.items()):
        if (result.reference is None and result.verdict in JUDGED and result.metrics
                and all("against_baseline" in row for row in result.metrics)):
            found[result.case, result.hardware_class].append(result)
    return found


def as_stored(order: int, result: Result) -> StoredSession:
    """A session as ``perfgate store-sessions`` keeps it: its gated medians and probe (in history order)."""
    return StoredSession(f"{order:06}", {row["metric"]: result.measured[row["metric"]] for row in result.metrics
                                         if result.measured.get(row["metric"])},
                         result.measured.get(CALIBRATION_PROBE))


def decided(result: Result, others: list[Result], measured: dict, stored: Sequence[StoredSession] = ()
            ) -> tuple[str, list[dict]]:
    """The session's outcome with ``stored`` (already in the baseline file, older) and ``others`` (unchanged
    sessions of the history) stored with the baseline."""
    rows, now = result.metrics, result.measured
    sessions = [*stored, *(as_stored(order, other) for order, other in enumerate(others))]
    metrics = [row["metric"] for row in rows]
    spreads = session_spread.stored_judging(sessions, metrics, now.get(CALIBRATION_PROBE), "the other sessions")
    raw = [row.get("against_baseline") or recorded_alone(row["verdict"]) for row in rows]
    verdicts = [RecordedVerdict.of(row, alone) for row, alone in zip(rows, raw)]
    outcomes, spread_rows, _ = machine_rules(spreads, verdicts, raw, machine_drop.probe_drop(measured, now, "wall"),
                                             machine_drop.probe_drop(measured, now, "cpu"),
                                             machine_drop.turns_taken(measured, now), cpu_flavour=True)
    outcome = "FAIL" if "FAIL" in outcomes else "unresolved" if "unresolved" in outcomes else "pass"
    return outcome, spread_rows


def figure(rows: Sequence[dict]) -> float | None:
    """The smallest slowdown the gate said a stored baseline catches in this session (its spread rows): the least of
    its metrics' figures from sessions like it; None where too few were like it to give one."""
    like = [row["catchable"] for row in rows if not row["unlike"]]
    return min(like) if like else None


def at_or_above_figure(planted: Sequence[tuple[float, str, Sequence[dict]]]) -> list[str]:
    """The outcomes of the plants (size, outcome, spread rows) at least as large as the figure the gate gave them:
    each of these the gate promised to FAIL 9 times in 10."""
    return [outcome for size, outcome, rows in planted if (least := figure(rows)) is not None and size >= least]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", default="results/history.db", help="the results database (make perf's)")
    parser.add_argument("--baseline-dir", type=Path, default=REPO / "baselines")
    parser.add_argument("--with-stored", action="store_true",
                        help="count the sessions each baseline file already stores among every session's others")
    args = parser.parse_args()
    print("| case | unchanged sessions | FAIL as recorded | FAIL with none stored | FAIL with the others stored | "
          "unresolved | planted (size): FAIL as recorded / with none stored / with the others stored | planted at or "
          "above its figure: FAIL | catches (median, unchanged sessions) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (case, hardware_class), results in sorted(sessions_of(args.history).items()):
        baseline = baselines.load(args.baseline_dir / hardware_class / f"{case}.json")
        if baseline is None:
            continue
        measured = baseline.provenance.get("measured", {})
        stored = baseline.sessions if args.with_stored else ()
        results = [r for r in results if r.workload_version == baseline.workload_version]
        unchanged = [r for r in results if not r.injected_slowdown]
        planted = [r for r in results if r.injected_slowdown]
        again = [decided(r, [o for o in unchanged if o is not r], measured, stored) for r in unchanged]
        plants = [(r.injected_slowdown, *decided(r, unchanged, measured, stored)) for r in planted]
        caught = [outcome for _, outcome, _ in plants]
        cold = [decided(r, [], measured)[0] for r in unchanged]
        cold_caught = [decided(r, [], measured)[0] for r in planted]
        promised = at_or_above_figure(plants)
        sizes = ", ".join(f"{size:.0%}" for size in sorted({r.injected_slowdown for r in planted}))
        catches = [least for _, rows in again if (least := figure(rows)) is not None]
        print(f"| {case} | {len(unchanged)} | {sum(r.verdict == 'FAIL' for r in unchanged)} | {cold.count('FAIL')} | "
              f"{sum(outcome == 'FAIL' for outcome, _ in again)} | {sum(outcome == 'unresolved' for outcome, _ in again)}"
              f" | ({sizes or '-'}): {sum(r.verdict == 'FAIL' for r in planted)} / {cold_caught.count('FAIL')} / "
              f"{caught.count('FAIL')} of "
              f"{len(planted)} | {promised.count('FAIL')} of {len(promised)} | "
              f"{f'{statistics.median(catches):.1%}' if catches else '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
