"""--perf-against: a git repository whose second commit makes the workload twice as slow, judged A/B."""

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from background_load import busy_processes
from pace import python_start_s
from sleeper_repo import ARGS, NEW_CASE, SLEEPER, SUITE, git, init, result_of, worktrees

from conftest import REPO, leftover_processes
from perfgate.judge import revision
from perfgate.judge.revision import RevisionError
from perfgate.launch.cores import duet_cores
from perfgate.records.steps import read_records

@pytest.fixture
def repo(pytester):
    """Two pairs first, up to four. Commit 1: 20 ms steps. Commit 2 (HEAD): 40 ms steps, and a new case."""
    init(pytester.path)
    pytester.makepyfile(sleeper=SLEEPER.format(step_s=0.02), test_suite=SUITE.format(extra=""))
    git(pytester.path, "add", ".")
    git(pytester.path, "commit", "-qm", "fast")
    pytester.makepyfile(sleeper=SLEEPER.format(step_s=0.04), newer=SLEEPER.format(step_s=0.02),
                        test_suite=SUITE.format(extra=NEW_CASE))
    git(pytester.path, "add", ".")
    git(pytester.path, "commit", "-qm", "twice as slow, and a new case")
    return pytester


def run(pytester, *args):
    return pytester.runpytest_subprocess(*ARGS, *args, timeout=300)


IN_TURN = "--perf-ab-in-turn"
"""The sleeper's 6 measured steps last 120 ms, less than two launches' start may differ by: a duet pair (the default
for a CPU flavour on the local launcher) would share too few of them, so the tests of pairs in turn ask for them."""


@pytest.mark.launches
def test_the_same_code_on_both_sides_passes_and_the_summary_names_both_commits(repo):
    head = git(repo.path, "rev-parse", "HEAD")
    result = run(repo, "--perf-against", "HEAD", "-k", "sleep", IN_TURN)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*hardware class cpu-*, {head[:12]} vs HEAD ({head[:12]})*",
                                 "*sleeper-sleep-cpu*fastest_step_samples_per_second*pass*",
                                 "A/B: pairs of launches (reference, candidate) and the time to each verdict:",
                                 "sleeper-sleep-cpu*2*0:*"])
    stored = result_of(repo, "sleep")
    assert stored["candidate_commit"] == stored["reference"]["commit"] == head
    assert len(stored["per_run"]) == len(stored["reference"]["per_run"]) == 2
    assert stored["time_to_verdict_s"] > 0
    assert not list(repo.path.glob("b*")), "no stored baseline is written or needed"
    assert worktrees(repo.path) == [f"worktree {repo.path}"], "the reference's checkout is removed at the end"


