"""The reference revision of ``--perf-against REF``: a git worktree of REF beside the working tree.

The reference runs its own workloads and its own perfgate (its checkout comes first on PYTHONPATH); the
candidate is the checked-out commit. Both must be commits, so the summary can name them: a dirty
working tree, a shallow clone (which may lack REF or its history) and an unknown REF are errors.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from perfgate.config.cases import CaseRun


class RevisionError(Exception):
    """The revisions cannot be set side by side; the message says what to do."""


@dataclass(frozen=True)
class Revision:
    name: str
    """REF as given (``origin/main``, a tag, a hash)."""
    commit: str
    root: Path
    """Where it is checked out."""


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
    An entry outside the repository is the same file for both revisions."""
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
