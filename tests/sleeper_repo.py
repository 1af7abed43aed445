"""The A/B tests' toy repository: a case whose steps are sleeps (so only the wall clock sees them), its suite, and
git helpers, shared by the A/B, bisect, environment A/B and trend tests. Its ranks record no scalars, so they start
without importing torch (StepRecorder imports it only for scalars or CUDA): a launch of it costs little more than
torchrun's own start."""

import json
import subprocess

SLEEPER = """
import argparse, pathlib, time
from perfgate import StepRecorder

STEP_S = {step_s}
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
parser.add_argument("--records", type=pathlib.Path)
parser.add_argument("--inject-slowdown", type=float, default=0.0)
args = parser.parse_args()
recorder = StepRecorder(args.records, device_type="cpu")
recorder.write("start", world_size=1, global_batch=1, device="cpu")
recorder.begin()
for step in range(args.steps):
    recorder.data_ready()
    time.sleep(STEP_S * (1 + args.inject_slowdown))
    recorder.end_step(step, samples=1, data_s=0.0, lr=None, scalars={{}})
recorder.close(peak_memory_bytes=0)
"""
SUITE = """
from perfgate import Case, Flavour, parametrize

# A loop of sleeps: only the wall clock sees its steps, so only the wall clock is gated.
FLAVOUR = Flavour({{}}, steps=8, warmup=2, tolerance=0.2, ranks_per_node=1, timeout_s=120,
                 gated=("fastest_step_samples_per_second",))
CASES = [Case("sleeper", "sleep", ("sleeper.py",), cpu=FLAVOUR)]
{extra}
@parametrize(CASES)
def test_case(perfgate, case):
    perfgate.check(case)
"""
NEW_CASE = 'CASES.append(Case("newer", "new", ("newer.py",), cpu=FLAVOUR))\n'
ARGS = ["-p", "no:cacheprovider", "--perf-repeats", "2", "--perf-max-repeats", "4", "-rs"]


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def worktrees(repo):
    """The repository's worktrees, the main one included; a removed checkout would still be listed (prunable)."""
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def result_of(pytester, case):
    return json.loads(max(pytester.path.glob(f"**/test_case_{case}_cpu_0/result.json"),
                          key=lambda p: p.stat().st_mtime).read_text())


def init(path):
    """A git repository at ``path`` with a committer, as CI has one."""
    git(path, "init", "-q")
    git(path, "config", "user.email", "ci@example.com")
    git(path, "config", "user.name", "ci")
