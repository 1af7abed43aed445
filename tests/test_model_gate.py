"""The verdict's model on fake launches: the model's verdict against a stored baseline, its sessions and the
machine's speed, more launches while they can still decide it, and what the messages and the record say."""

import datetime
import math
import re

import pytest
from fakes import METRIC, FakeMeasurer, LaunchClock, make_plan

from perfgate.config.settings import Settings
from perfgate.judge import baselines
from perfgate.judge.baselines import Baseline, MetricBaseline, StoredBaseline, StoredSession
from perfgate.judge.gate import Gate, StaleBaselineWarning, UnresolvedVerdictWarning
from perfgate.measure.budget import SessionBudget
from perfgate.outcome import CaseFailed

PROBE = "probe_matmul_gflops"
RUNS = (99.0, 100.0, 101.0, 100.5, 99.5, 100.0, 100.2)


def sessions(count=12, spread=0.02, slope=0.7):
    """Stored sessions on machines whose matmul read 50-90 GFLOP/s against the baseline's 70: the throughput moves
    ``slope`` for one with it, and strays ``spread`` besides."""
    found = []
    for i in range(count):
        speed = math.log((50.0 + 40.0 * i / (count - 1)) / 70.0)
        value = 100.0 * math.exp(slope * speed + spread * (-1) ** i)
        when = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(hours=i)
        found.append(StoredSession(when.isoformat(), {METRIC: value},
                                   70.0 * math.exp(speed), "abc"))
    return tuple(found)


def gate(tmp_path, values, probe=70.0, stored=(), history=(), budget=None, measured=None, **settings):
    """A gate of fake launches against a baseline whose probe read ``measured`` (the wall-clock matmul 70)."""
    plan = make_plan(tmp_path)
    baselines.write(plan.baseline_file, Baseline(plan.run.key, "k", {
        METRIC: MetricBaseline(100.0, "higher", 0.05, "samples/s", RUNS)},
        provenance={"measured": measured or {PROBE: 70.0}}, workload_version="1", sessions=tuple(stored)))
    measurer = FakeMeasurer(plan, values, probe)
    checker = Gate(plan, Settings(**{"repeats": 3, "max_repeats": 5, **settings}), measurer,
                   StoredBaseline(plan.baseline_file), root=plan.spec.workdir, nvml=lambda: (None, ""),
                   sessions=lambda baseline: history, budget=budget)
    return checker, measurer


def test_an_unchanged_session_on_a_faster_machine_passes_and_records_the_models_row(tmp_path):
    """The machine reads 25 % faster and the throughput 17 % higher: what the stored sessions say it moves by."""
    checker, measurer = gate(tmp_path, [117.0, 117.5, 116.5], probe=87.5, stored=sessions())
    result = checker.check()
    assert result.verdict == "pass" and measurer.launches == 3
    row = result.metrics[0]
    assert (row["verdict"], row["basis"], row["covariates"]) == ("pass", "13 sessions", [PROBE])
    assert row["slopes"][0] == pytest.approx(-0.7, abs=0.1), "oriented: a faster machine, a lower (better) y"
    assert row["change"] == pytest.approx(0.17), "the measured value against the baseline's"
    assert abs(row["effect"]) < 0.03 and row["ci"][0] < row["effect"] < row["ci"][1], "the model's, machine weighed"
    assert 0.05 < row["catchable"] < 0.2


def test_a_slowdown_fails_naming_its_interval_and_the_figure_it_catches(tmp_path):
    checker, _ = gate(tmp_path, [70.0, 70.5, 69.5], stored=sessions())
    with pytest.raises(CaseFailed) as failed:
        checker.check()
    message = str(failed.value)
    assert re.match(r"w-c-cpu: performance regression on k\n  samples_per_second: -30\.0% against the baseline, "
                    r"\+42\.\d% slower by the model \(interval \+\d+\.\d% to \+\d+\.\d%, tolerance 5\.0%; from 13 "
                    r"sessions; weighs probe_matmul_gflops; catches \d+%\)\n", message), message
    assert "machine-speed probe now vs when the baseline was measured: probe_matmul_gflops 70 vs 70 (+0.0%)" in message


def test_no_stored_session_is_judged_by_the_prior_and_the_historys_sessions_count_too(tmp_path):
    checker, _ = gate(tmp_path, [100.0, 100.5, 99.5])
    result = checker.check()
    assert result.metrics[0]["basis"] == "the prior"
    checker, _ = gate(tmp_path, [100.0, 100.5, 99.5], history=sessions())
    assert checker.check().metrics[0]["basis"] == "13 sessions"
    checker, _ = gate(tmp_path, [100.0, 100.5, 99.5], stored=sessions(), history=sessions())
    assert checker.check().metrics[0]["basis"] == "13 sessions", "a session in both is counted once"


