"""A stored baseline judged by the verdict's model (``--perf-verdict model``): one estimate per gated metric from the
baseline's launches, the sessions stored with it and the results history's, and this session's launches, with the
machine-speed probe as the covariate (judge/model.py). It launches again while one more launch could still
decide an unresolved metric (model.Effect.another_launch_pays), up to the cap and where --perf-budget lets it.

It reads launches, not their windows (metrics.windows), until baselines keep their launches' windows too: a
launch's own value and a window's are of different lengths, so neither stands for the other.

It stands beside the rules of gate.Gate until live sessions have proven it there (issue 71); the guards stay
Gate's: no baseline, another workload version, another CPU's kernels, the planted slowdown's check, the budget.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from perfgate.judge import baselines, model
from perfgate.judge.baselines import StoredSession
from perfgate.judge.gate import Gate, UnresolvedVerdictWarning
from perfgate.measure.measurer import Measurement
from perfgate.measure.metrics import METRICS
from perfgate.outcome import CaseFailed
from perfgate.result import Result

class ModelGate(Gate):
    """Gate with the model's verdict on a stored baseline; ``sessions``: the results history's unchanged sessions of
    the case on this class since the baseline, as ``perfgate store-sessions`` would keep them."""

    def __init__(self, *args: Any, sessions: Callable[[baselines.Baseline], Sequence[StoredSession]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history_sessions = sessions or (lambda baseline: ())

    def judge(self, baseline: baselines.Baseline, measurement: Measurement) -> Result:
        plan, result, cap = self.plan, self.result, self.repeat_cap()
        self.gated.note_ungated([name for name in plan.run.gated if name not in baseline.metrics],
                                f"its reference ({self.reference.where}) has none (it is from before the metric); "
                                f"{self.reference.remedy}")
        unmeasured = [name for name in baseline.metrics if not measurement.values(name)]
        if unmeasured:
            raise CaseFailed(f"{plan.run.key}: the runs measured no {', '.join(unmeasured)}, which "
                             f"{self.reference.where} gates: the workload no longer records it, or its records changed. "
                             "Where that is meant, measure the baseline again: --update-baselines")
        stored = sessions_of(baseline, self.history_sessions(baseline))
        while True:
            effects = self.effects(baseline, measurement, stored)
            pays = any(effect.another_launch_pays() for effect in effects.values())
            if not pays or not self.may_measure_more(measurement, cap):
                break
            self.launch(cap)
        result.metrics = [self.row(metric, effect, baseline, measurement) for metric, effect in effects.items()]
        if self.settings.inject_slowdown:
            self.check_plant(baselines.judge(baseline, {m: measurement.values(m) for m in effects}, self.compare),
                             measurement)
        verdicts = [effect.verdict for effect in effects.values()]
        planted = (f" (with a PLANTED slowdown of {self.settings.inject_slowdown:.0%})"
                   if self.settings.inject_slowdown else "")
        details = "\n".join(f"  {metric}: {effect.describe()}" for metric, effect in effects.items())
        if "FAIL" in verdicts:
            self.regression(baseline, measurement, f"{planted}\n{details}")
        if "unresolved" in verdicts:
            if self.budget is not None and self.budget.stopped:
                return self.out_of_budget(f"{planted}\n{details}")
            result.conclude("unresolved")
            open_ = [effect for effect in effects.values() if effect.verdict == "unresolved"]
            why = ("more launches would narrow it: they would decide it (--perf-max-repeats)"
                   if any(not effect.undecidable for effect in open_) else
                   "the spread between sessions here keeps it so however many launches run")
            return self.say_unresolved(UnresolvedVerdictWarning(
                f"{plan.run.key}: unresolved on {plan.hardware_class}{planted}: an interval still straddles its "
                f"tolerance after {len(measurement.runs)} launches, and {why}\n{details}\n{self.instead()}"))
        if "stale" in verdicts:
            return self.say_stale(f"{planted}: faster than {self.reference.where} by more than its tolerance, once "
                                  f"the machine's speed is weighed\n{details}")
        result.conclude("pass")
        return result

    def effects(self, baseline: baselines.Baseline, measurement: Measurement, stored: Sequence[StoredSession]
                ) -> dict[str, model.Effect]:
        """Each gated metric's effect, from the launches so far."""
        plan, then, now = self.plan, baseline.provenance.get("measured", {}), measurement.medians()
        measured = [name for name in baseline.metrics if measurement.values(name)]
        found = {}
        for metric in measured:
            reference, info = baseline.metrics[metric], METRICS[metric]
            own = model.session_of(list(reference.samples), info.better, {k: then.get(k) for k in model.PROBES})
            this = model.session_of(measurement.values(metric), info.better, {k: now.get(k) for k in model.PROBES})
            others = [model.stored_session(session.medians[metric], info.better,
                                           dict(session.probes) or {model.WALL_MATMUL: session.probe})
                      for session in stored if metric in session.medians]
            found[metric] = model.estimate(this, own, others, clock=info.clock, kind=plan.run.kind,
                                           tolerance=plan.run.flavour.least_tolerance(info.clock, plan.run.kind),
                                           metrics=len(measured))
        return found

    def row(self, metric: str, effect: model.Effect, baseline: baselines.Baseline,
            measurement: Measurement) -> dict[str, Any]:
        reference = baseline.metrics[metric]
        change, interval = effect.as_change(reference.better)
        return {"metric": metric, "unit": self.gated.unit(metric), "measured": measurement.medians()[metric],
                "baseline": reference.value, "change": change, "tolerance": effect.tolerance,
                "ci": list(interval), "runs": effect.launches, "verdict": effect.verdict,
                "against_baseline": effect.verdict, "run_values": measurement.values(metric),
                "baseline_runs": list(reference.samples), "catchable": effect.catchable, "basis": effect.basis,
                "covariates": list(effect.covariates), "slopes": list(effect.slopes),
                "components": {"between_sessions": effect.components.between_sessions,
                               "between_launches": effect.components.between_launches,
                               "prediction": effect.prediction_var}}


def sessions_of(baseline: baselines.Baseline, history: Sequence[StoredSession]) -> list[StoredSession]:
    """The baseline file's sessions and the history's, each once (by when and at which commit it ran)."""
    by_identity = {(session.recorded_at, session.commit): session for session in (*baseline.sessions, *history)}
    return sorted(by_identity.values(), key=lambda session: session.recorded_at)
