"""Where a CPU case's spread lives, between launches or between windows of a launch, and so how a session should
spend its time: more launches, or longer launches with more windows (Kalibera & Jones, "Rigorous benchmarking in
reasonable time", 2013; Cochran, "Sampling Techniques", 1977, 10.6).

    python benchmarks/variance_components.py                        # make perf's default cases, 6 launches each
    python benchmarks/variance_components.py --load busy            # beside two busy processes
    python benchmarks/variance_components.py -k resnet50 --launches 8

One pytest session measuring the cases' baselines, LAUNCHES launches each, into a directory of its own (a disturbed
launch is measured again, as --update-baselines does), each launch's measured steps in the flavour's windows
(Flavour.windows). Per case and gated metric it prints the spread between launches (sigma_l) and
between windows (sigma_w, for a window of the flavour's length), the cost of a launch outside its window (c_l) and of
one window (c_w), and the windows per launch that give the least variance for the time, w* = sqrt(c_l sigma_w^2 /
(c_w sigma_l^2)): where w* exceeds the windows a launch has now, measuring longer launches pays more than launching
more often.
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
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from background_load import busy_processes  # noqa: E402

from perfgate.judge import model  # noqa: E402
from perfgate.measure.metrics import METRICS  # noqa: E402

GATED = ("fastest_step_samples_per_second", "cpu_seconds_per_sample")


def session(launches: int, selection: str, out: Path) -> list[dict]:
    command = [sys.executable, "-m", "pytest", "tests_perf", "-k", selection, "--hardware-class", "variance-components",
               "--update-baselines", "--baseline-dir", str(out / "baselines"), "--perf-baseline-repeats",
               str(launches), "--basetemp", str(out / "runs"), "-p", "no:cacheprovider", "-q"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=7200,
                          env={**os.environ, "PERFGATE_CACHE_DIR": str(out / "cache")})
    found = [json.loads(path.read_text()) for path in sorted((out / "runs").rglob("result.json"))]
    if not found:
        raise SystemExit(f"{' '.join(command)} measured nothing:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return found


def components(result: dict, metric: str) -> tuple[float, float, int]:
    """sigma_l and sigma_w (log scale) of one case's launches, and its windows per launch."""
    launches = tuple(tuple(math.log(part[metric]) for part in run["windows"] if part.get(metric))
                     for run in result["per_run"])
    between_launches, between_windows = model.within_session([model.Session(launches)])
    return math.sqrt(between_launches), math.sqrt(between_windows), len(launches[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=6)
    parser.add_argument("-k", dest="selection", default="cpu", help="pytest -k of tests_perf (default: cpu)")
    parser.add_argument("--load", choices=("none", "busy"), default="none")
    args = parser.parse_args()
    load = busy_processes if args.load == "busy" else contextlib.nullcontext
    with tempfile.TemporaryDirectory(prefix="perfgate-variance-") as tmp, load():
        results = session(args.launches, args.selection, Path(tmp))
    print("| case | metric | launches x windows | sigma_l | sigma_w | c_l (s) | c_w (s) | w* |")
    print("|---|---|---|---|---|---|---|---|")
    for result in results:
        times = [run["time_s"] for run in result["per_run"] if run.get("time_s")]
        if len(times) < 2:
            print(f"| {result['case']} | {result['verdict']}: {len(times)} launch(es) timed | | | | | | |")
            continue
        window = statistics.median(t["window_s"] for t in times)
        outside = statistics.median(t["total_s"] - t["window_s"] for t in times)
        for metric in GATED:
            if not all(part.get(metric) for run in result["per_run"] for part in run["windows"]):
                continue
            sigma_l, sigma_w, windows = components(result, metric)
            each = window / windows
            best = math.sqrt(outside * sigma_w ** 2 / (each * sigma_l ** 2)) if sigma_l else math.inf
            print(f"| {result['case']} | {metric} ({METRICS[metric].clock}) | {len(result['per_run'])} x {windows} | "
                  f"{sigma_l:.2%} | {sigma_w:.2%} | {outside:.1f} | {each:.2f} | {best:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
