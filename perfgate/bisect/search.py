"""The search: which first-parent commit between GOOD and BAD made a case slower.

A binary search whose every step is an A/B verdict (interleaved pairs, a paired interval), read three ways as
Chromium's Pinpoint reads its comparisons: a midpoint is bad when its interval lies beyond half of the slowdown
GOOD -> BAD showed, good when it lies short of it, and unknown otherwise. Half of the step is the right line to
draw: the question is which side of the step a commit is on, not whether it is as fast as GOOD within the gate's
tolerance, which a few pairs rarely prove. An unknown commit is measured again with more pairs, up to a cap, and
then goes to the side its estimate is on. A commit whose case cannot run is skipped, as ``git bisect skip`` does;
one that times out is slow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from perfgate.bisect.commits import Commit

BAD, GOOD, UNKNOWN, SKIP = "bad", "good", "unknown", "skip"

FAILED_TO_RUN = ("crashed", "out-of-memory", "setup-error", "diverged", "error")
"""Case verdicts of a commit whose case did not run to a measurement: skipped. ``timeout`` is not among them."""


@dataclass(frozen=True)
class Step:
    """The slowdown GOOD -> BAD showed on one gated metric: ``worse`` in the metric's bad direction (0.5 is half
    the throughput, 1.0 twice the time)."""

    metric: str
    better: str
    worse: float

    @property
    def midline(self) -> float:
        return self.worse / 2


@dataclass(frozen=True)
class Measured:
    """One commit measured against another by one A/B verdict, for one case."""

    index: int
    """The commit's place in the first-parent list (0 = GOOD)."""
    against: int
    verdict: str
    """The case's verdict: pass, FAIL, stale, timeout, or why it did not run."""
    rows: tuple[dict[str, Any], ...]
    """The gated metrics' rows of that verdict (change, ci, measured, baseline, runs)."""
    pairs: int
    seconds: float
    label: str = ""

    def row(self, metric: str) -> dict[str, Any] | None:
        return next((row for row in self.rows if row.get("metric") == metric), None)


def worse_interval(row: dict[str, Any], better: str) -> tuple[float, float, float]:
    """(estimate, low, high) of how much worse the candidate is, in the metric's bad direction."""
    change, (low, high) = row["change"], row["ci"]
    if better == "higher":
        return -change, -high, -low
    return change, low, high


def classify(measured: Measured, steps: Sequence[Step], *, final: bool = False) -> str:
    """bad, good, unknown or skip, for a commit measured against a good one. ``final``: no more pairs are allowed,
    so an unknown one goes to the side of the line its estimate is on."""
    if measured.verdict == "timeout":
        return BAD
    if measured.verdict in FAILED_TO_RUN or not measured.rows:
        return SKIP
    sides = []
    for step in steps:
        row = measured.row(step.metric)
        if row is None or row.get("change") is None or row.get("ci") is None:
            continue
        estimate, low, high = worse_interval(row, step.better)
        if low > step.midline:
            sides.append(BAD)
        elif high < step.midline:
            sides.append(GOOD)
        elif final:
            sides.append(BAD if estimate > step.midline else GOOD)
        else:
            sides.append(UNKNOWN)
    if not sides:
        return SKIP
    if all(side == GOOD for side in sides):
        return GOOD
    if BAD in sides and GOOD not in sides and (final or UNKNOWN not in sides):
        return BAD
    if final:
        return BAD if sides.count(BAD) >= sides.count(GOOD) else GOOD
    return UNKNOWN


@dataclass
class Search:
    """The state of one case's search over ``count`` first-parent commits, GOOD at 0 and BAD at count - 1."""

    count: int
    good: int = 0
    bad: int = -1
    skipped: set[int] = field(default_factory=set)
    classes: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.count < 2:
            raise ValueError("a search needs GOOD and BAD")
        if self.bad < 0:
            self.bad = self.count - 1
        self.classes.update({0: GOOD, self.bad: BAD})

    def candidates(self) -> list[int]:
        """The commits still between the last good one and the first bad one, not skipped."""
        return [index for index in range(self.good + 1, self.bad) if index not in self.skipped]

    def next_commit(self) -> int | None:
        """The untested commit nearest the middle of what is left (the earlier one of two), None when done."""
        left = self.candidates()
        if not left:
            return None
        middle = (self.good + self.bad) / 2
        return min(left, key=lambda index: (abs(index - middle), index))

    def record(self, index: int, verdict: str) -> None:
        """Moves the bounds by a final class of ``index``: good, bad or skip."""
        if not self.good < index < self.bad:
            raise ValueError(f"commit {index} is not between {self.good} and {self.bad}")
        self.classes[index] = verdict
        if verdict == GOOD:
            self.good = index
        elif verdict == BAD:
            self.bad = index
        elif verdict == SKIP:
            self.skipped.add(index)
        else:
            raise ValueError(f"not a final class: {verdict}")

    @property
    def done(self) -> bool:
        return self.next_commit() is None

    def suspects(self) -> list[int]:
        """Once done: the first bad commit alone, or it and the skipped commits before it, any of which may be it."""
        return [index for index in range(self.good + 1, self.bad + 1) if index == self.bad or index in self.skipped]


@dataclass
class CaseSearch:
    """One case's question and its answer so far."""

    test: str
    case: str
    hardware_class: str
    steps: list[Step]
    search: Search
    commits: list[Commit]
    measured: list[Measured] = field(default_factory=list)
    culprit: int | None = None

    def report(self) -> tuple[Any, ...]:
        """What bisection.answer takes: case, commits, steps, verdicts, classes, suspects, culprit."""
        return (self.case, self.commits, self.steps, self.measured, self.search.classes, self.search.suspects(),
                self.culprit)
