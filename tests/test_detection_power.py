"""benchmarks/detection_power.py tallies each planted size's verdicts."""

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("detection_power",
                                              Path(__file__).parent.parent / "benchmarks" / "detection_power.py")
detection_power = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(detection_power)


def test_the_table_counts_failed_and_unresolved_trials_apart_and_reads_trials_from_before_the_verdict_was_kept():
    trials = [{"slowdown": 0.05, "failed": True, "seconds": 100.0, "verdict": "FAIL"},
              {"slowdown": 0.05, "failed": False, "seconds": 240.0, "verdict": "unresolved"},
              {"slowdown": 0.05, "failed": False, "seconds": 90.0},
              {"slowdown": 0.0, "failed": False, "seconds": 80.0, "verdict": "pass"}]
    lines = detection_power.summarize(trials, [0.0, 0.05])
    assert lines[0].split(" | ")[4] == "unresolved"
    assert lines[2] == "| 0 % (unchanged) | 1 | 0 | 0% | 0 | 80 s | 80 s |"
    assert lines[3] == "| 5% | 3 | 1 | 33% | 1 | 100 s | 240 s |"


def test_a_trials_verdict_is_read_from_its_result(tmp_path):
    (tmp_path / "case").mkdir()
    (tmp_path / "case" / "result.json").write_text('{"verdict": "unresolved", "metrics": [{"metric": "m"}]}')
    assert detection_power.judged(tmp_path) == {"verdict": "unresolved", "metrics": [{"metric": "m"}]}
    assert detection_power.judged(tmp_path / "none") == {"verdict": None, "metrics": []}
