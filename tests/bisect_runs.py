"""perfgate bisect run as a user runs it, in a process of its own, over a repository built here; and what its output
says (its verdicts and the comparisons they measured)."""

import json
import os
import subprocess
import sys

from multinode import TOY_DDP
from sleeper_repo import git, init, worktrees

from conftest import leftover_processes

# The toy DDP job on two nodes, gated on the wall clock only (a longer sleep is no more CPU work) within 20 %.
TWO_NODE_SUITE = """
from perfgate import Case, Flavour, parametrize

CASES = [Case("toy", "ddp", ("toy_ddp.py",), cpu=Flavour({}, steps=10, warmup=2, tolerance=0.2, ranks_per_node=1,
                                                         timeout_s=120, gated=("fastest_step_samples_per_second",)))]

@parametrize(CASES)
def test_toy(perfgate, case):
    perfgate.check(case)
"""


def scratch_env(repo):
    """The bisect's scratch directory (its worktrees, the sessions' temp dirs) under this test's directory."""
    (repo.parent / "tmp").mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(repo.parent / "tmp")}


def verdicts(output):
    return output.count("perfgate bisect: verdict ")


def comparisons(output):
    """The distinct comparisons the verdicts measured (``COMMIT (subject) against GOOD``): a commit left unknown
    after a few pairs is measured again with more, the same comparison, as the bisect's docs say."""
    return {line.split(": ", 2)[2] for line in output.splitlines() if line.startswith("perfgate bisect: verdict ")}


def check_bisect_across_two_nodes(tmp_path, launcher_options, launched_by):
    """perfgate bisect through a multi-node launcher: GOOD, then BAD, a commit that doubles the toy DDP job's sleep on
    every node. Its one verdict is an A/B session on both nodes of BAD's worktree against GOOD, and BAD is named (the
    search itself is tested with fake sessions in test_bisect); nothing is left behind."""
    repo = tmp_path / "repo"
    repo.mkdir()
    init(repo)
    (repo / "test_suite.py").write_text(TWO_NODE_SUITE)
    shas = []
    for message, sleep_s in (("GOOD", 0.05), ("BAD: twice the sleep", 0.1)):
        (repo / "toy_ddp.py").write_text(TOY_DDP.replace("time.sleep(0.05)", f"time.sleep({sleep_s})"))
        git(repo, "add", ".")
        git(repo, "commit", "-qm", message)
        shas.append(git(repo, "rev-parse", "HEAD"))
    done = subprocess.run([sys.executable, "-m", "perfgate.cli", "bisect", *shas, *launcher_options,
                           "-k", "ddp", "--perf-repeats", "2", "--perf-max-repeats", "4",
                           "--bisect-logs", str(tmp_path / "logs")],
                          cwd=repo, capture_output=True, text=True, timeout=900, env=scratch_env(repo))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert f"first bad commit {shas[1]}" in output and "subject: BAD: twice the sleep" in output
    assert verdicts(output) == 1, output
    results = [json.loads(path.read_text()) for path in (tmp_path / "logs").glob("**/result.json")]
    assert len(results) == 1
    assert all(result["world_size"] == 2 and result["command"].startswith(launched_by) for result in results)
    assert worktrees(repo) == [f"worktree {repo}"]
    assert leftover_processes(str(tmp_path)) == []
