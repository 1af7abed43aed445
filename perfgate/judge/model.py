"""One model of a gated metric across sessions, launches and windows, with the machine's speed as a covariate.

    y = level + effect x [this session] + beta . x_session + u_session + v_launch + e_window

``y`` is the log of a value, oriented so that positive is worse; ``x`` the machine-speed probe's readings as logs
against the baseline's (COVARIATES says which move which clock); ``u``, ``v`` and ``e`` are the between-session,
between-launch and between-window variations, with variances tau^2, sigma_l^2 and sigma_w^2 (issue 71).

Estimated in closed form, each step citable:
- sigma_l^2 and sigma_w^2 by the method of moments for nested random effects (Searle, Casella & McCulloch,
  "Variance Components", 1992, ch. 3; the multi-level estimator of Kalibera & Jones, "Rigorous benchmarking in
  reasonable time", 2013), pooled over the sessions whose launches are at hand (the baseline's and this one);
- level, beta and tau^2 by least squares over the sessions' levels (the baseline's and the stored sessions'), the
  residual variance less what the launches within a session contribute;
- with too few sessions for that, a prior per flavour and clock (PRIORS), fitted from the committed sessions,
  whose slopes bring the sessions at hand to one machine and whose tau pools with their spread (by_the_prior).

The effect's interval, each side at alpha / m for m gated metrics (Bonferroni), is set against the tolerance, an
effect size: FAIL where it lies above it, stale where it lies below its negative, pass where it lies below it, and
unresolved while it straddles it and more launches could still decide it (Effect.verdict). The same variance says
which slowdown this session could catch, and every verdict states it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from scipy import stats as scipy_stats

from perfgate.measure.metrics import MACHINE_PROBES, MATMUL_PROBE, RUN_QUEUE_TURNS

WALL_MATMUL = MATMUL_PROBE
NEIGHBOUR_TURNS = "neighbour_turns"
"""The matmul probe's wall time over its CPU time: how much of the cores a neighbour took while it ran."""
COVARIATES = {"wall": ("probe_matmul_cpu_gflops", "probe_copy_cpu_gbps", NEIGHBOUR_TURNS),
              "cpu": ("probe_matmul_cpu_gflops", "probe_copy_cpu_gbps")}
"""Which readings move a metric of each clock, where every session has them. Sessions stored before the CPU-time
readings were kept have the wall-clock matmul alone, which then stands in for all of them (FALLBACK)."""
READ_BETTER = {NEIGHBOUR_TURNS: RUN_QUEUE_TURNS}
"""A reading that takes another's place where every session has it. The window's own wait for a core reads the
neighbour while the workload ran; the probe's turns read it only while the probe ran, a short new process that the
scheduler may run first. Beside the same two busy processes, live on the Intel 2-core class (2026-12-07), the probe
read turns of 1.00 to 1.87 and the window's CPU use 0.61-0.70 of the wall clock in every launch (0.92-0.95 quiet),
and an unchanged U-Net FAILed where its probe had read 1.02-1.07."""
FALLBACK = (WALL_MATMUL,)
CPU_MATMUL = MACHINE_PROBES["cpu"][0]
NOMINAL_LAUNCHES = 3
"""The launches behind a stored session's median, which the file does not record (make perf's default)."""
PRIOR_DOF = 8
"""How many sessions' degrees of freedom the prior's tau counts for beside a case's own sessions."""
POWER = 0.9
"""The chance with which the stated figure is caught."""
MIN_GAIN = 0.03
"""The least share of the standard error one more launch must take off to be launched."""
ALPHA = 0.05


@dataclass(frozen=True)
class Prior:
    """What a clone with too few sessions assumes: the between-session spread (log sd) and how the metric moves with
    the machine's speed, the slope per log of the ratio of reading ``on`` (and its uncertainty)."""

    tau: float
    on: str
    slope: float
    slope_sd: float
    turns_slope: float = 0.0
    """How the metric moves with the neighbour's turns (log of the matmul's wall time over its CPU time), where the
    prior is on the CPU-time matmul, which both need."""
    turns_slope_sd: float = 0.0
    run_queue_slope: float = 0.0
    """How the metric moves with the window's run-queue turns (RUN_QUEUE_TURNS), which take the probe's turns'
    place where both sessions have them."""
    run_queue_slope_sd: float = 0.0


