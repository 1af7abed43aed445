"""How the verdict's model (perfgate/judge/model.py) judges the sessions committed with the baselines, each left out
in turn, unchanged and with a slowdown of 5, 10 and 20 % added to it; or (--priors) the prior it fits from them.

    python benchmarks/verdict_model.py
    python benchmarks/verdict_model.py --priors
    python benchmarks/verdict_model.py --population --baseline-dir benchmarks/sessions

A session stored in a baseline file is its gated metrics' medians and its probe readings, not its launches: it is
replayed as NOMINAL_LAUNCHES launches at its median, whose spread the baseline's launches give. Each is judged
against the baseline's launches and the file's other sessions (leave one out), with the flavour's tolerances as
the effect sizes and a Bonferroni correction over the file's gated metrics. A case-session FAILs where a metric does;
else it is unresolved where one is, else stale where one is, else a pass. Prints, per hardware class: the
unchanged case-sessions and their verdicts, the plants caught per size, the median figure the model states
("catches"), and how many plants at or above the figure their session stated FAILed.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from perfgate.config.cases import CPU_TOLERANCE_FLOOR  # noqa: E402
from perfgate.judge import baselines, model  # noqa: E402
from perfgate.measure.metrics import METRICS, PROBES  # noqa: E402

PLANTS = (0.05, 0.10, 0.20)
TOLERANCES = {"wall": CPU_TOLERANCE_FLOOR, "cpu": 0.05}
"""A CPU flavour's default least tolerances (config/cases.py): the effect size each clock's metrics must exceed."""
ORDER = ("FAIL", "unresolved", "stale", "pass")


def case_verdict(verdicts: list[str]) -> str:
    return next(verdict for verdict in ORDER if verdict in verdicts)


def files(baseline_dir: Path) -> list[baselines.Baseline]:
    """The CPU baselines that store sessions."""
    found = []
    for path in sorted(baseline_dir.glob("cpu-*/*.json")):
        if path.name.endswith(".profile.json"):  # the profile summary beside a baseline (profile_diff.beside)
            continue
        baseline = baselines.load(path)
        if baseline is not None and len(baseline.sessions) >= 2:
            found.append(baseline)
    return found


def sessions(baseline: baselines.Baseline, metric: str) -> tuple[model.Session, list[model.Session]]:
    """The baseline's own session and its stored ones, for ``metric``."""
    better = METRICS[metric].better
    measured = baseline.provenance.get("measured", {})
    own = model.session_of(baseline.metrics[metric].runs, better, {k: measured.get(k) for k in PROBES})
    stored = [model.stored_session(s.medians[metric], better, probes(s)) for s in baseline.sessions]
    return own, stored


def probes(session: baselines.StoredSession) -> dict[str, float]:
    return dict(session.probes) or {model.WALL_MATMUL: session.probe}


def launches(reference: baselines.MetricBaseline, median: float, planted: float) -> list[float]:
    """A stored session's launches: its median with the spread of the baseline's first NOMINAL_LAUNCHES launches
    about their own median, slowed by ``planted``."""
    pattern = reference.runs[:model.NOMINAL_LAUNCHES]
    centre = statistics.median(pattern)
    slowed = median * (1 + planted) if reference.better == "lower" else median / (1 + planted)
    return [slowed * run / centre for run in pattern]


def by_the_model(baseline: baselines.Baseline, left_out: int, planted: float) -> tuple[str, float]:
    """The case-session's verdict, session ``left_out`` of the file judged with ``planted`` added, and the least
    figure its metrics state."""
    verdicts, figures = [], []
    session = baseline.sessions[left_out]
    for metric, reference in baseline.metrics.items():
        own, stored = sessions(baseline, metric)
        this = model.session_of(launches(reference, session.medians[metric], planted), reference.better,
                                probes(session))
        clock = METRICS[metric].clock
        effect = model.estimate(this, own, stored[:left_out] + stored[left_out + 1:], clock=clock, kind="cpu",
                                tolerance=TOLERANCES[clock], metrics=len(baseline.metrics))
        verdicts.append(effect.verdict)
        figures.append(effect.catchable)
    return case_verdict(verdicts), min(figures)


