"""A FAIL's "what got slower": two sides' operators per step, the slowest rank, the diff and where it shows (the real
profiled launches are in test_profile_launch.py)."""

import json

import pytest
from fakes import METRIC, FakeMeasurer, LaunchClock, make_plan

from perfgate.config.settings import Settings
from perfgate.judge import baseline_update, baselines, profile_diff
from perfgate.judge.baselines import Baseline, MetricBaseline, StoredBaseline
from perfgate.judge.gate import Gate
from perfgate.judge.profile_diff import Summary
from perfgate.measure.budget import SessionBudget
from perfgate.outcome import CaseFailed
from perfgate.report import tables

STEP = {"aten::convolution": 6000.0, "aten::addmm": 2000.0, "aten::relu": 300.0, "c10d::allreduce_": 1500.0}


def summary(ops, rank=0):
    return Summary({name: {"calls": 1.0, "self_cpu_us": us, "self_device_us": 0.0} for name, us in ops.items()},
                   rank, 5)


def test_the_operators_that_grew_most_are_named_with_their_share_of_the_growth():
    slower = {**STEP, "aten::addmm": 5000.0, "aten::clone": 2000.0, "aten::relu": 320.0}
    rows = profile_diff.diff(summary(STEP), summary(slower))
    assert [(row["op"], row["kind"]) for row in rows] == [("aten::clone", "added"), ("aten::addmm", "slower")]
    assert rows[1]["share"] == pytest.approx(3000 / 5020)
    lines = profile_diff.describe(rows, summary(STEP), summary(slower))
    assert lines[0] == ("what got slower (torch.profiler, self time per step, the mean over the ranks, the "
                        "slowest rank 0: 9.8 -> 14.8 ms, of which in collectives 1.5 -> 1.5 ms):")
    assert lines[1] == "    aten::clone: 0.00 -> 2.00 ms (added, 40% of the growth)"
    assert lines[2] == "    aten::addmm: 2.00 -> 5.00 ms (slower, 60% of the growth)"


def test_an_unchanged_sides_small_differences_and_its_waits_in_collectives_name_nothing():
    """A neighbour on the cores makes a rank wait longer in its all-reduce: the wait is shown, not named."""
    jittered = {**{name: us * 1.02 for name, us in STEP.items()}, "c10d::allreduce_": 4000.0}
    assert profile_diff.diff(summary(STEP), summary(jittered)) == []
    assert profile_diff.waiting(summary(jittered)) == 4000.0
    assert profile_diff.describe([], summary(STEP), summary(jittered))[0].endswith(
        "no operator grew by 10% of the step or more")


def test_a_launch_is_its_ranks_mean_named_after_the_slowest_and_a_broken_summary_is_an_error_naming_it(tmp_path):
    for rank, scale in ((0, 1.0), (1, 1.5)):
        (tmp_path / f"profile-rank{rank}.json").write_text(json.dumps(summary(
            {name: us * scale for name, us in STEP.items()}, rank).to_json()))
    launch = profile_diff.launch_summary(tmp_path)
    assert (launch.rank, launch.time_us("aten::addmm")) == (1, 2500.0)
    with pytest.raises(profile_diff.ProfileError, match="no rank wrote a profile summary"):
        profile_diff.launch_summary(tmp_path / "none")
    (tmp_path / "profile-rank2.json").write_text("{")
    with pytest.raises(profile_diff.ProfileError, match="profile-rank2.json"):
        profile_diff.launch_summary(tmp_path)
    (tmp_path / "profile-rank2.json").write_text('{"ops": {"aten::mm": {"self_cpu_us": "fast"}}}')
    with pytest.raises(profile_diff.ProfileError, match=r"profile-rank2.json: not a profile summary \(expected "
                                                        r'\{"steps": N, "rank": R, "ops": '):
        profile_diff.launch_summary(tmp_path)


