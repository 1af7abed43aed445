"""perfgate bisect: a git repository built here, 8 commits after GOOD, exactly one of which makes the workload 2x
slower; every verdict is a real A/B session of real torchrun launches."""

import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from fakes import record
from bisect_runs import comparisons, scratch_env, verdicts
from sleeper_repo import SLEEPER, SUITE, git, init, worktrees

from perfgate.bisect import kept
from perfgate.bisect.commits import BisectUsageError, Commit, Worktrees, first_parent_range
from perfgate.bisect.driver import Bisect
from perfgate.bisect.search import BAD, GOOD, SKIP, UNKNOWN, Measured, Search, Step, classify
from perfgate.bisect.session import Outcome

CRASHER = "raise SystemExit('this commit does not train')\n"
ARGS = ["-k", "sleep or same", "--perf-repeats", "2", "--perf-max-repeats", "4", "--perf-ab-in-turn"]
"""In turn: the sleeper's 120 ms of measured steps are shorter than two launches' start may differ by, too short for
a duet pair (the default of a CPU flavour on the local launcher)."""


STEADY = 'CASES.append(Case("steady", "same", ("steady.py",), cpu=FLAVOUR))\n'


def commit(repo, message, *, step_s=0.02, crash=False):
    (repo / "sleeper.py").write_text((CRASHER if crash else "") + SLEEPER.format(step_s=step_s))
    (repo / "steady.py").write_text(SLEEPER.format(step_s=0.02))
    (repo / "test_suite.py").write_text(SUITE.format(extra=STEADY))
    (repo / "history.txt").write_text(message + "\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path):
    """GOOD, then 8 commits; the 5th after GOOD doubles the sleeper's step time, and the 6th (after it) does not run.
    A second case, steady, never changes: each case gets its own search, and steady none."""
    repo = tmp_path / "repo"
    repo.mkdir()
    init(repo)
    shas = [commit(repo, "GOOD: 20 ms steps")]
    for number in range(1, 9):
        slow = number >= 5
        shas.append(commit(repo, f"change {number}" + (": twice as slow" if number == 5 else ""),
                           step_s=0.04 if slow else 0.02, crash=number == 6))
    return repo, shas


def bisect(repo, *args, timeout=900):
    return subprocess.run([sys.executable, "-m", "perfgate.cli", "bisect", *args, *ARGS,
                           "--bisect-logs", str(repo.parent / "logs")],
                          cwd=repo, capture_output=True, text=True, timeout=timeout, env=scratch_env(repo))


@pytest.mark.launches
def test_the_commit_that_doubled_the_step_is_named_within_log2_n_plus_2_comparisons_skipping_one_that_crashes(history):
    repo, shas = history
    done = bisect(repo, shas[0], shas[8], "--perf-report", str(repo.parent / "report"),
                  "--perf-history", "../history.db")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert f"first bad commit {shas[5]}" in output
    assert f"perfgate bisect: kept the answer(s) in {repo.parent / 'history.db'}" in output
    assert "subject: change 5: twice as slow" in output and "author:  ci" in output
    assert len(comparisons(output)) <= math.ceil(math.log2(8)) + 2, output
    assert f"{shas[6][:10]} is skip" in output, "the commit that does not train is skipped, as git bisect skip does"
    assert "steady-same-cpu: no slowdown between GOOD and BAD" in output
    assert output.count("first bad commit") == 1, "the steady case is searched for nothing"
    logs = sorted((repo.parent / "logs").glob("*.log"))
    assert "steady-same-cpu" in logs[0].read_text()
    assert not [log.name for log in logs[1:] if "steady-same-cpu" in log.read_text()], "a search runs its case alone"
    assert f"against its parent {shas[4][:10]}: fastest_step_samples_per_second -" in output
    assert (repo.parent / "report" / "bisect.md").read_text().count("first bad commit") == 1
    assert (repo.parent / "report" / "bisect-sleeper-sleep-cpu.png").stat().st_size > 0
    assert worktrees(repo) == [f"worktree {repo}"], "every worktree is removed"
    database = pytest.importorskip("perfgate.trend.database").ResultsDatabase(str(repo.parent / "history.db"))
    (kept_answer,) = database.bisections()
    paired = [r for r in database.records().values() if r.reference is not None]
    database.close()
    assert (kept_answer.case, kept_answer.culprit) == ("sleeper-sleep-cpu", shas[5])
    assert len(paired) >= len(comparisons(output)), "each verdict's A/B results went to the database the bisect named"


@pytest.mark.parametrize("good, bad, message", [
    ("no-such-ref", "HEAD", "no-such-ref: no such revision here"),
    ("HEAD", "HEAD~3", "is not an ancestor of BAD"),
    ("HEAD~3", "HEAD~3", "the same commit"),
])
def test_unknown_refs_and_a_backwards_range_are_usage_errors(history, good, bad, message):
    repo, _ = history
    with pytest.raises(BisectUsageError, match=message):
        first_parent_range(repo, good, bad)


def test_a_good_commit_that_joined_through_a_merge_is_a_usage_error_saying_which_to_name(history):
    """GOOD on a branch merged into BAD's line: BAD's first-parent line never passes through it."""
    repo, shas = history
    git(repo, "checkout", "-q", "-b", "side", shas[2])
    (repo / "side.txt").write_text("side\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "on the side")
    side = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    with pytest.raises(BisectUsageError, match=f"GOOD {side} is not on BAD HEAD's first-parent line \\(it joined it "
                                               r"through a merge\): name a commit of that line"):
        first_parent_range(repo, side, "HEAD")


def test_a_dirty_tree_is_a_usage_error(history):
    repo, shas = history
    (repo / "sleeper.py").write_text("# edited\n")
    with pytest.raises(BisectUsageError, match="uncommitted changes"):
        first_parent_range(repo, shas[0], shas[8])


@pytest.mark.launches
def test_a_usage_error_ends_the_command_with_status_2_before_any_verdict(history):
    repo, _ = history
    done = bisect(repo, "no-such-ref", "HEAD", timeout=60)
    assert done.returncode == 2 and "perfgate bisect: error: no-such-ref: no such revision here" in done.stderr
    assert verdicts(done.stdout) == 0 and worktrees(repo) == [f"worktree {repo}"]


@pytest.mark.launches
def test_a_selection_that_matches_no_case_ends_the_bisect_with_status_2_naming_the_log(history):
    """A -k typo: the session of BAD against GOOD collects nothing, and the bisect stops before any search."""
    repo, shas = history
    done = subprocess.run([sys.executable, "-m", "perfgate.cli", "bisect", shas[0], shas[8], "-k", "no_such_case",
                           "--bisect-logs", str(repo.parent / "logs")],
                          cwd=repo, capture_output=True, text=True, timeout=300, env=scratch_env(repo))
    assert done.returncode == 2, done.stderr[-2000:]
    said = done.stderr.split("perfgate bisect: error: ")[1]
    assert said.startswith("the session of BAD against GOOD judged no case (pytest exit 5); check the selection and "
                           "options: see "), said
    log = Path(said.split("see ")[1].strip())
    assert log.is_file() and "deselected" in log.read_text()
    assert worktrees(repo) == [f"worktree {repo}"]


@pytest.mark.launches
def test_an_interrupted_bisect_leaves_no_worktree_and_no_process(history):
    repo, shas = history
    running = subprocess.Popen([sys.executable, "-m", "perfgate.cli", "bisect", shas[0], shas[8], *ARGS,
                                "--bisect-logs", str(repo.parent / "logs")], cwd=repo, env=scratch_env(repo),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while len(worktrees(repo)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(worktrees(repo)) == 3, "BAD and the A/B session's reference (GOOD) are checked out while it runs"
    running.send_signal(signal.SIGTERM)
    output, _ = running.communicate(timeout=120)
    assert running.returncode == 130, output[-3000:]
    assert "interrupted" in output
    assert worktrees(repo) == [f"worktree {repo}"], output[-3000:]
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if any(str(repo.parent) in part for part in p.info["cmdline"] or ())]
    assert not left, left


def row(change, low, high, metric="fastest_step_samples_per_second"):
    return {"metric": metric, "change": change, "ci": [low, high]}


STEP = Step("fastest_step_samples_per_second", "higher", 0.5)


@pytest.mark.parametrize("rows, verdict, final, expected", [
    ([row(-0.48, -0.5, -0.46)], "FAIL", False, BAD),
    ([row(-0.01, -0.03, 0.01)], "pass", False, GOOD),
    ([row(-0.2, -0.4, 0.0)], "pass", False, UNKNOWN),
    ([row(-0.2, -0.4, 0.0)], "pass", True, GOOD),
    ([row(-0.3, -0.5, -0.1)], "pass", True, BAD),
    ([], "crashed", False, SKIP),
    ([], "setup-error", True, SKIP),
    ([], "timeout", False, BAD),
])
def test_a_midpoint_is_classified_by_which_side_of_half_the_step_its_interval_lies(rows, verdict, final, expected):
    measured = Measured(3, 0, verdict, tuple(rows), 2, 10.0)
    assert classify(measured, [STEP], final=final) == expected


@pytest.mark.parametrize("count", [3, 9, 10, 17, 33])
def test_the_search_names_every_possible_culprit_within_ceil_log2_n_midpoints(count):
    for culprit in range(1, count):
        search, midpoints = Search(count), 0
        while (index := search.next_commit()) is not None:
            midpoints += 1
            search.record(index, BAD if index >= culprit else GOOD)
        assert search.suspects() == [culprit]
        assert midpoints <= math.ceil(math.log2(count - 1))


def test_skipped_commits_next_to_the_culprit_are_named_with_it():
    search = Search(9)
    classes = {4: SKIP, 3: GOOD, 5: BAD}
    while (index := search.next_commit()) is not None:
        search.record(index, classes[index])
    assert search.suspects() == [4, 5]


class FakeSessions:
    """A/B sessions answered from a table: commit index -> the fastest step's change against the reference (and its
    interval half-width), or a case verdict such as crashed; each call's extra arguments are kept."""

    def __init__(self, commits, answers):
        self.index = {commit.sha: i for i, commit in enumerate(commits)}
        self.answers = answers
        self.calls = []

    def run(self, tree, reference, label, *, extra=()):
        candidate = int(tree.name)
        self.calls.append((candidate, self.index[reference], list(extra)))
        answer = self.answers[candidate]
        if callable(answer):
            answer = answer(list(extra))
        if isinstance(answer, dict):
            result = record("case", test="t::case", **answer)
        elif isinstance(answer, str):
            result = record("case", test="t::case", verdict=answer, message=answer)
        else:
            change, half = answer
            worse = -change > 0.02 and -change - half > 0
            result = record("case", test="t::case", verdict="FAIL" if worse else "pass",
                            reference={"per_run": [{}, {}]},
                            metrics=[{"metric": "fastest_step_samples_per_second", "change": change,
                                      "ci": [change - half, change + half], "verdict": "FAIL" if worse else "pass",
                                      "reason": "not significant yet" if -change > 0.02 and not worse else "x"}])
        return Outcome({"t::case": result}, 0, 1.0, Path("log"))


class FakeTrees:
    def get(self, commit):
        return Path(commit.subject)


def fake_bisect(answers):
    commits = [Commit(f"{i:040x}", str(i), "ci", "2026-11-24") for i in range(len(answers))]
    sessions = FakeSessions(commits, answers)
    return Bisect(Path("."), commits, sessions, FakeTrees(), max_pairs=10, say=lambda line: None), sessions


def test_an_unknown_midpoint_is_measured_again_with_more_pairs_and_then_decided_on_its_estimate():
    """Commit 4's first verdict straddles half the step (-25 %): it is measured again with --bisect-max-pairs pairs
    (and the cap raised with them, or pytest would refuse the repeats), and its estimate then decides."""
    slow, fast = (-0.5, 0.01), (0.0, 0.01)
    answers = [fast, fast, fast, fast,
               lambda extra: (-0.3, 0.1) if "--perf-repeats" in extra else (-0.3, 0.2), slow, slow, slow, slow]
    bisect, sessions = fake_bisect(answers)
    searches, lines, answered = bisect.ends()
    bisect.search(searches[0], [])
    assert searches[0].culprit == 4 and answered
    retries = [extra for candidate, _, extra in sessions.calls if candidate == 4 and "--perf-repeats" in extra]
    assert retries and retries[0][retries[0].index("--perf-max-repeats") + 1] == "10"
    assert bisect.verdicts == 1 + 3 + 1 + 1, "the ends, 3 midpoints, one retry, and the culprit against its parent"


@pytest.mark.parametrize("bad", [(-0.1, 0.2), "unresolved"], ids=["inconclusive", "unresolved"])
def test_an_unproven_slowdown_between_good_and_bad_is_said_and_blames_nothing(bad):
    """Inconclusive at the pair cap, or left unresolved by a --perf-ab-resolve passed through to pytest."""
    bisect, _ = fake_bisect([(0.0, 0.01), bad])
    searches, lines, answered = bisect.ends()
    assert not searches and not answered
    assert "an unproven slowdown between GOOD and BAD" in lines[0] and "raise --bisect-max-pairs" in lines[0]


def test_an_unproven_slowdown_of_pairs_in_turn_beside_a_neighbour_says_to_launch_them_at_once_not_to_add_pairs():
    """More pairs do not settle what a neighbour's turns between a pair's launches explain (A/B's in-turn rule)."""
    in_turn = {"verdict": "unresolved", "reference": {"per_run": [{}, {}, {}]},
               "machine_drop": [{"rule": "in turn", "metric": "cpu_seconds_per_sample", "change": 0.037}]}
    bisect, _ = fake_bisect([(0.0, 0.01), in_turn])
    searches, lines, answered = bisect.ends()
    assert not searches and not answered
    assert "after 3 pairs" in lines[0]
    assert "launch the pairs at once (on the local launcher, leave --perf-ab-in-turn out)" in lines[0]
    assert "--bisect-max-pairs" not in lines[0]


def test_a_timeout_counts_as_slow_and_a_crashing_bad_is_a_usage_error():
    fast, slow = (0.0, 0.01), (-0.5, 0.01)
    bisect, _ = fake_bisect([fast, fast, "timeout", slow, slow])
    searches, _, _ = bisect.ends()
    bisect.search(searches[0], [])
    assert searches[0].culprit == 2
    broken, _ = fake_bisect([fast, fast, "crashed"])
    with pytest.raises(BisectUsageError, match="GOOD or BAD itself does not run"):
        broken.ends()


def test_a_range_with_no_slowdown_blames_nothing_in_one_verdict():
    bisect, sessions = fake_bisect([(0.0, 0.01), (0.01, 0.01), (-0.005, 0.01)])
    searches, lines, answered = bisect.ends()
    assert not searches and answered
    assert lines == ["case: no slowdown between GOOD and BAD: fastest_step_samples_per_second -0.5% [CI -1.5%..+0.5%]"]
    assert len(sessions.calls) == 1


def test_a_midpoint_that_does_not_run_is_skipped_and_the_culprit_still_named_within_log2_n_plus_2_verdicts():
    """As git bisect skip does: commit 6 crashes, after the culprit 5."""
    fast, slow = (0.0, 0.01), (-0.5, 0.01)
    bisect, _ = fake_bisect([fast, fast, fast, fast, fast, slow, "crashed", slow, slow])
    searches, _, answered = bisect.ends()
    bisect.search(searches[0], [])
    assert searches[0].culprit == 5 and answered
    assert searches[0].search.classes[6] == SKIP
    assert bisect.verdicts <= math.ceil(math.log2(8)) + 2


def test_a_commit_measured_twice_reuses_its_worktree_and_close_removes_every_one(history, tmp_path):
    """The culprit is measured against GOOD, then against its parent, in the one checkout."""
    repo, shas = history
    commits = first_parent_range(repo, shas[0], shas[2])
    trees = Worktrees(repo, tmp_path / "scratch")
    first = trees.get(commits[2])
    assert trees.get(commits[2]) == first and (first / "sleeper.py").is_file()
    assert trees.get(commits[1]) != first
    trees.close()
    assert worktrees(repo) == [f"worktree {repo}"] and not (tmp_path / "scratch").exists()


def test_each_answer_is_kept_in_the_results_database_the_sessions_wrote_to(tmp_path):
    """The named commit and the answer as printed, and where none could be named, its suspects."""
    database_module = pytest.importorskip("perfgate.trend.database", reason="the results database needs perfgate[trend]")
    fast, slow = (0.0, 0.01), (-0.5, 0.01)
    named, _ = fake_bisect([fast, fast, fast, slow, slow])
    (found,), _, _ = named.ends()
    named.search(found, [])
    unnamed, _ = fake_bisect([fast, fast, "crashed", slow])
    (open_,), _, _ = unnamed.ends()
    unnamed.search(open_, [])
    url = str(tmp_path / "history.db")
    assert kept.history_url(["-k", "x", "--perf-history", url]) == url
    assert kept.history_url([f"--perf-history={url}"]) == url and kept.history_url(["-k", "x"]) is None
    assert kept.keep(url, [found, open_]) == f"kept the answer(s) in {url}"
    database = database_module.ResultsDatabase(url, create=False)
    first, second = database.bisections()
    database.close()
    assert (first.case, first.hardware_class, first.good, first.bad, first.culprit) == (
        "case", "k", found.commits[0].sha, found.commits[-1].sha, found.commits[3].sha)
    assert f"case: first bad commit {found.commits[3].sha}" in first.answer
    assert second.culprit is None and second.suspects == [open_.commits[2].sha, open_.commits[3].sha]
    (tmp_path / "a-file").write_text("")
    assert kept.keep(str(tmp_path / "a-file" / "history.db"), [found]).startswith("the answers were not kept: "), \
        "a database that cannot be written is a line, not a traceback that changes the exit status"


def test_a_relative_history_path_is_the_one_the_bisect_was_started_in_not_each_worktrees(tmp_path):
    assert kept.anchored(["-k", "x", "--perf-history", "results/h.db"], tmp_path) == [
        "-k", "x", f"--perf-history={tmp_path / 'results/h.db'}"], "one argument: pytest's rootdir is not moved by it"
    assert kept.anchored(["--perf-history=h.db"], tmp_path) == [f"--perf-history={tmp_path / 'h.db'}"]
    assert kept.anchored(["--perf-history", "postgresql://ci@db/perf", "--perf-history=/abs/h.db"], tmp_path) == [
        "--perf-history=postgresql://ci@db/perf", "--perf-history=/abs/h.db"]


def test_a_session_whose_results_this_perfgate_cannot_read_is_a_usage_error_naming_its_log(tmp_path):
    """A commit whose perfgate writes another result record (an older schema): the bisect cannot judge it."""
    from perfgate.bisect.session import Sessions

    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do\n  if [ \"$1\" = --perf-results ]; then\n"
                      "    echo '{\"results\": [{\"schema\": 0}]}' > \"$2\"\n  fi\n  shift\ndone\n")
    python.chmod(0o755)
    sessions = Sessions([], tmp_path / "scratch", tmp_path / "logs", python=str(python))
    with pytest.raises(BisectUsageError, match=rf"the session in {tmp_path} wrote results this perfgate cannot read: "
                                               r".*\(its log: .*01-ends.log\). That commit's perfgate writes "
                                               r"another record: bisect a range whose perfgate writes this one's"):
        sessions.run(tmp_path, "HEAD", "ends")