def replay(baseline_dir: Path) -> None:
    tallies: dict[str, dict] = defaultdict(lambda: {"unchanged": Counter(), "plants": defaultdict(Counter),
                                                    "figures": [], "promised": Counter()})
    for baseline in files(baseline_dir):
        tally = tallies[baseline.hardware_class]
        for left_out in range(len(baseline.sessions)):
            verdict, stated = by_the_model(baseline, left_out, 0.0)
            tally["unchanged"][verdict] += 1
            tally["figures"].append(stated)
            for size in PLANTS:
                caught, _ = by_the_model(baseline, left_out, size)
                tally["plants"][size][caught] += 1
                if size >= stated:
                    tally["promised"][caught] += 1
    print("| hardware class | unchanged case-sessions | FAIL (false) | unresolved | stale | pass | "
          + " | ".join(f"{size:.0%} plants FAIL" for size in PLANTS) + " | catches (median) | plants at or above "
          "the figure: FAIL |")
    print("|---" * (8 + len(PLANTS)) + "|")
    for hardware_class, tally in sorted(tallies.items()):
        unchanged, total = tally["unchanged"], sum(tally["unchanged"].values())
        plants = [f"{tally['plants'][size]['FAIL']} of {sum(tally['plants'][size].values())}" for size in PLANTS]
        promised, stated = tally["promised"], tally["figures"]
        print(f"| {hardware_class} | {total} | {unchanged['FAIL']} ({unchanged['FAIL'] / total:.1%}) | "
              f"{unchanged['unresolved']} | {unchanged['stale']} | {unchanged['pass']} | {' | '.join(plants)} | "
              f"{f'{statistics.median(stated):.1%}' if stated else '-'} | {promised['FAIL']} of "
              f"{sum(promised.values())} |")


def priors(baseline_dir: Path) -> None:
    """Per clock, over the files' metrics: the between-session spread left once the wall-clock matmul explains what it
    can, and the slope on it, as the median over the files, with the slopes' spread as its uncertainty."""
    fitted: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for baseline in files(baseline_dir):
        for metric in baseline.metrics:
            own, stored = sessions(baseline, metric)
            if len(stored) < 5:
                continue
            effect = model.estimate(stored[-1], own, stored[:-1], clock=METRICS[metric].clock, kind="cpu",
                                    tolerance=0.05)
            if effect.covariates == model.FALLBACK:
                fitted[METRICS[metric].clock].append((effect.components.between_sessions ** 0.5, effect.slopes[0]))
    for clock, found in sorted(fitted.items()):
        taus, slopes = zip(*found)
        print(f'("cpu", "{clock}"): Prior(tau={statistics.median(taus):.3f}, slope={statistics.median(slopes):.2f}, '
              f"slope_sd={statistics.stdev(slopes):.2f}),  # {len(found)} case files, on the wall-clock matmul")
    pooled_priors(baseline_dir)


