"""Each case's answer of a bisect, kept in the results database that the sessions wrote to (``--perf-history``
among the pytest options), so that the dashboard shows the commit a bisect named at the change point it explains.
The database needs ``perfgate[trend]``, which a bisect without ``--perf-history`` does not."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from perfgate.bisect import report as bisection
from perfgate.bisect.search import CaseSearch

OPTION = "--perf-history"


def history_url(pytest_args: Sequence[str]) -> str | None:
    """The last ``--perf-history URL`` (or ``--perf-history=URL``) among the options the sessions get, as pytest
    reads them (one set through addopts or an ini file is not seen: give it on the command line)."""
    url = None
    for index, arg in enumerate(pytest_args):
        if arg == OPTION and index + 1 < len(pytest_args):
            url = pytest_args[index + 1]
        elif arg.startswith(OPTION + "="):
            url = arg.split("=", 1)[1]
    return url


def anchored(pytest_args: Sequence[str], here: Path) -> list[str]:
    """The options with a ``--perf-history`` path made absolute from ``here``, as one argument: each session runs in
    its own worktree, where a relative path would be a database of its own, gone with the worktree; and pytest takes
    a separate argument naming an existing file for a test path when it picks its rootdir."""
    anchored_args, values = [], iter(pytest_args)
    for arg in values:
        if arg == OPTION:
            arg = f"{OPTION}={next(values, '')}"
        if arg.startswith(OPTION + "=") and "://" not in arg:
            arg = f"{OPTION}={here / arg.split('=', 1)[1]}"
        anchored_args.append(arg)
    return anchored_args


def keep(url: str, searches: Sequence[CaseSearch]) -> str:
    """Writes each searched case's answer; returns the line that says where, or why they were not kept: they were
    printed already, so nothing else is lost and the bisect's exit status stands."""
    try:
        from perfgate.trend.database import Bisection, DatabaseError, ResultsDatabase
    except ImportError as exc:
        return f"the answers were not kept: {exc} (pip install 'perfgate[trend]')"
    try:
        database = ResultsDatabase(url)
    except (DatabaseError, OSError, ImportError) as exc:
        return f"the answers were not kept: {exc}"
    try:
        for case in searches:
            commits = case.commits
            database.record_bisection(Bisection(
                case.case, case.hardware_class, commits[0].sha, commits[-1].sha,
                commits[case.culprit].sha if case.culprit is not None else None,
                [commits[i].sha for i in case.search.suspects()], "\n".join(bisection.answer(*case.report())).strip()))
    except DatabaseError as exc:
        return f"the answers were not kept: {exc}"
    finally:
        database.close()
    return f"kept the answer(s) in {database.shown}"