def test_a_verdict_more_launches_could_decide_launches_again_up_to_the_cap_then_is_unresolved(tmp_path):
    """About 6 % slower, launches 8 % apart, against tight sessions, so many that the prior's spread (worth PRIOR_DOF
    sessions) weighs nothing beside theirs: the interval straddles the 5 % tolerance, and launches narrow it."""
    checker, measurer = gate(tmp_path, [96.0, 91.0, 94.0, 95.0, 90.0], stored=sessions(count=3000, spread=0.002))
    with pytest.warns(UnresolvedVerdictWarning) as warned:
        assert checker.check().verdict == "unresolved"
    assert measurer.launches == 5
    assert ("an interval still straddles its tolerance after 5 launches, and more launches would narrow it: raise "
            "--perf-max-repeats to let them decide it") in str(warned[0].message)
    checker, measurer = gate(tmp_path, [96.0, 91.0, 94.0, 95.0, 90.0], stored=sessions(count=3000, spread=0.002),
                             fail_unresolved=True)
    with pytest.raises(CaseFailed, match="unresolved on k"):
        checker.check()


def test_a_case_faster_than_the_machine_explains_is_stale(tmp_path):
    checker, _ = gate(tmp_path, [160.0, 161.0, 159.0], stored=sessions())
    with pytest.warns(StaleBaselineWarning, match="faster than .* by more than its tolerance, by the model"):
        assert checker.check().verdict == "stale"


def test_a_budget_that_stops_the_launches_it_wants_says_so(tmp_path):
    """Three launches of 30 s fit in 100 s, the fourth the model asks for does not: unresolved, for the budget."""
    clock = LaunchClock(30.0)
    checker, measurer = gate(tmp_path, [96.0, 91.0, 94.0, 95.0, 90.0], stored=sessions(count=3000, spread=0.002),
                             budget=SessionBudget(100.0, clock=clock))
    clock.wrap(measurer)
    with pytest.warns(UnresolvedVerdictWarning, match="launch 4 needs about 30 s"):
        assert checker.check().verdict == "unresolved"
    assert measurer.launches == 3 and measurer.result.budget_stop.startswith("--perf-budget: w-c-cpu stopped after 3")


def test_a_slowdown_the_sessions_spread_hides_stays_unresolved_however_many_launches(tmp_path):
    """Sessions 10 % apart, a session 12 % slower: no number of launches narrows the interval enough, so it is
    launched no more than planned, and it is not a pass."""
    checker, measurer = gate(tmp_path, [88.0, 88.5, 87.5, 88.0, 88.0], stored=sessions(spread=0.10))
    with pytest.warns(UnresolvedVerdictWarning, match="the spread between sessions here keeps it so however many "
                                                      "launches run"):
        assert checker.check().verdict == "unresolved"
    assert measurer.launches == 3


def test_runs_that_no_longer_measure_a_metric_the_baseline_gates_fail_saying_why(tmp_path):
    checker, _ = gate(tmp_path, [{"total_time_secs": 10.0}] * 3)
    with pytest.raises(CaseFailed, match=rf"w-c-cpu: the runs measured no {METRIC}, which .*w-c-cpu.json gates: the "
                                         r"workload no longer records it, or its records changed. Where that is meant, "
                                         r"measure the baseline again: --update-baselines"):
        checker.check()


def test_a_gated_value_of_zero_fails_the_case_saying_to_gate_another_metric(tmp_path):
    """The model compares logs: a share of the window that reads 0 in a launch cannot be judged, and says so."""
    checker, _ = gate(tmp_path, [100.0, 0.0, 99.0])
    with pytest.raises(CaseFailed, match=r"samples_per_second read 0 in a launch, and the verdict's model compares the "
                                         r"logs of positive values: gate a metric that stays above 0"):
        checker.check()


def test_the_cores_turns_in_the_window_weigh_a_neighbour_and_a_fail_says_them(tmp_path):
    """A baseline measured quiet, a session beside a neighbour that held the cores (run-queue turns 1.45 against
    1.0) while the probe's own turns read it barely: the throughput 26 % lower is what the turns expect, and a halved
    one FAILs, saying the turns beside the probe."""
    quiet = {PROBE: 100.0, "probe_matmul_cpu_gflops": 100.0, "run_queue_turns": 1.0}
    beside = {PROBE: 98.0, "probe_matmul_cpu_gflops": 100.0, "run_queue_turns": 1.45}
    checker, _ = gate(tmp_path, [74.0, 74.5, 73.5], probe=beside, measured=quiet)
    result = checker.check()
    assert result.verdict == "pass", result.metrics
    assert result.metrics[0]["covariates"] == ["probe_matmul_cpu_gflops", "run_queue_turns"]
    checker, _ = gate(tmp_path, [50.0, 50.5, 49.5], probe=beside, measured=quiet)
    with pytest.raises(CaseFailed) as failed:
        checker.check()
    assert "the cores' turns in the window (CPU time and the wait for a core, over CPU time): 1.45 now, 1.00 then" \
        in str(failed.value)
