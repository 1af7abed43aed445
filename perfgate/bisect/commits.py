"""The commits a bisect walks, and the worktrees it measures them in.

The range is the first-parent line from GOOD to BAD (``git rev-list --first-parent``), as a merged branch
is one change to whoever gates main. Each commit measured gets a detached worktree in the bisect's scratch
directory; every worktree there is removed when the bisect ends, however it ends, and ``git worktree prune``
forgets any that a killed process left behind.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from perfgate.git import GitError, check_comparable, git

FIELD = "\x1f"


class BisectUsageError(Exception):
    """The range cannot be bisected as given; the message says what to do."""


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    author: str
    date: str

    @property
    def short(self) -> str:
        return self.sha[:10]


def resolve(root: Path, ref: str) -> str:
    try:
        return git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GitError:
        raise BisectUsageError(f"{ref}: no such revision here (git rev-parse {ref} fails; fetch it, or name a branch, "
                               "tag or commit)") from None


def first_parent_range(root: Path, good: str, bad: str) -> list[Commit]:
    """GOOD, then every first-parent commit after it up to BAD, oldest first; usage errors for a checkout that is not
    a git repository, a dirty tree, an unknown ref, and GOOD that is not an ancestor of BAD."""
    try:
        check_comparable(root, "perfgate bisect", "each commit is measured in a worktree of its own, and the cases "
                         "come from the commits")
    except GitError as exc:
        raise BisectUsageError(str(exc)) from None
    good_sha, bad_sha = resolve(root, good), resolve(root, bad)
    if good_sha == bad_sha:
        raise BisectUsageError(f"GOOD {good} and BAD {bad} are the same commit: nothing to bisect")
    try:
        git(root, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except GitError:
        raise BisectUsageError(f"GOOD {good} is not an ancestor of BAD {bad}: give the older commit first") from None
    listed = git(root, "log", "--first-parent", "--reverse", f"--format=%H{FIELD}%s{FIELD}%an{FIELD}%aI",
                 f"{good_sha}..{bad_sha}")
    after = [Commit(*line.split(FIELD, 3)) for line in listed.splitlines() if line]
    if not after or after[-1].sha != bad_sha:
        raise BisectUsageError(f"BAD {bad} is not on the first-parent line from GOOD {good}")
    if good_sha not in {after[0].sha, *git(root, "rev-parse", f"{after[0].sha}^@").split()}:
        raise BisectUsageError(f"GOOD {good} is not on BAD {bad}'s first-parent line (it joined it through a merge): "
                               "name a commit of that line")
    return [commit_info(root, good_sha), *after]


def commit_info(root: Path, sha: str) -> Commit:
    line = git(root, "show", "-s", f"--format=%H{FIELD}%s{FIELD}%an{FIELD}%aI", sha)
    return Commit(*line.split(FIELD, 3))


class Worktrees:
    """Detached worktrees of the repository at ``root``, in ``scratch``; ``close`` removes them all."""

    def __init__(self, root: Path, scratch: Path) -> None:
        self.root = root
        self.scratch = scratch.resolve()
        self.made: dict[str, Path] = {}

    def get(self, commit: Commit) -> Path:
        if commit.sha not in self.made:
            path = self.scratch / f"tree-{commit.short}"
            git(self.root, "worktree", "add", "--detach", str(path), commit.sha)
            self.made[commit.sha] = path
        return self.made[commit.sha]

    def close(self) -> None:
        """Removes every worktree under the scratch directory (also those an A/B session made there and could not
        remove: it was killed), then the directory."""
        listed = git(self.root, "worktree", "list", "--porcelain")
        for line in listed.splitlines():
            if line.startswith("worktree ") and Path(line[len("worktree "):]).is_relative_to(self.scratch):
                try:
                    git(self.root, "worktree", "remove", "--force", line[len("worktree "):])
                except GitError:
                    pass
        shutil.rmtree(self.scratch, ignore_errors=True)
        git(self.root, "worktree", "prune")
        self.made.clear()
