"""Ranks pinned to cores by the launcher, for the two sides of a duet pair (``--perf-ab-duet``).

Run at once on one host, the two sides' ranks are placed by the kernel, by chance: for a spell both ranks of one
side may share a core while the other side's have one each, and a rank whose peer waits for a core spins in
gloo, on the CPU clock. Pinned, the sides meet the same contention by construction. Where the host has a core
for every rank of both sides, each side gets its own cores (a CPU-set split); where it has fewer, rank i of each
side shares core i with rank i of the other side.

The launcher pins, not the rank: the reference side of an A/B pair runs another revision's code, which may know
nothing of pinning. Each poll finds the run's ranks (and their loader workers) by their tag in the environment and
pins every thread whose affinity differs; threads and workers started later inherit it from their pinned parent.
Once every rank on the host is found the search stops (it reads every process's environment); the threads of the
processes found are still checked each poll.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import psutil

from perfgate.launch.agents import run_processes
from perfgate.launch.spec import NODE_ENV


def duet_cores(available: Iterable[int], ranks: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The cores each side's ranks are pinned to, in rank order: disjoint sets where ``available`` holds a core for
    every rank of both sides, else the same ``ranks`` cores for both (rank i of each side on core i)."""
    cores = tuple(sorted(available))
    if len(cores) >= 2 * ranks:
        return cores[:ranks], cores[ranks:2 * ranks]
    return cores[:ranks], cores[:ranks]


class RankPinner:
    """Called once per poll of a launch: pins each process of run ``run_id`` that is a rank or a rank's loader
    worker (torchrun's LOCAL_RANK in its environment) to ``cores[i % len(cores)]``, i being its rank's place on
    this host (node x ranks per node + local rank)."""

    def __init__(self, run_id: str, cores: Sequence[int], nodes: int, ranks_per_node: int) -> None:
        self._run_id = run_id
        self._cores = tuple(cores)
        self._ranks_per_node = ranks_per_node
        self._places = nodes * ranks_per_node
        self._found: dict[int, tuple[psutil.Process, int]] = {}
        """Every process found so far, with its place on the host."""

    def __call__(self) -> None:
        if len({place for _, place in self._found.values()}) < self._places:
            for proc in run_processes(self._run_id):
                place = self._place_of(proc)
                if place is not None:
                    self._found.setdefault(proc.pid, (proc, place))
        for proc, place in self._found.values():
            if proc.is_running():
                pin_threads(proc.pid, self._cores[place % len(self._cores)])

    def _place_of(self, proc: psutil.Process) -> int | None:
        try:
            environ = proc.environ()
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        if "LOCAL_RANK" not in environ:
            return None
        return int(environ.get(NODE_ENV, "0")) * self._ranks_per_node + int(environ["LOCAL_RANK"])


def pin_threads(pid: int, core: int) -> None:
    """Pins every thread of ``pid`` to ``core``; a process or thread that ended meanwhile is left alone."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in map(int, threads):
        try:
            if os.sched_getaffinity(tid) != {core}:
                os.sched_setaffinity(tid, {core})
        except OSError:
            continue
