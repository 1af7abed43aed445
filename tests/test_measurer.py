"""What the measurer says when a launch fails for a reason the case author can fix."""

from __future__ import annotations

from perfgate.measure.measurer import plant_refused

REJECTED = ("rank 0 failed: setup-error\n  train.py: error: unrecognized arguments: --inject-slowdown 0.1")


def test_a_workload_that_rejects_the_plant_is_told_how_to_take_it_or_be_skipped():
    hint = plant_refused(REJECTED, "--inject-slowdown")
    assert hint.startswith("its workload does not take --inject-slowdown: apply the plant there")
    assert "Case(inject_flag=...)" in hint and "inject_flag=None, and --perf-inject-slowdown skips it" in hint


def test_other_setup_errors_and_unplanted_cases_get_no_such_hint():
    assert plant_refused("train.py: error: unrecognized arguments: --frobnicate", "--inject-slowdown") == ""
    assert plant_refused(REJECTED, None) == ""
    assert plant_refused("CUDA out of memory", "--inject-slowdown") == ""
