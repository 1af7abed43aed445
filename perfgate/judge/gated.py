"""The metrics a case gates, as its runs measured them: which were left out and why, their units and their least
tolerances. Judging a case and writing its baseline both ask."""

from __future__ import annotations


from perfgate.launch.plan import Plan
from perfgate.measure import metrics
from perfgate.measure.measurer import Measurement
from perfgate.measure.metrics import METRICS
from perfgate.outcome import CaseFailed
from perfgate.records import host_wait
from perfgate.result import Result


class UngatedMetricWarning(UserWarning):
    """A metric the case gates was left out: its reference does not have it (a baseline or revision from before it)."""


class HostSpinWarning(UserWarning):
    """host_cpu_per_step_s is gated on runs whose host spun while it waited for the GPU: it read the device's time."""


def why_absent(measurement: Measurement, name: str) -> str:
    """What the runs' start records say of a metric they did not measure (no hardware counter, say), if anything."""
    fact = METRICS[name].why_absent
    if fact is None:
        return ""
    said = sorted(set(measurement.start_facts(fact)))
    return f" ({'; '.join(said)})" if said else ""


class GatedMetrics:
    """The gated metrics of ``plan``'s case; what is left out is noted in ``result`` (its ``ungated`` rows)."""

    def __init__(self, plan: Plan, result: Result) -> None:
        self.plan = plan
        self.result = result

    def floors(self) -> dict[str, float]:
        """Each gated metric's least tolerance, by the clock it reads."""
        return {name: self.plan.tolerance_floor(METRICS[name].clock) for name in self.plan.run.gated}

    def unit(self, name: str) -> str:
        return metrics.unit_of(name, self.plan.run.case.records.unit)

    def measured(self, measurement: Measurement) -> list[str]:
        """The gated metrics the runs measured; one that none did (CPU time from records without it) is left out,
        saying so, as long as another remains."""
        run = self.plan.run
        measured = [name for name in run.gated if measurement.values(name)]
        if not measured:
            why = "; ".join(name + why_absent(measurement, name) for name in run.gated)
            others = [name for name in METRICS
                      if name not in (*metrics.PROBES, "planted_fraction") and measurement.values(name)]
            raise CaseFailed(f"{run.key}: the runs measured none of the gated metrics ({why}). Gate one they measure "
                             f"(Flavour(gated=...) or Case(gated=...)): {', '.join(others) or 'none'}")
        for name in run.gated:
            if name not in measured:
                self.note_ungated([name], "the runs did not measure it" + why_absent(measurement, name))
        if "host_cpu_per_step_s" in measured and any(str(fact).startswith(host_wait.SPINS) for fact in
                                                     measurement.start_facts("host_wait")):
            self.result.warn(HostSpinWarning(
                f"{run.key}: host_cpu_per_step_s is gated, but the host spun while it waited for the GPU, so its CPU "
                "time per step is the step's time, not its work: give the case's GPU flavour {'host-wait': 'block'} "
                "(docs/clocks.md)"))
        return measured

    def note_ungated(self, names: list[str], why: str) -> None:
        """Says, in result.json and with a warning, which gated metrics were left out and why."""
        if not names:
            return
        self.result.ungated.extend({"metric": name, "why": why} for name in names)
        self.result.warn(UngatedMetricWarning(f"{self.plan.run.key}: {', '.join(names)} not gated: {why}"))