def test_a_baselines_summary_keeps_the_operators_that_matter_and_sums_the_rest():
    ops = {**STEP, **{f"aten::tiny{i}": 1.0 for i in range(50)}}
    kept = summary(ops).reviewable()
    assert set(kept.ops) == {*STEP, profile_diff.OTHERS}
    assert kept.step_us == pytest.approx(summary(ops).step_us)


def failing_gate(tmp_path, profiles, reference=None, budget=None):
    plan = make_plan(tmp_path)
    baselines.write(plan.baseline_file, Baseline(plan.run.key, "k", {
        METRIC: MetricBaseline(100.0, "higher", 0.05, "samples/s", (98.0, 99.0, 100.0, 101.0, 102.0))},
        provenance={"measured": {}}, workload_version="1"))
    if reference is not None:
        baselines.write_json(profile_diff.beside(plan.baseline_file), summary(reference).to_json())
    measurer = FakeMeasurer(plan, [70.0, 71.0, 69.0], profiles=profiles)
    return Gate(plan, Settings(repeats=3), measurer, StoredBaseline(plan.baseline_file), root=plan.spec.workdir,
                nvml=lambda: (None, ""), budget=budget), measurer


def test_a_fail_names_what_got_slower_against_the_profile_beside_the_baseline(tmp_path):
    slower = {**STEP, "perfgate.planted_slowdown": 4000.0}
    gate, measurer = failing_gate(tmp_path, [{0: slower, 1: STEP}], reference=STEP)
    with pytest.raises(CaseFailed) as failed:
        gate.check()
    message = str(failed.value)
    assert ("what got slower (torch.profiler, self time per step, the mean over the ranks, the "
            "slowest rank 0: 9.8 -> 11.8 ms, of which in collectives 1.5 -> 1.5 ms):\n"
            "    perfgate.planted_slowdown: 0.00 -> 2.00 ms (added, 100% of the growth)\nbaseline: ") in message
    assert measurer.profiled == 1 and len(measurer.measurement.runs) == 3, "the profiled launch is not judged"
    assert measurer.result.profile["rows"][0]["op"] == "perfgate.planted_slowdown"
    assert tables.slower_rows([measurer.result]) == [
        ["w-c-cpu", "perfgate.planted_slowdown", "0.00", "2.00", "+2.00 ms", "added"]]
    from perfgate.dashboard.runs import slower_html  # plotly: not in .venv-floor, which collects this module

    page = slower_html(measurer.result)
    assert page.startswith("<h2>What got slower (ms per step)</h2>") and "<code>perfgate.planted_slowdown</code>" in page


def test_a_fail_with_no_profile_beside_the_baseline_shows_where_this_sides_time_went(tmp_path):
    gate, _ = failing_gate(tmp_path, [{0: STEP}])
    with pytest.raises(CaseFailed, match=r"what got slower: no profile of the reference \(none beside .*w-c-cpu.json: "
                                         r"--update-baselines records one in w-c-cpu.profile.json\); this side's most "
                                         r"time per step: aten::convolution 6.00 ms, aten::addmm 2.00 ms"):
        gate.check()


def test_a_fail_that_cannot_be_profiled_says_why_and_stands(tmp_path):
    gate, _ = failing_gate(tmp_path, [])
    with pytest.raises(CaseFailed, match=r"what got slower: not profiled \(the fake measurer launches nothing"):
        gate.check()


def test_an_update_records_the_baselines_profile_beside_it(tmp_path):
    plan = make_plan(tmp_path)
    measurer = FakeMeasurer(plan, [100.0, 101.0, 99.0], profiles=[{0: STEP, 1: {**STEP, "aten::addmm": 2500.0}}])
    Gate(plan, Settings(baseline_repeats=3, update_baselines=True), measurer, StoredBaseline(plan.baseline_file),
         root=plan.spec.workdir, nvml=lambda: (None, "")).check()
    kept = profile_diff.read(profile_diff.beside(plan.baseline_file))
    assert (kept.rank, kept.time_us("aten::addmm")) == (1, 2250.0), "the ranks' mean, named after the slowest"
    assert len(json.loads(plan.baseline_file.read_text())["metrics"][METRIC]["runs"]) == 3


