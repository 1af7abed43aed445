"""perfgate.git: every stage's questions to the checkout end, with one error that says which command failed."""

from __future__ import annotations

import os
import subprocess

import pytest

from perfgate.git import GitError, branch, git, has_changes
from perfgate.launch.hardware import git_commit


@pytest.fixture
def stuck_git(tmp_path, monkeypatch):
    """A git that never answers, as one waiting on a credential prompt or a held lock does."""
    fake = tmp_path / "bin" / "git"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return fake


def test_a_git_that_does_not_answer_is_an_error_naming_the_command_and_the_wait(stuck_git, tmp_path):
    with pytest.raises(GitError, match=r"git rev-parse HEAD did not answer within 1 s in "):
        git(tmp_path, "rev-parse", "HEAD", timeout=1)


def test_outside_a_checkout_provenance_is_unknown_and_there_is_no_branch(tmp_path, monkeypatch):
    for name in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BRANCH_NAME"):
        monkeypatch.delenv(name, raising=False)
    assert (git_commit(tmp_path), branch(tmp_path)) == ("unknown", None)


def test_a_missing_git_and_a_failing_command_say_what_happened(tmp_path, monkeypatch):
    with pytest.raises(GitError, match="not a git repository"):
        git(tmp_path, "rev-parse", "HEAD")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(GitError, match=r"git status could not run in .*No such file"):
        git(tmp_path, "status")


def test_changes_count_tracked_files_only(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "tracked").write_text("1")
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"],
                   check=True)
    (tmp_path / "results.json").write_text("{}")
    assert not has_changes(tmp_path)
    (tmp_path / "tracked").write_text("2")
    assert has_changes(tmp_path)
    assert git_commit(tmp_path).endswith("-dirty")
