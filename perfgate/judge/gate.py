"""The gate: measures a planned case and decides its verdict against what it is judged by.

Against a stored baseline the verdict is the model's (judge/model.py): per gated metric, this session's effect with
the machine-speed probe as the covariate, from the baseline's launches, the sessions stored with it and the results
history's, and this session's launches. Its interval against the tolerance gives FAIL, pass, stale (faster beyond
the tolerance: a warning, or a failure under --fail-stale), or unresolved while it straddles the tolerance (a
warning, or a failure under --fail-unresolved); it launches again while one more launch could still decide an
unresolved metric, up to --perf-max-repeats and where --perf-budget lets it. Outside the model stay the guards (no
baseline, another workload version, another CPU's kernels, the planted slowdown's check, the budget) and A/B's
paired comparison (judge/ab.py), which overrides ``judge``. --update-baselines makes the runs the stored baseline
(judge/baseline_update.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn, Sequence

from perfgate.config.settings import Settings
from perfgate.judge import baselines, estimates, model, plant, profile_diff
from perfgate.judge.baseline_update import BaselineUpdate
from perfgate.judge.baselines import Reference, StoredSession
from perfgate.judge.gated import GatedMetrics
from perfgate.launch.plan import Plan
from perfgate.measure import gpu_monitor
from perfgate.measure.budget import CaseBudget, SessionBudget
from perfgate.measure.measurer import Measurement, Measurer
from perfgate.outcome import CaseFailed, CaseSkipped
from perfgate.result import Result


class StaleBaselineWarning(UserWarning):
    """A case ran faster than its baseline by more than its tolerance: re-measure and review the baseline."""


class UnresolvedVerdictWarning(UserWarning):
    """The launches allowed could not decide the verdict: neither a FAIL nor a pass."""


NO_BASELINE_RUNS = 2
"""Launches of a case that has no baseline for this class: nothing is gated, the measurement only informs (set
beside other classes' baselines), and the first launch (which also counts FLOPs and runs benchy) and one later
one are what the estimate of the baseline-making time needs. A newcomer's first `make perf` is a third shorter."""


class Gate:
    """Measures one planned case and decides its verdict; ``result`` is the case's record."""

    evidence = "launches"
    """What one more look at the case measures: a launch, or under A/B a pair."""
    look_named = ("launch", "launch(es)")
    """What --perf-budget calls one look and several."""

    def __init__(self, plan: Plan, settings: Settings, measurer: Measurer, reference: Reference, *,
                 root: Path, pytest_args: str = "",
                 nvml: Callable[[], tuple[Any, str]] = gpu_monitor.load_nvml,
                 sessions: Callable[[baselines.Baseline], Sequence[StoredSession]] | None = None,
                 budget: SessionBudget | None = None) -> None:
        """``sessions``: the results history's unchanged sessions of the case on this class since a baseline, as
        ``perfgate store-sessions`` keeps them; ``budget``: the session's --perf-budget, which every launch asks
        first."""
        self.plan = plan
        self.history_sessions = sessions or (lambda baseline: ())
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
        """The model's verdict on every gated metric; another launch while one could still decide an unresolved one
        and none FAILs (more launches would then only settle metrics that cannot change the case's verdict)."""
        plan, result, cap = self.plan, self.result, self.repeat_cap()
        self.gated.note_ungated([name for name in plan.run.gated if name not in baseline.metrics],
                                f"its reference ({self.reference.where}) has none (it is from before the metric); "
                                f"{self.reference.remedy}")
        unmeasured = [name for name in baseline.metrics if not measurement.values(name)]
        if unmeasured:
            raise CaseFailed(f"{plan.run.key}: the runs measured no {', '.join(unmeasured)}, which "
                             f"{self.reference.where} gates: the workload no longer records it, or its records "
                             "changed. Where that is meant, measure the baseline again: --update-baselines")
        stored = estimates.sessions_of(baseline, self.history_sessions(baseline))
        while True:
            effects = estimates.effects(plan, baseline, measurement, stored, self.settings.verdict == "model")
            decided = any(effect.verdict == "FAIL" for effect in effects.values())
            pays = not decided and any(effect.another_launch_pays() for effect in effects.values())
            if not pays or not self.may_measure_more(measurement, cap):
                break
            self.launch(cap)
        result.metrics = [estimates.row(metric, self.gated.unit(metric), effect, baseline, measurement)
                          for metric, effect in effects.items()]
        self.check_plant([(metric, baseline.metrics[metric].better, row["change"])
                          for metric, row in zip(effects, result.metrics)], measurement)
        verdicts = [effect.verdict for effect in effects.values()]
        planted = self.planted()
        lines = "\n".join(f"  {metric}: {effect.describe(estimates.change(metric, baseline, measurement))}"
                           for metric, effect in effects.items())
        if "FAIL" in verdicts:
            self.regression(baseline, measurement, f"{planted}\n{lines}")
        stopped = self.budget is not None and self.budget.stopped
        if stopped and ("unresolved" in verdicts or "stale" not in verdicts):
            return self.out_of_budget(f"{planted}\n{lines}")
        if "unresolved" in verdicts:
            return self.left_unresolved(
                f"{plan.run.key}: unresolved on {plan.hardware_class}{planted}: an interval still straddles its "
                f"tolerance after {len(measurement.runs)} launches, and {why_open(effects.values())}\n{lines}\n"
                f"{self.instead()}")
        if "stale" in verdicts:
            return self.say_stale(f"{planted}: faster than {self.reference.where} by more than its tolerance, by the "
                                  f"model\n{lines}")
        result.conclude("pass")
        return result

    def planted(self) -> str:
        fraction = self.settings.inject_slowdown
        return f" (with a PLANTED slowdown of {fraction:.0%})" if fraction else ""

    def instead(self) -> str:
        """What judges a change this verdict leaves unresolved."""
        return ab_instead(self.result.test)

    def out_of_budget(self, details: str) -> Result:
        """A verdict that --perf-budget stopped short of the launches planned or wanted: unresolved, with the budget
        as its reason, since a pass on fewer launches than planned would read as clean. A FAIL or a stale baseline
        the launches it had decided stands."""
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
                         f"{estimates.machine_speed(baseline, measurement)}{self.what_got_slower()}"
                         f"baseline: {self.reference.where}\ncommand: {measurement.command}\n"
                         f"logs kept in {plan.spec.workdir}")

    def what_got_slower(self) -> str:
        """Lines naming the operators whose time per step grew most (profile_diff.what_got_slower)."""
        return profile_diff.what_got_slower(self.measurer, self.reference, self.result, self.plan,
                                            self.budget.why_no_extra_launch() if self.budget is not None else "")

    def say_stale(self, why: str) -> Result:
        """A case faster than its reference beyond the tolerance: a failure under --fail-stale, else a warning."""
        self.result.conclude("stale")
        what, advice = self.reference.when_faster
        message = f"{self.plan.run.key}: {what} on {self.plan.hardware_class}{why}\n{advice}"
        if self.settings.fail_stale:
            raise CaseFailed(message)
        self.result.warn(StaleBaselineWarning(message))
        return self.result

    def left_unresolved(self, message: str) -> Result:
        """An unresolved verdict: neither a FAIL nor a pass, said as ``message``."""
        self.result.conclude("unresolved")
        return self.say_unresolved(UnresolvedVerdictWarning(message))

    def say_unresolved(self, warning: Warning) -> Result:
        """An unresolved verdict's message: a failure under --fail-unresolved, else a warning the record keeps."""
        if self.settings.fail_unresolved:
            raise CaseFailed(str(warning))
        self.result.warn(warning)
        return self.result

    def check_plant(self, changes: Sequence[tuple[str, str, float]], measurement: Measurement) -> None:
        """Shows, in result.json and with a warning, a planted slowdown that did not slow what is gated."""
        if self.settings.inject_slowdown:
            plant.check(self.result, self.plan.run.key, self.settings.inject_slowdown, changes,
                        measurement.values("planted_fraction"), self.reference.where)

    def repeat_cap(self) -> int:
        """How many launches a verdict may grow to."""
        return self.settings.repeat_cap

    def may_measure_more(self, measurement: Measurement, cap: int) -> bool:
        """Whether an undecided verdict may launch again: within the cap, and where --perf-budget lets it."""
        runs = len(measurement.runs)
        return runs < cap and (self.budget is None or self.budget.may_launch(runs))

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


def ab_instead(test_id: str) -> str:
    """The command that judges a smaller change on this machine: both sides in one job, measured at once."""
    return (f"to judge a smaller change here, A/B it in one job: pytest '{test_id}' --perf-against REF (a CPU flavour "
            "on the local launcher measures both sides at once: docs/ab.md)")


def why_open(effects: Iterable[model.Effect]) -> str:
    """Why an unresolved verdict stayed so: the cap stopped launches that would still narrow it, one more launch
    would narrow it too little to be worth its cost (model.MIN_GAIN), or no number of launches could."""
    still_open = [effect for effect in effects if effect.verdict == "unresolved"]
    if any(effect.another_launch_pays() for effect in still_open):
        return "more launches would narrow it: raise --perf-max-repeats to let them decide it"
    if all(effect.undecidable for effect in still_open):
        return "the spread between sessions here keeps it so however many launches run"
    return (f"one more launch would take less than {model.MIN_GAIN:.0%} off its standard error, as the spread between "
            "sessions here outweighs the launches'")
