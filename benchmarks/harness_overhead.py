"""Does perfgate's timing change what it measures? One workload, launched alternately with perfgate's
step records (``--timing steps``: a marker per step, resolved late) and as a bare loop (``--timing
bare``: one synchronize after the warm-up, one at the end), compared throughput for throughput.

    python benchmarks/harness_overhead.py                       # CPU: ResNet-50 synthetic, 2 gloo ranks
    python benchmarks/harness_overhead.py --nproc 1 -- --device cuda --precision amp --batch-size 256 \\
        --image-size 224 --steps 120                            # one GPU, the NGC case

Launches come in pairs whose order alternates (steps-bare, bare-steps, ...) so a drift of the machine
falls on both alike. The overhead of a pair is bare / perfgate - 1; the script reports the median over
pairs and writes every launch to JSON. perfgate's budget: within 1 % of the bare loop on GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfgate.launch.diagnose import LaunchFailed  # noqa: E402
from perfgate.launch.local import launch  # noqa: E402
from perfgate.launch.spec import LaunchSpec  # noqa: E402
from perfgate.measure.metrics import compute  # noqa: E402
from perfgate.records.steps import RunRecords, read_records  # noqa: E402

CPU_ARGS = ["--device", "cpu", "--precision", "fp32", "--loader", "synthetic", "--workers", "0", "--image-size", "64",
            "--batch-size", "8", "--steps", "40"]


def measure(args: argparse.Namespace, timing: str, run_dir: Path, extra: Sequence[str] = ()) -> float:
    """Global samples/s of one launch: perfgate's window metric, or the bare loop's own figure."""
    got = launch_records(args, timing, run_dir, extra)
    if timing == "bare":
        return float(got.phases["bare"]["samples_per_second"])
    return compute(got, args.warmup).samples_per_second


def launch_records(args: argparse.Namespace, timing: str, run_dir: Path, extra: Sequence[str] = ()) -> RunRecords:
    """One launch of the workload; its step records."""
    records = run_dir / "steps.jsonl"
    entry = [str(args.workload), *(args.workload_args or CPU_ARGS), "--warmup", str(args.warmup),
             "--timing", timing, "--records", str(records), *extra]
    spec = LaunchSpec(entry=entry, workdir=run_dir, procs_per_node=args.nproc, timeout_s=args.timeout,
                      env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    launch(spec)
    return read_records(records)


OWN_SCRIPT = REPO / "tests" / "own_script" / "train.py"


def launch_wrapped(args: argparse.Namespace, timing: str, run_dir: Path, extra: Sequence[str] = ()) -> RunRecords:
    """One launch of the unmodified test script under OptimizerSteps' wrapper (``extra``: the wrapper's options, such
    as ``--inject-slowdown``); its step records."""
    records = run_dir / "steps.jsonl"
    entry = ["-m", "perfgate.rank.instrument", "--records", str(records), "--steps", str(args.steps),
             "--samples-per-step", "64", *extra, "--", str(OWN_SCRIPT),
             f"--config={OWN_SCRIPT.parent / 'configs' / 'small.cfg'}", *args.workload_args]
    spec = LaunchSpec(entry=entry, workdir=run_dir, procs_per_node=args.nproc, timeout_s=args.timeout,
                      env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    launch(spec)
    return read_records(records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, default=REPO / "workloads" / "resnet50_train.py")
    parser.add_argument("--pairs", type=int, default=5, help="launch pairs (default %(default)s)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the measured window")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per launch")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "harness_overhead.json")
    parser.add_argument("workload_args", nargs="*",
                        help=f"the workload's options (after --); default: {' '.join(CPU_ARGS)}")
    args = parser.parse_args()

    pairs = []
    with tempfile.TemporaryDirectory(prefix="perfgate-overhead-") as scratch:
        for index in range(args.pairs):
            order = ("steps", "bare") if index % 2 == 0 else ("bare", "steps")
            try:
                got = {timing: measure(args, timing, Path(scratch) / f"pair{index}-{timing}") for timing in order}
            except LaunchFailed as exc:
                sys.exit(f"launch failed ({exc.kind}): {exc.message}")
            got["overhead"] = got["bare"] / got["steps"] - 1
            pairs.append(got)
            print(f"[{index + 1}/{args.pairs}] perfgate {got['steps']:.2f} samples/s, bare loop {got['bare']:.2f} "
                  f"samples/s: overhead {got['overhead']:+.2%}", flush=True)

    overhead = statistics.median(p["overhead"] for p in pairs)
    print(f"median over {len(pairs)} pairs: perfgate {statistics.median(p['steps'] for p in pairs):.2f} samples/s, "
          f"bare loop {statistics.median(p['bare'] for p in pairs):.2f} samples/s, overhead {overhead:+.2%} "
          f"(range {min(p['overhead'] for p in pairs):+.2%} .. {max(p['overhead'] for p in pairs):+.2%})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"workload": str(args.workload), "workload_args": args.workload_args or CPU_ARGS,
                                    "nproc": args.nproc, "warmup": args.warmup, "pairs": pairs,
                                    "median_overhead": overhead}, indent=2) + "\n")
    print(f"launches written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
