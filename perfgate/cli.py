"""The ``perfgate`` command: tools used outside a pytest run.

    perfgate import-log open_clip PATH [--json]

reads an upstream ``open_clip_train.main --log-every-n-steps 1`` log (rank 0's ``out.log`` or the
job's stderr) and prints the MMoCLIP benchmark's numbers, so a cluster run can be set beside the
baselines.

    perfgate import-log lines PATH --pattern REGEX --samples-per-step N [--warmup W] [--json]

reads any script's per-step log lines as a ``LogLines`` case would (named groups ``step_s`` or ``rate``) and
prints the steps found and the window's throughput.

    perfgate baseline-log [CASE ...] [--baseline-dir DIR] [--png PATH]

prints each case's baseline values across the git history of the baseline directory, and draws them (the
command was called ``perfgate history``, which still works: the results history is --perf-history's database).

    perfgate result-schema

prints the JSON Schema of the result record that result.json, --perf-results and the results database hold.

    perfgate trend [CASE ...] [--history URL] [--fail-on-regression] [--png PATH]

finds the change points in each case's results kept by --perf-history (perfgate.trend).

    perfgate dashboard --history URL --out DIR [--commit-url TEMPLATE]

writes the results kept by --perf-history as a static site (perfgate.dashboard).

    perfgate bisect GOOD BAD [pytest options, e.g. -k CASE]

finds the first-parent commit between GOOD and BAD that made a case slower, with A/B verdicts
(perfgate.bisect).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict
from pathlib import Path

from perfgate.bisect import driver as bisect_driver
from perfgate.measure import metrics
from perfgate.records import openclip_log
from perfgate.records.sources import LogLines
from perfgate.records.steps import RunRecords
from perfgate.report import baseline_log
from perfgate.report.terminal import table
from perfgate.result import json_schema

LOG_FORMATS = ("open_clip", "lines")


def import_lines(path: Path, pattern: str | None, samples_per_step: int | None, warmup: int, as_json: bool) -> int:
    """A script's own per-step lines, read with the LogLines source a case would use."""
    if pattern is None or samples_per_step is None:
        raise openclip_log.LogError("import-log lines needs --pattern and --samples-per-step")
    try:
        source = LogLines(pattern, samples_per_step)
    except (ValueError, re.error) as exc:
        raise openclip_log.LogError(str(exc)) from None
    steps = source.steps(path.read_text(errors="replace").splitlines())
    if len(steps) <= warmup:
        raise openclip_log.LogError(f"{path}: {len(steps)} line(s) match {pattern!r}, not more than the {warmup} "
                                    "warm-up step(s)")
    measured = metrics.compute(RunRecords(steps=tuple(steps)), warmup)
    numbers = {"log": str(path), "steps": len(steps), "warmup": warmup,
               "samples_per_second": measured.samples_per_second,
               "fastest_step_samples_per_second": measured.fastest_step_samples_per_second,
               "step_time_median_s": measured.step_time_median_s}
    if as_json:
        print(json.dumps(numbers, indent=2))
        return 0
    print(f"log: {path}")
    print(f"matching steps: {len(steps)} (warm-up {warmup})")
    print(f"samples_per_second: {measured.samples_per_second:.2f} (fastest step "
          f"{measured.fastest_step_samples_per_second:.2f})")
    print(f"step_time_median_s: {measured.step_time_median_s:.4f}")
    return 0


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


