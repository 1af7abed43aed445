"""Where a launch's start-up went: the points a rank passes before its first step, stamped in wall-clock time and
written in its end record (``startup``), so that the launch's time accounting (measure/metrics.time_accounting) splits
its start-up into phases.

A workload marks each point as it passes it (``mark``); a point it never reaches (an unmodified script's) is left out,
and its time falls to the next phase that is marked. Nothing here imports torch.
"""

from __future__ import annotations

import os
import time

POINTS = ("process", "imports", "process_group", "model", "flops", "probe")
"""In order: the rank's process began (the OS's own stamp), its imports and command line were done, the process group
was joined, the model, optimizer and data were built, FLOPs were counted (the first launch only), DDP wrapped the
model and the machine-speed probe ran."""
PHASES = {
    "torchrun": "launch to the rank's process: the launcher, torchrun's agent and its rendezvous",
    "imports": "the interpreter, the workload's imports and its command line",
    "process_group": "joining the process group",
    "model": "building the model, optimizer and data",
    "flops": "counting FLOPs (the first launch)",
    "probe": "DDP's wrap and the machine-speed probe",
    "loader": "the loader's start, to the first step",
}
"""Each start-up phase, named for the point it ends at (``loader`` ends at the first step)."""

_marks: dict[str, float] = {}


def process_started_at() -> float | None:
    """When this process began, in wall-clock seconds, from /proc (Linux; the OS stamps it in clock ticks since boot,
    which /proc/uptime places to 10 ms); None elsewhere."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            since_boot = float(uptime.read().split()[0])
        return time.time() - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def mark(point: str) -> None:
    """Stamps ``point`` (one of POINTS) the first time this process passes it."""
    if point not in POINTS:
        raise ValueError(f"{point!r} is not a start-up point ({', '.join(POINTS)})")
    if not _marks:
        started = process_started_at()
        if started is not None:
            _marks["process"] = started
    _marks.setdefault(point, time.time())


def marks() -> dict[str, float]:
    """The points this process has passed so far, for its end record."""
    return dict(_marks)


def phases(launched_at: float, marked: dict[str, float], first_step: float) -> dict[str, float]:
    """Seconds per phase from the launch to the first step, by the points marked; a phase whose end point is missing
    goes into the next marked one, so the phases sum to the whole start-up; none where nothing was marked."""
    if not marked:
        return {}
    ends = [*(marked.get(point) for point in POINTS), first_step]
    found, since = {}, launched_at
    for at, phase in zip(ends, PHASES):
        if at is None or not since <= at <= first_step:
            continue
        found[phase] = round(at - since, 3)
        since = at
    return found
