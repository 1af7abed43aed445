"""Duet pairs (perfgate/measure/duet.py): both sides stop together, and each is measured on the steps it ran while
the other ran too."""

from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fakes import make_plan, record

from perfgate.launch.spec import LaunchSpec
from perfgate.measure.duet import common_span, launch_together, measure_within, overlapping, step_span
from perfgate.measure.measurer import LaunchStopped, Measurer
from perfgate.measure.metrics import compute
from perfgate.outcome import CaseFailed
from perfgate.records.steps import RunRecords, StepRecord


class DuetSide:
    """A side of a duet pair: its launch raises ``failure`` at once, or interrupts the thread that waits for the pair
    (``interrupts``: that thread's id) as Ctrl-C would, or runs until it is told to stop; stopping takes
    ``stopping_s``, as killing a run's processes does."""

    def __init__(self, failure=None, interrupts=None, started=None, stopping_s=0.0):
        self.failure, self.interrupts, self.started, self.stopped = failure, interrupts, started, False
        self.stopping_s = stopping_s
        self.plan = SimpleNamespace(spec=LaunchSpec(entry=(), workdir=Path("."), procs_per_node=2))

    def launch_once(self, planned, stop, cores):
        if self.started is not None:
            self.started.wait(timeout=30)
        if self.failure is not None:
            raise self.failure
        if self.interrupts is not None:
            # Raised in the waiting thread itself, whatever the process does with SIGINT and whichever thread runs
            # the test: under pytest-xdist, _thread.interrupt_main() did not reach it.
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.interrupts),
                                                       ctypes.py_object(KeyboardInterrupt))
        if not stop.wait(timeout=30):
            raise AssertionError("never told to stop")
        time.sleep(self.stopping_s)
        self.stopped = True
        raise LaunchStopped("stopped")


@pytest.mark.parametrize("failing_side", [0, 1])
def test_a_duet_side_that_fails_stops_the_other_and_its_failure_is_raised(failing_side):
    """Whichever side fails, its failure is raised, not the other's LaunchStopped."""
    waiting = DuetSide()
    sides = [waiting]
    sides.insert(failing_side, DuetSide(CaseFailed("the reference crashed")))
    with pytest.raises(CaseFailed, match="the reference crashed"):
        launch_together(sides, planned=2)
    assert waiting.stopped


def test_an_interrupted_duet_pair_stops_both_sides_and_raises_the_interrupt():
    """The side that was being waited for when the interrupt came still takes its time to stop: the interrupted wait
    must not count it as stopped (a Thread.join interrupted so did, and the session went on while it killed)."""
    both_running = threading.Barrier(2)
    sides = [DuetSide(interrupts=threading.get_ident(), started=both_running, stopping_s=1.0),
             DuetSide(started=both_running)]
    with pytest.raises(KeyboardInterrupt):
        launch_together(sides, planned=2)
    assert [side.stopped for side in sides] == [True, True]


def timed_steps(start, step_times):
    """Step records that ran back to back from ``start``, each ending at its ``t``."""
    steps, t = [], start
    for index, step_s in enumerate(step_times):
        t += step_s
        steps.append(StepRecord(index, 8, step_s, 0.0, t=t))
    return RunRecords(start={"world_size": 1}, steps=tuple(steps))


def test_a_duet_side_is_measured_on_the_steps_it_ran_while_the_other_ran():
    """The slower side's last steps ran alone on the cores, twice as fast: kept, its fastest step would read the
    planted side faster than its reference."""
    faster = timed_steps(0.0, [1.0] * 10)  # runs 0-10 s
    slower = timed_steps(0.5, [1.0] * 10 + [0.5] * 3)  # 0.5-12 s, the last 3 steps alone
    both = common_span([faster, slower])
    assert both == (0.5, 10.0)
    kept = overlapping(slower, 2, both)
    assert [step.step for step in kept.steps] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert compute(kept, 2).fastest_step_samples_per_second == pytest.approx(8.0)
    assert compute(slower, 2).fastest_step_samples_per_second == pytest.approx(16.0)
    assert [step.step for step in overlapping(faster, 2, both).steps] == list(range(10))  # measured inside the span
    assert step_span(RunRecords(steps=(StepRecord(0, 8, 1.0, 0.0),))) is None


def test_a_duet_side_is_measured_again_on_the_span_or_fails_saying_so_where_too_little_of_it_overlapped(tmp_path):
    side = Measurer(make_plan(tmp_path), record(), launcher=None, root=tmp_path)
    side.last_records = timed_steps(0.0, [1.0] * 10)
    side.measurement.runs.append({"run": 0, "metrics": {"total_time_secs": 9.0, "measured_steps": 8}})
    measure_within(side, (0.0, 6.0))
    assert side.measurement.runs[-1]["metrics"]["measured_steps"] == 4
    assert side.measurement.runs[-1]["metrics"]["total_time_secs"] == 9.0
    assert side.result.measured["measured_steps"] == 4
    with pytest.raises(CaseFailed, match=r"run 1 of a duet pair ran only 1 of its measured steps .*\(--perf-steps\)"):
        measure_within(side, (0.0, 3.0))
