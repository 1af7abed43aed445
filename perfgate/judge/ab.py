"""A/B in one job (``--perf-against REF``): the working tree judged against a reference revision measured
beside it, launch for launch, so that a machine's drift falls on both alike.

Launches come in pairs whose two launches run at the same time (duet: the default of a CPU flavour on the local
launcher, or --perf-ab-duet), so that a shared host's slow spells fall on both, or pairs whose order alternates
(ABBA...: GPU flavours, the slurm and ssh launchers, --perf-ab-in-turn). The reference's runs so far stand in for a
stored baseline, with --perf-ab-tolerance as its tolerance, and the candidate is judged pair by pair
(stats.compare_pairs: a paired t interval of the runs' log ratios), since drift moves both runs of a
pair alike; the gate's decision rules apply. An inconclusive verdict measures another pair, up to
--perf-max-repeats pairs (default --perf-repeats + 2), or while another pair fits in --perf-ab-budget
seconds; under --perf-ab-resolve R so does a pass whose 99 % interval still reaches R (default cap 20 pairs).
A planted slowdown (--perf-inject-slowdown) goes into the candidate only.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Sequence

from perfgate.config.settings import Settings
from perfgate.judge import baselines, machine_drop, profile_diff
from perfgate.judge.gate import Gate
from perfgate.judge.revision import Revision
from perfgate.launch.plan import Plan
from perfgate.measure import stats
from perfgate.measure.duet import launch_together
from perfgate.measure.measurer import Measurement, Measurer
from perfgate.measure.metrics import METRICS
from perfgate.outcome import CaseFailed
from perfgate.result import Result


RESOLVE_PAIRS = 20
"""--perf-ab-resolve's pair cap where --perf-max-repeats gives none: in simulation with the gate's rules it resolves
most 5 % slowdowns at a shared runner's pair spreads (docs/measurements.md#why-the-rules-are-what-they-are)."""


def runs_duet(settings: Settings, kind: str) -> bool:
    """Whether each pair's two sides run at once: asked for (--perf-ab-duet), or by default for a CPU flavour on the
    local launcher, where duet pairs read steadier than pairs in turn in every condition measured, quiet or beside
    busy processes (docs/measurements.md); --perf-ab-in-turn keeps them apart."""
    if settings.ab_duet or settings.ab_in_turn:
        return settings.ab_duet
    return kind == "cpu" and settings.launcher == "local"


class RevisionReference:
    """The reference revision's runs of one case, as a baseline that grows with every pair."""

    against = "the reference"
    remedy = "it is gated against a reference revision that measures it"
    when_faster = ("faster than the reference", "an improvement beyond --perf-ab-tolerance, or the reference's launches "
                                                "were slowed by something else; no baseline is stored, none to update")

    no_profile = ""

    def __init__(self, revision: Revision, measurer: Measurer, plan: Plan, tolerance: float) -> None:
        self.revision = revision
        self.measurer = measurer
        self.plan = plan
        self.tolerance = tolerance
        side = revision.name if revision.python is None else f"python {revision.name}"
        self.where = f"{side} ({revision.commit[:12]}), measured beside it in {measurer.plan.spec.workdir}"

    def tolerance_of(self, name: str) -> float:
        """--perf-ab-tolerance, except for the wall clock of a case that gates the CPU clock beside it: that one keeps
        the flavour's wider wall floor, as against a stored baseline. The CPU clock catches more work within 2 %; the
        wall clock is there for waits, and on a loaded runner its pairs differ by more than a 2 % tolerance allows
        (docs/measurements.md#why-the-rules-are-what-they-are)."""
        gated = self.plan.run.gated
        if METRICS[name].clock == "wall" and any(METRICS[m].clock == "cpu" for m in gated):
            return max(self.tolerance, self.plan.tolerance_floor("wall"))
        return self.tolerance

    def profile(self) -> profile_diff.Summary:
        """The reference side profiled the way this side was, in a launch of its own."""
        return profile_diff.launch_summary(self.measurer.profile())

    def load(self) -> baselines.Baseline:
        measurement, run = self.measurer.measurement, self.plan.run
        gated = {}
        for name in run.gated:
            runs = tuple(measurement.values(name))
            if not runs:
                continue  # a revision from before the metric: the gate says it was left out
            gated[name] = baselines.MetricBaseline(stats.median(runs), METRICS[name].better, self.tolerance_of(name),
                                                   METRICS[name].unit, runs)
        if not gated:
            raise CaseFailed(f"{run.key}: the reference {self.revision.name} reports none of the gated metrics "
                             f"({', '.join(run.gated)}): its workload is from before them. Compare against a newer "
                             "revision, or gate a metric both sides measure (Flavour(gated=...))")
        return baselines.Baseline(run.key, self.plan.hardware_class, gated,
                                  provenance={"measured": measurement.medians(), "commit": self.revision.commit},
                                  workload_version=run.case.version)


