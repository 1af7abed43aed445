"""A/B in one job (``--perf-against REF``): the working tree judged against a reference revision measured
beside it, launch for launch, so that a machine's drift falls on both alike.

Launches come in pairs whose order alternates (ABBA...). The reference's runs so far stand in for a
stored baseline (their median, the flavour's tolerance or noise floor), and the gate's statistics
judge the candidate's runs against them; an inconclusive verdict measures another pair, up to
--perf-max-repeats pairs. A planted slowdown (--perf-inject-slowdown) goes into the candidate only.
"""

from __future__ import annotations

import time
from typing import Any

from perfgate import baselines, stats
from perfgate.gate import Gate
from perfgate.measure import Measurer
from perfgate.metrics import METRICS
from perfgate.outcome import CaseFailed
from perfgate.plan import Plan
from perfgate.revision import Revision


class RevisionReference:
    """The reference revision's runs of one case, as a baseline that grows with every pair."""

    def __init__(self, revision: Revision, measurer: Measurer, plan: Plan) -> None:
        self.revision = revision
        self.measurer = measurer
        self.plan = plan
        self.where = f"{revision.name} ({revision.commit[:12]}), measured beside it in {measurer.plan.spec.workdir}"

    def load(self) -> baselines.Baseline:
        measurement, run = self.measurer.measurement, self.plan.run
        gated = {}
        for name in run.gated:
            runs = tuple(measurement.values(name))
            if not runs:
                raise CaseFailed(f"{run.key}: the reference {self.revision.name} does not report {name}")
            gated[name] = baselines.MetricBaseline(stats.median(runs), METRICS[name].better, self.plan.tolerance_floor,
                                                   METRICS[name].unit, runs)
        return baselines.Baseline(run.key, self.plan.hardware_class, gated,
                                  provenance={"measured": measurement.medians(), "commit": self.revision.commit},
                                  workload_version=run.case.version)


class ABGate(Gate):
    """Measures the candidate and the reference in alternating pairs and judges one against the other."""

    reference: RevisionReference

    def check(self) -> dict[str, Any]:
        started = time.monotonic()
        try:
            for _ in range(self.settings.repeats):
                self._pair(self.settings.repeats)
            return self.judge(self.reference.load(), self.measurer.measurement)
        finally:
            self.result["time_to_verdict_s"] = round(time.monotonic() - started, 1)
            self.result["reference"] = {
                "revision": self.reference.revision.name, "commit": self.reference.revision.commit,
                "command": self.reference.measurer.measurement.command,
                "per_run": self.reference.measurer.measurement.runs,
            }

    def measure_more(self, baseline: baselines.Baseline, cap: int) -> baselines.Baseline:
        self._pair(cap)
        return self.reference.load()

    def _pair(self, planned: int) -> None:
        """One launch of each side; every other pair starts with the candidate (ABBA)."""
        sides = [self.reference.measurer, self.measurer]
        if len(self.measurer.measurement.runs) % 2:
            sides.reverse()
        for side in sides:
            side.launch_once(planned)
