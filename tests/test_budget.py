"""--perf-budget on fake launches whose seconds a fake clock counts: which launches start, which verdicts it leaves
unresolved and why, and that the session ends inside it (the real launches are in test_budget_session.py)."""

import pytest
from fakes import METRIC, FakeMeasurer, LaunchClock, make_plan

from perfgate.config.settings import Settings
from perfgate.judge import baselines
from perfgate.judge.baselines import Baseline, MetricBaseline, StoredBaseline
from perfgate.judge.gate import Gate, StaleBaselineWarning, UnresolvedVerdictWarning
from perfgate.measure.budget import SessionBudget, launch_costs
from perfgate.outcome import CaseFailed, CaseSkipped
from perfgate.report import tables, terminal

TIGHT = (98.0, 99.0, 100.0, 101.0, 102.0)
WIDE = (80.0, 90.0, 100.0, 110.0, 120.0)


def store(plan, runs=TIGHT, launch_s=None):
    provenance = {"measured": {}, **({"launch_s": launch_s} if launch_s else {})}
    baselines.write(plan.baseline_file, Baseline(plan.run.key, "k", {
        METRIC: MetricBaseline(100.0, "higher", 0.05, "samples/s", runs)}, provenance=provenance, workload_version="1"))


def budgeted(tmp_path, values, minutes, seconds_per_launch=30.0, cases_to_come=0, runs=TIGHT, launch_s=None,
             used_s=0.0, **settings):
    """A gate under a budget of ``minutes`` whose launches each take ``seconds_per_launch`` on the fake clock, with
    ``used_s`` of the session gone before the case."""
    plan = make_plan(tmp_path)
    store(plan, runs, launch_s)
    clock = LaunchClock(seconds_per_launch)
    budget = SessionBudget(minutes * 60, clock=clock, cases_to_come=cases_to_come)
    clock.now += used_s
    measurer = FakeMeasurer(plan, values)
    clock.wrap(measurer)
    gate = Gate(plan, Settings(**{"repeats": 3, **settings}), measurer, StoredBaseline(plan.baseline_file),
                root=plan.spec.workdir, nvml=lambda: (None, ""), budget=budget)
    return gate, measurer, budget


def test_a_budget_that_holds_every_launch_changes_nothing(tmp_path):
    gate, measurer, budget = budgeted(tmp_path, [100.0, 99.5, 100.5], minutes=10)
    assert gate.check().verdict == "pass"
    assert measurer.launches == 3 and measurer.result.budget_stop is None
    assert budget.first_launches == [30.0] and budget.later_launches == [30.0, 30.0]


def test_no_planned_launch_starts_that_would_end_past_the_budget(tmp_path):
    """Nothing is known of the first launch, which then teaches what the next cost: 50 s each, so the third would
    end at 150 s of a 120 s budget. Two runs that pass are still fewer than the verdict planned: unresolved."""
    gate, measurer, budget = budgeted(tmp_path, [100.0] * 3, minutes=2, seconds_per_launch=50.0)
    with pytest.warns(UnresolvedVerdictWarning) as warned:
        assert gate.check().verdict == "unresolved"
    assert measurer.launches == 2 and budget.used_s() == 100.0 <= 120.0
    stop = ("--perf-budget: w-c-cpu stopped after 2 launch(es): launch 3 needs about 50 s, and 20 s of the 2 min "
            "budget (120 s) were left")
    assert measurer.result.budget_stop == stop
    message = str(warned[0].message)
    assert message.startswith(f"w-c-cpu: unresolved on k: {stop}\n")
    assert "2 launches measured; give the session more time (--perf-budget), fewer cases (-k, -m)" in message
    row = measurer.result.metrics[0]
    assert (row["verdict"], row["against_baseline"]) == ("unresolved", "pass")  # what its runs said stays in the record


def test_a_case_whose_planned_launches_do_not_fit_is_not_started(tmp_path):
    """The session's earlier cases (or its baseline) say what a launch costs; 3 of 30 s do not fit in 60 s left."""
    gate, measurer, budget = budgeted(tmp_path, [100.0] * 3, minutes=2, used_s=60.0)
    budget.first_launches, budget.later_launches = [30.0], [30.0]
    with pytest.warns(UnresolvedVerdictWarning, match="0 launches measured"):
        assert gate.check().verdict == "unresolved"
    assert measurer.launches == 0 and measurer.result.metrics == []
    assert measurer.result.budget_stop == ("--perf-budget: w-c-cpu was not launched: its 3 launch(es) need about 90 s "
                                           "and 60 s of the 2 min budget (120 s) were left")


