"""Does counting an unmodified script's optimizer steps slow it down? The own-style test script
(tests/own_script/train.py, 2 gloo ranks) is launched alternately as it is and under OptimizerSteps' wrapper
(``python -m perfgate.measure.instrument``), and each launch is timed by the script's own per-step log lines,
the one clock both launches share.

    python benchmarks/hook_overhead.py                 # 10 pairs of 60 iterations, first 10 left out
    python benchmarks/hook_overhead.py --load busy     # beside two busy processes

Pairs alternate their order, so a drift of the machine falls on both alike. A pair's overhead is the wrapped
launch's median logged step time over the plain one's, less 1; the median pair is the figure. The budget:
within 0.5 % on CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from background_load import busy_processes  # noqa: E402

from perfgate.launch.local import launch  # noqa: E402
from perfgate.launch.spec import LaunchSpec  # noqa: E402
from perfgate.records.sources import LogLines  # noqa: E402

SCRIPT = REPO / "tests" / "own_script" / "train.py"
LOGGED = LogLines(r"iter (?P<step>\d+) .*step_time (?P<step_s>[\d.]+)s", samples_per_step=1)


def median_step(run_dir: Path, wrapped: bool, iterations: int, skip: int) -> float:
    """One launch; the median of the script's own logged step times after ``skip`` iterations."""
    program = [str(SCRIPT), f"--max-iters={iterations}", f"--config={SCRIPT.parent / 'configs' / 'small.cfg'}"]
    entry = (["-m", "perfgate.measure.instrument", "--records", str(run_dir / "steps.jsonl"), "--steps",
              str(iterations), "--samples-per-step", "64", "--", *program] if wrapped else program)
    launch(LaunchSpec(entry=entry, workdir=run_dir, procs_per_node=2, timeout_s=600,
                      env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}))
    steps = LOGGED.read(run_dir).steps
    return statistics.median(s.step_s for s in steps if s.step >= skip)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--skip", type=int, default=10, help="first iterations left out (warm-up)")
    parser.add_argument("--load", choices=("none", "busy"), default="none")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "hook_overhead.json")
    args = parser.parse_args()
    overheads = []
    load = busy_processes if args.load == "busy" else contextlib.nullcontext
    with tempfile.TemporaryDirectory(prefix="perfgate-hook-") as scratch, load():
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            got = {wrapped: median_step(Path(scratch) / f"p{pair}-{wrapped}", wrapped, args.iterations, args.skip)
                   for wrapped in order}
            overheads.append(got[True] / got[False] - 1)
            print(f"[pair {pair + 1}/{args.pairs}] plain {got[False] * 1000:.2f} ms, wrapped {got[True] * 1000:.2f} ms "
                  f"per step: {overheads[-1]:+.2%}", flush=True)
    print(f"hook overhead: median {statistics.median(overheads):+.2%} over {len(overheads)} pairs "
          f"(range {min(overheads):+.2%} .. {max(overheads):+.2%}); budget 0.5 %")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"overheads": overheads, "load": args.load}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
