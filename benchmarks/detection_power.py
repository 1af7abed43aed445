"""How good are perfgate's verdicts? Plant slowdowns into a CPU case and count how often the gate fails.

    python benchmarks/detection_power.py --trials 10 --sizes 0:20 0.03 0.05 0.10:20 0.20

Measures a fresh baseline for one case (``--perf-baseline-repeats`` runs, in a scratch baseline
directory), then runs the gate ``--trials`` times per planted slowdown size, each a whole pytest
session at the default settings, sizes interleaved in a shuffled order so that slow spells of a
shared machine fall on every size alike. Reports per size how often the gate failed (for 0: false
alarms), how often it was left unresolved (under ``-- --perf-ab-resolve R``) and how long each verdict took, as
a Markdown table, and writes every trial to JSON.

    python benchmarks/detection_power.py --against HEAD --trials 20 --sizes 0 0.03 0.05 0.10

A/B mode: no baseline; each trial judges the working tree (with the plant) against REF measured in the
same session, pair by pair (``--perf-against``). The working tree must be committed. ``--load busy`` runs
two busy processes beside the whole run (``--load training``: a second 2-rank training job), as on a shared
CI runner.

The results file is rewritten after every trial; ``--resume`` continues a stopped run of the same plan, and
``--baseline-from EARLIER.json`` judges a new plan against the stored baseline an earlier results file measured
(hours or sessions before, as a stored baseline is used). Each
trial keeps its start time and each run's machine-speed probe. The figure a stored baseline's verdict states
("catches X %": the model's, judge/model.py) is tallied against the plants at or above it.

    python benchmarks/detection_power.py --rejudge results/detection_power.json

decides each recorded A/B trial again by the pairs' current rules from the pairs it recorded (its first
``--perf-repeats`` pairs, then one more while the gate would ask for one): how a change to them that stops no
later than the recorded trials did would have decided them, and with how many pairs. A rule that asks for more
pairs than were recorded cannot be replayed, so each trial ends at its recorded count at most.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from background_load import busy_processes, training_job  # noqa: E402

from perfgate.config.cases import baseline_path  # noqa: E402
from perfgate.config.settings import Settings  # noqa: E402
from perfgate.judge import baselines, pairs  # noqa: E402
from perfgate.judge.ab import undecided  # noqa: E402
from perfgate.measure import stats  # noqa: E402
from perfgate.measure.metrics import METRICS, PROBES  # noqa: E402


def pytest_command(args: argparse.Namespace, baseline_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "tests_perf", "-q", "-p", "no:cacheprovider",
        "-k", args.case, "--baseline-dir", str(baseline_dir), "--hardware-class", "detection-power",
        *args.pytest_args, *extra,
    ]


def run_session(command: list[str]) -> tuple[int, float]:
    """One gate session; stopped (Ctrl-C, SIGTERM) it is ended with SIGTERM, on which perfgate kills its ranks."""
    started = time.monotonic()
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as session:
        try:
            stdout, stderr = session.communicate()
        except BaseException:
            session.terminate()
            try:
                session.wait(timeout=60)
            except subprocess.TimeoutExpired:
                session.kill()
            raise
    elapsed = time.monotonic() - started
    if session.returncode not in (0, 1):
        sys.exit(f"pytest exited {session.returncode}:\n{stdout[-3000:]}\n{stderr[-2000:]}")
    return session.returncode, elapsed




def judged(basetemp: Path) -> dict:
    """The case's verdict, the gate's per-metric rows (change, interval, runs, and against a stored baseline the
    slowdown the model said it catches), its plant check (per metric, the change the plant should have made and the
    one measured) and each run's probe, from the trial's result.json: on a noisy runner, whether a missed plant
    took cannot be told afterwards without them."""
    found = sorted(basetemp.glob("*/result.json"))
    result = json.loads(found[0].read_text()) if found else {}
    # each run's machine readings: whether a missed plant took, or a false FAIL was the machine, is told from them
    probes = [{name: run["metrics"].get(name) for name in PROBES} for run in result.get("per_run", [])]
    return {"verdict": result.get("verdict"), "metrics": result.get("metrics", []), "plant": result.get("plant", []),
            "probes": probes}


def size_and_trials(text: str) -> tuple[float, int | None]:
    size, _, trials = text.partition(":")
    try:
        return float(size), int(trials) if trials else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SIZE or SIZE:TRIALS (e.g. 0.05 or 0.1:20), got {text!r}")


def summarize(trials: list[dict], sizes: list[float]) -> list[str]:
    lines = [
        "| planted slowdown | trials | gate failed | rate | unresolved | median time to verdict | max time |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        mine = [t for t in trials if t["slowdown"] == size]
        failed = sum(t["failed"] for t in mine)
        unresolved = sum(t.get("verdict") == "unresolved" for t in mine)
        times = [t["seconds"] for t in mine]
        label = "0 % (unchanged)" if size == 0 else f"{size:.0%}"
        lines.append(
            f"| {label} | {len(mine)} | {failed} | {failed / len(mine):.0%} | {unresolved} | "
            f"{statistics.median(times):.0f} s | {max(times):.0f} s |"
        )
    return lines


def promised(trial: dict) -> float | None:
    """The smallest slowdown the gate said this session could catch (its best metric's), where the model judged it."""
    figures = [row["catchable"] for row in trial.get("metrics", []) if row.get("catchable") is not None]
    return min(figures) if figures else None


def promises_kept(trials: list[dict], sizes: list[float]) -> list[str]:
    """Per planted size, the trials whose plant was at least what the gate said it catches, and how many of those
    failed; and the trials below that figure, where the gate promised nothing."""
    lines = ["| planted slowdown | gate's figure (median) | at or above it | caught | below it | caught |",
             "|---|---|---|---|---|---|"]
    for size in sizes:
        mine = [(t, promised(t)) for t in trials if t["slowdown"] == size and promised(t) is not None]
        if size == 0 or not mine:
            continue
        above = [t for t, figure in mine if size >= figure]
        below = [t for t, figure in mine if size < figure]
        median = statistics.median(figure for _, figure in mine)
        lines.append(f"| {size:.0%} | {median:.1%} | {len(above)} | {sum(t['failed'] for t in above)} | "
                     f"{len(below)} | {sum(t['failed'] for t in below)} |")
    return lines


def rejudge(trial: dict, first: int) -> tuple[bool, int]:
    """One recorded A/B trial decided again by the pairs' rules: whether it fails, and after how many pairs."""
    rows = trial["metrics"]
    recorded = min(len(row["run_values"]) for row in rows)
    runs = min(first, recorded)
    while True:
        reference = baselines.Baseline("rejudged", "detection-power", {
            row["metric"]: baselines.MetricBaseline(row["baseline"], METRICS[row["metric"]].better, row["tolerance"],
                                                    row["unit"], tuple(row["baseline_runs"][:runs]))
            for row in rows}, provenance={})
        verdicts = pairs.judge(reference, {row["metric"]: row["run_values"][:runs] for row in rows},
                               stats.compare_pairs)
        if not undecided({v.outcome for v in verdicts}) or runs >= recorded:
            return any(stats.settle(v.decision).outcome == "FAIL" for v in verdicts), runs
        runs += 1


def first_runs(pytest_args: list[str]) -> int:
    """The runs every trial measured before the gate's first look: its --perf-repeats, else the default."""
    for index, arg in enumerate(pytest_args):
        if arg.startswith("--perf-repeats="):
            return int(arg.partition("=")[2])
        if arg == "--perf-repeats":
            return int(pytest_args[index + 1])
    return Settings().repeats


def print_rejudged(path: Path) -> None:
    """Each size's A/B trials as recorded and as the pairs' current rules decide them from the same pairs."""
    recorded = json.loads(path.read_text())
    if recorded["against"] is None:
        sys.exit(f"--rejudge: {path} holds trials against a stored baseline, which the verdict's model decides; "
                 "python benchmarks/verdict_model.py replays stored sessions")
    if any(arg.startswith("--perf-ab-resolve") for arg in recorded["pytest_args"]):
        sys.exit("--rejudge: trials run under --perf-ab-resolve look at a 99 % interval after every pair; not replayed")
    first = first_runs(recorded["pytest_args"])
    print("| planted slowdown | trials | failed: recorded / rejudged | runs per trial: recorded / rejudged | "
          "max time to verdict: recorded / rejudged |")
    print("|---|---|---|---|---|")
    trials = [t for t in recorded["trials"] if t["metrics"]]
    for size in sorted({t["slowdown"] for t in trials}):
        mine = [t for t in trials if t["slowdown"] == size]
        again = [rejudge(t, first) for t in mine]
        counts = [min(len(row["run_values"]) for row in t["metrics"]) for t in mine]
        # A trial's time scales with its runs: each pair (run) takes about as long as the others.
        seconds = [t["seconds"] * runs / count for t, (_, runs), count in zip(mine, again, counts)]
        print(f"| {size:.0%} | {len(mine)} | {sum(t['failed'] for t in mine)} / {sum(f for f, _ in again)} | "
              f"{statistics.fmean(counts):.1f} / {statistics.fmean(r for _, r in again):.1f} | "
              f"{max(t['seconds'] for t in mine):.0f} s / {max(seconds):.0f} s |")


def measure_baseline(args: argparse.Namespace, baseline_dir: Path) -> dict:
    code, seconds = run_session(pytest_command(args, baseline_dir, "--update-baselines"))
    if code != 0:
        sys.exit("measuring the baseline failed")
    baseline = next(baseline_dir.glob("*/*.json"))
    stored = json.loads(baseline.read_text())
    print(f"baseline: {baseline.name} in {seconds:.0f} s; tolerance "
          + ", ".join(f"{k} {v['tolerance']:.1%}" for k, v in stored["metrics"].items()), flush=True)
    return stored


def save(args: argparse.Namespace, stored: dict | None, trials: list[dict]) -> None:
    """Written after every trial, so a stopped run keeps what it measured and --resume continues it."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".partial")
    partial.write_text(json.dumps({"case": args.case, "pytest_args": args.pytest_args, "against": args.against,
                                   "seed": args.seed, "baseline": stored, "trials": trials}, indent=2) + "\n")
    partial.replace(args.out)


def resumed(args: argparse.Namespace, order: list[float]) -> tuple[dict | None, list[dict]]:
    """The baseline and trials of an earlier run of the same plan (case, against, seed, order)."""
    if not args.resume or not args.out.exists():
        return None, []
    earlier = json.loads(args.out.read_text())
    trials = earlier["trials"]
    same = (earlier["case"], earlier["against"], earlier.get("seed")) == (args.case, args.against, args.seed)
    if not same or [t["slowdown"] for t in trials] != order[:len(trials)]:
        sys.exit(f"--resume: {args.out} holds another plan (case, --against, --seed or sizes differ)")
    return earlier["baseline"], trials


def earlier_baseline(args: argparse.Namespace) -> dict:
    """The stored baseline of an earlier plan of the same case, so that sessions hours later are judged by it."""
    earlier = json.loads(args.baseline_from.read_text())
    if args.against or earlier["case"] != args.case or not earlier.get("baseline"):
        sys.exit(f"--baseline-from: {args.baseline_from} holds no stored baseline of case {args.case!r} "
                 "(and A/B trials take none)")
    return earlier["baseline"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="workers0-cpu", help="pytest -k expression selecting one case")
    parser.add_argument("--sizes", type=size_and_trials, nargs="+", metavar="SIZE[:TRIALS]",
                        default=[(0.0, None), (0.03, None), (0.05, None), (0.10, None), (0.20, None)])
    parser.add_argument("--trials", type=int, default=10, help="gate sessions per size without its own count")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffled trial order")
    parser.add_argument("--against", metavar="REF", help="A/B mode: judge every trial against git revision REF "
                        "measured beside it (--perf-against), with no stored baseline")
    parser.add_argument("--load", choices=("none", "busy", "training"), default="none",
                        help="what runs beside the trials: nothing, two busy processes, or a second 2-rank training "
                        "job (default %(default)s)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "detection_power.json")
    parser.add_argument("--resume", action="store_true", help="continue the run that --out holds (same plan)")
    parser.add_argument("--baseline-from", type=Path, metavar="RESULTS",
                        help="judge against the stored baseline of an earlier results file instead of measuring one")
    parser.add_argument("--rejudge", type=Path, nargs="+", metavar="RESULTS",
                        help="decide the A/B trials of results files again by the pairs' current rules; run nothing")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest options (after --), e.g. --perf-steps 20")
    args = parser.parse_args()
    if args.rejudge:
        for path in args.rejudge:
            print_rejudged(path)
        return 0
    # A SIGTERM leaves through the with blocks below, so the load, the running session and the scratch go with it.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    counts = {size: trials or args.trials for size, trials in args.sizes}
    order = [size for size, count in counts.items() for _ in range(count)]
    random.Random(args.seed).shuffle(order)
    stored, trials = resumed(args, order)
    if stored is None and args.baseline_from:
        stored = earlier_baseline(args)
    load = {"none": contextlib.nullcontext, "busy": busy_processes, "training": training_job}[args.load]
    lasting = {} if args.load == "none" else {"seconds": 600 * len(order) + 1200}
    with tempfile.TemporaryDirectory(prefix="perfgate-power-") as scratch, load(**lasting):
        baseline_dir = Path(scratch) / "baselines"
        if stored is not None:
            baselines.write(baseline_path(baseline_dir, "detection-power", stored["case"]),
                            baselines.parse(stored, "resumed baseline"))
        elif not args.against:
            stored = measure_baseline(args, baseline_dir)
        against = ["--perf-against", args.against] if args.against else []
        for index, size in enumerate(order[len(trials):], len(trials) + 1):
            basetemp = Path(scratch) / f"trial{index}"
            started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            code, seconds = run_session(pytest_command(args, baseline_dir, *against, "--perf-inject-slowdown",
                                                       str(size), "--basetemp", str(basetemp)))
            trials.append({"slowdown": size, "started": started, "failed": code == 1, "seconds": round(seconds, 1),
                           **judged(basetemp)})
            save(args, stored, trials)
            shutil.rmtree(basetemp, ignore_errors=True)
            verdict = trials[-1]["verdict"] or ("FAIL" if code else "pass")
            print(f"[{index}/{len(order)}] slowdown {size:.0%}: {verdict} in {seconds:.0f} s", flush=True)

    print("\n".join(summarize(trials, list(counts))))
    print("\n".join(promises_kept(trials, list(counts))))
    caught = [s for s, count in counts.items() if s > 0 and
              sum(t["failed"] for t in trials if t["slowdown"] == s) >= 0.9 * count]
    print(f"smallest slowdown caught in >= 90 % of trials: {min(caught):.0%}" if caught else
          "no planted slowdown was caught in >= 90 % of trials")
    print(f"trials written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