PRIORS = {
    ("cpu", "wall"): (Prior(tau=0.064, on=CPU_MATMUL, slope=-0.82, slope_sd=0.42,
                            turns_slope=0.77, turns_slope_sd=0.35, run_queue_slope=0.83, run_queue_slope_sd=0.25),
                      Prior(tau=0.056, on=WALL_MATMUL, slope=-0.68, slope_sd=0.12)),
    ("cpu", "cpu"): (Prior(tau=0.038, on=CPU_MATMUL, slope=-1.02, slope_sd=0.33,
                           turns_slope=-0.03, turns_slope_sd=0.08),
                     Prior(tau=0.071, on=WALL_MATMUL, slope=-0.11, slope_sd=0.15)),
    ("gpu", "wall"): (Prior(tau=0.010, on=WALL_MATMUL, slope=0.0, slope_sd=0.05),),
    ("gpu", "cpu"): (Prior(tau=0.030, on=WALL_MATMUL, slope=0.0, slope_sd=0.25),),
}
"""Each flavour's priors, the first whose reading both sessions have. On the CPU-time matmul and the neighbour's turns:
what a case with no sessions of its own should expect, from each case file's own fit (``python
benchmarks/verdict_model.py --population --baseline-dir benchmarks/sessions``): the mean of the 14 case files'
slopes, 7 cases on each of two classes (AMD EPYC family 25 model 17 avx512bf16, 9 sessions a case over 4 hours; Intel
Xeon family 6 model 167 with AMX, 5 a case over 50 minutes; quiet and beside two busy processes,
2026-12-07), and their spread over the cases as the slopes' uncertainty. That spread is the term a pooled fit of one
class left out: how a case's wall clock moves with a neighbour's turns depends on its ranks and workers against the
cores, and on the class (0.41-0.70 on the AMD class, 0.70-1.26 on the Intel one), where the AMD class's pooled fit
alone (0.58 +- 0.03, the standard error of one common slope) had FAILed two unchanged Intel sessions beside two busy
processes (docs/measurements.md, 2026-12-07 19:27-20:19). It depends on the neighbour too: beside another test's
launches, which come and go, the AMD class's fastest step moved 0.19, so the turns' slope takes 0.35, not the
cases' 0.25. A CPU time per sample rises as a slower host's cores take
longer (-1.02 per log of the matmul's rate), which the wall-clock matmul, which the neighbour's turns also move, had
hidden (-0.11 fitted on it), and hardly moves with the turns (-0.03). On the wall-clock matmul alone (sessions stored
before every reading was kept): fitted on the 21 case files of three classes, 2026-12-07. A GPU flavour's spread is
tight by assumption until GPU sessions are stored (issue 71). The window's run-queue turns, where both sessions have
them, move the wall clock's fastest step 0.83 +- 0.25: the 7 cases' quiet and loaded sessions of 2026-12-07 on the
Intel class moved 0.69-0.98 (mean 0.83, sd 0.11) against the window's CPU use, which stands in for the turns before
they were kept, widened for that stand-in. The first sessions that kept the turns (benchmarks/run-queue-sessions, one
quiet and three loaded, 22:51-23:26) moved 0.64-1.01 (mean 0.85, sd 0.14) with them."""


@dataclass(frozen=True)
class Session:
    """One session of the case: per launch, its windows' oriented log values (one each where a launch was not split),
    and its machine-speed probe's readings."""

    launches: tuple[tuple[float, ...], ...]
    probes: Mapping[str, float] = field(default_factory=dict)

    @property
    def level(self) -> float:
        """The median of its launches' means: what the baseline file and the results history keep of a session is
        its launches' median, so this session and the baseline's are read alike; a launch that a neighbour slowed
        moves it no further than the middle one."""
        return float(np.median([np.mean(windows) for windows in self.launches]))


def oriented(value: float, better: str) -> float:
    """The log of ``value``, positive where worse."""
    return math.log(value) if better == "lower" else -math.log(value)


def session_of(runs: Sequence[Sequence[float]] | Sequence[float], better: str,
               probes: Mapping[str, float | None]) -> Session:
    """A session from its launches' values (each a number, or its windows' numbers) and its probe readings."""
    launches = tuple(tuple(oriented(v, better) for v in (run if isinstance(run, (list, tuple)) else [run]))
                     for run in runs)
    return Session(launches, {name: value for name, value in probes.items() if value})