def test_an_update_whose_profile_fails_keeps_the_baseline_drops_the_old_profile_and_says_so(tmp_path):
    plan = make_plan(tmp_path)
    plan.baseline_file.parent.mkdir(parents=True, exist_ok=True)
    profile_diff.beside(plan.baseline_file).write_text("{}")
    measurer = FakeMeasurer(plan, [100.0, 101.0, 99.0])
    with pytest.warns(baseline_update.ProfileNotRecordedWarning):
        Gate(plan, Settings(baseline_repeats=3, update_baselines=True), measurer, StoredBaseline(plan.baseline_file),
             root=plan.spec.workdir, nvml=lambda: (None, "")).check()
    assert plan.baseline_file.exists() and not profile_diff.beside(plan.baseline_file).exists()
    assert measurer.result.warnings == [{"category": "ProfileNotRecordedWarning", "message": (
        f"{plan.run.key}: no profile recorded beside {plan.baseline_file} (and none kept from before): the fake "
        "measurer launches nothing to profile")}]


def test_a_fail_is_not_profiled_past_the_budget(tmp_path):
    """Three launches of 30 s took 90 s of 100: a profiled launch of 30 s more would end past the budget."""
    clock = LaunchClock(30.0)
    gate, measurer = failing_gate(tmp_path, [{0: STEP}], reference=STEP, budget=SessionBudget(100.0, clock=clock))
    clock.wrap(measurer)
    with pytest.raises(CaseFailed, match=r"what got slower: not profiled \(--perf-budget: one more launch needs about "
                                         r"30 s and 10 s of the 1.66667 min budget \(100 s\) were left\)"):
        gate.check()
    assert measurer.profiled == 0


def test_the_profilers_own_cost_is_its_steps_against_the_launchs_others():
    times = [9.0, 9.0, 1.2, 1.2, 1.3, 1.0, 1.0, 1.0]
    assert profile_diff.overhead(times, first=2, count=3) == pytest.approx(0.2)
    assert profile_diff.overhead(times, first=2, count=6) is None, "no step beside the profiled ones"
    line = profile_diff.describe([], summary(STEP), summary(STEP), cost=0.2)[0]
    assert line.endswith("of which in collectives 1.5 -> 1.5 ms; the profiler slowed its steps +20%): no operator "
                         "grew by 10% of the step or more")


def test_perf_profile_profiles_a_case_that_passes_too(tmp_path):
    plan = make_plan(tmp_path)
    baselines.write(plan.baseline_file, Baseline(plan.run.key, "k", {
        METRIC: MetricBaseline(100.0, "higher", 0.05, "samples/s", (98.0, 99.0, 100.0, 101.0, 102.0))},
        provenance={"measured": {}}, workload_version="1"))
    baselines.write_json(profile_diff.beside(plan.baseline_file), summary(STEP).to_json())
    grown = {**STEP, "aten::addmm": 5000.0}
    for profile, rows in ((False, None), (True, ["aten::addmm"])):
        measurer = FakeMeasurer(plan, [100.0, 100.5, 99.5], profiles=[{0: grown}])
        result = Gate(plan, Settings(repeats=3, profile=profile), measurer, StoredBaseline(plan.baseline_file),
                      root=plan.spec.workdir, nvml=lambda: (None, "")).check()
        assert result.verdict == "pass" and measurer.profiled == int(profile)
        assert (result.profile and [row["op"] for row in result.profile["rows"]]) == rows


def test_an_ab_reference_is_profiled_by_a_launch_of_its_own(tmp_path):
    from perfgate.judge.ab import RevisionReference
    from perfgate.judge.revision import Revision

    plan = make_plan(tmp_path)
    side = FakeMeasurer(plan, [], profiles=[{0: STEP, 1: STEP}])
    reference = RevisionReference(Revision("HEAD~1", "0" * 40, tmp_path), side, plan, 0.02)
    assert reference.profile().time_us("aten::addmm") == 2000.0 and side.profiled == 1
