"""How long does `perfgate bisect` take, against its bound of ceil(log2 n) + 2 A/B verdicts?

    python benchmarks/bisect_time.py                 # 16 commits, the 9th doubles the step
    python benchmarks/bisect_time.py --commits 16 --culprit 5 -- --perf-repeats 3

Builds a git repository in a scratch directory: GOOD, then ``--commits`` commits, one of which makes the case
twice as slow. The case is the tiny OpenCLIP's CPU flavour (``workloads/openclip_train.py``, 2 gloo ranks),
started by the repository's own ``train.py``; from the slow commit on, ``train.py`` passes ``--inject-slowdown 1``,
so each step does twice the CPU work (the plant). The change is in the repository's code, not in the case's
arguments: an A/B reference runs its own code with the candidate's case definitions.
Then runs ``perfgate bisect`` over the range and prints the verdicts taken, the bound, whether the culprit was
named, and the total time, as a Markdown row.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITE = """
from perfgate import Case, Flavour, parametrize

TINY = {"model": "perfgate-ViT-tiny", "device": "cpu", "batch-size": 32, "workers": 0, "precision": "fp32"}
CASES = [Case("openclip", "tiny", ("train.py",), cpu=Flavour(TINY, steps=30, warmup=5, timeout_s=300))]


@parametrize(CASES)
def test_case(perfgate, case):
    perfgate.check(case)
"""


TRAIN = """
import runpy, sys
WORKLOAD = {workload!r}
SLOW = {slow}
sys.path.insert(0, WORKLOAD.rsplit("/", 1)[0])
sys.argv = [WORKLOAD, *sys.argv[1:], *(["--inject-slowdown", "1"] if SLOW else [])]
runpy.run_path(WORKLOAD, run_name="__main__")
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def build(repo: Path, commits: int, culprit: int) -> list[str]:
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "bench@example.com")
    git(repo, "config", "user.name", "bench")
    workload = str(REPO / "workloads" / "openclip_train.py")
    shas = []
    for number in range(commits + 1):
        (repo / "train.py").write_text(TRAIN.format(workload=workload, slow=number >= culprit))
        (repo / "test_suite.py").write_text(SUITE)
        (repo / "history.txt").write_text(f"commit {number}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "GOOD" if number == 0 else f"change {number}"
            + (": twice as slow" if number == culprit else ""))
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=16)
    parser.add_argument("--culprit", type=int, default=9, help="which commit after GOOD doubles the step")
    parser.add_argument("pytest_args", nargs="*", help="after --: options for every verdict's pytest session")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfgate-bisect-bench-") as scratch:
        repo = Path(scratch) / "repo"
        shas = build(repo, args.commits, args.culprit)
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "perfgate.cli", "bisect", shas[0], shas[-1], *args.pytest_args,
                               "--bisect-logs", str(Path(scratch) / "logs")], cwd=repo, capture_output=True, text=True)
        seconds = time.monotonic() - began
    print(done.stdout[-6000:], done.stderr[-3000:], sep="\n")
    verdicts = len(re.findall(r"perfgate bisect: verdict \d+:", done.stdout))
    named = f"first bad commit {shas[args.culprit]}" in done.stdout
    bound = math.ceil(math.log2(args.commits)) + 2
    print("| commits | culprit | verdicts | bound ceil(log2 n) + 2 | named | time | exit |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {args.commits} | {args.culprit} | {verdicts} | {bound} | {'yes' if named else 'NO'} | {seconds:.0f} s "
          f"({seconds / max(verdicts, 1):.0f} s per verdict) | {done.returncode} |")
    return 0 if named else 1


if __name__ == "__main__":
    sys.exit(main())
