"""Asking the checkout something: one way to run git for every stage, each call bounded in time.

A git that hangs (a credential prompt, a lock a killed process left, a slow network file system) must not hang the
session, so each call has a timeout; a failure, a timeout and a missing git are one ``GitError`` naming the command.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

TIMEOUT_S = 120.0
"""Long enough for ``worktree add`` of a large checkout; a quick question passes its own, shorter one."""


class GitError(Exception):
    """git failed, timed out or is missing; the message names the command and what git said."""


def git(root: Path, *args: str, timeout: float = TIMEOUT_S) -> str:
    """git's output for ``args`` in the repository at ``root``, stripped."""
    command = f"git {' '.join(args)}"
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GitError(f"{command} did not answer within {timeout:.0f} s in {root}") from None
    except OSError as exc:
        raise GitError(f"{command} could not run in {root}: {exc}") from None
    if done.returncode != 0:
        raise GitError(done.stderr.strip() or f"{command} exited {done.returncode}")
    return done.stdout.strip()


def has_changes(root: Path, timeout: float = TIMEOUT_S) -> bool:
    """Whether tracked files differ from HEAD (untracked files do not count: results, virtual environments)."""
    return bool(git(root, "status", "--porcelain", "--untracked-files=no", timeout=timeout))


def check_comparable(root: Path, who: str, why_committed: str) -> None:
    """That ``root`` is a whole git checkout (not a shallow clone) with no uncommitted changes, as ``who`` needs to
    set commits side by side; else a GitError saying what to do. ``why_committed`` ends the dirty tree's message."""
    try:
        git(root, "rev-parse", "--is-inside-work-tree")
    except GitError:
        raise GitError(f"{who} needs a git checkout, and {root} is not one: run it in a clone (a copy or an "
                       "archive of the files has no commits to compare)") from None
    if git(root, "rev-parse", "--is-shallow-repository") == "true":
        raise GitError(f"{who} needs the history, and this is a shallow clone: git fetch --unshallow (CI: "
                       "actions/checkout with fetch-depth: 0)")
    if has_changes(root):
        raise GitError(f"the working tree has uncommitted changes: commit or stash them ({why_committed})")


def branch(root: Path) -> str | None:
    """The CI system's branch name where it says one, else the checkout's."""
    for name in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BRANCH_NAME"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        name = git(root, "rev-parse", "--abbrev-ref", "HEAD", timeout=10)
    except GitError:
        return None
    return name if name != "HEAD" else None
