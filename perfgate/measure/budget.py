"""--perf-budget: the session's time limit, spent launch by launch so that the session ends inside it.

A CI job has a time limit, and a gate that overruns it is killed with no verdict at all. So no launch starts that
would end past the limit, at the longest that the case's launches have taken (or, before its first, what its
baseline's launches took, else its newest session's in the results history, else the longest of the session's
launches of other cases). A case whose planned launches do not all fit is not started;
a case whose verdict wants another launch gets it only once the planned launches of every case still to come fit
beside it: a case with no launch yet is the least decided of all. What the budget stopped is said in the record
(``Result.budget_stop``) and leaves the case unresolved, never a silent pass (judge/gate.py).

Pytest runs a session's cases one after the other, so the budget sees each case as it comes and the number of cases
still to come (the plugin counts them); under pytest-xdist each worker plans for its share of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence


@dataclass
class SessionBudget:
    """The session's time limit and what its launches have cost so far."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    cases_to_come: int = 0
    """Cases of this session (this worker's share under xdist) that have not started, set before each case."""
    first_launches: list[float] = field(default_factory=list)
    later_launches: list[float] = field(default_factory=list)
    known: dict[str, Mapping[str, float]] = field(default_factory=dict)
    """What each case's launches cost in the results history's newest session of it (--perf-history), by case."""

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()

    def left_s(self) -> float:
        return self.seconds - self.used_s()

    def used_s(self) -> float:
        return self.clock() - self.started

    def typical(self, first: bool) -> float | None:
        """A launch of a case this session has not launched yet: the longest of the session's launches of its kind (a
        first launch counts FLOPs and runs benchy's phases, later ones do not); None before any. The longest, since a
        case started on a guess that proves short is cut off with nothing decided, its launches spent for nothing."""
        seen = self.first_launches if first else (self.later_launches or self.first_launches)
        return max(seen) if seen else None

    def for_case(self, label: str, planned: int, costs: Mapping[str, float] | None = None,
                 look: tuple[str, str] = ("launch", "launch(es)")) -> CaseBudget:
        """The budget of one case that plans ``planned`` launches (``look``: what one is called, and several: an A/B
        pair); ``costs``: its first and later launches' cost as its baseline measured them, else as the results
        history's newest session of it did (``known``)."""
        costs = costs or self.known.get(label) or {}
        return CaseBudget(self, label, planned, self.cases_to_come, (costs.get("first"), costs.get("later")), look)


@dataclass
class CaseBudget:
    """One case's launches under the session's budget."""

    session: SessionBudget
    label: str
    planned: int
    cases_after: int
    expected: Sequence[float | None] = (None, None)
    look: tuple[str, str] = ("launch", "launch(es)")
    launches: list[float] = field(default_factory=list)
    stopped: str | None = None
    """Why the budget stopped a launch the case wanted: its reason in the record."""

    def cost(self, index: int) -> float | None:
        """What launch ``index`` is expected to take: the longest of this case's launches of its kind so far, else
        its baseline's, else the session's typical launch; None where nothing is known yet."""
        first = index == 0
        own = self.launches[:1] if first else self.launches[1:]
        if own:
            return max(own)
        return self.expected[0 if first else 1] or self.session.typical(first)

    def reserve_s(self) -> float:
        """What the cases to come need for their planned launches, at the session's longest launches."""
        first, later = self.session.typical(True), self.session.typical(False)
        if first is None:
            return 0.0
        return self.cases_after * (first + (self.planned - 1) * (later or first))

    def may_launch(self, index: int) -> bool:
        """Whether launch ``index`` (0-based) of the case may start; where not, ``stopped`` says why. Before the first,
        all the planned launches must fit; beyond them, they must fit beside the cases to come."""
        left, budget = self.session.left_s(), self.session.seconds
        if index == 0:
            costs = [self.cost(0), *[self.cost(1)] * (self.planned - 1)]
            if None in costs:
                return left > 0 or self._stop(f"the session had used its {budget_words(budget)} before {self.label} began")
            need = sum(costs)  # type: ignore[arg-type]
            return need <= left or self._stop(
                f"{self.label} was not launched: its {self.planned} {self.look[1]} need about {need:.0f} s and "
                f"{max(left, 0):.0f} s of the {budget_words(budget)} were left")
        need = self.cost(index) or 0.0
        reserve = self.reserve_s() if index >= self.planned else 0.0
        if need + reserve <= left:
            return True
        beside = (f", beside the {reserve:.0f} s that the {self.cases_after} case(s) after it need"
                  if reserve else "")
        return self._stop(f"{self.label} stopped after {index} {self.look[1]}: {self.look[0]} {index + 1} needs about "
                          f"{need:.0f} s{beside}, and {max(left, 0):.0f} s of the {budget_words(budget)} were left")

    def why_no_extra_launch(self) -> str:
        """Why a launch outside the verdict (a FAIL's profile) may not start: "" where one of the case's later
        launches fits in what is left."""
        need, left = self.cost(1) or 0.0, self.session.left_s()
        return "" if need <= left else (f"--perf-budget: one more launch needs about {need:.0f} s and {max(left, 0):.0f}"
                                        f" s of the {budget_words(self.session.seconds)} were left")

    def timed(self, launch: Callable[[], None]) -> None:
        """Runs one launch (or one A/B pair) and books what it took; a launch that failed (killed at its timeout, say)
        ends its case and says nothing of what the next case's launches cost."""
        began = self.session.clock()
        launch()
        took = self.session.clock() - began
        self.launches.append(took)
        (self.session.first_launches if len(self.launches) == 1 else self.session.later_launches).append(took)

    def _stop(self, why: str) -> bool:
        self.stopped = f"--perf-budget: {why}"
        return False


def budget_words(seconds: float) -> str:
    return f"{seconds / 60:g} min budget ({seconds:.0f} s)"


def launch_costs(runs: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """What a case's launches cost, from their time accounting (Result.per_run): the first launch (which counts FLOPs
    and runs benchy's phases) and the longest of the later ones, in seconds, as the session's own estimates take the
    longest; either stands for the other where it alone was timed; None without timed launches."""
    first = (runs[0].get("time_s") or {}).get("total_s") if runs else None
    later = [run["time_s"]["total_s"] for run in runs[1:] if run.get("time_s")]
    if first is None and not later:
        return None
    return {"first": round(first if first is not None else max(later), 1),
            "later": round(max(later) if later else first, 1)}
