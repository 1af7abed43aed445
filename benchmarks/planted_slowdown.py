"""Is the planted slowdown what it says? One workload launched with --inject-slowdown F for several F,
interleaved with unplanted launches, and the measured throughput set against 1 / (1 + F).

    python benchmarks/planted_slowdown.py                        # CPU: ResNet-50 synthetic, 2 gloo ranks
    python benchmarks/planted_slowdown.py --nproc 1 -- --device cuda --precision amp --batch-size 256 \\
        --image-size 224 --steps 120                             # one GPU, the NGC case (GPU 90 % busy)
    python benchmarks/planted_slowdown.py --load training        # beside a second 2-rank training job

``--load busy`` runs two busy processes beside every launch, ``--load training`` a second 2-rank training job (the
tiny OpenCLIP): a shared CI runner's conditions, where a plant that hands its core away would be swallowed.

    python benchmarks/planted_slowdown.py --own-script --steps 60     # an unmodified script, through the wrapper

``--own-script`` plants through OptimizerSteps' wrapper into tests/own_script/train.py (no perfgate import).
Besides the wall clock's throughputs, the CPU clock's ``cpu_seconds_per_sample`` is set against 1 + F (as a
rate, 1 / (1 + F), like the others).

Each round launches F = 0 and every planted size once, in a shuffled order, so a drift of the machine falls
on all alike; a size's measured ratio is the median over rounds of its throughput over the same round's
unplanted throughput. perfgate's promise: within 1 percentage point of 1 / (1 + F), on CPU and GPU, for the
window's throughput and for the fastest step's (the metric the CPU flavour gates).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

from harness_overhead import CPU_ARGS, REPO, launch_records, launch_wrapped

sys.path.insert(0, str(REPO / "tests"))
from background_load import busy_processes, training_job  # noqa: E402

from perfgate.launch.diagnose import LaunchFailed
from perfgate.measure.metrics import METRICS as INFO, compute

METRICS = ("samples_per_second", "fastest_step_samples_per_second", "cpu_seconds_per_sample")


def as_rate(metrics, name: str) -> float:
    """The metric as a rate (a lower-is-better one inverted), so a planted F moves each to 1 / (1 + F)."""
    value = getattr(metrics, name)
    return value if INFO[name].better == "higher" else 1.0 / value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, default=REPO / "workloads" / "resnet50_train.py")
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.03, 0.05, 0.10, 0.25])
    parser.add_argument("--rounds", type=int, default=3, help="launches per size (default %(default)s)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the measured window")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per launch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", choices=("none", "busy", "training"), default="none",
                        help="what runs beside the launches: nothing, two busy processes, or a second 2-rank training "
                        "job (default %(default)s)")
    parser.add_argument("--own-script", action="store_true",
                        help="plant through OptimizerSteps' wrapper into tests/own_script/train.py")
    parser.add_argument("--steps", type=int, default=40, help="--own-script: optimizer steps per launch")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "planted_slowdown.json")
    parser.add_argument("workload_args", nargs="*",
                        help=f"the workload's options (after --); default: {' '.join(CPU_ARGS)}")
    args = parser.parse_args()

    shuffle = random.Random(args.seed).shuffle
    ratios: dict[tuple[str, float], list[float]] = {(m, size): [] for m in METRICS for size in args.sizes}
    load = {"none": contextlib.nullcontext, "busy": busy_processes, "training": training_job}[args.load]
    # The load lasts the whole benchmark (about 2 minutes a launch under load, with room), and stops with it.
    lasting = {} if args.load == "none" else {"seconds": args.rounds * (len(args.sizes) + 1) * 240}
    with tempfile.TemporaryDirectory(prefix="perfgate-planted-") as scratch, load(**lasting):
        for round_ in range(args.rounds):
            order = [0.0, *args.sizes]
            shuffle(order)
            try:
                launched = launch_wrapped if args.own_script else launch_records
                rate = {size: compute(launched(args, "steps", Path(scratch) / f"r{round_}-{size}",
                                               ["--inject-slowdown", str(size)] if size else []), args.warmup)
                        for size in order}
            except LaunchFailed as exc:
                sys.exit(f"launch failed ({exc.kind}): {exc.message}")
            for metric, size in ratios:
                ratios[metric, size].append(as_rate(rate[size], metric) / as_rate(rate[0.0], metric))
            print(f"[round {round_ + 1}/{args.rounds}] " + ", ".join(
                f"{size:g}: {rate[size].samples_per_second:.2f} (fastest step "
                f"{rate[size].fastest_step_samples_per_second:.2f})" for size in order) + " samples/s", flush=True)

    print("| metric | planted | expected throughput | measured throughput (median) | off by | rounds |")
    print("|---|---|---|---|---|---|")
    rows = []
    for (metric, size), got in ratios.items():
        expected, measured = 1 / (1 + size), statistics.median(got)
        rows.append({"metric": metric, "planted": size, "expected": expected, "measured": measured, "ratios": got})
        print(f"| {metric} | {size:.0%} | {expected - 1:+.1%} | {measured - 1:+.1%} | "
              f"{100 * (measured - expected):+.1f} points | {len(got)} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"workload": "own-script" if args.own_script else str(args.workload), "workload_args": args.workload_args or CPU_ARGS,
                                    "nproc": args.nproc, "load": args.load, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