class ABGate(Gate):
    """Measures the candidate and the reference in pairs (at once, or in turn) and judges one against the other."""

    weighs_machine = False
    evidence = "pairs"
    look_named = ("pair", "pair(s)")

    reference: RevisionReference
    clock = staticmethod(time.monotonic)
    pair_seconds: list[float]
    """How long each pair took, both launches."""

    @property
    def resolution(self) -> float | None:
        return self.settings.ab_resolve

    def compare(self, reference: Sequence[float], current: Sequence[float]) -> stats.Comparison:
        """Pair by pair; at 99 % under --perf-ab-resolve, whose verdict looks again after every pair."""
        return stats.compare_pairs(reference, current, stats.paired_confidence(self.resolution))

    def repeat_cap(self) -> int:
        """Pairs cancel the machine's drift but not its short-term noise: two more pairs than planned are allowed
        by default (a stored-baseline gate allows one more run), as a 5 % slowdown on a 2-core VM needs them; under
        --perf-ab-resolve, up to RESOLVE_PAIRS, which --perf-ab-budget bounds in time."""
        if self.settings.max_repeats:
            return self.settings.max_repeats
        return RESOLVE_PAIRS if self.settings.ab_resolve else self.settings.repeats + 2

    def weigh_turns(self, verdicts: list[baselines.MetricVerdict], outcomes: list[str]
                    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Pairs of a CPU flavour in turn: a FAIL that a neighbour's turns on the cores explain, as both sides' probes
        read them, is unresolved (machine_drop.in_turn_beside_a_neighbour); duet pairs meet the neighbour alike, and
        under --perf-calibrate, whose values the probe has scaled, no rule reads the probe, as against a stored
        baseline."""
        if self.duet or self.plan.run.kind != "cpu" or self.settings.calibrate:
            return outcomes, []
        reference, candidate = (machine_drop.core_shortfall(side.measurement.medians())
                                for side in (self.reference.measurer, self.measurer))
        return machine_drop.in_turn_beside_a_neighbour(verdicts, outcomes, reference, candidate)

    def instead(self) -> str:
        """Pairs launched at once, where the launcher can: a neighbour then meets both sides alike."""
        if self.settings.launcher == "local":
            return ("launched at once, a pair's two sides meet a neighbour alike: leave --perf-ab-in-turn out (a CPU "
                    "flavour on the local launcher runs duet pairs: docs/ab.md), or A/B where no other job shares "
                    "the cores")
        return (f"the {self.settings.launcher} launcher launches a pair's sides one after the other: A/B where no "
                "other job shares the nodes' cores, or on the local launcher, which launches both at once "
                "(docs/ab.md)")

    def what_settles_it(self) -> str:
        return ("more pairs would settle it (raise --perf-max-repeats or --perf-ab-budget), and longer windows "
                "(--perf-steps) narrow each pair (docs/ab.md)")

    @property
    def duet(self) -> bool:
        return runs_duet(self.settings, self.plan.run.kind)

    def check(self) -> Result:
        if self.settings.ab_duet and self.plan.run.kind == "gpu":
            raise CaseFailed(f"{self.plan.run.key}: --perf-ab-duet launches both sides of a pair at once, and on a GPU "
                             "flavour they would share its GPUs, each measuring the other's work: leave --perf-ab-duet "
                             "out for GPU cases (-m gpu), or select CPU flavours (-m cpu)")
        self.started, self.pair_seconds = self.clock(), []
        if self.duet:
            self.result.duet = True
        try:
            if not self.measure_planned(self.settings.repeats).runs:
                return self.out_of_budget("")
            return self.judge(self.reference.load(), self.measurer.measurement)
        finally:
            self.result.time_to_verdict_s = round(self.clock() - self.started, 1)
            revision = self.reference.revision
            self.result.reference = {
                "revision": revision.name, "commit": revision.commit,
                "command": self.reference.measurer.measurement.command,
                "per_run": self.reference.measurer.measurement.runs,
            }
            if revision.python is not None:
                self.result.reference.update(python=revision.python, environment=revision.environment)
            self.result.warnings.extend(self.reference.measurer.result.warnings)

    def may_measure_more(self, measurement: Measurement, cap: int) -> bool:
        """Within the pair cap and, under --perf-ab-budget, when one more pair of the mean length so far ends in time;
        a budget that stops the pairs is noted in the result."""
        if not super().may_measure_more(measurement, cap):
            return False
        budget = self.settings.ab_budget
        if budget is None or not self.pair_seconds:
            return True
        next_pair_ends = self.clock() - self.started + statistics.fmean(self.pair_seconds)
        if next_pair_ends <= budget:
            return True
        self.result.ab_budget_stop = (f"no pair {len(self.pair_seconds) + 1}: it would end {next_pair_ends:.0f} s "
                                         f"after the case began, past --perf-ab-budget {budget:g} s")
        return False

    def measure_more(self, baseline: baselines.Baseline, cap: int) -> baselines.Baseline:
        self.launch(cap)
        return self.reference.load()

    def look(self, planned: int) -> None:
        """One launch of each side: under duet both at once, else one after the other, every other pair starting with
        the candidate (ABBA)."""
        sides = [self.reference.measurer, self.measurer]
        if len(self.measurer.measurement.runs) % 2:
            sides.reverse()
        began = self.clock()
        if self.duet:
            launch_together(sides, planned)
        else:
            for side in sides:
                side.launch_once(planned)
        self.pair_seconds.append(self.clock() - began)
