"""A wall-clock regression in a session whose machine ran slower by as much, while the CPU clock held.

The machine-speed probe (a matmul, outside the window) runs the same kernels whatever the code does. On a shared
runner a neighbour's job that overlaps the session drops the probe and the wall clock together, while the CPU
clock, blind to the slices given to other work, holds; more work per step moves both clocks, and so does a slower
core (a procurement check's slow machine still fails). So a wall-clock FAIL that the probe's drop covers (within
the metric's tolerance: the probe is a snapshot), in a case that gates the CPU clock and whose CPU clock held, is
unresolved rather than FAIL: the machine's other work is the likelier cause, and only A/B in one job can tell. A case
that gates no CPU-clock metric (a GPU flavour's default) keeps its FAIL. The probe does not calibrate the values
(``--perf-calibrate``): its snapshots around a window exaggerate or miss a burst, and scaling by them moved
unchanged sessions far more than the drift it corrects (docs/measurements.md#why-the-rules-are-what-they-are).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from perfgate.measure.metrics import CALIBRATION_PROBE, METRICS


def probe_change(then: Mapping[str, Any], now: Mapping[str, Any]) -> float | None:
    """The runs' median probe against the baseline's (negative: the machine ran slower); None without both."""
    before, after = then.get(CALIBRATION_PROBE), now.get(CALIBRATION_PROBE)
    return after / before - 1.0 if before and after else None


def judge(verdicts: Sequence[Any], outcomes: Sequence[str], machine: float | None, *, raw: Sequence[str],
          worse: Sequence[float]) -> tuple[list[str], list[dict[str, Any]]]:
    """The outcomes once the probe's drop ``machine`` is weighed, and a row per wall-clock FAIL it covers (left
    unresolved). ``verdicts``: the gate's MetricVerdicts; ``outcomes`` their outcomes so far; ``raw`` their outcomes
    against the baseline alone (whether the CPU clock held is read there, before any other rule); ``worse``: how much
    worse each is than what it FAILed against."""
    settled = list(outcomes)
    cpu = [outcome for verdict, outcome in zip(verdicts, raw) if clock(verdict.metric) == "cpu"]
    if machine is None or machine >= 0 or not cpu or "FAIL" in cpu:
        return settled, []
    rows = []
    for index, verdict in enumerate(verdicts):
        if settled[index] == "FAIL" and clock(verdict.metric) == "wall" and worse[index] <= verdict.tolerance - machine:
            settled[index] = "unresolved"
            rows.append({"metric": verdict.metric, "change": verdict.change, "probe_change": machine})
    return settled, rows


def clock(metric: str) -> str | None:
    info = METRICS.get(metric)
    return info.clock if info else None


def describe(row: Mapping[str, Any]) -> str:
    return (f"{row['metric']}: {row['change']:+.1%}, but the machine-speed probe ran {row['probe_change']:+.1%} "
            "against the baseline's and no CPU-clock metric failed: the machine ran slower, which the code does not "
            "explain")
