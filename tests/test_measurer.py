"""What the measurer says when a launch fails for a reason the case author can fix, and what it launches to profile."""

from __future__ import annotations

import dataclasses

from fakes import make_plan, record

from perfgate.measure.measurer import Measurer, plant_refused

REJECTED = ("rank 0 failed: setup-error\n  train.py: error: unrecognized arguments: --inject-slowdown 0.1")


def test_a_workload_that_rejects_the_plant_is_told_how_to_take_it_or_be_skipped():
    hint = plant_refused(REJECTED, "--inject-slowdown")
    assert hint.startswith("its workload does not take --inject-slowdown: apply the plant there")
    assert "Case(inject_flag=...)" in hint and "inject_flag=None, and --perf-inject-slowdown skips it" in hint


def test_other_setup_errors_and_unplanted_cases_get_no_such_hint():
    assert plant_refused("train.py: error: unrecognized arguments: --frobnicate", "--inject-slowdown") == ""
    assert plant_refused(REJECTED, None) == ""
    assert plant_refused("CUDA out of memory", "--inject-slowdown") == ""


class RecordingLauncher:
    """A launcher that keeps what it was asked to launch and launches nothing."""

    def __init__(self):
        self.specs = []

    def launch(self, spec):
        self.specs.append(spec)


def profiled_steps(plan, tmp_path):
    launcher = RecordingLauncher()
    Measurer(plan, record(), launcher=launcher, root=tmp_path).profile(steps=5)
    (spec,) = launcher.specs
    return int(spec.entry[spec.entry.index("--steps") + 1])


def test_a_profiled_launch_runs_its_warm_up_its_profiled_steps_and_as_many_after_them_and_no_more(tmp_path):
    """A case of 40 steps, 2 of them warm-up: the profiled launch, never judged, runs 12 (the profiler's own cost is
    its 5 steps against the 5 after them), not 40; an adaptive-length flavour keeps its fewest steps."""
    plan = dataclasses.replace(make_plan(tmp_path), steps=40)
    assert profiled_steps(plan, tmp_path) == 12
    flavour = dataclasses.replace(plan.run.flavour, target_ci=0.01, min_steps=30)
    adaptive = dataclasses.replace(plan.run.case, cpu=flavour)
    assert profiled_steps(dataclasses.replace(plan, run=dataclasses.replace(plan.run, case=adaptive)), tmp_path) == 30
    assert profiled_steps(dataclasses.replace(plan, steps=8), tmp_path) == 8, "never more than the case's own"
