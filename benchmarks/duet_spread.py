"""Do two launches of an unchanged build agree better run at the same time (a duet pair) than one after the other?

    python benchmarks/duet_spread.py --rounds 12 --load busy --out runs/duet-busy

Each round launches the tiny OpenCLIP (2 gloo ranks, 40 steps, OMP_NUM_THREADS=1) in pairs, one pair per mode,
the modes' order turning from round to round: twice back to back, as an A/B pair does by default; twice at the
same time with the ranks where the kernel puts them ("duet, unpinned"); and twice at the same time with the ranks
pinned as ``--perf-ab-duet`` pins them (launch.cores). A pair's log ratio (second launch over first, or the two
of a duet) would be 0 on a steady machine; the table gives, per statistic of cpu_clock_noise.py, the root mean
square of the pairs' log ratios in each mode (the pair spread that benchmarks/ab_power.py turns into a detection
rate) and the mean seconds a pair took. ``--summarize DIR`` prints the table again from a finished run's records.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

from background_load import busy_processes  # noqa: E402
from cpu_clock_noise import STATISTICS, window  # noqa: E402

from perfgate.launch.cores import RankPinner, duet_cores  # noqa: E402
from perfgate.launch.hardware import usable_core_ids  # noqa: E402
from perfgate.launch.spec import RUN_ID_ENV  # noqa: E402
from perfgate.records.steps import read_records  # noqa: E402

MODES = ("back-to-back", "duet, unpinned", "duet")
RANKS = 2


def command(records: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(RANKS),
            str(REPO / "workloads" / "openclip_train.py"), "--model", "perfgate-ViT-tiny", "--device", "cpu",
            "--batch-size", "32", "--workers", "0", "--precision", "fp32", "--steps", str(steps),
            "--no-count-flops", "--records", str(records)]


def launch(records: list[Path], steps: int, pin: bool = False) -> None:
    """Starts one launch per records file at once and waits for all; with ``pin``, two launches' ranks pinned as a
    duet pair's launcher pins them."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    run_ids = [f"duet-spread-{os.getpid()}-{path.stem}" for path in records]
    procs = [subprocess.Popen(command(path, steps), env={**env, RUN_ID_ENV: run_id}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT) for path, run_id in zip(records, run_ids)]
    pinners = []
    if pin:
        sides = duet_cores(usable_core_ids(), RANKS)
        pinners = [RankPinner(run_id, cores, 1, RANKS) for run_id, cores in zip(run_ids, sides)]
    while any(proc.poll() is None for proc in procs):
        for pinner in pinners:
            pinner()
        time.sleep(0.5)
    codes = [proc.returncode for proc in procs]
    if any(codes):
        raise SystemExit(f"a launch failed (exit codes {codes}); run it alone to see why: "
                         f"{' '.join(command(records[0], steps))}")


def pair_files(out: Path, mode: str, round_: int) -> tuple[Path, Path]:
    name = mode.replace(", ", "-")
    return out / f"{name}-{round_}-a.jsonl", out / f"{name}-{round_}-b.jsonl"


def measure(out: Path, rounds: int, steps: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    timings = []
    for round_ in range(rounds):
        for mode in MODES[round_ % len(MODES):] + MODES[:round_ % len(MODES)]:
            first, second = pair_files(out, mode, round_)
            began = time.monotonic()
            if mode == "back-to-back":
                launch([first], steps)
                launch([second], steps)
            else:
                launch([first, second], steps, pin=mode == "duet")
            timings.append({"round": round_, "mode": mode, "seconds": round(time.monotonic() - began, 1)})
            (out / "pairs.json").write_text(json.dumps(timings, indent=1))
            print(f"[round {round_ + 1}/{rounds}] {mode}: {timings[-1]['seconds']} s", flush=True)


def summarize(out: Path, warmup: int) -> list[str]:
    """The table: per statistic and mode, the RMS of the pairs' log ratios, then each mode's mean pair time."""
    timings = json.loads((out / "pairs.json").read_text())
    modes = [mode for mode in MODES if any(pair["mode"] == mode for pair in timings)]
    ratios: dict[str, dict[str, list[float]]] = {mode: {name: [] for name in STATISTICS} for mode in modes}
    for pair in timings:
        first, second = (window(read_records(path), warmup) for path in pair_files(out, pair["mode"], pair["round"]))
        for name, statistic in STATISTICS.items():
            ratios[pair["mode"]][name].append(math.log(statistic(second) / statistic(first)))
    lines = [f"| statistic | {' | '.join(f'{mode}: pair spread (RMS)' for mode in modes)} |",
             f"|---|{'---|' * len(modes)}"]
    for name in STATISTICS:
        cells = [f"{math.sqrt(statistics.fmean(r * r for r in ratios[mode][name])):.1%}" for mode in modes]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    seconds = [f"{statistics.fmean(p['seconds'] for p in timings if p['mode'] == mode):.1f} s" for mode in modes]
    lines.append(f"| seconds a pair | {' | '.join(seconds)} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12, help="rounds, each one pair of either mode")
    parser.add_argument("--steps", type=int, default=40, help="steps of each launch")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out at the start of each launch")
    parser.add_argument("--load", choices=("none", "busy"), default="none",
                        help="what runs beside: nothing, or two busy processes")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "duet", help="where the records go")
    parser.add_argument("--summarize", type=Path, metavar="DIR", help="print the table of a finished run and stop")
    args = parser.parse_args()
    if args.summarize is None:
        load = busy_processes(seconds=120 * args.rounds + 600) if args.load == "busy" else contextlib.nullcontext()
        with load:
            measure(args.out, args.rounds, args.steps)
    print("\n".join(summarize(args.summarize or args.out, args.warmup)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
