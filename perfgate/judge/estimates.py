"""The verdict's model (judge/model.py) read against a stored baseline: each gated metric's sessions, from the
baseline's launches, the stored sessions and this session's launches, with the machine-speed readings the metric
moves with, and the record's row of its estimate."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from perfgate.judge import model
from perfgate.judge.baselines import Baseline, StoredSession
from perfgate.launch.plan import Plan
from perfgate.measure import metrics
from perfgate.measure.measurer import Measurement
from perfgate.measure.metrics import METRICS
from perfgate.outcome import CaseFailed


def effects(plan: Plan, baseline: Baseline, measurement: Measurement, stored: Sequence[StoredSession],
            weigh_machine: bool = True) -> dict[str, model.Effect]:
    """Each gated metric's effect, from the launches so far, with the readings that weigh it (``readings``)."""
    then, now, kind = baseline.provenance.get("measured", {}), measurement.medians(), plan.run.kind
    found = {}
    for metric, reference in baseline.metrics.items():
        info = METRICS[metric]
        if any(value <= 0 for value in measurement.values(metric)):
            raise CaseFailed(f"{plan.run.key}: {metric} read {min(measurement.values(metric)):g} in a launch, and the "
                             "verdict's model compares the logs of positive values: gate a metric that stays above "
                             "0 (Flavour(gated=...)), as a share of the window can reach 0")
        own = model.session_of(list(reference.samples), info.better, readings(metric, then, weigh_machine))
        this = model.session_of(measurement.values(metric), info.better, readings(metric, now, weigh_machine))
        others = stored_sessions(metric, stored, weigh_machine)
        found[metric] = model.estimate(this, own, others, clock=info.clock, kind=kind,
                                       tolerance=plan.run.flavour.least_tolerance(info.clock, kind),
                                       metrics=len(baseline.metrics))
    return found


def readings(metric: str, source: Mapping[str, Any], weigh_machine: bool = True) -> dict[str, Any]:
    """The machine-speed readings in ``source`` that weigh ``metric``: none for a metric the machine's speed does not
    move (memory, FLOPs, instructions, a share), or where ``weigh_machine`` is off (--perf-verdict as-measured)."""
    if not weigh_machine or not metrics.moves_with_machine(metric):
        return {}
    return {name: source.get(name) for name in metrics.PROBES}


def stored_sessions(metric: str, stored: Sequence[StoredSession], weigh_machine: bool = True) -> list[model.Session]:
    """The stored sessions that measured ``metric``, as the model reads them: each its median, with every probe
    reading it kept (the wall-clock matmul alone, for a session stored before they all were)."""
    better = METRICS[metric].better
    return [model.stored_session(session.medians[metric], better,
                                 readings(metric, dict(session.probes) or {model.WALL_MATMUL: session.probe},
                                          weigh_machine))
            for session in stored if metric in session.medians]


def change(metric: str, baseline: Baseline, measurement: Measurement) -> float:
    """The measured median against the baseline's value, as a relative change of the value (+0.05: 5 % higher)."""
    return measurement.medians()[metric] / baseline.metrics[metric].value - 1


def row(metric: str, unit: str, effect: model.Effect, baseline: Baseline, measurement: Measurement
        ) -> dict[str, Any]:
    """The record's row of one metric: what was measured against the baseline, the model's effect (as a change of
    the value) with its interval, and what it rests on."""
    reference = baseline.metrics[metric]
    estimated, interval = effect.as_change(reference.better)
    return {"metric": metric, "unit": unit, "measured": measurement.medians()[metric],
            "baseline": reference.value, "change": change(metric, baseline, measurement), "effect": estimated,
            "tolerance": effect.tolerance, "ci": list(interval), "runs": effect.launches, "verdict": effect.verdict,
            "against_baseline": effect.verdict, "run_values": measurement.values(metric),
            "baseline_runs": list(reference.samples), "catchable": effect.catchable, "basis": effect.basis,
            "covariates": list(effect.covariates), "slopes": list(effect.slopes),
            "components": {"between_sessions": effect.components.between_sessions,
                           "between_launches": effect.components.between_launches,
                           "prediction": effect.prediction_var}}


def sessions_of(baseline: Baseline, history: Sequence[StoredSession]) -> list[StoredSession]:
    """The baseline file's sessions and the history's, each once (by when and at which commit it ran)."""
    by_identity = {(session.recorded_at, session.commit): session for session in (*baseline.sessions, *history)}
    return sorted(by_identity.values(), key=lambda session: session.recorded_at)


def machine_speed(baseline: Baseline, measurement: Measurement) -> str:
    """Lines comparing the machine-speed probe now with the probe when the baseline was measured, and the cores' turns
    in the window: the readings the verdict's model weighs. Empty without readings."""
    then, now = baseline.provenance.get("measured", {}), measurement.medians()
    lines = [f"{name} {now[name]:.4g} vs {then[name]:.4g} ({now[name] / then[name] - 1:+.1%})"
             for name in metrics.PROBES if name != metrics.RUN_QUEUE_TURNS and then.get(name) and now.get(name)]
    said = "machine-speed probe now vs when the baseline was measured: " + ", ".join(lines) + "\n" if lines else ""
    turns = now.get(metrics.RUN_QUEUE_TURNS), then.get(metrics.RUN_QUEUE_TURNS)
    if all(turns):
        said += (f"the cores' turns in the window (CPU time and the wait for a core, over CPU time): {turns[0]:.2f} now, "
                 f"{turns[1]:.2f} then\n")
    return said
