"""--perf-against-python: this checkout under .venv judged against .venv-other (the same with open_clip 3.2.0 in
front, an upgrade to check), launch for launch, and both environments named by what they hold."""

import json
import sys

import pytest
from multinode import OTHER, needs_other
from sleeper_repo import ARGS, SLEEPER, SUITE, result_of

from conftest import REPO

pytestmark = pytest.mark.launches

NEEDS_NEW_OPEN_CLIP = ("import open_clip\n"
                       "if open_clip.__version__ != '3.3.0':\n"
                       "    raise SystemExit(f'needs open_clip 3.3.0, found {open_clip.__version__}')\n")


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(sleeper=SLEEPER.format(step_s=0.02), needs_new=NEEDS_NEW_OPEN_CLIP + SLEEPER.format(step_s=0.02),
                        test_suite=SUITE.format(extra='CASES.append(Case("onlyhere", "newclip", '
                                                      '("needs_new.py",), cpu=FLAVOUR))\n'))
    return pytester


def run(pytester, *args, python=OTHER):
    """In turn: the sleeper's 120 ms of measured steps are shorter than two launches' start may differ by."""
    return pytester.runpytest_subprocess(*ARGS, f"--perf-against-python={python}", "--perf-ab-in-turn", *args,
                                         timeout=300)


FLOOR = REPO / ".venv-floor" / "bin" / "python"
needs_floor = pytest.mark.skipif(not FLOOR.exists(), reason=f"{FLOOR} is not there: `make test-floor` creates it "
                                 "(.ci/run keeps it for `make test` where 20 GiB of disk are free beside it: both CUDA "
                                 "torch builds at once need ~13 GB)")


@pytest.mark.parametrize("python, reference", [
    pytest.param(OTHER, "torch 2.14.1, *open_clip 3.2.0", marks=needs_other, id="older-open_clip"),
    pytest.param(FLOOR, "torch 2.5.1, CUDA 12.4, NCCL 2.21.5, open_clip 3.3.0", marks=needs_floor, id="oldest-torch"),
])
def test_the_same_checkout_in_another_environment_is_judged_pair_by_pair_and_both_environments_are_named(
        suite, python, reference):
    result = run(suite, "-k", "sleep", "--perf-json", "bench.json", python=python)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*this Python environment vs python {python}*",
                                 f"this environment: torch 2.14.1, *open_clip 3.3.0*Python 3.*({sys.executable})",
                                 f"reference environment: {reference}*Python 3.*({python})"])
    stored = result_of(suite, "sleep")
    assert stored["environment"]["torch"] == "2.14.1" and stored["environment"]["open_clip"] == "3.3.0"
    assert stored["reference"]["python"] == str(python)
    assert stored["reference"]["command"].startswith(f"{python} -m torch.distributed.run")
    assert len(stored["per_run"]) == len(stored["reference"]["per_run"]) >= 2
    against = json.loads((suite.path / "bench.json").read_text())["benchmarks"][0]["extra_info"]["against"]
    assert against["environment"] == stored["reference"]["environment"] != stored["environment"]


@needs_other
def test_a_case_that_cannot_run_in_the_reference_environment_is_an_error_naming_it(suite):
    result = run(suite, "-k", "newclip")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*onlyhere-newclip-cpu @ {OTHER}: crashed in run 1*"])
    assert "needs open_clip 3.3.0, found 3.2.0" in result.stdout.str()


@needs_other
def test_an_interpreter_that_is_not_there_or_has_no_torch_is_a_usage_error(suite, tmp_path):
    missing = suite.runpytest_inprocess(*ARGS, f"--perf-against-python={tmp_path / 'nope'}")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*is not an executable file*"])
    bare = tmp_path / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    without = suite.runpytest_inprocess(*ARGS, f"--perf-against-python={bare}")
    assert without.ret == pytest.ExitCode.USAGE_ERROR
    without.stderr.fnmatch_lines([f"*--perf-against-python {bare}: it has no torch*"])
    apart = suite.runpytest_inprocess(*ARGS, "--perf-against-python", str(OTHER))
    assert apart.ret == pytest.ExitCode.USAGE_ERROR
    apart.stderr.fnmatch_lines([f"*pytest took {OTHER} for a test path when it chose its rootdir ({REPO}); write it "
                                f"as one argument: --perf-against-python={OTHER}"])
    both = suite.runpytest_inprocess(*ARGS, f"--perf-against-python={sys.executable}", "--perf-against", "HEAD")
    assert both.ret == pytest.ExitCode.USAGE_ERROR
    both.stderr.fnmatch_lines(["*--perf-against and --perf-against-python each name the reference side*"])


@pytest.mark.parametrize("script, says", [
    ("echo this is no interpreter\n", "cannot run it: *Exec format error*; give a Python interpreter (a venv's "
                                       "bin/python, or a script starting with #! that runs one)"),
    ("#!/bin/sh\necho 'ModuleNotFoundError: No module named perfgate' >&2\nexit 3\n",
     "`{python} -m perfgate.launch.environment` exited 3: ModuleNotFoundError: No module named perfgate; it must "
     "import this checkout's perfgate (its PYTHONPATH names it) with its own torch"),
], ids=["no-shebang", "probe-fails"])
def test_an_interpreter_that_cannot_start_or_fails_its_probe_is_a_usage_error_saying_how(suite, tmp_path, script, says):
    python = tmp_path / "reference-python"
    python.write_text(script)
    python.chmod(0o755)
    refused = suite.runpytest_inprocess(*ARGS, f"--perf-against-python={python}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines([f"*--perf-against-python {python}: {says.format(python=python)}"])