def stored_session(median: float, better: str, probes: Mapping[str, float | None]) -> Session:
    """A session known by its median alone (a baseline file's stored sessions), as NOMINAL_LAUNCHES equal launches."""
    return session_of([median] * NOMINAL_LAUNCHES, better, probes)


@dataclass(frozen=True)
class Components:
    """Variance components on the log scale."""

    between_sessions: float
    between_launches: float
    between_windows: float


def within_session(sessions: Sequence[Session]) -> tuple[float, float]:
    """sigma_l^2 and sigma_w^2 by the nested method of moments, pooled over ``sessions``: the windows' mean square
    within launches, and the launches' mean square less it, over the launches' effective window count."""
    ss_windows = df_windows = ss_launches = df_launches = weighted_n0 = 0.0
    for session in sessions:
        sizes = [len(windows) for windows in session.launches]
        total = sum(sizes)
        means = [float(np.mean(windows)) for windows in session.launches]
        grand = float(np.average(means, weights=sizes))
        ss_windows += sum(float(np.sum((np.asarray(w) - m) ** 2)) for w, m in zip(session.launches, means))
        df_windows += total - len(sizes)
        if len(sizes) > 1:
            ss_launches += sum(n * (m - grand) ** 2 for n, m in zip(sizes, means))
            df_launches += len(sizes) - 1
            weighted_n0 += (total - sum(n * n for n in sizes) / total)
    windows = ss_windows / df_windows if df_windows else 0.0
    if not df_launches:
        return 0.0, windows
    n0 = weighted_n0 / df_launches
    return max(0.0, (ss_launches / df_launches - windows) / n0), windows


def has_turns(session: Session) -> bool:
    """Whether the session read the matmul by both clocks, whose ratio is the neighbour's turns."""
    return WALL_MATMUL in session.probes and CPU_MATMUL in session.probes


def has_reading(session: Session, name: str) -> bool:
    return has_turns(session) if name == NEIGHBOUR_TURNS else name in session.probes


def covariates(sessions: Sequence[Session], clock: str) -> tuple[str, ...]:
    """The readings of COVARIATES[clock] that every session has (each in READ_BETTER's place where all have that),
    else the wall-clock matmul where all have that."""
    chosen = []
    for name in COVARIATES[clock]:
        better = READ_BETTER.get(name)
        if better and all(has_reading(s, better) for s in sessions):
            chosen.append(better)
        elif all(has_reading(s, name) for s in sessions):
            chosen.append(name)
    if chosen:
        return tuple(chosen)
    return FALLBACK if all(has_reading(s, WALL_MATMUL) for s in sessions) else ()


def pooled_tau2(prior_tau: float, squares: float, dof: int, in_session: float) -> float:
    """tau^2 from the prior's, worth PRIOR_DOF degrees of freedom, and the sessions' squared deviations about their
    fitted level (``dof`` of them) less what their launches contribute: the conjugate scaled-inverse-chi^2 update
    (Gelman et al., "Bayesian Data Analysis", 3rd ed., 2013, sec. 3.3)."""
    return (PRIOR_DOF * prior_tau ** 2 + max(0.0, squares - dof * in_session)) / (PRIOR_DOF + dof)


def reading(session: Session, name: str) -> float:
    if name == NEIGHBOUR_TURNS:
        return session.probes["probe_matmul_cpu_gflops"] / session.probes[WALL_MATMUL]
    return session.probes[name]


def design(sessions: Sequence[Session], reference: Session, names: Sequence[str]) -> np.ndarray:
    """Each session's row: 1 and its readings as logs against the baseline's (``reference``)."""
    return np.array([[1.0] + [math.log(reading(s, n) / reading(reference, n)) for n in names] for s in sessions])


