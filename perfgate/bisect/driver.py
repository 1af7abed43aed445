"""``perfgate bisect GOOD BAD [pytest options]``: the commit that made a case slower, found with A/B verdicts.

First BAD is judged against GOOD with the gate's own A/B (pairs up to ``--bisect-max-pairs`` while unproven).
A case that did not slow down blames nothing. Each case that did gets its own search (search.py) over the
first-parent commits between them, each midpoint an A/B verdict against the last good commit, and at the end
the first bad commit is measured against its parent unless it already was: at most ceil(log2 n) + 2 verdicts
for n commits after GOOD, when nothing is unknown or skipped.

Exit status: 0 when every case's question was answered (a culprit named, or no slowdown), 1 when one was not
(an unproven slowdown, or a culprit among skipped commits), 2 for a usage error or GOOD/BAD failing to run,
130 when interrupted (Ctrl-C, SIGTERM); worktrees and processes are gone in every case.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from perfgate.bisect import kept
from perfgate.bisect import report as bisection
from perfgate.bisect.commits import BisectUsageError, Commit, Worktrees, first_parent_range
from perfgate.bisect.search import GOOD, UNKNOWN, CaseSearch, Measured, Search, Step, classify, worse_interval
from perfgate.bisect.session import Outcome, Sessions
from perfgate.git import GitError, git
from perfgate.measure.metrics import METRICS
from perfgate.measure.progress import clock

NOT_ANSWERED, USAGE, INTERRUPTED = 1, 2, 130


class Bisect:
    def __init__(self, root: Path, commits: list[Commit], sessions: Sessions, worktrees: Worktrees,
                 max_pairs: int, say: Any = print) -> None:
        self.root = root
        self.commits = commits
        self.sessions = sessions
        self.worktrees = worktrees
        self.max_pairs = max_pairs
        self.say = say
        self.verdicts = 0
        self.tests: list[str] = []
        """Every case the first session judged: a case's search deselects the others."""

    def verdict(self, candidate: int, reference: int, extra: Sequence[str] = ()) -> Outcome:
        self.verdicts += 1
        new, old = self.commits[candidate], self.commits[reference]
        self.say(f"perfgate bisect: verdict {self.verdicts}: {new.short} ({new.subject[:50]}) against {old.short}")
        return self.sessions.run(self.worktrees.get(new), old.sha, f"{new.short}-vs-{old.short}", extra=extra)

    def measured(self, outcome: Outcome, test: str, candidate: int, reference: int) -> Measured:
        record = outcome.results.get(test)
        if record is None:
            return Measured(candidate, reference, "error", (), 0, outcome.seconds, self.commits[candidate].short)
        pairs = len((record.reference or {}).get("per_run") or [])
        return Measured(candidate, reference, record.verdict, tuple(record.metrics), pairs, outcome.seconds,
                        self.commits[candidate].short)

    def ends(self) -> tuple[list[CaseSearch], list[str], int]:
        """BAD against GOOD: the cases that slowed down (each to search), a line for each that did not, and whether
        every case was answered."""
        outcome = self.verdict(len(self.commits) - 1, 0, ["--perf-max-repeats", str(self.max_pairs)])
        if not outcome.results:
            raise BisectUsageError(f"the session of BAD against GOOD judged no case (pytest exit {outcome.exit_code}); "
                                   f"check the selection and options: see {outcome.log}")
        searches, lines, answered = [], [], True
        self.tests = sorted(outcome.results)
        for test, record in sorted(outcome.results.items()):
            measured = self.measured(outcome, test, len(self.commits) - 1, 0)
            rows = [row for row in measured.rows if row.get("verdict") == "FAIL"]
            if record.verdict == "FAIL" and rows:
                steps = [Step(row["metric"], METRICS[row["metric"]].better,
                              worse_interval(row, METRICS[row["metric"]].better)[0]) for row in rows]
                search = CaseSearch(test, record.case, record.hardware_class, steps, Search(len(self.commits)),
                                    self.commits, [measured])
                lines.append(f"{record.case}: slower between GOOD and BAD: {bisection.changes(measured.rows)}")
                searches.append(search)
            elif record.verdict in ("pass", "stale", "unresolved"):
                unproven = record.verdict == "unresolved" or any("not significant yet" in (row.get("reason") or "")
                                                                    for row in measured.rows)
                if unproven:
                    answered = False
                    in_turn = any(row.get("rule") == "in turn" for row in record.machine_drop)
                    remedy = ("they ran in turn beside a neighbour: launch the pairs at once (on the local launcher, "
                              "leave --perf-ab-in-turn out), or bisect where no other job shares the cores" if in_turn
                              else "raise --bisect-max-pairs")
                    lines.append(f"{record.case}: an unproven slowdown between GOOD and BAD after {measured.pairs} "
                                 f"pairs: {bisection.changes(measured.rows)}; {remedy}")
                else:
                    lines.append(f"{record.case}: no slowdown between GOOD and BAD: "
                                 f"{bisection.changes(measured.rows)}")
            else:
                raise BisectUsageError(f"{record.case}: GOOD or BAD itself does not run ({record.verdict}): "
                                       f"{record.message.splitlines()[0] if record.message else ''}"
                                       f" (log: {outcome.log})")
        for line in lines:
            self.say(f"perfgate bisect: {line}")
        return searches, lines, answered

    def search(self, case: CaseSearch, others: Sequence[str]) -> None:
        """Narrows one case's range to its first bad commit."""
        deselect = [arg for test in others for arg in ("--deselect", test)]
        tolerance = min(step.midline for step in case.steps)
        narrowed = [*deselect, "--perf-ab-tolerance", f"{tolerance:.4f}"]
        search = case.search
        while (index := search.next_commit()) is not None:
            measured = self.measured(self.verdict(index, search.good, narrowed), case.test, index, search.good)
            verdict = classify(measured, case.steps)
            if verdict == UNKNOWN:
                case.measured.append(measured)
                more = self.verdict(index, search.good, [*narrowed, "--perf-repeats", str(self.max_pairs),
                                                         "--perf-max-repeats", str(self.max_pairs)])
                measured = self.measured(more, case.test, index, search.good)
                verdict = classify(measured, case.steps, final=True)
            case.measured.append(measured)
            search.record(index, verdict)
            self.say(f"perfgate bisect: {case.case}: {self.commits[index].short} is {verdict} "
                     f"({bisection.changes(measured.rows) or measured.verdict}; {measured.pairs} pair(s))")
        suspects = search.suspects()
        if len(suspects) == 1:
            case.culprit = search.bad
            parent = search.bad - 1
            against_parent = any(m.index == search.bad and m.against == parent for m in case.measured)
            if not against_parent and search.classes.get(parent) == GOOD:
                outcome = self.verdict(search.bad, parent, deselect)
                case.measured.append(self.measured(outcome, case.test, search.bad, parent))


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="perfgate bisect", allow_abbrev=False,
        description="Find the first-parent commit between GOOD and BAD that made a case slower, with perfgate's A/B "
        "verdicts (interleaved pairs, a paired interval). Every option it does not know goes to pytest, as in "
        "`perfgate bisect v1.2 main -k resnet50 --launcher slurm --nodes 2`.")
    parser.add_argument("good", metavar="GOOD", help="a commit where the case was fast")
    parser.add_argument("bad", metavar="BAD", help="a later commit, on GOOD's first-parent line, where it is slow")
    parser.add_argument("--bisect-max-pairs", type=int, default=10, metavar="N",
                        help="pairs an undecided verdict may grow to before it is decided on its estimate "
                        "(default %(default)s)")
    parser.add_argument("--bisect-logs", type=Path, default=Path("results/bisect"), metavar="DIR",
                        help="where each verdict's pytest output is kept (default %(default)s)")
    parser.add_argument("--perf-report", type=Path, metavar="DIR",
                        help="also write DIR/bisect.md and a plot per case of each commit's medians in order")
    return parser.parse_known_args(argv)


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str]) -> int:
    args, pytest_args = parse(argv)
    began = time.monotonic()
    try:
        root = Path(git(Path.cwd(), "rev-parse", "--show-toplevel"))
        commits = first_parent_range(root, args.good, args.bad)
    except (BisectUsageError, GitError) as exc:
        print(f"perfgate bisect: error: {exc}", file=sys.stderr)
        return USAGE
    scratch = Path(tempfile.mkdtemp(prefix="perfgate-bisect-"))
    worktrees = Worktrees(root, scratch)
    pytest_args = kept.anchored(pytest_args, Path.cwd())
    sessions = Sessions(pytest_args, scratch, args.bisect_logs.resolve())
    bisect = Bisect(root, commits, sessions, worktrees, args.bisect_max_pairs)
    previous = signal.signal(signal.SIGTERM, _interrupted)
    print(f"perfgate bisect: {len(commits) - 1} commit(s) after GOOD {commits[0].short}, up to BAD {commits[-1].short}; "
          f"at most {math.ceil(math.log2(len(commits) - 1)) + 2 if len(commits) > 2 else 2} verdicts per case when "
          f"none is unknown; logs in {args.bisect_logs}")
    try:
        searches, lines, answered = bisect.ends()
        for case in searches:
            bisect.search(case, [test for test in bisect.tests if test != case.test])
        for case in searches:
            print("\n".join(bisection.answer(*case.report())))
            answered = answered and case.culprit is not None
        print(f"perfgate bisect: {bisect.verdicts} verdict(s) in {clock(time.monotonic() - began)}")
        if args.perf_report is not None:
            written = bisection.write_report(args.perf_report, [case.report() for case in searches], lines)
            print(f"perfgate bisect: wrote {written}")
        url = kept.history_url(pytest_args)
        if url is not None and searches:
            print(f"perfgate bisect: {kept.keep(url, searches)}")
        return 0 if answered else NOT_ANSWERED
    except BisectUsageError as exc:
        print(f"perfgate bisect: error: {exc}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        print("perfgate bisect: interrupted; stopping the running session and removing the worktrees", file=sys.stderr)
        return INTERRUPTED
    finally:
        sessions.stop()
        worktrees.close()
        signal.signal(signal.SIGTERM, previous)
