"""What the dashboard compares: two commits of a series, and the pairs of an A/B session.

Two commits are compared through the history around them. One session of each says little alone, and the sessions
of one commit are too few to show their own spread, so the noise is the series' spread between unchanged sessions:
the pooled standard deviation of the log values around their segment's mean (a change point starts a segment, so a
step of the code is not counted as noise). The difference of the two commits' mean logs then has a Student t
interval, with that spread's degrees of freedom. The page's script does the arithmetic for the two commits a reader
picks; the spread and the t quantile come from here.

An A/B session's pairs are its launches side by side (``run_values`` against ``baseline_runs``): each pair's ratio,
and the gate's own interval of their geometric mean.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any, Sequence

from scipy import stats

from perfgate.result import Result
from perfgate.trend.analysis import Series

CONFIDENCE = 0.95
SAME = 1e-9
"""A spread of the log values below this is rounding: the sessions read the same."""


@dataclass(frozen=True)
class Noise:
    """A series' spread between sessions, in log units, and the t quantile of its interval."""

    sigma: float
    degrees_of_freedom: int
    t: float


def usable(value: float) -> bool:
    """A value whose log is a number: finite and positive."""
    return math.isfinite(value) and value > 0


def noise(one: Series) -> Noise | None:
    """None where the series cannot show a spread: a value that is not finite and positive, no more sessions than
    segments, or sessions that all read the same (a spread of zero would call any difference real)."""
    values = one.values
    if not all(usable(value) for value in values):
        return None
    squares, count = 0.0, 0
    for start, end, _ in one.segments():
        logs = [math.log(value) for value in values[start:end]]
        centre = sum(logs) / len(logs)
        squares += sum((log - centre) ** 2 for log in logs)
        count += len(logs) - 1
    sigma = math.sqrt(squares / count) if count else 0.0
    if sigma < SAME:
        return None
    return Noise(sigma, count, float(stats.t.ppf(0.5 + CONFIDENCE / 2, count)))


def commit_data(found: Sequence[Series]) -> dict[str, Any]:
    """What the case page's script needs to compare any two commits: each commit (oldest first), and each metric's
    direction, noise and sessions (their log values, by commit)."""
    seen: dict[str, datetime.datetime] = {}
    metrics = {}
    for one in found:
        spread = noise(one)
        logs: dict[str, list[float]] = {}
        for point in one.points:
            if point.commit and usable(point.value):
                seen[point.commit] = min(seen.get(point.commit, point.recorded_at), point.recorded_at)
                logs.setdefault(point.commit, []).append(math.log(point.value))
        metrics[one.metric] = {"higher_is_better": one.higher_is_better, "logs": logs,
                               "sigma": spread.sigma if spread else None, "t": spread.t if spread else None}
    commits = sorted(seen, key=lambda sha: seen[sha])
    return {"commits": [{"sha": sha, "first_seen": f"{seen[sha]:%Y-%m-%d %H:%M}"} for sha in commits],
            "metrics": metrics}


def default_pair(found: Sequence[Series], commits: Sequence[str]) -> tuple[str | None, str | None]:
    """The commits either side of the newest change point of a gated metric, else the oldest and the newest of
    ``commits``."""
    changed = [(one.points[c.index].recorded_at, one, c) for one in found if one.points[0].gated for c in one.changes]
    if changed:
        _, one, change = max(changed, key=lambda item: item[0])
        return one.points[change.index - 1].commit, one.points[change.index].commit
    return (commits[0], commits[-1]) if commits else (None, None)


@dataclass(frozen=True)
class Pairs:
    """One metric of an A/B session: each pair's candidate against its reference."""

    metric: str
    reference: list[float]
    candidate: list[float]
    change: float | None
    ci: tuple[float, float] | None
    verdict: str | None

    @property
    def ratios(self) -> list[float]:
        """Each pair's candidate against its reference, -0.1 for 10 % less."""
        return [cand / ref - 1.0 for ref, cand in zip(self.reference, self.candidate)]


def ab_pairs(result: Result) -> list[Pairs]:
    """The gated metrics of an A/B result, pair by pair; none for a result judged against a stored baseline."""
    if result.reference is None:
        return []
    found = []
    for row in result.metrics:
        reference, candidate = row.get("baseline_runs") or [], row.get("run_values") or []
        if reference and len(reference) == len(candidate) and all(value > 0 for value in reference):
            ci = row.get("ci")
            found.append(Pairs(row["metric"], list(reference), list(candidate), row.get("change"),
                               (ci[0], ci[1]) if ci and None not in ci else None, row.get("verdict")))
    return found