@dataclass(frozen=True)
class Effect:
    """This session's code effect on one metric (oriented log), its standard error and what it rests on."""

    estimate: float
    se: float
    quantile: float
    """Each side's distance in standard errors, at alpha / m: Student's t with the degrees of freedom of the
    sessions and the prior's PRIOR_DOF."""
    tolerance: float
    """The effect size that matters, as a relative change."""
    components: Components
    covariates: tuple[str, ...]
    slopes: tuple[float, ...]
    basis: str
    """"N sessions" where fitted, or "the prior" where there were too few."""
    launches: int
    windows: float
    prediction_var: float

    @property
    def interval(self) -> tuple[float, float]:
        """How much worse, as relative changes (+0.05: 5 % worse), at each side's alpha / m."""
        return (math.expm1(self.estimate - self.quantile * self.se), math.expm1(self.estimate + self.quantile * self.se))

    @property
    def worse(self) -> float:
        """How much worse, as a relative change (+0.05: 5 % worse)."""
        return math.expm1(self.estimate)

    def as_change(self, better: str) -> tuple[float, tuple[float, float]]:
        """The change of the value itself and its interval, as the record's rows hold them (+0.05: 5 % higher)."""
        if better == "lower":
            return self.worse, self.interval
        low, high = self.interval
        return 1 / (1 + self.worse) - 1, (1 / (1 + high) - 1, 1 / (1 + low) - 1)

    @property
    def verdict(self) -> str:
        """FAIL or stale where the interval lies beyond the tolerance; pass where it lies below it; unresolved while
        it straddles it. Where no number of launches could narrow it enough (the spread between sessions keeps it
        wide), a change estimated within the tolerance passes, saying what it could catch, and one beyond it stays
        unresolved."""
        low, high = self.interval
        if low > self.tolerance:
            return "FAIL"
        if high < -self.tolerance:
            return "stale"
        if high <= self.tolerance or (self.undecidable and self.estimate <= math.log1p(self.tolerance)):
            return "pass"
        return "unresolved"

    @property
    def undecidable(self) -> bool:
        """Whether the interval would straddle the tolerance with only the session's own spread and the prediction's
        left in it: more launches cannot decide it."""
        margin = self.quantile * math.sqrt(self.components.between_sessions + self.prediction_var)
        return abs(self.estimate - math.log1p(self.tolerance)) <= margin

    def another_launch_pays(self) -> bool:
        """Whether one more launch could still decide an unresolved verdict and takes MIN_GAIN off its standard
        error."""
        return self.verdict == "unresolved" and not self.undecidable and \
            self.se_after(launches=1) <= (1 - MIN_GAIN) * self.se

    @property
    def catchable(self) -> float:
        """The slowdown that FAILs with probability POWER in a session measured as this one was."""
        z_power = float(scipy_stats.norm.ppf(POWER))
        return math.expm1(math.log1p(self.tolerance) + (self.quantile + z_power) * self.se)

    def se_after(self, launches: int = 0, windows: int = 0) -> float:
        """The standard error with ``launches`` more launches (of the same windows) or ``windows`` more per launch:
        what more measuring can still buy, since tau^2 and the prediction's share stay."""
        c = self.components
        n, w = self.launches + launches, self.windows + windows
        return math.sqrt(c.between_sessions + self.prediction_var + c.between_launches / n
                         + c.between_windows / (n * w))

    def describe(self, change: float) -> str:
        """``change``, the measured value's against the baseline's, then the model's effect as time, which weighs
        the sessions and the machine's readings: a rate 30 % lower takes 42.9 % longer, as a planted slowdown of
        42.9 % makes it."""
        low, high = self.interval
        weighed = f"; weighs {', '.join(self.covariates)}" if self.covariates else ""
        return (f"{change:+.1%} against the baseline, {self.worse:+.1%} slower by the model (interval {low:+.1%} to "
                f"{high:+.1%}, tolerance {self.tolerance:.1%}; from {self.basis}{weighed}; catches "
                f"{self.catchable:.0%})")


def prior_for(kind: str, clock: str, baseline: Session, this: Session) -> Prior:
    """The flavour's first prior whose reading both sessions have (the CPU-time matmul reads the machine's speed
    whatever a neighbour takes; sessions stored before it was kept have the wall-clock one alone); else its last,
    whose slope then has nothing to apply to."""
    priors = PRIORS[kind, clock]
    return next((prior for prior in priors if all(prior.on in s.probes for s in (baseline, this))), priors[-1])


