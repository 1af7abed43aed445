"""A generated suite of fault cases run in a pytest session of its own, as a user runs it (hardware class
"faults"), and what the session left: each case's result.json and the baseline files."""

import json
import sys


def pytest_args(root, *args):
    return [sys.executable, "-m", "pytest", "test_suite.py", "-p", "no:cacheprovider", "--basetemp",
            str(root / "tmp"), "--baseline-dir", str(root / "b"), "--hardware-class", "faults",
            "--perf-repeats", "1", "-rA", *args]


def results_of(basetemp):
    results = {}
    for path in basetemp.glob("**/result.json"):
        result = json.loads(path.read_text())
        results[result["case"]] = result
    return results


def baseline_files(root):
    return {p.name: p.read_bytes() for p in (root / "b").rglob("*") if p.is_file()}
