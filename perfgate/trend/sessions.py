"""Which of a case's sessions in the results history count as its unchanged sessions: one rule for what
``perfgate store-sessions`` keeps in a baseline file and for what the verdict's model reads of the history
(``SessionHistory.sessions``).

A session counts where it ran the baseline's workload version, since the baseline was measured (or a given time),
was judged against the baseline (JUDGED), planted no slowdown, and had no A/B reference measured beside it; each is
kept with its gated medians and every machine-speed probe reading.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Sequence

from perfgate.judge.baselines import Baseline, StoredSession
from perfgate.measure.metrics import MATMUL_PROBE, PROBES
from perfgate.trend.database import Point

PLANT = "planted_fraction"
"""The metric that a result measured with a planted slowdown has."""
JUDGED = ("pass", "stale", "unresolved", "FAIL")
"""The verdicts of a session judged against the baseline: not a launch that failed (no whole medians), nor the
session that measured a baseline (its medians are the baseline's own)."""


def utc(when: datetime.datetime) -> datetime.datetime:
    """``when`` in UTC; a time with no zone is taken as UTC (SQLite keeps none)."""
    return when.astimezone(datetime.timezone.utc) if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


def unchanged_sessions(points: Sequence[Point], baseline: Baseline, paired: set[int], start: datetime.datetime
                       ) -> list[tuple[StoredSession, str]]:
    """One case's sessions that count, oldest first, each with its verdict: its baseline's workload version, since
    ``start``, judged, no plant, no A/B reference beside it (``paired``), with a value of a metric the baseline
    gates."""
    results: dict[int, list[Point]] = defaultdict(list)
    for point in points:
        results[point.result_id].append(point)
    sessions = []
    for values in results.values():
        first, by_metric = values[0], {point.metric: point.value for point in values}
        medians = {metric: by_metric[metric] for metric in baseline.metrics if metric in by_metric}
        recorded = utc(first.recorded_at)
        if (medians and first.workload_version == baseline.workload_version and first.result_id not in paired
                and first.verdict in JUDGED and not by_metric.get(PLANT) and recorded >= start):
            probes = {name: by_metric[name] for name in PROBES if name in by_metric}
            sessions.append((StoredSession(recorded.isoformat(), medians, by_metric.get(MATMUL_PROBE),
                                           first.commit, probes), first.verdict))
    return sorted(sessions, key=lambda pair: pair[0].recorded_at)
