"""The reference side of an A/B session: a git worktree of REF beside the working tree (``--perf-against REF``),
or this checkout under another Python interpreter (``--perf-against-python PATH``).

A reference revision runs its own workloads and its own perfgate (its checkout comes first on PYTHONPATH); the
candidate is the checked-out commit. Both must be commits, so the summary can name them: a dirty
working tree, a shallow clone (which may lack REF or its history) and an unknown REF are errors. A reference
environment runs the same checkout, the same perfgate and the same workloads with another interpreter, and both
sides are named by what their environments hold (launch/environment.py).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.config.cases import CaseRun


class RevisionError(Exception):
    """The revisions cannot be set side by side; the message says what to do."""


@dataclass(frozen=True)
class Revision:
    name: str
    """REF as given (``origin/main``, a tag, a hash), or the reference interpreter's path."""
    commit: str
    root: Path
    """Where it is checked out."""
    python: str | None = None
    """The reference interpreter (--perf-against-python); None: the session's own."""
    environment: dict[str, Any] | None = None
    """What the reference interpreter holds (launch.environment.describe), under --perf-against-python."""


def other_python(root: Path, python: str, environment: dict[str, Any]) -> Revision:
    """This checkout under another interpreter; its commit is the working tree's, or ``-`` outside git."""
    try:
        commit = git(root, "rev-parse", "HEAD")
    except (RevisionError, OSError):
        commit = "-"
    return Revision(python, commit, root, python, environment)


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RevisionError(done.stderr.strip() or f"git {' '.join(args)} exited {done.returncode}")
    return done.stdout.strip()


def commits(root: Path, ref: str) -> tuple[str, str]:
    """(REF's commit, the working tree's commit), after checking the checkout can be compared at all."""
    try:
        git(root, "rev-parse", "--is-inside-work-tree")
    except (RevisionError, OSError):
        raise RevisionError(f"--perf-against needs a git checkout, and {root} is not one") from None
    if git(root, "rev-parse", "--is-shallow-repository") == "true":
        raise RevisionError("--perf-against needs the history, and this is a shallow clone: "
                            "git fetch --unshallow (CI: actions/checkout with fetch-depth: 0)")
    if git(root, "status", "--porcelain", "--untracked-files=no"):
        raise RevisionError("--perf-against compares commits, and the working tree has uncommitted changes: "
                            "commit or stash them")
    try:
        reference = git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except RevisionError:
        raise RevisionError(f"--perf-against {ref}: no such revision here (git rev-parse {ref} fails; "
                            "fetch it, or name a branch, tag or commit)") from None
    return reference, git(root, "rev-parse", "HEAD")


def check_out(root: Path, ref: str, commit: str, into: Path) -> Revision:
    git(root, "worktree", "add", "--detach", str(into), commit)
    return Revision(ref, commit, into)


def remove(root: Path, revision: Revision) -> None:
    git(root, "worktree", "remove", "--force", str(revision.root))


def entry_in(revision: Revision, run: CaseRun, root: Path) -> Path | None:
    """The case's workload file in the reference checkout; None when that revision has none (a new case).
    An entry outside the repository is the same file for both revisions, and so is every entry for another
    interpreter on this checkout."""
    if revision.python is not None:
        return root / run.case.entry[0]
    entry = run.case.entry
    if entry[0] == "-m":
        relative = Path(*entry[1].split("."))
        candidates = [revision.root / relative.with_suffix(".py"), revision.root / relative / "__main__.py"]
        return next((path for path in candidates if path.exists()), None)
    path = (root / entry[0]).resolve()
    try:
        inside = path.relative_to(root.resolve())
    except ValueError:
        return path
    return revision.root / inside if (revision.root / inside).exists() else None
