"""The ``perfgate`` command: tools used outside a pytest run.

    perfgate import-log open_clip PATH [--json]

reads an upstream ``open_clip_train.main --log-every-n-steps 1`` log (rank 0's ``out.log`` or the
job's stderr) and prints the MMoCLIP benchmark's numbers, so a cluster run can be set beside the
baselines.

    perfgate history [CASE ...] [--baseline-dir DIR] [--png PATH]

prints each case's baseline values across the git history of the baseline directory, and draws them.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from perfgate.records import openclip_log
from perfgate.report import history
from perfgate.report.terminal import table

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


def show_history(patterns: list[str], baseline_dir: Path, png: Path | None) -> int:
    found = history.points(baseline_dir, patterns)
    if not found:
        wanted = f" matching {' '.join(patterns)}" if patterns else ""
        raise history.HistoryError(f"no committed baseline{wanted} under {baseline_dir}: commit baselines first, or "
                                   "check the case ids (`ls` the hardware class directories)")
    print("\n".join(table(history.table_rows(found), history.HEADER)))
    if png is not None:
        png.parent.mkdir(parents=True, exist_ok=True)
        history.figure(found).savefig(png, dpi=100)
        print(f"wrote {png}")
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
    past = commands.add_parser(
        "history",
        help="a case's baseline values across the git history of the baselines",
        description="Print every committed value of the cases' baselines, oldest first, per case, hardware class "
        "and metric, with the change from the commit before, so a reviewer sees the trend behind today's number.",
    )
    past.add_argument("cases", nargs="*", metavar="CASE", help="case ids or globs, e.g. 'resnet50-*-gpu' (default: all)")
    past.add_argument("--baseline-dir", type=Path, default=Path("baselines"), help="default: ./baselines")
    past.add_argument("--png", type=Path, help="also draw the values against commit date into this PNG")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "history":
            return show_history(args.cases, args.baseline_dir, args.png)
        return import_log(args.format, args.path, args.json)
    except FileNotFoundError:
        print(f"perfgate: error: {args.path}: no such file", file=sys.stderr)
    except (openclip_log.LogError, history.HistoryError) as exc:
        print(f"perfgate: error: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
