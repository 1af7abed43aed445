"""--perf-budget in real pytest sessions of real torchrun launches (the sleeper case, three copies): a budget too small
for any verdict leaves every case unresolved, saying so in the terminal, the record, JUnit and summary.md, and fails
them under --fail-unresolved; a budget that holds them changes nothing. The launch-by-launch plan, on a fake clock, is
test_budget.py's."""

import json
from xml.etree import ElementTree

import pytest
from sleeper_repo import SLEEPER, SUITE

from perfgate.judge import baselines
from perfgate.judge.baselines import Baseline, MetricBaseline

pytestmark = pytest.mark.launches

STEP_S = 0.05
CLASS = "budget-cpu-class"
CASES = ("s1", "s2", "s3")
EXTRA = "".join(f'CASES.append(Case("sleeper", "{name}", ("sleeper.py",), cpu=FLAVOUR))\n' for name in CASES)
METRIC = "fastest_step_samples_per_second"


@pytest.fixture
def suite(pytester):
    """Three sleeper cases (and the suite's own), each with a baseline its sleeps match: a launch passes them."""
    pytester.makepyfile(sleeper=SLEEPER.format(step_s=STEP_S), test_suite=SUITE.format(extra=EXTRA))
    rate = 1 / STEP_S
    for name in ("sleep", *CASES):
        key = f"sleeper-{name}-cpu"
        baselines.write(pytester.path / "b" / CLASS / f"{key}.json", Baseline(
            key, CLASS, {METRIC: MetricBaseline(rate, "higher", 0.2, "samples/s", (rate,) * 5)},
            provenance={"measured": {}}, workload_version="1"))
    return pytester


def session(pytester, budget, *args):
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--baseline-dir", "b", "--hardware-class", CLASS, "--perf-repeats", "2",
        "--perf-budget", budget, "--perf-results", "results.json", "--perf-report", "report",
        "--junitxml", "junit.xml", *args, timeout=600)


def records(pytester):
    return {record["case"]: record for record in json.loads((pytester.path / "results.json").read_text())["results"]}


def test_a_budget_too_small_for_any_verdict_leaves_every_case_unresolved_saying_so(suite):
    """0.01 minutes: at most the first case's first launch starts (nothing is known of its cost until it has run), and
    no case reaches the two launches it plans."""
    result = session(suite, "0.01")
    result.assert_outcomes(passed=4)
    found = records(suite)
    assert {record["verdict"] for record in found.values()} == {"unresolved"}
    assert all(record["budget_stop"].startswith("--perf-budget: sleeper-") for record in found.values())
    assert sum(record["runs"] for record in found.values()) <= 1
    result.stdout.fnmatch_lines(["*left undecided by --perf-budget*",
                                 "perfgate: --perf-budget 0.01 min: the session took * s of its 1 s; 4 case(s) left "
                                 "unresolved by it"])
    assert result.stdout.str().count("UnresolvedVerdictWarning") >= 4
    summary = (suite.path / "report" / "summary.md").read_text()
    assert "### Left undecided by --perf-budget" in summary and "4 unresolved" in summary
    budget_properties = [prop.get("value") for prop in ElementTree.parse(suite.path / "junit.xml").iter("property")
                         if prop.get("name") == "perfgate.budget"]
    assert len(budget_properties) == 4 and all("--perf-budget: " in value for value in budget_properties)

    failed = session(suite, "0.01", "--fail-unresolved")
    failed.assert_outcomes(failed=4)
    failed.stdout.fnmatch_lines(["*unresolved on budget-cpu-class: --perf-budget: sleeper-*"])


def test_a_budget_that_holds_every_launch_changes_no_verdict(suite):
    result = session(suite, "30", "-k", "s1 or s2")
    result.assert_outcomes(passed=2)
    found = records(suite)
    assert {record["verdict"] for record in found.values()} == {"pass"}
    assert [record["runs"] for record in found.values()] == [2, 2]
    assert not any(record["budget_stop"] for record in found.values())
    result.stdout.fnmatch_lines(["perfgate: --perf-budget 30 min: the session took * s of its 1800 s; 0 case(s) left "
                                 "unresolved by it"])
    assert "left undecided by --perf-budget" not in result.stdout.str()