def show_baseline_log(patterns: list[str], baseline_dir: Path, png: Path | None) -> int:
    found = baseline_log.points(baseline_dir, patterns)
    if not found:
        wanted = f" matching {' '.join(patterns)}" if patterns else ""
        raise baseline_log.BaselineLogError(f"no committed baseline{wanted} under {baseline_dir}: commit baselines first, or "
                                   "check the case ids (`ls` the hardware class directories)")
    print("\n".join(table(baseline_log.table_rows(found), baseline_log.HEADER)))
    if png is not None:
        png.parent.mkdir(parents=True, exist_ok=True)
        baseline_log.figure(found).savefig(png, dpi=100)
        print(f"wrote {png}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfgate", description="perfgate command-line tools")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    importer = commands.add_parser(
        "import-log",
        help="score an upstream training log as its benchmark does",
        description="open_clip: print total_time_secs (sum of every step's 'Batch (t)' except the first) and the "
        "JUBE table's throughput_avg / time_per_iteration_secs_avg (means over every logged step) "
        "of an open_clip_train log, exactly as the MMoCLIP benchmark computes them. lines: read any script's "
        "per-step lines with --pattern, as a LogLines case does, and print the window's throughput.",
    )
    importer.add_argument("format", choices=LOG_FORMATS, help="which program wrote the log")
    importer.add_argument("path", type=Path, help="the log file (rank 0's out.log or the job's stderr)")
    importer.add_argument("--json", action="store_true", help="print the numbers as JSON")
    importer.add_argument("--pattern", help="lines: a regular expression with named groups step_s or rate")
    importer.add_argument("--samples-per-step", type=int, help="lines: samples per logged step, all ranks")
    importer.add_argument("--warmup", type=int, default=0, help="lines: first steps left out (default 0)")
    past = commands.add_parser(
        "baseline-log", aliases=["history"],
        help="a case's baseline values across the git history of the baselines",
        description="Print every committed value of the cases' baselines, oldest first, per case, hardware class "
        "and metric, with the change from the commit before, so a reviewer sees the trend behind today's number.",
    )
    past.add_argument("cases", nargs="*", metavar="CASE", help="case ids or globs, e.g. 'resnet50-*-gpu' (default: all)")
    past.add_argument("--baseline-dir", type=Path, default=Path("baselines"), help="default: ./baselines")
    past.add_argument("--png", type=Path, help="also draw the values against commit date into this PNG")
    commands.add_parser("result-schema", help="print the JSON Schema of the result record (result.json and others)",
                        description="Print the JSON Schema that every case's result.json, --perf-results and the "
                        "results database's record column follow (docs/result-record.md).")
    commands.add_parser("dashboard", add_help=False, help="the results kept by --perf-history as a static site; "
                        "perfgate dashboard --help")
    commands.add_parser("trend", add_help=False, help="change points in the results kept by --perf-history; "
                        "perfgate trend --help")
    commands.add_parser("store-sessions", add_help=False, help="keep each case's unchanged sessions from the results "
                        "history in its baseline file, for clones with no history; perfgate store-sessions --help")
    commands.add_parser("bisect", add_help=False, help="find the commit that made a case slower (A/B verdicts); "
                        "perfgate bisect --help")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bisect"]:
        return bisect_driver.main(argv[1:])
    if argv[:1] == ["dashboard"]:
        try:
            from perfgate.dashboard import command as dashboard  # its libraries are an extra, perfgate[dashboard]
        except ImportError as exc:
            print(f"perfgate: error: perfgate dashboard needs {exc.name}: pip install 'perfgate[dashboard]'",
                  file=sys.stderr)
            return 2
        return dashboard.main(argv[1:])
    if argv[:1] in (["trend"], ["store-sessions"]):
        try:  # their libraries are an extra, perfgate[trend]
            from perfgate.trend import command, store_sessions
        except ImportError as exc:
            print(f"perfgate: error: perfgate {argv[0]} needs {exc.name}: pip install 'perfgate[trend]', then pip "
                  "install --no-deps apache-otava==0.8.0 (requirements-nodeps.txt)", file=sys.stderr)
            return 2
        return (command if argv[0] == "trend" else store_sessions).main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if args.command == "result-schema":
            print(json.dumps(json_schema(), indent=2))
            return 0
        if args.command in ("baseline-log", "history"):
            return show_baseline_log(args.cases, args.baseline_dir, args.png)
        if args.format == "lines":
            return import_lines(args.path, args.pattern, args.samples_per_step, args.warmup, args.json)
        return import_log(args.format, args.path, args.json)
    except FileNotFoundError:
        print(f"perfgate: error: {args.path}: no such file", file=sys.stderr)
    except (openclip_log.LogError, baseline_log.BaselineLogError) as exc:
        print(f"perfgate: error: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