def test_the_baselines_launch_cost_plans_a_case_before_its_first_launch(tmp_path):
    """--update-baselines records what the case's launches cost (provenance launch_s), so the first case of a session
    is planned too: 200 + 2 x 100 s do not fit in 5 minutes, and without the record it would have launched."""
    gate, measurer, _ = budgeted(tmp_path, [100.0] * 3, minutes=5, launch_s={"first": 200.0, "later": 100.0})
    with pytest.warns(UnresolvedVerdictWarning):
        assert gate.check().verdict == "unresolved"
    assert measurer.launches == 0
    assert "need about 400 s and 300 s of the 5 min budget (300 s) were left" in measurer.result.budget_stop


@pytest.mark.parametrize("cases_to_come, launches, verdict", [(0, 2, "FAIL"), (4, 2, "FAIL"), (5, 1, "unresolved")])
def test_an_undecided_verdict_gets_more_launches_only_where_the_cases_to_come_still_fit(tmp_path, cases_to_come,
                                                                                         launches, verdict):
    """One run 30 % slower than a wide baseline leaves the interval straddling the tolerance; a second decides a
    FAIL. After the first
    30 s launch of a 3-minute budget, 150 s are left: the extra 30 s launch fits beside 4 cases to come of one planned
    30 s launch each (120 s), not beside 5 (150 s)."""
    gate, measurer, _ = budgeted(tmp_path, [70.0, 70.0, 70.0], minutes=3, cases_to_come=cases_to_come, runs=WIDE,
                                 repeats=1, max_repeats=3)
    if verdict == "FAIL":
        with pytest.raises(CaseFailed, match="-30.0% against the baseline"):
            gate.check()
    else:
        with pytest.warns(UnresolvedVerdictWarning, match="beside the 150 s that the 5 case"):
            assert gate.check().verdict == "unresolved"
    assert measurer.launches == launches


def test_a_verdict_the_budget_cut_short_is_unresolved_with_the_budget_as_its_reason(tmp_path):
    """33 % slower than a wide baseline: a third launch could still decide it, and the budget leaves no time for it."""
    gate, measurer, _ = budgeted(tmp_path, [75.0] * 4, minutes=1, runs=WIDE, repeats=1, max_repeats=3)
    with pytest.warns(UnresolvedVerdictWarning):
        assert gate.check().verdict == "unresolved"
    assert measurer.launches == 2 and "launch 3 needs about 30 s, and 0 s" in measurer.result.budget_stop


def test_a_fail_stands_where_the_budget_stopped_a_launch(tmp_path):
    gate, measurer, _ = budgeted(tmp_path, [70.0, 71.0, 69.0], minutes=1)
    with pytest.raises(CaseFailed, match="performance regression"):
        gate.check()
    assert measurer.launches == 2 and measurer.result.verdict == "FAIL"


def test_fail_unresolved_fails_a_case_the_budget_left_undecided(tmp_path):
    gate, measurer, _ = budgeted(tmp_path, [100.0] * 3, minutes=1, fail_unresolved=True)
    with pytest.raises(CaseFailed, match=r"unresolved on k: --perf-budget: w-c-cpu stopped after 2 launch\(es\)"):
        gate.check()
    assert measurer.result.verdict == "unresolved"


def test_a_b_pairs_are_what_the_budget_counts(tmp_path):
    """A pair of 30 s launches in turn costs 60 s: in 1.5 minutes the second of two planned pairs does not fit."""
    from perfgate.judge.ab import ABGate, RevisionReference
    from perfgate.judge.revision import Revision

    plan = make_plan(tmp_path)
    clock = LaunchClock(30.0)
    candidate, reference = FakeMeasurer(plan, [100.0] * 4), FakeMeasurer(plan, [100.0] * 4)
    clock.wrap(candidate)
    clock.wrap(reference)
    gate = ABGate(plan, Settings(repeats=2, ab_in_turn=True, against="main"), candidate,
                  RevisionReference(Revision("main", "0123456789abcdef", tmp_path), reference, plan, 0.02),
                  root=tmp_path, nvml=lambda: (None, ""), budget=SessionBudget(90.0, clock=clock))
    with pytest.warns(UnresolvedVerdictWarning, match="1 pairs measured"):
        assert gate.check().verdict == "unresolved"
    assert candidate.launches == reference.launches == 1
    assert candidate.result.budget_stop == ("--perf-budget: w-c-cpu stopped after 1 pair(s): pair 2 needs about 60 s, "
                                            "and 30 s of the 1.5 min budget (90 s) were left")