def pooled_priors(baseline_dir: Path) -> None:
    """Per clock, over the case files whose sessions all read the matmul by both clocks (stored since the sessions
    keep every probe reading): one least-squares fit of the sessions' means on the CPU-time matmul and the
    neighbour's turns (logs against the file's own baseline), each file and metric at its own level. tau is the
    residual spread less the sessions' own launch noise; the slopes' uncertainties are their standard errors."""
    rows: dict[str, list[tuple[str, float, float, float]]] = defaultdict(list)
    noise: dict[str, list[float]] = defaultdict(list)
    for baseline in files(baseline_dir):
        for metric in baseline.metrics:
            own, stored = sessions(baseline, metric)
            everyone = [own, *stored]
            if not all(model.has_turns(session) for session in everyone):
                continue
            clock = METRICS[metric].clock
            for session in everyone:
                rows[clock].append((f"{baseline.hardware_class}:{baseline.case}:{metric}", session.level,
                                    *(math.log(model.reading(session, name) / model.reading(own, name))
                                      for name in ("probe_matmul_cpu_gflops", model.NEIGHBOUR_TURNS))))
            noise[clock].append(model.within_session([own])[0] / model.NOMINAL_LAUNCHES)
    for clock, found in sorted(rows.items()):
        groups = sorted({group for group, *_ in found})
        x = np.array([[float(group == g) for g in groups] + [matmul, turns] for group, _, matmul, turns in found])
        y = np.array([mean for _, mean, _, _ in found])
        dof = len(y) - x.shape[1]
        if dof <= 0:
            print(f'("cpu", "{clock}"): {len(y)} sessions of {len(groups)} case metrics are too few to fit')
            continue
        fitted, _, _, _ = np.linalg.lstsq(x, y, rcond=None)
        residual_var = float(np.sum((y - x @ fitted) ** 2)) / dof
        se = np.sqrt(np.diag(residual_var * np.linalg.pinv(x.T @ x)))
        tau = math.sqrt(max(0.0, residual_var - statistics.mean(noise[clock])))
        print(f'("cpu", "{clock}"): Prior(tau={tau:.3f}, slope={fitted[-2]:.2f}, slope_sd={se[-2]:.2f}, '
              f"turns_slope={fitted[-1]:.2f}, turns_slope_sd={se[-1]:.2f}),  # {len(y)} sessions of {len(groups)} "
              "case metrics, on the CPU-time matmul and the neighbour's turns")


def population_priors(baseline_dir: Path) -> None:
    """Per clock, the slopes a case with no sessions of its own should expect: each case file's own least-squares fit
    on the CPU-time matmul and the neighbour's turns (its sessions, logs against its baseline), then the mean of those
    slopes over the case files of every class, and their spread (the standard deviation over the cases, which holds
    how cases and classes differ: a case's ranks and workers against its cores move it with a neighbour more or less),
    and tau as the root mean square of the files' residual spreads less their launches' noise."""
    slopes: dict[str, list[tuple[float, float]]] = defaultdict(list)
    residuals: dict[str, list[float]] = defaultdict(list)
    for baseline in files(baseline_dir):
        for metric in baseline.metrics:
            own, stored = sessions(baseline, metric)
            everyone = [own, *stored]
            if len(everyone) < 5 or not all(model.has_turns(session) for session in everyone):
                continue
            names = ("probe_matmul_cpu_gflops", model.NEIGHBOUR_TURNS)
            x = model.design(everyone, own, names)
            y = np.array([session.level for session in everyone])
            fitted, _, _, _ = np.linalg.lstsq(x, y, rcond=None)
            clock = METRICS[metric].clock
            slopes[clock].append((float(fitted[1]), float(fitted[2])))
            noise = model.within_session([own])[0] / model.NOMINAL_LAUNCHES
            residuals[clock].append(max(0.0, float(np.sum((y - x @ fitted) ** 2)) / (len(y) - 3) - noise))
    for clock, found in sorted(slopes.items()):
        matmul, turns = zip(*found)
        tau = math.sqrt(statistics.fmean(residuals[clock]))
        print(f'("cpu", "{clock}"): Prior(tau={tau:.3f}, slope={statistics.fmean(matmul):.2f}, '
              f"slope_sd={statistics.stdev(matmul):.2f}, turns_slope={statistics.fmean(turns):.2f}, "
              f"turns_slope_sd={statistics.stdev(turns):.2f}),  # {len(found)} case files, each fitted on its own")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-dir", type=Path, default=REPO / "baselines")
    parser.add_argument("--priors", action="store_true", help="print the CPU priors fitted from the stored sessions")
    parser.add_argument("--population", action="store_true",
                        help="print the CPU priors from each case file's own slopes, their mean and spread")
    args = parser.parse_args()
    (population_priors if args.population else priors if args.priors else replay)(args.baseline_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