@pytest.mark.parametrize("duet", [[IN_TURN], []], ids=["in-turn", "duet"])
@pytest.mark.launches
def test_sigterm_during_a_reference_launch_ends_the_session_and_removes_the_reference_checkout(repo, tmp_path, duet):
    """CI cancels a job with SIGTERM; the reference's worktree must not outlive the session, nor, under duet, the
    launch running beside the reference's in another thread."""
    repo.makepyfile(sleeper=SLEEPER.format(step_s=0.5))
    git(repo.path, "commit", "-qam", "slow enough to be interrupted")
    session = subprocess.Popen([*repo._getpytestargs(), *ARGS, "--perf-against", "HEAD", "-k", "sleep", *duet,
                                "--basetemp", str(tmp_path / "bt")], cwd=repo.path,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "bt").glob("*/reference/run0/*.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(worktrees(repo.path)) == 2, "the reference is checked out while its run goes on"
    session.send_signal(signal.SIGTERM)
    output, _ = session.communicate(timeout=120)
    assert session.returncode != 0
    assert "SIGTERM received" in output
    assert worktrees(repo.path) == [f"worktree {repo.path}"], output[-2000:]
    assert leftover_processes(str(tmp_path / "bt")) == []


def measured_span(run_dir):
    """The wall-clock span of a run's measured steps (after the 2 warm-up steps), from its step records."""
    steps = read_records(run_dir / "steps.jsonl").steps[2:]
    return steps[0].t - steps[0].step_s, steps[-1].t


@pytest.mark.launches
def test_under_duet_both_sides_of_each_pair_measure_at_the_same_time(repo):
    """Duet, the default for a CPU flavour on the local launcher: a slow spell of the host must fall on both sides, so
    their measured steps must coincide. The two launches may start as far apart as a torch import takes here: 6
    measured steps span three of those."""
    repo.makepyfile(sleeper=SLEEPER.format(step_s=max(0.5, python_start_s() / 2)))
    git(repo.path, "commit", "-qam", "steps long enough to overlap")
    result = run(repo, "--perf-against", "HEAD", "-k", "sleep", "--perf-max-repeats", "2", "--perf-steps", "8")
    result.assert_outcomes(passed=1)
    assert result_of(repo, "sleep")["duet"] is True
    candidate_dir = max(repo.path.glob("**/test_case_sleep_cpu_0"), key=lambda p: p.stat().st_mtime)
    for pair in range(2):
        (a_start, a_end), (b_start, b_end) = (measured_span(candidate_dir / side / f"run{pair}")
                                              for side in ("reference", "."))
        overlap = min(a_end, b_end) - max(a_start, b_start)
        assert overlap > 0.5 * min(a_end - a_start, b_end - b_start), (pair, a_start, a_end, b_start, b_end)
    # Each side's one rank pinned by the launcher: on its own core where the host has two, else on the same one.
    expected = {tuple(side) for side in duet_cores(sorted(os.sched_getaffinity(0)), 1)}
    stored = result_of(repo, "sleep")
    for pair, (reference, candidate) in enumerate(zip(stored["reference"]["per_run"], stored["per_run"])):
        assert {tuple(launch["facts"]["end"]["cores"]) for launch in (reference, candidate)} == expected
        # Each side measured on its steps inside the span both ran in.
        sides = [read_records(candidate_dir / side / f"run{pair}" / "steps.jsonl").steps
                 for side in ("reference", ".")]
        began = max(steps[0].t - steps[0].step_s for steps in sides)
        ended = min(steps[-1].t for steps in sides)
        for steps, launch in zip(sides, (reference, candidate)):
            inside = [s for s in steps[2:] if s.t - s.step_s >= began and s.t <= ended]
            assert launch["metrics"]["measured_steps"] == len(inside) >= 2


@pytest.mark.launches
def test_under_duet_a_side_that_crashes_stops_the_other_and_is_what_the_case_reports(repo):
    repo.makepyfile(sleeper="import sys\nsys.exit('planted crash of the reference')\n")
    git(repo.path, "commit", "-qam", "a reference that crashes")
    repo.makepyfile(sleeper=SLEEPER.format(step_s=3.0))
    git(repo.path, "commit", "-qam", "a candidate that would take 24 s")
    result = run(repo, "--perf-against", "HEAD~1", "-k", "sleep", "--perf-ab-duet")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*sleeper-sleep-cpu @ HEAD~1: crashed in run 1*"])
    candidate = max(repo.path.glob("**/test_case_sleep_cpu_0/run0"), key=lambda p: p.stat().st_mtime)
    records = candidate / "steps.jsonl"
    assert not records.exists() or read_records(records).end is None, "the candidate was stopped before it finished"
    assert leftover_processes(str(repo.path)) == []


@pytest.mark.launches
def test_a_commit_twice_as_slow_fails_against_its_parent(repo):
    result = run(repo, "--perf-against", "HEAD~1", "-k", "sleep", IN_TURN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*sleeper-sleep-cpu: performance regression on cpu-*",
                                 "*baseline: HEAD~1 (*), measured beside it in *reference"])


@pytest.mark.launches
def test_a_planted_slowdown_goes_into_the_candidate_only(repo):
    result = run(repo, "--perf-against", "HEAD", "-k", "sleep", "--perf-inject-slowdown", "1", IN_TURN)
    result.assert_outcomes(failed=1)
    stored = result_of(repo, "sleep")
    assert "--inject-slowdown" not in stored["reference"]["command"]
    assert "--inject-slowdown 1.0" in stored["command"]


@pytest.mark.launches
def test_a_case_the_reference_lacks_is_skipped_as_new(repo):
    result = run(repo, "--perf-against", "HEAD~1", "-k", "new")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*newer-new-cpu: a new case: HEAD~1 has no newer.py, so there is nothing to "
                                 "compare it against*"])


def test_unknown_revisions_dirty_trees_and_shallow_clones_are_refused_saying_what_to_do(repo, tmp_path):
    with pytest.raises(RevisionError, match="--perf-against no-such-branch: no such revision here"):
        revision.commits(repo.path, "no-such-branch")
    (repo.path / "sleeper.py").write_text("# changed\n")
    with pytest.raises(RevisionError, match="the working tree has uncommitted changes: commit or stash them"):
        revision.commits(repo.path, "HEAD")
    git(repo.path, "checkout", "--", "sleeper.py")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo.path}", str(shallow)], check=True)
    with pytest.raises(RevisionError, match="this is a shallow clone: git fetch --unshallow"):
        revision.commits(shallow, "HEAD")
    copy = tmp_path / "copy"
    copy.mkdir()
    with pytest.raises(RevisionError, match=rf"--perf-against needs a git checkout, and {copy} is not one: run it in a "
                                            r"clone \(a copy or an archive of the files has no commits to compare\)"):
        revision.commits(copy, "HEAD")