def test_the_summary_junit_and_the_record_name_what_the_budget_stopped(tmp_path):
    gate, measurer, _ = budgeted(tmp_path, [100.0] * 3, minutes=2, seconds_per_launch=50.0)
    with pytest.warns(UnresolvedVerdictWarning):
        result = gate.check()
    assert tables.budget_rows([result]) == [["w-c-cpu", "2", result.budget_stop]]
    budget_table = next(shown for shown in tables.sections([result], Settings()) if shown.name == "budget")
    assert budget_table.heading.startswith("left undecided by --perf-budget")
    assert ("perfgate.budget", result.budget_stop) in terminal.junit_properties(result)
    assert result.to_json()["budget_stop"] == result.budget_stop


def test_a_case_of_unknown_cost_after_the_budget_is_spent_is_not_started(tmp_path):
    """Nothing says what a launch of the case costs (no history, no launch_s in its baseline, no launch so far),
    and the session has used all of its 2 minutes: the case is not started, and its record says why."""
    gate, measurer, _ = budgeted(tmp_path, [100.0] * 3, minutes=2, used_s=125.0)
    with pytest.warns(UnresolvedVerdictWarning, match="0 launches measured"):
        assert gate.check().verdict == "unresolved"
    assert measurer.launches == 0
    assert measurer.result.budget_stop == "--perf-budget: the session had used its 2 min budget (120 s) before w-c-cpu began"


def test_cost_estimates_come_from_the_case_then_its_baseline_then_the_session():
    clock = LaunchClock(0.0)
    budget = SessionBudget(600.0, clock=clock)
    case = budget.for_case("c", 3, {"first": 40.0, "later": 20.0})
    assert (case.cost(0), case.cost(1)) == (40.0, 20.0)
    budget.known["h"] = {"first": 50.0, "later": 25.0}  # the results history's newest session of the case
    assert budget.for_case("h", 3).cost(1) == 25.0 and budget.for_case("h", 3, {"first": 1.0, "later": 2.0}).cost(1) == 2.0
    budget.first_launches, budget.later_launches = [10.0, 16.0], [5.0, 4.0]  # the longest: a short guess wastes more
    assert budget.for_case("d", 3).cost(0) == 16.0 and budget.for_case("d", 3).cost(2) == 5.0
    case.launches = [30.0, 12.0, 14.0]
    assert (case.cost(0), case.cost(3)) == (30.0, 14.0)  # the longest of its own launches of the kind
    assert SessionBudget(600.0, clock=clock).for_case("e", 3).cost(0) is None


def test_launch_costs_are_the_first_launch_and_the_longest_of_the_later_ones():
    runs = [{"time_s": {"total_s": 30.04}}, {"time_s": None}, {"time_s": {"total_s": 12.0}},
            {"time_s": {"total_s": 14.0}}, {"time_s": {"total_s": 20.0}}]
    assert launch_costs(runs) == {"first": 30.0, "later": 20.0}  # the longest, as the session's own estimates
    assert launch_costs(runs[:1]) == {"first": 30.0, "later": 30.0}
    assert launch_costs([{"time_s": None}, *runs[2:]]) == {"first": 20.0, "later": 20.0}  # a later one is no first
    assert launch_costs([{"time_s": None}]) is None


def test_a_case_with_no_baseline_the_budget_did_not_start_is_skipped_saying_both(tmp_path):
    """Nothing was measured, so nothing is reported but why: the missing baseline, and the budget."""
    plan = make_plan(tmp_path)
    budget = SessionBudget(50.0, clock=LaunchClock(30.0), first_launches=[30.0], later_launches=[30.0])
    measurer = FakeMeasurer(plan, [100.0] * 3)
    gate = Gate(plan, Settings(repeats=3), measurer, StoredBaseline(plan.baseline_file), root=tmp_path,
                nvml=lambda: (None, ""), budget=budget)
    with pytest.raises(CaseSkipped, match=r"no baseline for hardware class k .* \(--perf-budget: w-c-cpu was not "
                                          r"launched: its 2 launch\(es\) need about 60 s and 50 s"):
        gate.check()
    assert measurer.launches == 0 and gate.result.verdict == "no-baseline" and gate.result.metrics == []
    assert gate.result.budget_stop.startswith("--perf-budget: w-c-cpu was not launched")


def test_a_stale_baseline_the_runs_decided_stands_when_the_budget_stopped_a_launch(tmp_path):
    gate, measurer, _ = budgeted(tmp_path, [150.0, 151.0, 150.0], minutes=1)
    with pytest.warns(StaleBaselineWarning):
        assert gate.check().verdict == "stale"
    assert measurer.launches == 2 and measurer.result.budget_stop is None


def test_a_launch_that_failed_says_nothing_of_what_the_next_cases_cost(tmp_path):
    budget = SessionBudget(600.0, clock=LaunchClock(0.0))
    case = budget.for_case("c", 3)

    def timed_out():
        raise CaseFailed("c: timeout in run 1")
    with pytest.raises(CaseFailed):
        case.timed(timed_out)
    assert case.launches == budget.first_launches == []
