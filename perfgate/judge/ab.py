"""A/B in one job (``--perf-against REF``): the working tree judged against a reference revision measured
beside it, launch for launch, so that a machine's drift falls on both alike.

Launches come in pairs whose two launches run at the same time (duet: the default of a CPU flavour on the local
launcher, or --perf-ab-duet), so that a shared host's slow spells fall on both, or pairs whose order alternates
(ABBA...: GPU flavours, the slurm and ssh launchers, --perf-ab-in-turn). The reference's runs so far stand in for a
stored baseline, with --perf-ab-tolerance as its tolerance, and the candidate is judged pair by pair
(stats.compare_pairs: a paired t interval of the runs' log ratios), since drift moves both runs of a
pair alike, and decided by stats.decide; the stored baseline's model (judge/model.py) does not judge pairs.
An inconclusive verdict measures another pair, up to
--perf-max-repeats pairs (default --perf-repeats + 2), or while another pair fits in --perf-ab-budget
seconds; under --perf-ab-resolve R so does a pass whose 99 % interval still reaches R (default cap 20 pairs).
A planted slowdown (--perf-inject-slowdown) goes into the candidate only.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Mapping, Sequence

from perfgate.config.settings import Settings
from perfgate.judge import baselines, pairs, profile_diff
from perfgate.judge.gate import Gate, UnresolvedVerdictWarning
from perfgate.judge.pairs import MetricVerdict
from perfgate.judge.revision import Revision
from perfgate.launch.plan import Plan
from perfgate.measure import metrics, stats
from perfgate.measure.duet import launch_together
from perfgate.measure.measurer import Measurement, Measurer
from perfgate.measure.metrics import METRICS
from perfgate.outcome import CaseFailed
from perfgate.result import Result


class UnprovenPassWarning(UserWarning):
    """A metric read worse than its tolerance, but the pairs allowed could not tell that from noise: it passes, saying
    so, since a pass that hid it would read as clean."""


RESOLVE_PAIRS = 20
"""--perf-ab-resolve's pair cap where --perf-max-repeats gives none: in simulation with the gate's rules it resolves
most 5 % slowdowns at a shared runner's pair spreads (docs/measurements.md#why-the-rules-are-what-they-are)."""


def undecided(outcomes: set[str]) -> bool:
    """Whether the metrics' outcomes so far call for another pair: one is inconclusive or unresolved, and none FAILs.
    A FAIL decides the case, as it does once no other metric is open; more pairs would only settle metrics that
    cannot change it."""
    return "FAIL" not in outcomes and ("inconclusive" in outcomes or "unresolved" in outcomes)


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

    def in_turn(self, verdicts: list[MetricVerdict], outcomes: list[str]
                ) -> tuple[list[str], list[dict[str, Any]]]:
        """Pairs of a CPU flavour in turn: a FAIL that a neighbour's turns on the cores explain, as both sides' probes
        read them, is unresolved (in_turn_beside_a_neighbour); duet pairs meet the neighbour alike."""
        if self.duet or self.plan.run.kind != "cpu":
            return outcomes, []
        reference, candidate = (core_shortfall(side.measurement.medians())
                                for side in (self.reference.measurer, self.measurer))
        return in_turn_beside_a_neighbour(verdicts, outcomes, reference, candidate)

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

    def judge(self, baseline: baselines.Baseline, measurement: Measurement) -> Result:
        """Decides pair by pair; an inconclusive verdict measures another pair, up to the cap, unless a metric FAILs
        already (more pairs would only settle metrics that cannot change the verdict)."""
        plan, result, cap = self.plan, self.result, self.repeat_cap()
        self.gated.note_ungated([name for name in plan.run.gated if name not in baseline.metrics],
                                f"its reference ({self.reference.where}) has none (it is from before the metric); "
                                f"{self.reference.remedy}")
        while True:
            current = {name: measurement.values(name) for name in baseline.metrics}
            try:
                verdicts = pairs.judge(baseline, current, self.compare, self.resolution)
            except pairs.PairsError as exc:
                raise CaseFailed(f"{plan.run.key}: {exc}") from None
            if not undecided({v.outcome for v in verdicts}) or not self.may_measure_more(measurement, cap):
                break
            self.launch(cap)
            baseline = self.reference.load()
        raw = [stats.settle(v.decision).outcome for v in verdicts]
        settled, turn_rows = self.in_turn(verdicts, raw)
        result.metrics = [{**verdict_row(v, outcome), "against_baseline": alone, "run_values": current[v.metric],
                           "baseline_runs": list(baseline.metrics[v.metric].samples)}
                          for v, outcome, alone in zip(verdicts, settled, raw)]
        if turn_rows:
            result.machine_drop = turn_rows
        self.check_plant([(v.metric, v.better, v.change) for v in verdicts], measurement)
        planted = self.planted()
        details = "\n".join([f"  {v.describe()}" for v in verdicts]
                            + [f"  {describe_in_turn(row)}" for row in turn_rows])
        if "FAIL" in settled:
            self.regression(baseline, measurement, f"{planted}\n{details}")
        if turn_rows:
            return self.left_unresolved(
                f"{plan.run.key}: unresolved on {plan.hardware_class}: worse than the reference, but its pairs ran one "
                f"launch after the other while a neighbour took turns on the cores{planted}\n{details}\n"
                f"{self.instead()}")
        if "stale" in settled:
            return self.say_stale(f"{planted}: significantly faster than {self.reference.where} allows\n{details}")
        if "unresolved" in settled:
            return self.unresolved(verdicts, baseline, current, f"{planted}\n{details}")
        if self.budget is not None and self.budget.stopped:
            return self.out_of_budget(f"{planted}\n{details}")
        result.conclude("pass")
        unproven = [f"{v.metric} read {v.comparison.worse(v.better)[0]:.1%} worse, beyond its {v.tolerance:.1%} "
                    f"tolerance, and {v.runs} pairs could not tell that from noise"
                    for v, outcome in zip(verdicts, settled) if outcome == "pass" and v.outcome == "inconclusive"]
        if unproven:
            result.warn(UnprovenPassWarning(
                f"{plan.run.key}: passed on {plan.hardware_class}, but {' and '.join(unproven)}{planted}\n{details}\n"
                f"{self.what_settles_it()}"))
        return result

    def unresolved(self, verdicts: list[MetricVerdict], baseline: baselines.Baseline,
                   current: dict[str, list[float]], details: str) -> Result:
        """A verdict whose pairs ran out before they could rule out the slowdown --perf-ab-resolve asks about: how
        large a slowdown it could have missed, and about how many pairs would have settled it."""
        rows = [{"metric": v.metric, "could_miss": v.comparison.worse(v.better)[2], "pairs": v.runs,
                 "pairs_needed": stats.pairs_to_resolve(baseline.metrics[v.metric].samples, current[v.metric],
                                                        v.better, self.resolution)}
                for v in verdicts if v.outcome == "unresolved"]
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


