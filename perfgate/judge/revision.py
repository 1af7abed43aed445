"""The reference side of an A/B session: a git worktree of REF beside the working tree (``--perf-against REF``),
or this checkout under another Python interpreter (``--perf-against-python PATH``).

A reference revision runs its own workloads and its own perfgate (its checkout comes first on PYTHONPATH); the
candidate is the checked-out commit. Both must be commits, so the summary can name them: a dirty
working tree, a shallow clone (which may lack REF or its history) and an unknown REF are errors. A reference
environment runs the same checkout, the same perfgate and the same workloads with another interpreter, and both
sides are named by what their environments hold (launch/environment.py).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.config.cases import CaseRun
from perfgate.git import GitError, check_comparable, git
from perfgate.launch import environment
from perfgate.launch.plan import import_env


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
    except GitError:
        commit = "-"
    return Revision(python, commit, root, python, environment)


def commits(root: Path, ref: str) -> tuple[str, str]:
    """(REF's commit, the working tree's commit), after checking the checkout can be compared at all."""
    try:
        check_comparable(root, "--perf-against", "--perf-against compares commits")
    except GitError as exc:
        raise RevisionError(str(exc)) from None
    try:
        reference = git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GitError:
        raise RevisionError(f"--perf-against {ref}: no such revision here (git rev-parse {ref} fails; "
                            "fetch it, or name a branch, tag or commit)") from None
    return reference, head(root)


def head(root: Path) -> str:
    try:
        return git(root, "rev-parse", "HEAD")
    except GitError as exc:
        raise RevisionError(str(exc)) from None


def check_out(root: Path, ref: str, commit: str, into: Path) -> Revision:
    try:
        git(root, "worktree", "add", "--detach", str(into), commit)
    except GitError as exc:
        raise RevisionError(f"--perf-against {ref} could not be checked out beside the working tree ({into}): {exc}. "
                            "Fix what git names there (free disk, TMPDIR writable, a damaged .git/worktrees), then "
                            "run again") from None
    return Revision(ref, commit, into)


def remove(root: Path, revision: Revision) -> None:
    try:
        git(root, "worktree", "remove", "--force", str(revision.root))
    except GitError as exc:
        raise RevisionError(f"the worktree of {revision.name} at {revision.root} was not removed by git: {exc}; its "
                            "directory is deleted, so run `git worktree prune` for git to forget it") from None


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


class ReferenceSide:
    """A session's A/B reference: ``--perf-against REF`` (checked out beside the working tree at the first case that
    needs it, removed by ``close``) or ``--perf-against-python PATH`` (both interpreters probed at once, so a
    reference that cannot run is a usage error before any case). RevisionError says what is wrong."""

    def __init__(self, root: Path, against: str | None, against_python: str | None) -> None:
        self.root = root
        self.against = against
        self._revision: Revision | None = None
        self.environment: dict[str, Any] | None = None
        """What this session's interpreter holds, under --perf-against-python (the reference's is the revision's)."""
        if against:
            self.commits = commits(root, against)
            """(the reference's commit, the working tree's)."""
        else:
            env = {**os.environ, **import_env(root)}
            try:
                other = environment.probe(against_python, env)
                self.environment = environment.probe(sys.executable, env)
            except environment.EnvironmentProbeError as exc:
                raise RevisionError(f"--perf-against-python {exc}") from None
            self._revision = other_python(root, against_python, other)
            self.commits = (self._revision.commit, self._revision.commit)

    def revision(self) -> Revision:
        if self._revision is None:
            into = Path(tempfile.mkdtemp(prefix="perfgate-against-")) / "tree"
            try:
                self._revision = check_out(self.root, self.against, self.commits[0], into)
            except RevisionError:
                shutil.rmtree(into.parent, ignore_errors=True)
                raise
        return self._revision

    def close(self) -> None:
        if self._revision is not None and self._revision.python is None:
            try:
                remove(self.root, self._revision)
            finally:
                shutil.rmtree(self._revision.root.parent, ignore_errors=True)
