"""What reading the instruction counter costs a step: one ``read`` syscall per thread counted at the start.

Opens the counter in a process of N threads (a rank's main thread, its intra-op and gloo threads) and times
``read``. Where the host has no hardware counter it times the kernel's software task clock instead, through the
same code, and says so: the syscall and the per-thread reads are the same.

    python benchmarks/instruction_counter_cost.py --threads 1 4 16

The budget: with the CPU clock's reads, within 0.5 % of a step (docs/clocks.md).
"""

from __future__ import annotations

import argparse
import sys
import threading
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.records.instructions import (INSTRUCTIONS, PERF_COUNT_SW_TASK_CLOCK, PERF_TYPE_SOFTWARE,  # noqa: E402
                                           CounterUnavailable, InstructionCounter)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--reads", type=int, default=20_000)
    args = parser.parse_args()
    event, name = INSTRUCTIONS, "instructions"
    try:
        InstructionCounter().open().close()
    except CounterUnavailable as exc:
        print(f"no instruction counter here ({exc}); timing the software task clock instead")
        event, name = (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK), "task clock"
    release = threading.Event()
    for threads in args.threads:
        idle = [threading.Thread(target=release.wait, daemon=True) for _ in range(threads - 1)]
        for thread in idle:
            thread.start()
        counter = InstructionCounter(event=event).open()
        seconds = min(timeit.repeat(counter.read, number=args.reads, repeat=5)) / args.reads
        print(f"{name}, {threads} threads counted: {seconds * 1e6:.1f} us per read")
        counter.close()
        release.set()
        for thread in idle:
            thread.join()
        release.clear()


if __name__ == "__main__":
    main()
