"""How much can A/B resolve on this runner? Predicts --perf-against's detection power from one session's noise.

    pytest tests_perf -k CASE --perf-against HEAD --perf-repeats 8 --perf-max-repeats 8 --basetemp runs/ab
    python benchmarks/ab_power.py runs/ab/*/result.json

An unchanged build judged against itself gives pairs whose log ratios are pure noise. Their standard
deviation is what a pair costs in resolution here; this script draws that many pairs from a normal
distribution of that spread (8 measured pairs are too few to resample), shifts them by a planted
slowdown, and decides each simulated case with the gate's own rules (stats.compare_pairs, decide, settle:
``--perf-repeats`` pairs first, one more while inconclusive, up to the cap). It answers "how often would a
5 % slowdown fail, and how often would an unchanged build cry wolf, with 5 or 8 pairs", in seconds, where
benchmarks/detection_power.py measures the same thing live in hours.

    python benchmarks/ab_power.py --pair-sd 0.014 0.036 0.07 --resolve 0.05 --caps 6 12 20

simulates given spreads instead, and ``--resolve R`` the rule of ``--perf-ab-resolve R``: a pass that cannot yet rule
out R measures another pair too, every look at the 99 % interval, and what is still open at the cap is counted as
unresolved. ``--narrow W`` simulates a rule that was considered for the default gate and not built: a pass whose 95 %
interval still reaches a slowdown of W measures another pair as well, within the cap, and passes there.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfgate.judge.ab import undecided  # noqa: E402
from perfgate.measure import stats  # noqa: E402
from perfgate.measure.metrics import METRICS  # noqa: E402


def pair_log_ratios(result: dict, metric: str) -> list[float]:
    """Per pair, log(candidate / reference) of a gated metric, oriented so that a slowdown is negative."""
    sign = 1.0 if METRICS[metric].better == "higher" else -1.0
    pairs = zip(result["reference"]["per_run"], result["per_run"])
    return [sign * math.log(cand["metrics"][metric] / ref["metrics"][metric]) for ref, cand in pairs]


def verdict(noise: list[float], slowdown: float, first: int, cap: int, tolerance: float,
            resolve: float | None = None, wall: tuple[list[float], float] | None = None,
            narrow: float | None = None) -> tuple[str, int]:
    """The gate's decision on simulated pairs: ``noise`` holds ``cap`` pair log ratios, before the plant; ``wall``, a
    second gated metric's (the wall clock beside the CPU clock) and its tolerance: the case is decided on both, by the
    gate's rules for when another pair is measured (``narrow``: see --narrow)."""
    metrics = [(noise, tolerance)] + ([wall] if wall else [])
    planted = math.log(1.0 + slowdown)
    pairs = first
    while True:
        decisions = []
        for logs, metric_tolerance in metrics:
            comparison = stats.compare_pairs([1.0] * pairs, [math.exp(x - planted) for x in logs[:pairs]],
                                             stats.paired_confidence(resolve))
            decision = stats.decide(comparison, "higher", metric_tolerance, resolve=resolve)
            if narrow is not None and decision.outcome == "pass" and comparison.worse("higher")[2] >= narrow:
                decision = stats.Decision("inconclusive", "a pass whose interval is wider than --narrow")
            decisions.append(decision)
        if not undecided({d.outcome for d in decisions}) or pairs >= cap:
            outcomes = [stats.settle(d).outcome for d in decisions]
            return next((o for o in ("FAIL", "unresolved") if o in outcomes), outcomes[0]), pairs
        pairs += 1


def predict(pair_sd: float, sizes: list[float], caps: list[int], first: int, tolerance: float, draws: int,
            seed: int, resolve: float | None = None, wall: tuple[float, float] | None = None,
            narrow: float | None = None) -> dict[int, dict[float, tuple[float, float, float]]]:
    """Per cap and planted size: the shares of simulated cases that fail and that end unresolved, and the mean pairs
    they took (``wall``: a second gated metric's pair spread and tolerance, drawn independently)."""
    rng = random.Random(seed)
    table: dict[int, dict[float, tuple[float, float, float]]] = {}
    for cap in caps:
        table[cap] = {}
        for size in sizes:
            outcomes = [verdict([rng.gauss(0.0, pair_sd) for _ in range(cap)], size, first, cap, tolerance, resolve,
                                ([rng.gauss(0.0, wall[0]) for _ in range(cap)], wall[1]) if wall else None,
                                narrow)
                        for _ in range(draws)]
            failed = sum(outcome == "FAIL" for outcome, _ in outcomes)
            unresolved = sum(outcome == "unresolved" for outcome, _ in outcomes)
            table[cap][size] = (failed / draws, unresolved / draws, statistics.fmean(pairs for _, pairs in outcomes))
    return table


