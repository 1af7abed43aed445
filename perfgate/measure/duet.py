"""Duet A/B: the two sides of a pair launched at the same time on cores they share alike, each measured on the steps
it ran while the other ran too (docs/ab.md). On shared cores a pair launched at once meets the same neighbours, where
two launches in turn meet whatever each minute brings."""

from __future__ import annotations

import dataclasses
import threading
from typing import Sequence

from perfgate.launch.cores import duet_cores
from perfgate.launch.hardware import usable_core_ids
from perfgate.measure import metrics
from perfgate.measure.measurer import Measurer
from perfgate.outcome import CaseFailed
from perfgate.records.steps import RunRecords

MIN_OVERLAP_STEPS = 2
"""The fewest measured steps a duet side may keep from the span both sides ran in."""


def step_span(records: RunRecords | None) -> tuple[float, float] | None:
    """From the start of a run's first step to the end of its last (wall clock); None where a step has no time."""
    if records is None or not records.steps or any(step.t is None for step in records.steps):
        return None
    first = records.steps[0]
    return first.t - first.step_s, records.steps[-1].t


def common_span(runs: Sequence[RunRecords | None]) -> tuple[float, float] | None:
    """The wall-clock span in which every run was inside its steps; None where a run's steps carry no times."""
    spans = [step_span(records) for records in runs]
    if not spans or None in spans:
        return None
    return max(start for start, _ in spans), min(end for _, end in spans)


def overlapping(records: RunRecords, warmup: int, span: tuple[float, float]) -> RunRecords:
    """The run's warm-up steps, then those of its measured steps that began and ended inside ``span``."""
    start, end = span
    measured = [step for step in records.steps[warmup:] if step.t - step.step_s >= start and step.t <= end]
    return dataclasses.replace(records, steps=(*records.steps[:warmup], *measured))


def launch_together(measurers: Sequence[Measurer], planned: int) -> None:
    """One launch of each of two measurers at the same time (a duet pair), each in a thread of its own, their ranks
    pinned so that both meet the same contention (launch.cores), each measured on the steps it ran while the other
    ran too. The first to fail, or an interrupt of the session (Ctrl-C, SIGTERM), stops the other at its next poll,
    its processes killed; then that failure or interrupt is raised."""
    stop = threading.Event()
    failures: list[BaseException] = []
    ranks = max(measurer.plan.spec.nodes * measurer.plan.spec.procs_per_node for measurer in measurers)
    cores = duet_cores(usable_core_ids(), ranks)
    ended = [threading.Event() for _ in measurers]

    def launch(measurer: Measurer, side_cores: Sequence[int], done: threading.Event) -> None:
        try:
            measurer.launch_once(planned, stop, side_cores)
        except BaseException as failure:  # handed to the main thread, which raises it
            failures.append(failure)
            stop.set()
        finally:
            done.set()

    # Each side says itself when it has ended, its processes killed: a Thread.join that Ctrl-C interrupts marks the
    # thread stopped while it still runs (CPython gh-90882, through 3.12), so a join after it would return at once.
    threads = [threading.Thread(target=launch, args=(measurer, side_cores, done), name=f"perfgate-duet-{side}",
                                daemon=True)
               for side, (measurer, side_cores, done) in enumerate(zip(measurers, cores, ended, strict=True))]
    try:
        for thread in threads:
            thread.start()
        for done in ended:
            while not done.wait(0.2):
                pass
    except BaseException:
        stop.set()
        for thread, done in zip(threads, ended):
            if thread.ident is not None:
                done.wait()
        raise
    if failures:  # the first is the cause: a side raises LaunchStopped only once a failure before it set ``stop``
        raise failures[0]
    both = common_span([measurer.last_records for measurer in measurers])
    if both is not None:
        for measurer in measurers:
            measure_within(measurer, both)


def measure_within(measurer: Measurer, span: tuple[float, float]) -> None:
    """Measures ``measurer``'s last run again on its measured steps that ran inside ``span``: under duet, while the other
    side ran too. The side that finishes last runs its last steps alone on the cores, faster: kept, they can make a
    slower side read faster than its reference (docs/measurements.md#why-the-rules-are-what-they-are)."""
    run, records = measurer.measurement.runs[-1], measurer.last_records
    kept = overlapping(records, measurer.plan.warmup, span)
    if len(kept.steps) - measurer.plan.warmup < MIN_OVERLAP_STEPS:
        raise CaseFailed(f"{measurer.label}: run {run['run'] + 1} of a duet pair ran only "
                         f"{len(kept.steps) - measurer.plan.warmup} of its measured steps while the other side ran: "
                         "one side started or ended far from the other; give the case more steps (--perf-steps), or "
                         "launch the sides in turn (--perf-ab-in-turn)")
    measured = metrics.compute(kept, measurer.plan.warmup, measurer.plan.world_size).as_dict()
    measured["total_time_secs"] = run["metrics"]["total_time_secs"]
    run["metrics"] = measured
    measurer.result.measured = measurer.measurement.medians()
