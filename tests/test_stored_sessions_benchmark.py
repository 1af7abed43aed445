"""benchmarks/stored_sessions.py decides each recorded session again with the case's other sessions stored."""

import importlib.util
from pathlib import Path

import pytest
from fakes import record

pytest.importorskip("otava.analysis", reason="benchmarks/stored_sessions.py reads a results history: perfgate[trend], "
                    "which .venv-floor does not have")
SPEC = importlib.util.spec_from_file_location("stored_sessions",
                                              Path(__file__).parent.parent / "benchmarks" / "stored_sessions.py")
stored_sessions = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(stored_sessions)

METRIC = "cpu_seconds_per_sample"
MEASURED = {"probe_matmul_gflops": 70.0, "probe_matmul_cpu_gflops": 70.0}


def session(value, *, planted=0.0):
    """A session of a case whose baseline reads 1.0 CPU s/sample (tolerance 5 %), judged against it alone as the
    gate did: FAIL beyond the tolerance, with the machine-speed probe where the baseline had it."""
    change = value - 1.0
    return record(verdict="FAIL" if change > 0.05 else "pass", injected_slowdown=planted,
                  measured={METRIC: value, **MEASURED},
                  metrics=[{"metric": METRIC, "unit": "CPU s/sample", "measured": value, "baseline": 1.0,
                            "change": change, "tolerance": 0.05, "ci": [change - 0.01, change + 0.01],
                            "p_value": 0.001, "verdict": "FAIL" if change > 0.05 else "pass",
                            "against_baseline": "FAIL" if change > 0.05 else "pass",
                            "run_values": [value] * 3, "baseline_runs": [1.0] * 3}])


def test_a_session_within_the_other_sessions_spread_is_unresolved_and_a_slowdown_beyond_it_fails():
    """Issue 47's VM drifted 8-42 % between quiet sessions; sessions that spread so leave a drifted one unresolved,
    and a session twice as slow as the others still FAILs."""
    unchanged = [session(value) for value in (1.10, 1.02, 1.14, 0.98, 1.12, 1.06)]
    drifted = unchanged[2]
    outcome, rows = stored_sessions.decided(drifted, [other for other in unchanged if other is not drifted], MEASURED)
    assert drifted.verdict == "FAIL" and outcome == "unresolved"
    assert rows[0]["sessions"] == 5 and rows[0]["catchable"] > 0.14
    assert stored_sessions.decided(session(2.2, planted=1.0), unchanged, MEASURED)[0] == "FAIL"
    assert stored_sessions.decided(drifted, unchanged[:3], MEASURED)[0] == "FAIL", "too few sessions to tell"


def test_sessions_the_baseline_file_already_stores_count_among_the_others():
    """An evening session 8 % slower than the afternoon's sessions (issue 47's family 25 VM) FAILs against them
    alone, and is unresolved once the evening's sessions that the baseline file already stores count too."""
    afternoon = [session(value) for value in (1.10, 1.09, 1.11, 1.10, 1.09, 1.11)]
    evening = [stored_sessions.as_stored(order, session(value))
               for order, value in enumerate((1.18, 1.19, 1.17, 1.18, 1.20))]
    an_evening = session(1.19)
    assert stored_sessions.decided(an_evening, afternoon, MEASURED)[0] == "FAIL"
    outcome, rows = stored_sessions.decided(an_evening, afternoon, MEASURED, evening)
    assert outcome == "unresolved" and rows[0]["sessions"] == 11


def test_plants_at_or_above_the_figure_the_gate_gave_them_are_counted_against_its_promise():
    """The figure is what a session's spread rows promise; a plant below it promised nothing and is not counted."""
    steady = [session(value) for value in (1.00, 1.01, 0.99, 1.00, 1.01, 0.99)]
    plants = [(size, *stored_sessions.decided(session(1.0 + size, planted=size), steady, MEASURED))
              for size in (0.30, 0.02)]
    [(_, _, large_rows), (_, _, small_rows)] = plants
    assert 0.02 < stored_sessions.figure(large_rows) < 0.30
    assert stored_sessions.figure(small_rows) == stored_sessions.figure(large_rows)
    assert stored_sessions.at_or_above_figure(plants) == ["FAIL"]
    unlike = [{"catchable": 0.01, "unlike": True}]
    assert stored_sessions.figure(unlike) is None and stored_sessions.at_or_above_figure([(0.5, "pass", unlike)]) == []
