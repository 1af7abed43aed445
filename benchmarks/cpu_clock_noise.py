"""Which statistic of each clock varies least between launches of an unchanged build on this machine?

    for i in 1 2 3 4 5 6 7 8 9; do
      OMP_NUM_THREADS=1 PYTHONPATH=$PWD python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        workloads/openclip_train.py --model perfgate-ViT-tiny --device cpu --batch-size 32 --workers 0 \\
        --precision fp32 --steps 40 --no-count-flops --records runs/noise/$i.jsonl
    done
    python benchmarks/cpu_clock_noise.py runs/noise/*.jsonl

Reads each launch's step records (warm-up steps left out) and prints, per statistic, its value in every launch
and its coefficient of variation across them. CPU time is not a cure for a shared host: where the host slows a
vCPU's instructions (a neighbour on the same physical core, memory bandwidth, clocks) the CPU time of the same
work grows too, in spells of seconds, and the window's total carries every spell it met. The least CPU time of
any step, like the fastest step on the wall clock, keeps only what the quickest spell allowed.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfgate.records.steps import RunRecords, read_records  # noqa: E402

STATISTICS = {
    "wall: window samples/s": lambda s: sum(x.samples for x in s) / sum(x.step_s for x in s),
    "wall: fastest step samples/s": lambda s: max(x.samples / x.step_s for x in s),
    "CPU: window ms/sample": lambda s: 1000 * sum(x.cpu_s for x in s) / sum(x.samples for x in s),
    "CPU: least step ms/sample": lambda s: 1000 * min(x.cpu_s / x.samples for x in s),
    "CPU: median step ms/sample": lambda s: 1000 * statistics.median(x.cpu_s / x.samples for x in s),
}


def window(records: RunRecords, warmup: int) -> list:
    steps = [step for step in records.steps[warmup:] if step.cpu_s is not None]
    if not steps:
        raise SystemExit("a records file has no step with CPU time after the warm-up")
    return steps


def table(launches: list[list]) -> list[str]:
    """Per statistic: its range, its CV across launches, and the standard deviation of the log ratio of each
    launch to the one before it (the spread an A/B pair of two launches back to back would have)."""
    lines = ["| statistic | per launch | CV across launches | sd of consecutive launches' ratio |",
             "|---|---|---|---|"]
    for name, statistic in STATISTICS.items():
        values = [statistic(steps) for steps in launches]
        spread = statistics.stdev(values) / statistics.mean(values)
        consecutive = statistics.stdev(math.log(after / before) for before, after in zip(values, values[1:]))
        lines.append(f"| {name} | {min(values):.3f}..{max(values):.3f} | {spread:.1%} | {consecutive:.1%} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, nargs="+", help="one step-records file per launch, in launch order")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out at the start of each launch")
    args = parser.parse_args()
    if len(args.records) < 3:
        parser.error("give at least 3 launches' records")
    print("\n".join(table([window(read_records(path), args.warmup) for path in args.records])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