def print_table(title: str, pair_sd: float, tolerance: float, args: argparse.Namespace) -> None:
    print(f"\n{title}, tolerance {tolerance:.1%}" + (f", --perf-ab-resolve {args.resolve:g}" if args.resolve else "")
          + (f", passes measured on while their interval reaches {args.narrow:.0%}" if args.narrow else "")
          + (f"; beside it a wall clock of pair sd {args.wall_sd:.1%}, tolerance {args.wall_tolerance:.1%}"
             if args.wall_sd is not None else "") + "\n")
    print("| pairs (first, cap) | " + " | ".join(f"{s:.0%} planted: failed{', unresolved' if args.resolve else ''} "
                                                f"(pairs)" for s in args.sizes) + " |")
    print("|---|" + "---|" * len(args.sizes))
    wall = (args.wall_sd, args.wall_tolerance) if args.wall_sd is not None else None
    table = predict(pair_sd, args.sizes, args.caps, args.first, tolerance, args.draws, args.seed, args.resolve, wall,
                    args.narrow)
    for cap, cells in table.items():
        cells_text = [f"{rate:.0%}{f', {open_:.0%}' if args.resolve else ''} ({pairs:.1f})"
                      for rate, open_, pairs in cells.values()]
        print(f"| {args.first}, {cap} | " + " | ".join(cells_text) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="*", help="result.json of A/B sessions of unchanged builds")
    parser.add_argument("--pair-sd", type=float, nargs="+", default=[],
                        help="simulate these standard deviations of the pairs' log ratios instead (0.03 = 3 %%)")
    parser.add_argument("--resolve", type=float, help="simulate --perf-ab-resolve with this fraction")
    parser.add_argument("--narrow", type=float, metavar="W",
                        help="simulate a rule not built: a pass whose 95 %% interval reaches a slowdown of W measures "
                        "another pair as well, within the cap")
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.0, 0.03, 0.05, 0.10])
    parser.add_argument("--caps", type=int, nargs="+", default=[5, 8, 12], help="--perf-max-repeats values")
    parser.add_argument("--first", type=int, default=3, help="--perf-repeats: pairs measured before deciding")
    parser.add_argument("--tolerance", type=float,
                        help="the tolerance to simulate (default: each metric's own in the session, by "
                        "--perf-ab-tolerance and the case's clocks)")
    parser.add_argument("--metrics", nargs="+", metavar="NAME",
                        help="read these recorded metrics' pairs instead of the gated ones (every run records each "
                        "clock's statistics; the tolerance is --tolerance, or 2 %%)")
    parser.add_argument("--wall-sd", type=float, help="also gate a second metric of this pair spread, as a CPU flavour "
                        "gates the wall clock's fastest step beside the CPU clock (drawn independently)")
    parser.add_argument("--wall-tolerance", type=float, default=0.06,
                        help="that second metric's tolerance (default %(default)s: the CPU flavour's wall floor)")
    parser.add_argument("--draws", type=int, default=4000, help="simulated cases per cell")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.results and not args.pair_sd:
        parser.error("give A/B sessions' result.json files, or --pair-sd")
    if args.narrow is not None and args.resolve is not None:
        parser.error("--narrow varies the default rule; --resolve has its own (a pass must rule R out)")

    for pair_sd in args.pair_sd:
        print_table(f"pair sd {pair_sd:.1%}", pair_sd, 0.02 if args.tolerance is None else args.tolerance, args)
    for path in args.results:
        result = json.loads(path.read_text())
        if "reference" not in result:
            sys.exit(f"{path}: not an A/B session (no reference runs): run it with --perf-against")
        rows = result["metrics"] if not args.metrics else [{"metric": name, "tolerance": 0.02} for name in args.metrics]
        for row in rows:
            logs = pair_log_ratios(result, row["metric"])
            if len(logs) < 3:
                sys.exit(f"{path}: {len(logs)} pair(s) of {row['metric']}; measure at least 3 (8 is better)")
            pair_sd = statistics.stdev(logs)
            seconds = result.get("time_to_verdict_s")
            per_pair = f", {seconds / len(logs):.0f} s per pair" if seconds else ""
            print_table(f"{result['case']} {row['metric']}: {len(logs)} pairs, pair sd {pair_sd:.1%}, mean "
                        f"{statistics.fmean(logs):+.1%}{per_pair}", pair_sd,
                        row["tolerance"] if args.tolerance is None else args.tolerance, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