def verdict_row(verdict: MetricVerdict, outcome: str) -> dict[str, Any]:
    c = verdict.comparison
    return {
        "metric": verdict.metric, "unit": verdict.unit, "measured": verdict.measured,
        "baseline": verdict.baseline, "change": verdict.change, "tolerance": verdict.tolerance,
        "ci": [c.ci_low, c.ci_high], "runs": verdict.runs,
        "reason": verdict.decision.reason, "verdict": outcome,
    }


def core_shortfall(medians: Mapping[str, Any]) -> float | None:
    """How much less than a whole core the probe's thread got in these runs: its matmul's wall-clock rate against
    its CPU-time rate, less one (negative: something else took turns on the cores); None without both readings. A
    quiet machine reads about 0: -1.6..0 % in every CPU baseline measured on the 2-core VMs, those with loader workers
    too (the probe runs outside the window)."""
    wall, cpu = medians.get("probe_matmul_gflops"), medians.get("probe_matmul_cpu_gflops")
    return wall / cpu - 1.0 if wall and cpu else None


def explained(verdict: MetricVerdict, turns: float) -> float:
    """The worsening of the metric that the cores' shortfall ``turns`` and its tolerance explain together: a rate d
    slower makes a rate (higher is better) d worse and a time (lower is better) 1/(1+d) - 1 worse."""
    slower = 1.0 + turns
    if verdict.better == "higher":
        return 1.0 - (1.0 - verdict.tolerance) * slower
    return (1.0 + verdict.tolerance) / slower - 1.0


def in_turn_beside_a_neighbour(verdicts: Sequence[MetricVerdict], outcomes: Sequence[str],
                               reference: float | None, candidate: float | None
                               ) -> tuple[list[str], list[dict[str, Any]]]:
    """An A/B FAIL of a CPU flavour whose pairs ran one launch after the other while a neighbour took turns on the
    cores is unresolved where those turns explain it. The two launches of a pair meet the neighbour at different
    times, and a spell of it moves a launch of several processes further than the probe's one thread, on both clocks
    (its ranks spin in gloo while a peer waits for a core). Beside two busy processes on the 2-core VM, pairs in turn
    of one checkout under one interpreter read their fastest step -14.5..+16.2 % and their CPU clock -14.9..+12.4 %
    apart (docs/measurements.md); duet pairs, launched at once, meet the neighbour alike.

    ``reference`` and ``candidate``: each side's core_shortfall. Both sides must show the turns, beyond each metric's
    tolerance (a candidate whose own slowdown kept its probe off the cores does not excuse itself), and the smaller
    of the two is what explains a change: a rate or a time worse by no more than it and the tolerance allow. All or
    nothing: where one FAIL is beyond them, every FAIL stands."""
    settled = list(outcomes)
    if reference is None or candidate is None:
        return settled, []
    turns = max(reference, candidate)
    fails = [index for index, outcome in enumerate(settled) if outcome == "FAIL"]
    for index in fails:
        verdict = verdicts[index]
        worse, _, _ = verdict.comparison.worse(verdict.better)
        if not (turns < -verdict.tolerance and metrics.moves_with_machine(verdict.metric)
                and worse <= explained(verdict, turns)):
            return settled, []
    rows = []
    for index in fails:
        settled[index] = "unresolved"
        verdict = verdicts[index]
        rows.append({"rule": "in turn", "metric": verdict.metric, "change": verdict.change, "turns_taken": turns,
                     "explained": explained(verdict, turns)})
    return settled, rows


def describe_in_turn(row: Mapping[str, Any]) -> str:
    return (f"{row['metric']}: {row['change']:+.1%}, but the pairs ran one launch after the other while a "
            f"neighbour took turns on the cores (the machine-speed probe's thread got {-row['turns_taken']:.0%} "
            "less of a core): a pair's two launches met it at different times, which moves a launch of several "
            f"processes by as much; only a reading worse by more than {row['explained']:.1%} FAILs here")
