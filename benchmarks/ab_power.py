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

from perfgate.measure import stats  # noqa: E402
from perfgate.measure.metrics import METRICS  # noqa: E402


def pair_log_ratios(result: dict, metric: str) -> list[float]:
    """Per pair, log(candidate / reference) of a gated metric, oriented so that a slowdown is negative."""
    sign = 1.0 if METRICS[metric].better == "higher" else -1.0
    pairs = zip(result["reference"]["per_run"], result["per_run"])
    return [sign * math.log(cand["metrics"][metric] / ref["metrics"][metric]) for ref, cand in pairs]


def verdict(noise: list[float], slowdown: float, first: int, cap: int, tolerance: float) -> tuple[str, int]:
    """The gate's decision on simulated pairs: ``noise`` holds ``cap`` pair log ratios, before the plant."""
    logs = [x - math.log(1.0 + slowdown) for x in noise]
    pairs = first
    while True:
        comparison = stats.compare_pairs([1.0] * pairs, [math.exp(x) for x in logs[:pairs]])
        decision = stats.decide(comparison, "higher", tolerance)
        if decision.outcome != "inconclusive" or pairs >= cap:
            return stats.settle(decision).outcome, pairs
        pairs += 1


def predict(pair_sd: float, sizes: list[float], caps: list[int], first: int, tolerance: float, draws: int,
            seed: int) -> dict[int, dict[float, tuple[float, float]]]:
    """Per cap and planted size: the share of simulated cases that fail, and the mean pairs they took."""
    rng = random.Random(seed)
    table: dict[int, dict[float, tuple[float, float]]] = {}
    for cap in caps:
        table[cap] = {}
        for size in sizes:
            outcomes = [verdict([rng.gauss(0.0, pair_sd) for _ in range(cap)], size, first, cap, tolerance)
                        for _ in range(draws)]
            failed = sum(outcome == "FAIL" for outcome, _ in outcomes)
            table[cap][size] = (failed / draws, statistics.fmean(pairs for _, pairs in outcomes))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="result.json of A/B sessions of unchanged builds")
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.0, 0.03, 0.05, 0.10])
    parser.add_argument("--caps", type=int, nargs="+", default=[5, 8, 12], help="--perf-max-repeats values")
    parser.add_argument("--first", type=int, default=3, help="--perf-repeats: pairs measured before deciding")
    parser.add_argument("--tolerance", type=float,
                        help="the tolerance to simulate (default: each metric's own in the session, by --perf-ab-tolerance "
                        "and the case's clocks)"),
    parser.add_argument("--metrics", nargs="+", metavar="NAME",
                        help="read these recorded metrics' pairs instead of the gated ones (every run records each "
                        "clock's statistics; the tolerance is --tolerance, or 2 %%)")
    parser.add_argument("--draws", type=int, default=4000, help="simulated cases per cell")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

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
            print(f"\n{result['case']} {row['metric']}: {len(logs)} pairs, pair sd {pair_sd:.1%}, "
                  f"mean {statistics.fmean(logs):+.1%}{per_pair}\n")
            print("| pairs (first, cap) | " + " | ".join(f"{s:.0%} planted: failed (pairs)" for s in args.sizes) + " |")
            print("|---|" + "---|" * len(args.sizes))
            tolerance = row["tolerance"] if args.tolerance is None else args.tolerance
            print(f"tolerance {tolerance:.1%}\n")
            table = predict(pair_sd, args.sizes, args.caps, args.first, tolerance, args.draws, args.seed)
            for cap, cells in table.items():
                print(f"| {args.first}, {cap} | " + " | ".join(f"{rate:.0%} ({pairs:.1f})"
                                                          for rate, pairs in cells.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