def estimate(this: Session, baseline: Session, stored: Sequence[Session], *, clock: str, kind: str,
             tolerance: float, metrics: int = 1, alpha: float = ALPHA) -> Effect:
    """This session's effect against the baseline's session and the stored ones, each with its probe readings."""
    launch_var, window_var = within_session([baseline, this])
    if len(baseline.launches) + len(this.launches) <= 2:
        launch_var = max(launch_var, PRIORS[kind, clock][0].tau ** 2)  # one launch a side says nothing of their spread
    windows = float(np.mean([len(w) for w in this.launches]))
    n = len(this.launches)
    sessions = [baseline, *stored]
    names = covariates([*sessions, this], clock)
    one_side = alpha / metrics
    in_session = launch_var / NOMINAL_LAUNCHES + window_var / (NOMINAL_LAUNCHES * windows)
    if len(sessions) >= len(names) + 4:
        x = design(sessions, baseline, names)
        y = np.array([s.level for s in sessions])
        fitted, _, _, _ = np.linalg.lstsq(x, y, rcond=None)
        dof = len(sessions) - x.shape[1]
        tau2 = pooled_tau2(prior_for(kind, clock, baseline, this).tau, float(np.sum((y - x @ fitted) ** 2)), dof,
                           in_session)
        row = design([this], baseline, names)[0]
        prediction_var = (tau2 + in_session) * float(row @ np.linalg.pinv(x.T @ x) @ row)
        predicted = float(row @ fitted)
        quantile = float(scipy_stats.t.ppf(1 - one_side, PRIOR_DOF + dof))
        slopes, basis = tuple(float(b) for b in fitted[1:]), f"{len(sessions)} sessions"
    else:
        prior = prior_for(kind, clock, baseline, this)
        predicted, prediction_var, tau2, dof, names, slopes = by_the_prior(prior, this, sessions, in_session)
        quantile = float(scipy_stats.t.ppf(1 - one_side, dof))
        basis = "the prior" if len(sessions) == 1 else f"the prior and {len(sessions)} sessions"
    components = Components(tau2, launch_var, window_var)
    se = math.sqrt(tau2 + prediction_var + launch_var / n + window_var / (n * windows))
    return Effect(this.level - predicted, se, quantile, tolerance, components, names, slopes, basis, n, windows,
                  prediction_var)


def by_the_prior(prior: Prior, this: Session, sessions: Sequence[Session], in_session: float
                 ) -> tuple[float, float, float, float, tuple[str, ...], tuple[float, ...]]:
    """This session's expected value where too few sessions fit the slopes: each session (the baseline's first) is
    brought to the baseline's machine by the prior's slopes and the level is their mean; tau^2 pools the prior's with
    the sessions' own spread about that level (pooled_tau2). Returns the prediction, its variance, tau^2, the degrees
    of freedom, and the readings with their slopes."""
    baseline = sessions[0]
    terms = [(prior.on, prior.slope, prior.slope_sd)] if all(prior.on in s.probes for s in (baseline, this)) else []
    if terms and prior.on == CPU_MATMUL:
        if prior.run_queue_slope and all(RUN_QUEUE_TURNS in s.probes for s in (baseline, this)):
            terms.append((RUN_QUEUE_TURNS, prior.run_queue_slope, prior.run_queue_slope_sd))
        elif has_turns(baseline) and has_turns(this):
            terms.append((NEIGHBOUR_TURNS, prior.turns_slope, prior.turns_slope_sd))
    names = tuple(name for name, _, _ in terms)
    slopes, slope_sds = np.array([term[1] for term in terms]), np.array([term[2] for term in terms])
    usable = [s for s in sessions if all(has_reading(s, name) for name in names)]
    xs, x_this = design(usable, baseline, names)[:, 1:], design([this], baseline, names)[0, 1:]
    adjusted = np.array([s.level for s in usable]) - xs @ slopes
    k = len(usable)
    tau2 = pooled_tau2(prior.tau, float(np.sum((adjusted - adjusted.mean()) ** 2)), k - 1, in_session)
    slope_var = float(np.sum(((x_this - xs.mean(axis=0)) * slope_sds) ** 2))
    prediction_var = (tau2 + in_session) / k + slope_var
    predicted = float(adjusted.mean() + x_this @ slopes)
    return predicted, prediction_var, tau2, PRIOR_DOF + k - 1, names, tuple(map(float, slopes))
