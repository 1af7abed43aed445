"""--perf-against-python: this checkout under .venv (the pinned torch) judged against .venv-floor (torch 2.5.1),
launch for launch, and both environments named by what they hold."""

import json
import sys

import pytest
from test_ab import ARGS, SLEEPER, SUITE, result_of

from conftest import REPO

FLOOR = REPO / ".venv-floor" / "bin" / "python"
needs_floor = pytest.mark.skipif(not FLOOR.exists(), reason=f"{FLOOR} is not there: `make test-floor` (or .ci/run) "
                                 "creates the oldest supported torch's environment")
ONLY_HERE = "import pytest_benchmark  # in .venv (requirements.txt), not in .venv-floor\n"


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(sleeper=SLEEPER.format(step_s=0.02), needs_benchmark=ONLY_HERE + SLEEPER.format(step_s=0.02),
                        test_suite=SUITE.format(extra='CASES.append(Case("onlyhere", "benchmark", '
                                                      '("needs_benchmark.py",), cpu=FLAVOUR))\n'))
    return pytester


def run(pytester, *args):
    return pytester.runpytest_subprocess(*ARGS, f"--perf-against-python={FLOOR}", *args, timeout=300)


@needs_floor
def test_the_same_checkout_under_the_oldest_torch_is_judged_pair_by_pair_and_both_environments_are_named(suite):
    result = run(suite, "-k", "sleep", "--perf-json", "bench.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*this Python environment vs python {FLOOR}*",
                                 f"this environment: torch 2.14.1*Python 3.*({sys.executable})",
                                 f"reference environment: torch 2.5.1, CUDA 12.4, NCCL 2.21.5, open_clip 3.3.0, "
                                 f"Python 3.*({FLOOR})"])
    stored = result_of(suite, "sleep")
    assert stored["environment"]["torch"] == "2.14.1" and stored["environment"]["dali"]
    assert stored["reference"]["environment"]["torch"] == "2.5.1"
    assert stored["reference"]["environment"]["dali"] is None
    assert stored["reference"]["python"] == str(FLOOR)
    assert stored["reference"]["command"].startswith(f"{FLOOR} -m torch.distributed.run")
    assert len(stored["per_run"]) == len(stored["reference"]["per_run"]) >= 2
    against = json.loads((suite.path / "bench.json").read_text())["benchmarks"][0]["extra_info"]["against"]
    assert against["environment"]["torch"] == "2.5.1"


@needs_floor
def test_a_case_that_cannot_run_in_the_reference_environment_is_an_error_naming_it(suite):
    result = run(suite, "-k", "benchmark")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*onlyhere-benchmark-cpu @ {FLOOR}: crashed in run 1*"])
    assert "No module named 'pytest_benchmark'" in result.stdout.str()


def test_an_interpreter_that_is_not_there_or_has_no_torch_is_a_usage_error(suite, tmp_path):
    missing = suite.runpytest_subprocess(*ARGS, f"--perf-against-python={tmp_path / 'nope'}", timeout=120)
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*is not an executable file*"])
    bare = tmp_path / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    without = suite.runpytest_subprocess(*ARGS, f"--perf-against-python={bare}", timeout=120)
    assert without.ret == pytest.ExitCode.USAGE_ERROR
    without.stderr.fnmatch_lines([f"*--perf-against-python {bare}: it has no torch*"])
    apart = suite.runpytest_subprocess(*ARGS, "--perf-against-python", str(FLOOR), timeout=120)
    assert apart.ret == pytest.ExitCode.USAGE_ERROR
    apart.stderr.fnmatch_lines([f"*pytest took {FLOOR} for a test path when it chose its rootdir ({REPO}); write it "
                                f"as one argument: --perf-against-python={FLOOR}"])
    both = suite.runpytest_subprocess(*ARGS, f"--perf-against-python={sys.executable}", "--perf-against", "HEAD",
                                      timeout=120)
    assert both.ret == pytest.ExitCode.USAGE_ERROR
    both.stderr.fnmatch_lines(["*--perf-against and --perf-against-python each name the reference side*"])
