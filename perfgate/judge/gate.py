"""The gate's decisions: what a measured case is judged against, and what follows from it.

- judged: pass, FAIL (a significant regression beyond the tolerance), stale (significantly better: the
  reference is out of date; a warning, or a failure under --fail-stale); an inconclusive verdict
  launches more runs, up to --perf-max-repeats, unless another metric already FAILs; under A/B's
  --perf-ab-resolve, so does a pass that cannot yet rule out the slowdown asked for, which ends unresolved if the
  runs run out (a warning, or a failure under --fail-unresolved);
- no reference: skipped with how to create one (failed under --strict-baselines);
- --update-baselines: the runs become the stored baseline (judge/baseline_update.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Protocol

from perfgate.config.settings import Settings
from perfgate.judge import baselines, machine_drop, profile_diff, session_spread
from perfgate.judge.baseline_update import BaselineUpdate
from perfgate.judge.gated import GatedMetrics
from perfgate.judge.session_spread import SessionSpread
from perfgate.launch.plan import Plan
from perfgate.measure import gpu_monitor, metrics, stats
from perfgate.measure.budget import CaseBudget, SessionBudget
from perfgate.measure.measurer import Measurement, Measurer
from perfgate.outcome import CaseFailed, CaseSkipped
from perfgate.records.steps import RecordsError
from perfgate.result import Result


def undecided(outcomes: set[str]) -> bool:
    """Whether the metrics' outcomes so far call for another run: one is inconclusive or unresolved, and none FAILs.
    A FAIL decides the case, as it does once no other metric is open; more runs would only settle metrics that
    cannot change it, at the cost of whole launches (docs/measurements.md#why-the-rules-are-what-they-are). The one
    exception, a wall-clock FAIL beside a neighbour that the CPU clock decides, is machine_drop.awaits_cpu_clock."""
    return "FAIL" not in outcomes and ("inconclusive" in outcomes or "unresolved" in outcomes)


class StaleBaselineWarning(UserWarning):
    """A case ran significantly faster than its baseline allows: re-measure and review the baseline."""


class SessionSpreadWarning(UserWarning):
    """The case moves further between sessions on this machine than its stored tolerance allows: a change inside
    that spread is unresolved, not a FAIL, and a pass catches only the slowdown it names."""


class PlantNotTakenWarning(UserWarning):
    """A planted slowdown moved a gated metric by less than half of what it should: a gate proven with that plant
    proves nothing."""


class UnprovenPassWarning(UserWarning):
    """A metric read worse than its tolerance, but the runs allowed could not tell that from noise: it passes, saying
    so, since a pass that hid it would read as clean."""


class UnresolvedVerdictWarning(UserWarning):
    """The runs allowed could not tell the slowdown --perf-ab-resolve asks about from none."""


PLANT_TAKEN = 0.5
"""A plant has taken once a gated metric moved at least this share of the way it should."""


def plant_check(fraction: float, verdicts: list[baselines.MetricVerdict],
                planted_fractions: list[float]) -> list[dict[str, Any]]:
    """Did each gated metric move as a planted slowdown of ``fraction`` should (a rate to 1 / (1 + F), a time by
    +F)? ``planted_fractions``: what the runs applied (RunMetrics.planted_fraction)."""
    rows = []
    for verdict in verdicts:
        expected = 1 / (1 + fraction) - 1 if verdict.better == "higher" else fraction
        rows.append({"metric": verdict.metric, "planted": fraction, "expected_change": expected,
                     "measured_change": verdict.change, "applied": stats.median(planted_fractions)
                     if planted_fractions else None, "took": verdict.change / expected >= PLANT_TAKEN})
    return rows


class Reference(Protocol):
    """What a case is judged against."""

    where: Path | str
    """Where the reference lives, for messages."""
    against: str
    """What the runs are set against, as a message names it ("the baseline")."""
    remedy: str
    """What gates a metric the reference lacks (one from before the metric)."""
    when_faster: tuple[str, str]
    """What a case significantly faster than the reference beyond the tolerance is, and what to do about it."""

    no_profile: str
    """Why the reference has no profile to set a FAIL's against, where it has none."""

    def load(self) -> baselines.Baseline | None:
        """The reference; None when there is none yet; BaselineError when it cannot be trusted."""

    def profile(self) -> profile_diff.Summary | None:
        """The reference's operators per step, for a FAIL's "what got slower"; None where it has none."""


class StoredBaseline:
    """A reviewed baseline file under --baseline-dir, which --update-baselines (re)writes."""

    against = "the baseline"
    remedy = "re-measure the baseline with --update-baselines to gate it"
    when_faster = ("stale baseline", "re-measure with --update-baselines and review")

    def __init__(self, path: Path) -> None:
        self.where = path
        self.no_profile = (f"none beside {path}: --update-baselines records one in "
                           f"{profile_diff.beside(path).name}")

    def load(self) -> baselines.Baseline | None:
        return baselines.load(self.where)

    def profile(self) -> profile_diff.Summary | None:
        path = profile_diff.beside(self.where)
        return profile_diff.read(path) if path.exists() else None


NO_BASELINE_RUNS = 2
"""Launches of a case that has no baseline for this class: nothing is gated, the measurement only informs (set
beside other classes' baselines), and the first launch (which also counts FLOPs and runs benchy) and one later
one are what the estimate of the baseline-making time needs. A newcomer's first `make perf` is a third shorter."""


class Gate:
    """Measures one planned case and decides its verdict; ``result`` is the case's record."""

    compare = staticmethod(stats.compare_runs)
    """How the runs are set against the baseline's: as independent samples (a baseline measured at another time)."""
    resolution: float | None = None
    """The slowdown a pass must rule out (stats.decide's ``resolve``); A/B's --perf-ab-resolve."""
    evidence = "runs"
    """What one more look at the case measures: a run, or under A/B a pair."""
    look_named = ("launch", "launch(es)")
    """What --perf-budget calls one look and several."""
    weighs_machine = True
    """Whether a FAIL that the machine-speed probe's drop on its clock covers is left unresolved (machine_drop):
    against a stored baseline; A/B's pairs meet the machine's speed on both sides."""

    def __init__(self, plan: Plan, settings: Settings, measurer: Measurer, reference: Reference, *,
                 root: Path, pytest_args: str = "",
                 nvml: Callable[[], tuple[Any, str]] = gpu_monitor.load_nvml,
                 spreads: Callable[[float | None, bool], dict[str, SessionSpread]] | None = None,
                 budget: SessionBudget | None = None) -> None:
        """``spreads``: given the runs' machine-speed probe, each gated metric's spread between the sessions the
        results history holds on a machine like it, or, asked for ``unlike`` ones, at least as fast (none: those
        stored with the baseline, if any, judge). ``budget``: the session's --perf-budget, which every launch asks
        first."""
        self.plan = plan
        self.spreads = spreads or (lambda machine, unlike: {})
        self.settings = settings
        self.measurer = measurer
        self.reference = reference
        self.result = measurer.result
        self.gated = GatedMetrics(plan, self.result)
        self._root = root
        self._pytest_args = pytest_args
        self._nvml = nvml
        self._session_budget = budget
        self.budget: CaseBudget | None = None

    def check(self) -> Result:
        """Gates the case, or updates its baseline; raises CaseFailed or CaseSkipped where that is the outcome."""
        run, settings = self.plan.run, self.settings
        try:
            baseline = self.reference.load()
        except baselines.BaselineError as exc:
            if not settings.update_baselines:
                raise CaseFailed(f"{run.key}: {exc}") from None
            baseline = None
        if settings.update_baselines:
            return BaselineUpdate(self.plan, settings, self.measurer, self.reference.where, self.gated, root=self._root,
                                  pytest_args=self._pytest_args, nvml=self._nvml).run(baseline)
        if baseline is not None and baseline.workload_version != run.case.version:
            raise CaseFailed(f"{run.key}: {self.reference.where} was measured with workload version "
                             f"{baseline.workload_version}, the case is version {run.case.version}: the numbers "
                             "are not comparable. Re-measure: --update-baselines --force-baseline-update")
        why_not = baselines.other_kernels(baseline, self.plan.hardware.cpu_generation) \
            if baseline is not None and run.kind == "cpu" else ""
        if baseline is None or why_not:
            return self.no_baseline(self.measure_planned(min(settings.repeats, NO_BASELINE_RUNS)), why_not)
        measurement = self.measure_planned(settings.repeats, baseline.provenance.get("launch_s"))
        if not measurement.runs:
            return self.out_of_budget("")
        result = self.judge(baseline, measurement)
        if settings.profile:
            self.what_got_slower()
        return result

    def measure_planned(self, planned: int, expected: dict[str, float] | None = None) -> Measurement:
        """The case's planned launches, as many as --perf-budget lets start (``expected``: its baseline's launch
        costs, where the baseline recorded them)."""
        if self._session_budget is not None:
            self.budget = self._session_budget.for_case(self.plan.run.key, planned, expected, self.look_named)
        for index in range(planned):
            if self.budget is not None and not self.budget.may_launch(index):
                break
            self.launch(planned)
        return self.measurer.measurement

    def launch(self, planned: int) -> None:
        """One more look at the case, its cost booked against --perf-budget."""
        if self.budget is None:
            self.look(planned)
        else:
            self.budget.timed(lambda: self.look(planned))

    def look(self, planned: int) -> None:
        """One launch of the case (under A/B a pair)."""
        self.measurer.launch_once(planned)

    def judge(self, baseline: baselines.Baseline, measurement: Measurement) -> Result:
        """Decides from the runs so far; an inconclusive verdict launches more runs, up to the cap."""
        plan, result, cap = self.plan, self.result, self.repeat_cap()
        weighs = self.weighs_machine and not self.settings.calibrate
        self.gated.note_ungated([name for name in plan.run.gated if name not in baseline.metrics],
                          f"its reference ({self.reference.where}) has none (it is from before the metric); "
                          f"{self.reference.remedy}")
        while True:
            current = self._values(baseline, measurement)
            try:
                verdicts = baselines.judge(baseline, current, self.compare, self.resolution)
            except baselines.BaselineError as exc:
                raise CaseFailed(f"{plan.run.key}: {exc}") from None
            then, now = baseline.provenance.get("measured", {}), measurement.medians()
            turns = machine_drop.turns_taken(then, now) if weighs else None
            more = undecided({v.outcome for v in verdicts}) or (
                plan.run.kind == "cpu" and machine_drop.awaits_cpu_clock(verdicts, turns))
            if not more or not self.may_measure_more(measurement, cap):
                break
            baseline = self.measure_more(baseline, cap)
        spreads = self.session_spreads(baseline, now.get(metrics.CALIBRATION_PROBE))
        machine = machine_drop.probe_drop(then, now, "wall") if weighs else None
        cores = machine_drop.probe_drop(then, now, "cpu") if weighs else None
        raw = [stats.settle(v.decision).outcome for v in verdicts]
        outcomes, spread_rows, drop_rows = machine_rules(spreads, verdicts, raw, machine, cores, turns,
                                                         cpu_flavour=weighs and plan.run.kind == "cpu")
        outcomes, turn_rows = self.weigh_turns(verdicts, outcomes)
        drop_rows += turn_rows
        result.metrics = [{**verdict_row(v, outcome), "against_baseline": alone, "run_values": current[v.metric],
                           "baseline_runs": list(baseline.metrics[v.metric].samples)}
                          for v, outcome, alone in zip(verdicts, outcomes, raw)]
        if spread_rows:
            result.session_spread = spread_rows
        if drop_rows:
            result.machine_drop = drop_rows
        self.check_plant(verdicts, measurement)
        planted = (f" (with a PLANTED slowdown of {self.settings.inject_slowdown:.0%})"
                   if self.settings.inject_slowdown else "")
        details = "\n".join([f"  {v.describe()}" for v in verdicts] + calibration_note(result.calibration)
                            + [f"  {session_spread.describe(row)}" for row in spread_rows]
                            + [f"  {machine_drop.describe(row)}" for row in drop_rows])
        if "FAIL" in outcomes:
            self.regression(baseline, measurement, f"{planted}\n{details}")
        within_spread = any(row["outcome"] == "unresolved" for row in spread_rows)
        if within_spread or drop_rows:
            return self.left_unresolved(f"{planted}\n{details}", within_spread, bool(drop_rows))
        if "stale" in outcomes:
            return self.say_stale(f"{planted}: significantly faster than {self.reference.where} allows\n{details}")
        if "unresolved" in outcomes:
            return self.unresolved(verdicts, baseline, current, f"{planted}\n{details}")
        if self.budget is not None and self.budget.stopped:
            return self.out_of_budget(f"{planted}\n{details}")
        result.conclude("pass")
        faster = ({v.metric: machine_drop.speed_up_on(v.metric, then, now, self.settings.calibrate) for v in verdicts}
                  if self.weighs_machine else {})
        blunted = (session_spread.why_blunted(spread_rows)
                   + session_spread.hidden_by_speed_up(faster, verdicts, session_spread.like_only(spreads)))
        if blunted:
            self.result.warn(SessionSpreadWarning(
                f"{plan.run.key}: passed on {plan.hardware_class}, but {' and '.join(blunted)}{planted}\n{details}\n"
                f"{session_spread.ab_instead(result.test)}"))
        unproven = [f"{v.metric} read {v.comparison.worse(v.better)[0]:.1%} worse, beyond its {v.tolerance:.1%} "
                    f"tolerance, and {v.runs} {self.evidence} could not tell that from noise"
                    for v, outcome in zip(verdicts, outcomes) if outcome == "pass" and v.outcome == "inconclusive"]
        if unproven:
            self.result.warn(UnprovenPassWarning(
                f"{plan.run.key}: passed on {plan.hardware_class}, but {' and '.join(unproven)}{planted}\n{details}\n"
                f"{self.what_settles_it()}"))
        return result

    def session_spreads(self, baseline: baselines.Baseline, machine: float | None) -> dict[str, SessionSpread]:
        """Each gated metric's spread between unchanged sessions on a machine like this one (given its probe,
        ``machine``): from the results history where it holds enough of them, else from the sessions stored with the
        baseline (none under --perf-calibrate: they hold values as measured); else from those on a machine at least
        as fast, which may only excuse (session_spread.with_unlike)."""
        def read(unlike: bool) -> dict[str, SessionSpread]:
            kept = {} if self.settings.calibrate else session_spread.stored(baseline.sessions, list(baseline.metrics),
                                                                             machine, self.reference.where, unlike)
            return {**kept, **self.spreads(machine, unlike)}

        found = read(unlike=False)
        if machine is None or set(found) >= set(baseline.metrics):
            return found
        return session_spread.with_unlike(found, read(unlike=True))

    def weigh_turns(self, verdicts: list[baselines.MetricVerdict], outcomes: list[str]
                    ) -> tuple[list[str], list[dict[str, Any]]]:
        """The outcomes once a neighbour's turns on the cores between the launches compared are weighed: nothing to
        weigh against a stored baseline (machine_rules reads the machine there); A/B's pairs in turn have
        something."""
        return outcomes, []

    def instead(self) -> str:
        """What judges a change this verdict leaves unresolved."""
        return session_spread.ab_instead(self.result.test)

    def what_settles_it(self) -> str:
        """The advice for a slowdown the runs allowed could not tell from noise."""
        return f"more runs would settle it (--perf-max-repeats); or {session_spread.ab_instead(self.result.test)}"

    def left_unresolved(self, details: str, within_spread: bool, machine_dropped: bool) -> Result:
        """A regression beyond the tolerance that this machine explains as well as the code: within how far
        unchanged sessions of the case stray here (1 in 20 reads that far), a drop that the probe's on the same
        clock matches, the wall clock beside a neighbour while the CPU clock did not FAIL beyond what the machine
        does, the wall clock alone,
        no history saying how far it strays, or A/B's pairs in turn beside a neighbour (machine_drop). Neither a
        FAIL nor a pass."""
        plan = self.plan
        self.result.conclude("unresolved")
        rows = self.result.machine_drop if machine_dropped else []
        why = [reason for reason, holds in (
            ("within how far this case moves between unchanged sessions here (or worse than them on some gated "
             "clocks only, as a loaded machine's CPU clock can be)", within_spread),
            ("the machine ran slower by as much, on the clocks it failed on",
             any(row["rule"] == "machine slower" for row in rows)),
            ("a neighbour took turns on the cores and no CPU-clock metric FAILed beyond what the machine does",
             any(row["rule"] == "neighbour" for row in rows)),
            ("only its wall clock moved beyond what the machine's cores explain",
             any(row["rule"] == "wall alone" for row in rows)),
            ("its pairs ran one launch after the other while a neighbour took turns on the cores",
             any(row["rule"] == "in turn" for row in rows))) if holds]
        message = (f"{plan.run.key}: unresolved on {plan.hardware_class}: worse than {self.reference.against}, but "
                   f"{' and '.join(why)}{details}\n{self.instead()}")
        return self.say_unresolved(SessionSpreadWarning(message) if within_spread else UnresolvedVerdictWarning(message))

    def out_of_budget(self, details: str) -> Result:
        """A pass that --perf-budget stopped short of the launches its verdict wanted: unresolved, with the budget as
        its reason, since a pass on fewer runs than the verdict asked for would read as clean. A FAIL or a stale
        baseline the runs it had decided stands, and so does a verdict another rule left unresolved, for its reason."""
        plan, stopped = self.plan, self.budget.stopped if self.budget else None
        self.result.budget_stop = stopped
        for row in self.result.metrics:
            row["verdict"] = "unresolved"
        self.result.conclude("unresolved")
        return self.say_unresolved(UnresolvedVerdictWarning(
            f"{plan.run.key}: unresolved on {plan.hardware_class}: {stopped}{details}\n"
            f"{len(self.measurer.measurement.runs)} {self.evidence} measured; give the session more time "
            "(--perf-budget), fewer cases (-k, -m), or a cache directory a CI job restores, so that launches start "
            "sooner (docs/ci.md)"))

    def regression(self, baseline: baselines.Baseline, measurement: Measurement, details: str) -> NoReturn:
        """A FAIL: how much, where it was measured, and what got slower (one profiled launch of each side)."""
        plan = self.plan
        self.result.conclude("FAIL")
        raise CaseFailed(f"{plan.run.key}: performance regression on {plan.hardware_class}{details}\n"
                         f"{machine_speed(baseline, measurement)}{self.what_got_slower()}"
                         f"baseline: {self.reference.where}\ncommand: {measurement.command}\n"
                         f"logs kept in {plan.spec.workdir}")

    def what_got_slower(self) -> str:
        """Lines naming the operators whose time per step grew most, from a profiled launch of this side against the
        reference's profile; what was not profiled, and why, otherwise. The launches are never judged."""
        budget = self.budget.why_no_extra_launch() if self.budget is not None else ""
        if budget:
            return f"what got slower: not profiled ({budget})\n"
        began = time.monotonic()
        try:
            directory = self.measurer.profile()
            current = profile_diff.launch_summary(directory)
        except Exception as exc:  # what got slower only explains a FAIL: nothing in it may lose the FAIL
            return f"what got slower: not profiled ({profile_diff.first_line(exc)})\n"
        cost = self.profiler_cost(directory, current.steps)
        try:
            reference = self.reference.profile()
        except Exception as exc:
            reference, why = None, profile_diff.first_line(exc)
        else:
            why = "" if reference is not None else self.reference.no_profile
        launch_s = time.monotonic() - began
        self.result.profile = {"rank": current.rank, "step_us": current.step_us, "launches_s": launch_s,
                               "dir": str(directory), "profiler_cost": cost,
                               "reference_step_us": reference.step_us if reference else None,
                               "rows": profile_diff.diff(reference, current) if reference else []}
        if reference is None:
            top = ", ".join(f"{name} {current.time_us(name) / 1e3:.2f} ms" for name in
                            sorted(current.ops, key=current.time_us, reverse=True)[:profile_diff.TOP])
            return f"what got slower: no profile of the reference ({why}); this side's most time per step: {top}\n"
        return "\n".join(profile_diff.describe(self.result.profile["rows"], reference, current, cost)) + "\n"

    def profiler_cost(self, directory: Path, steps: int) -> float | None:
        """The profiler's own cost on the steps it recorded, from the profiled launch's step records."""
        try:
            times = [step.step_s for step in self.plan.run.case.records.read(directory).steps]
        except (RecordsError, OSError):
            return None
        return profile_diff.overhead(times, self.plan.warmup, steps)

    def say_stale(self, why: str) -> Result:
        """A case faster than its reference beyond the tolerance: a failure under --fail-stale, else a warning."""
        self.result.conclude("stale")
        what, advice = self.reference.when_faster
        message = f"{self.plan.run.key}: {what} on {self.plan.hardware_class}{why}\n{advice}"
        if self.settings.fail_stale:
            raise CaseFailed(message)
        self.result.warn(StaleBaselineWarning(message))
        return self.result

    def say_unresolved(self, warning: Warning) -> Result:
        """An unresolved verdict's message: a failure under --fail-unresolved, else a warning the record keeps."""
        if self.settings.fail_unresolved:
            raise CaseFailed(str(warning))
        self.result.warn(warning)
        return self.result

    def unresolved(self, verdicts: list[baselines.MetricVerdict], baseline: baselines.Baseline,
                   current: dict[str, list[float]], details: str) -> Result:
        """A verdict whose runs ran out before they could rule out the slowdown asked about: how large a slowdown it
        could have missed, and about how many pairs would have settled it."""
        rows = []
        for v in verdicts:
            if v.outcome == "unresolved":
                rows.append({"metric": v.metric, "could_miss": v.comparison.worse(v.better)[2], "pairs": v.runs,
                             "pairs_needed": stats.pairs_to_resolve(baseline.metrics[v.metric].samples,
                                                                    current[v.metric], v.better, self.resolution)})
        self.result.unresolved = rows
        self.result.conclude("unresolved")
        needed = [row["pairs_needed"] for row in rows]
        more = "more pairs" if None in needed else f"about {max(needed)} pairs"
        reach = ", ".join(f"{row['could_miss']:.1%} on {row['metric']}" for row in rows)
        return self.say_unresolved(UnresolvedVerdictWarning(
            f"{self.plan.run.key}: unresolved on {self.plan.hardware_class}{details}\n"
            f"after {rows[0]['pairs']} pairs a slowdown of up to {reach} cannot be ruled out, more than the "
            f"{self.resolution:.1%} that --perf-ab-resolve asks to rule out: {more} would settle it (raise "
            "--perf-max-repeats or --perf-ab-budget), and longer windows (--perf-steps) narrow each pair "
            "(docs/ab.md)"))

    def check_plant(self, verdicts: list[baselines.MetricVerdict], measurement: Measurement) -> None:
        """Shows, in result.json and with a warning, a planted slowdown that did not slow what is gated."""
        fraction = self.settings.inject_slowdown
        if not fraction:
            return
        rows = plant_check(fraction, verdicts, measurement.values("planted_fraction"))
        self.result.plant = rows
        for row in rows:
            if not row["took"]:
                applied = "" if row["applied"] is None else f" (the runs applied {row['applied']:.1%})"
                self.result.warn(PlantNotTakenWarning(
                    f"{self.plan.run.key}: a planted slowdown of {fraction:.0%}{applied} should move {row['metric']} "
                    f"by {row['expected_change']:+.1%}, but it moved {row['measured_change']:+.1%} against "
                    f"{self.reference.where}: the plant did not take, or the machine got that much faster since "
                    "(A/B in one job, --perf-against, answers drift); this verdict proves nothing about the gate"))

    def repeat_cap(self) -> int:
        """How many runs an inconclusive verdict may grow to."""
        return self.settings.repeat_cap

    def may_measure_more(self, measurement: Measurement, cap: int) -> bool:
        """Whether an inconclusive verdict may launch another run: within the cap, and where --perf-budget lets it."""
        runs = len(measurement.runs)
        return runs < cap and (self.budget is None or self.budget.may_launch(runs))

    def measure_more(self, baseline: baselines.Baseline, cap: int) -> baselines.Baseline:
        """One more run while a verdict is inconclusive; returns what to judge against next."""
        self.launch(cap)
        return baseline

    def _values(self, baseline: baselines.Baseline, measurement: Measurement) -> dict[str, list[float]]:
        """The runs' values of each gated metric; under --perf-calibrate scaled by the baseline's probe over the
        median probe of these runs. The median, not each run's own: the probe's snapshots around a window track
        a machine that is slower for hours, but miss or exaggerate a burst of a few seconds in one run."""
        if not self.settings.calibrate:
            return {name: measurement.values(name) for name in baseline.metrics}
        probe, key = metrics.CALIBRATION_PROBE, self.plan.run.key
        reference = baseline.provenance.get("measured", {}).get(probe)
        readings = measurement.values(probe)
        if not reference:
            raise CaseFailed(f"{key}: --perf-calibrate needs the machine-speed probe ({probe}) of the baseline, and "
                             f"{self.reference.where} has none: re-measure it with --update-baselines")
        if len(readings) < len(measurement.runs):
            raise CaseFailed(f"{key}: --perf-calibrate needs the machine-speed probe ({probe}) of every run, and "
                             "this workload records none; run it without --perf-calibrate")
        self.result.calibration = {"probe": probe, "baseline": reference, "runs": readings}
        now = stats.median(readings)
        return {name: [metrics.calibrated(name, value, now, reference) for value in measurement.values(name)]
                for name in baseline.metrics}

    def no_baseline(self, measurement: Measurement, why_not: str = "") -> Result:
        """Nothing to judge against (``why_not``: the baseline there is does not judge this machine): the measurement
        is reported, and the case skipped with how to create one."""
        plan, measured = self.plan, measurement.medians()
        self.result.metrics = [  # before the verdict: gated.measured raises where the runs measured none of them
            {"metric": name, "unit": self.gated.unit(name), "measured": measured[name], "verdict": "no-baseline",
             "run_values": measurement.values(name)}
            for name in (self.gated.measured(measurement) if measurement.runs else [])
        ]
        self.result.conclude("no-baseline")
        if why_not:
            message = (f"{plan.run.key}: {self.reference.where} {why_not}. Nothing was gated. Measure this machine's "
                       f"own: pytest '{plan.test_id}' --update-baselines --hardware-class {plan.detected_class}, then "
                       "review and commit the file.")
        else:
            message = (f"{plan.run.key}: no baseline for hardware class {plan.hardware_class} ({self.reference.where} "
                       f"does not exist), so nothing was gated. Create it: pytest '{plan.test_id}' "
                       "--update-baselines, then review and commit the file.")
            older = baselines.named_before_the_tier(Path(self.reference.where))
            if older is not None:
                message += (f" {older} is this processor's baseline from before the class named the CPU's vector "
                            f"extensions: where its provenance's cpu_generation has this machine's "
                            f"({plan.hardware.cpu_generation}), rename its folder to {plan.hardware_class} (git mv) "
                            "instead.")
        if self.budget is not None and self.budget.stopped:
            self.result.budget_stop = self.budget.stopped
            message += f" ({self.budget.stopped})"
        if self.settings.strict_baselines:
            raise CaseFailed(message)
        raise CaseSkipped(message)

def verdict_row(verdict: baselines.MetricVerdict, outcome: str) -> dict[str, Any]:
    c = verdict.comparison
    return {
        "metric": verdict.metric, "unit": verdict.unit, "measured": verdict.measured,
        "baseline": verdict.baseline, "change": verdict.change, "tolerance": verdict.tolerance,
        "ci": [c.ci_low, c.ci_high], "p_value": c.p_value, "runs": verdict.runs,
        "reason": verdict.decision.reason, "verdict": outcome,
    }


def calibration_note(calibration: dict[str, Any] | None) -> list[str]:
    """The line that says a verdict compared calibrated values, and by how much the machine had moved."""
    if not calibration:
        return []
    now, then = stats.median(calibration["runs"]), calibration["baseline"]
    return [f"  calibrated (--perf-calibrate): values scaled by the machine-speed probe, {calibration['probe']} "
            f"{now:.4g} now vs {then:.4g} for the baseline ({now / then - 1:+.1%})"]


def machine_rules(spreads: dict[str, SessionSpread], verdicts: list[Any], raw: list[str],
                  machine: machine_drop.Drop | None, cores: machine_drop.Drop | None = None,
                  turns: float | None = None, cpu_flavour: bool = False
                  ) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """The outcomes once this machine is weighed: the spread between its sessions (session_spread), then the probe's
    drop by the wall clock and by its CPU time (machine_drop), which reads the CPU clock in ``raw`` (the outcomes
    against the baseline alone) and compares each drop with what each metric on its clock FAILed against, then, where
    ``cpu_flavour`` (a CPU flavour against a stored baseline), a wall-clock FAIL while no CPU-clock metric FAILed
    beyond the probe's drop by CPU time or the spread between sessions in a session a neighbour took ``turns`` in,
    and a FAIL of the wall clock alone (the CPU clock held, or moved no further than the probe's drop by CPU time
    explains) on a metric whose spread no history knows. Returns the outcomes and each rule's rows."""
    outcomes, spread_rows = session_spread.judge(spreads, verdicts, raw)
    against = {row["metric"]: row["against_sessions"] for row in spread_rows if not row["unlike"]}
    worse = [max(session_spread.worsening(v.change, v.better), against.get(v.metric, -1.0)) for v in verdicts]
    outcomes, drop_rows = machine_drop.judge(verdicts, outcomes, machine, raw=raw, worse=worse, cores=cores)
    if cpu_flavour:
        outcomes, neighbour_rows = machine_drop.beside_a_neighbour(
            verdicts, outcomes, turns, raw=raw,
            held=machine_drop.held_on_slower_cores(verdicts, raw, worse, cores) | session_spread.held(spread_rows))
        outcomes, alone_rows = machine_drop.wall_alone(verdicts, outcomes, machine, known=against, cores=cores,
                                                       worse=worse)
        drop_rows += neighbour_rows + alone_rows
    return outcomes, spread_rows, drop_rows


def machine_speed(baseline: baselines.Baseline, measurement: Measurement) -> str:
    """A line comparing the machine-speed probe now with the probe when the baseline was measured.

    The probe's kernels do not change with the workload: if it dropped as much as the workload did, the
    machine (other tenants, clocks) is the likelier suspect than the code. Empty without probe readings.
    """
    then = baseline.provenance.get("measured", {})
    now = measurement.medians()
    lines = []
    for name in (*metrics.MACHINE_PROBES["wall"], *metrics.MACHINE_PROBES["cpu"]):
        if then.get(name) and now.get(name):
            change = now[name] / then[name] - 1
            lines.append(f"{name} {now[name]:.4g} vs {then[name]:.4g} ({change:+.1%})")
    if not lines:
        return ""
    return ("machine-speed probe now vs when the baseline was measured: " + ", ".join(lines)
            + " (a drop as large as the workload's points at the machine, not the code)\n")
