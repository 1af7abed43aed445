"""The ``perfgate`` command: tools used outside a pytest run.

    perfgate import-log open_clip PATH [--json]

reads an upstream ``open_clip_train.main --log-every-n-steps 1`` log (rank 0's ``out.log`` or the
job's stderr) and prints the MMoCLIP benchmark's numbers, so a cluster run can be set beside the
baselines.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from perfgate import openclip_log

LOG_FORMATS = ("open_clip",)


def import_log(fmt: str, path: Path, as_json: bool) -> int:
    steps = openclip_log.read_log(path)
    score = openclip_log.mmoclip_score(steps)
    if as_json:
        print(json.dumps({"log": str(path), **asdict(score)}, indent=2))
        return 0
    print(f"log: {path}")
    print(f"logged steps: {score.logged_steps} (last at {score.done_percent_last}%)")
    print(f"total_time_secs: {score.total_time_secs:.2f}")
    print(f"throughput_avg: {score.throughput_avg:.2f} samples/s")
    print(f"time_per_iteration_secs_avg: {score.time_per_iteration_secs_avg:.2f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfgate", description="perfgate command-line tools")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    importer = commands.add_parser(
        "import-log",
        help="score an upstream training log as its benchmark does",
        description="Print total_time_secs (sum of every step's 'Batch (t)' except the first) and the "
        "JUBE table's throughput_avg / time_per_iteration_secs_avg (means over every logged step) "
        "of an open_clip_train log, exactly as the MMoCLIP benchmark computes them.",
    )
    importer.add_argument("format", choices=LOG_FORMATS, help="which program wrote the log")
    importer.add_argument("path", type=Path, help="the log file (rank 0's out.log or the job's stderr)")
    importer.add_argument("--json", action="store_true", help="print the numbers as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return import_log(args.format, args.path, args.json)
    except FileNotFoundError:
        print(f"perfgate: error: {args.path}: no such file", file=sys.stderr)
    except openclip_log.LogError as exc:
        print(f"perfgate: error: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