def test_a_reference_worktree_git_cannot_remove_is_named_with_how_to_forget_it(repo):
    """Its checkout lost its .git file (a clean-up that went too far): the session's end warns, naming the worktree,
    and the verdicts stand."""
    side = revision.ReferenceSide(repo.path, "HEAD~1", None)
    tree = side.revision().root
    (tree / ".git").unlink()
    with pytest.raises(RevisionError, match=rf"the worktree of HEAD~1 at {tree} was not removed by git: .*; its "
                                            r"directory is deleted, so run `git worktree prune` for git to forget it"):
        side.close()
    assert not tree.parent.exists()
    git(repo.path, "worktree", "prune")
    assert worktrees(repo.path) == [f"worktree {repo.path}"], "as the message says"


def test_a_refused_reference_is_a_usage_error_before_any_case_runs(repo):
    unknown = repo.runpytest_inprocess(*ARGS, "--perf-against", "no-such-branch")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["*perfgate: --perf-against no-such-branch: no such revision here*"])
    assert worktrees(repo.path) == [f"worktree {repo.path}"]


def test_a_reference_git_cannot_check_out_fails_the_case_saying_what_git_said_and_what_to_fix(repo):
    """git worktree add needs .git/worktrees; where that is not a directory (a damaged repository) the checkout fails
    at the first case, which fails saying so: not a traceback."""
    (repo.path / ".git" / "worktrees").write_text("not a directory\n")
    before = set(Path(tempfile.gettempdir()).glob("perfgate-against-*"))
    result = repo.runpytest_inprocess(*ARGS, "--perf-against", "HEAD~1", "-k", "sleep")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*sleeper-sleep-cpu: --perf-against HEAD~1 could not be checked out beside the "
                                 "working tree (*tree): *", "*Fix what git names there (free disk, TMPDIR writable, a "
                                 "damaged .git/worktrees), then run again*"])
    assert "Traceback" not in result.stdout.str()
    assert set(Path(tempfile.gettempdir()).glob("perfgate-against-*")) <= before, "no checkout directory is left"


@pytest.mark.launches
def test_the_unchanged_build_passes_a_b_with_the_defaults_beside_a_busy_process(pytester):
    """A loaded CI runner: a small real 3D U-Net on 2 gloo ranks, A/B of HEAD against HEAD with the default pairing
    (duet, both sides at once, ranks pinned alike), beside a process that keeps a core busy; the pairs must not read
    the load as a regression. With a pair's 4 ranks, 5 processes share the 2 cores (more beside the other xdist
    worker's tests); a second busy process would add nothing the pairs meet differently, only take its CPU from the
    rest of make test.

    In turn, a pair cancels a drift but not a neighbour whose launches start and stop with ours, and unchanged builds
    can then fail (docs/measurements.md#why-the-rules-are-what-they-are). A duet pair's sides meet the same load at
    once, so this test needs no machine of its own.

    The case gates the window's throughput, measured on the span both sides ran in, with a 20 % tolerance: the load
    takes a third of the throughput (the rank on the busy core gets a third of it, not half, and DDP waits for it),
    and the test is about the verdict's footing, not its resolution (benchmarks/
    detection_power.py measures that: docs/measurements.md)."""
    workload = REPO / "workloads" / "unet3d_train.py"
    pytester.makepyfile(test_suite=f"""
from perfgate import Case, Flavour, parametrize

SMALL = {{"device": "cpu", "base-channels": 4, "batch-size": 1, "volume": 64, "loader": "synthetic",
          "workers": 0}}
CASES = [Case("unet3d", "small", ({str(workload)!r},), cpu=Flavour(SMALL, steps=16, warmup=2, timeout_s=240),
              gated=("samples_per_second",))]

@parametrize(CASES)
def test_case(perfgate, case):
    perfgate.check(case)
""")
    init(pytester.path)
    git(pytester.path, "add", ".")
    git(pytester.path, "commit", "-qm", "suite")
    with busy_processes(1, seconds=600):
        result = pytester.runpytest_subprocess(*ARGS, "--perf-repeats", "3", "--perf-against", "HEAD",
                                               "--perf-ab-tolerance", "0.2", timeout=600)
    result.assert_outcomes(passed=1)
    stored = result_of(pytester, "small")
    assert (stored["verdict"], stored["duet"], len(stored["per_run"])) == ("pass", True, 3)

