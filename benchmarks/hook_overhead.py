"""Does counting an unmodified script's optimizer steps slow it down? Two measures:

- the hook's own cost per step, in one process: blocks of optimizer steps alternately plain and followed by the
  hook (what it adds: the step record, the plant's check), the fastest block of each kind compared; precise to
  a microsecond, so it says what share of a step of any length the hook takes;
- whole launches of the own-style test script (tests/own_script/train.py, 2 gloo ranks), alternately as it is
  and under OptimizerSteps' wrapper, timed by the script's own per-step log lines, the one clock both share.
  On a shared VM whole launches differ by more than the budget, so this is the check on a quiet machine.

    python benchmarks/hook_overhead.py                 # 10 pairs of 60 iterations, first 10 left out
    python benchmarks/hook_overhead.py --load busy     # beside two busy processes

The budget: within 0.5 % of a step on CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from background_load import busy_processes  # noqa: E402

from perfgate.launch.local import launch  # noqa: E402
from perfgate.rank import instrument  # noqa: E402
from perfgate.launch.spec import LaunchSpec  # noqa: E402
from perfgate.records.sources import LogLines  # noqa: E402

SCRIPT = REPO / "tests" / "own_script" / "train.py"
LOGGED = LogLines(r"iter (?P<step>\d+) .*step_time (?P<step_s>[\d.]+)s", samples_per_step=1)


def median_step(run_dir: Path, wrapped: bool, iterations: int, skip: int) -> float:
    """One launch; the median of the script's own logged step times after ``skip`` iterations."""
    program = [str(SCRIPT), f"--max-iters={iterations}", f"--config={SCRIPT.parent / 'configs' / 'small.cfg'}"]
    entry = (["-m", "perfgate.rank.instrument", "--records", str(run_dir / "steps.jsonl"), "--steps",
              str(iterations), "--samples-per-step", "64", "--", *program] if wrapped else program)
    launch(LaunchSpec(entry=entry, workdir=run_dir, procs_per_node=2, timeout_s=600,
                      env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}))
    steps = LOGGED.read(run_dir).steps
    return statistics.median(s.step_s for s in steps if s.step >= skip)


def hook_cost_s(scratch: Path, steps: int = 2000, blocks: int = 10) -> float:
    """Seconds the hook adds to one optimizer step (rank 0, recording): fastest hooked block less fastest plain."""
    import torch

    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    counter = instrument.OptimizerStepCounter(instrument.parse(
        ["--records", str(scratch / "micro.jsonl"), "--steps", str(10 * steps * blocks), "--samples-per-step", "1",
         "--", "none.py"]), rank=0, world_size=1)
    counter.recorder.begin()
    counter.injector.begin()
    best = {False: float("inf"), True: float("inf")}
    for block in range(2 * blocks):
        hooked = block % 2 == 1
        began = time.perf_counter()
        for _ in range(steps):
            optimizer.step()
            if hooked:
                counter.after_step(optimizer, (), {})
        best[hooked] = min(best[hooked], (time.perf_counter() - began) / steps)
    return best[True] - best[False]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--skip", type=int, default=10, help="first iterations left out (warm-up)")
    parser.add_argument("--load", choices=("none", "busy"), default="none")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "hook_overhead.json")
    args = parser.parse_args()
    overheads, plain_steps = [], []
    with tempfile.TemporaryDirectory(prefix="perfgate-hook-micro-") as scratch:
        cost = hook_cost_s(Path(scratch))
    print(f"hook cost: {cost * 1e6:.1f} us per optimizer step", flush=True)
    load = busy_processes if args.load == "busy" else contextlib.nullcontext
    with tempfile.TemporaryDirectory(prefix="perfgate-hook-") as scratch, load():
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            got = {wrapped: median_step(Path(scratch) / f"p{pair}-{wrapped}", wrapped, args.iterations, args.skip)
                   for wrapped in order}
            overheads.append(got[True] / got[False] - 1)
            plain_steps.append(got[False])
            print(f"[pair {pair + 1}/{args.pairs}] plain {got[False] * 1000:.2f} ms, wrapped {got[True] * 1000:.2f} ms "
                  f"per step: {overheads[-1]:+.2%}", flush=True)
    print(f"hook overhead: median {statistics.median(overheads):+.2%} over {len(overheads)} pairs "
          f"(range {min(overheads):+.2%} .. {max(overheads):+.2%}); budget 0.5 %")
    plain_step = statistics.median(plain_steps)
    print(f"hook cost {cost * 1e6:.1f} us per step: {cost / plain_step:.3%} of this script's median step "
          f"({plain_step * 1e3:.2f} ms)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"hook_cost_s": cost, "overheads": overheads, "load": args.load}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
