"""How well does `perfgate trend` find change points, and how fast? Synthetic series with Gaussian noise.

    python benchmarks/change_points.py                  # 100 series per shape, 1 % noise
    python benchmarks/change_points.py --series 200 --noise 0.02

Shapes: a flat series (any change point is a false alarm), one 3 % step at result 40 of 80, five 1.5 % steps
(creep) 20 and 30 results apart, and six results whose last three are 20 % lower (the end-to-end test's
shape, with 2 % noise). Prints a Markdown table: how often each was found as built, and the time per series.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from perfgate.trend.changepoints import change_points


def steps(length: int, starts: list[int], factor: float, noise: float, rng: np.random.Generator) -> list[float]:
    values = 100 * (1 + noise * rng.standard_normal(length))
    for start in starts:
        values[start:] *= factor
    return list(values)


def found(values: list[float], starts: list[int], slack: int) -> tuple[bool, int, int]:
    """(exactly the built change points, how many of them were found, how many others were reported)."""
    indices = [point.index for point in change_points(values)]
    hits = sum(any(abs(i - s) <= slack for i in indices) for s in starts)
    others = sum(not any(abs(i - s) <= slack for s in starts) for i in indices)
    return hits == len(starts) and others == 0, hits, others


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--noise", type=float, default=0.01)
    args = parser.parse_args()
    shapes = {
        "flat, 80 results: no change point": (80, [], 1.0, args.noise, 0),
        "3 % step at 40 of 80: found at 40 +-1, nothing else": (80, [40], 0.97, args.noise, 1),
        "five 1.5 % steps, 20 apart (120): all five +-2": (120, [20, 40, 60, 80, 100], 0.985, args.noise, 2),
        "five 1.5 % steps, 30 apart (180): all five +-2": (180, [30, 60, 90, 120, 150], 0.985, args.noise, 2),
        "6 results, last 3 20 % lower, 2 % noise: found at 3": (6, [3], 0.8, 0.02, 0),
    }
    print("| shape | exactly as built | built steps found | other change points | ms per series |\n"
          "|---|---|---|---|---|")
    for name, (length, starts, factor, noise, slack) in shapes.items():
        rng = np.random.default_rng(0)
        exact = hits = others = 0
        began = time.perf_counter()
        for _ in range(args.series):
            one = found(steps(length, starts, factor, noise, rng), starts, slack)
            exact, hits, others = exact + one[0], hits + one[1], others + one[2]
        elapsed = (time.perf_counter() - began) / args.series * 1000
        built = f"{hits}/{len(starts) * args.series}" if starts else "-"
        print(f"| {name} | {exact}/{args.series} | {built} | {others} | {elapsed:.1f} |")


if __name__ == "__main__":
    main()
