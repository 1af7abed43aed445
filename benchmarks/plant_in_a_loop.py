"""Does the CPU plant move the fastest step by F, step by step? The real StepRecorder and SlowdownInjector in one
process, on the clocks a CPU rank uses (the wall clock, the process's CPU time), around steps of fixed CPU work; each
round runs the loop unplanted and planted, and a size's ratio is the unplanted fastest step over the planted one.

    python benchmarks/plant_in_a_loop.py                      # beside two busy processes, 8 rounds, F 5 % and 20 %
    python benchmarks/plant_in_a_loop.py --load none

A busy wait that ends a scheduler slice late is where a plant can go wrong beside other work: an overrun taken off the
next step's plant left that step short of F, and the fastest step was often it (docs/measurements.md). No torchrun:
the launches' own noise would bury what the plant does to one step (benchmarks/planted_slowdown.py measures that).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from background_load import busy_processes  # noqa: E402

from perfgate.rank.plant import SlowdownInjector  # noqa: E402
from perfgate.records.steps import StepRecorder  # noqa: E402


def work(seconds: float) -> None:
    """``seconds`` of this thread's CPU time: the same work in every step, however the cores are shared."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


def fastest_step(fraction: float, steps: int, step_s: float, scratch: Path) -> float:
    recorder = StepRecorder(scratch / f"{fraction}-{time.monotonic_ns()}.jsonl", device_type="cpu")
    injector = SlowdownInjector(fraction, "cpu", recorder.step_times, targets=lambda: None)
    gc.collect()
    gc.disable()
    try:
        recorder.begin()
        injector.begin()
        for step in range(steps):
            work(step_s)
            injector.pause()
            recorder.end_step(step, samples=1, data_s=0.0, lr=None, scalars={})
        recorder.close()
    finally:
        gc.enable()
    return min(recorder.step_times[2:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.05, 0.2])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="steps a loop (the first two left out)")
    parser.add_argument("--step-s", type=float, default=0.05, help="CPU seconds of work a step")
    parser.add_argument("--load", choices=("none", "busy"), default="busy")
    args = parser.parse_args()
    load = busy_processes if args.load == "busy" else contextlib.nullcontext
    print("| planted | expected ratio | median | least | most | rounds |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="perfgate-plant-loop-") as scratch, load():
        for size in args.sizes:
            ratios = [fastest_step(0.0, args.steps, args.step_s, Path(scratch))
                      / fastest_step(size, args.steps, args.step_s, Path(scratch)) for _ in range(args.rounds)]
            print(f"| {size:.0%} | {1 / (1 + size):.4f} | {statistics.median(ratios):.4f} | {min(ratios):.4f} | "
                  f"{max(ratios):.4f} | {args.rounds} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
