"""The second clock: CPU time a rank spends, read beside each step's wall-clock marker.

Wall time counts the slices a shared machine gives to other work; CPU time counts only what the rank's own
process did (every thread: the training loop, intra-op threads, gloo's) and, separately, what its loader
workers did. A slower kernel or more Python per step moves both clocks; a wait (a lock, a sleep, I/O, a
barrier behind a slow rank) moves only the wall clock.

Loader workers are the child processes of the rank's main thread (torch's DataLoader starts them there): live
ones are read from ``/proc/<pid>/stat``, in clock ticks (10 ms on most kernels, so only their sum over a window
is precise), and exited ones from ``os.times`` once reaped. Where ``/proc`` cannot list children (not Linux),
worker CPU is None.

Beside them, how long the rank's threads waited for a core while runnable (RunQueueWait): the turns a neighbour took,
which the wall clock counts and CPU time does not, read during the window itself.

No torch import: workloads import this under torchrun.
"""

from __future__ import annotations

import os
import time
from typing import Callable

UTIME_FIELD = 11
"""Index of utime in /proc/<pid>/stat after the command name's closing parenthesis (stime follows)."""


class WorkerCpu:
    """CPU seconds of this process's child processes so far: live ones from /proc, reaped ones from os.times.

    A child reaped between the listing and ``os.times`` can be missed once or counted twice: a few ticks, once
    an epoch, where non-persistent workers are replaced."""

    def __init__(self) -> None:
        pid = os.getpid()
        self._children = f"/proc/{pid}/task/{pid}/children"
        self._tick_s = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
        self.available = os.path.exists(self._children)

    def __call__(self) -> float | None:
        if not self.available:
            return None
        reaped = os.times()
        total = reaped.children_user + reaped.children_system
        try:
            with open(self._children) as fh:
                pids = fh.read().split()
        except OSError:
            return None
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            total += (int(fields[UTIME_FIELD]) + int(fields[UTIME_FIELD + 1])) * self._tick_s
        return total


class RunQueueWait:
    """Seconds this process's threads have waited in the run queue so far: runnable, while their core ran another task
    (the second field of /proc/<pid>/task/<tid>/schedstat, the kernel's sched_info). A neighbour's turns on the cores
    show here; so do the workload's own other tasks where they outnumber the cores (rank 1, loader workers, its own
    threads), which an unchanged case repeats alike. Its blocked waits (a lock, a sleep, I/O, a barrier behind another
    rank) do not, as a thread that waits is not runnable. Each thread's count is kept from when it was last seen, so a
    thread that exits takes none of the total with it. ``available`` is False where the kernel keeps no count (not
    Linux, or a kernel without CONFIG_SCHED_INFO, whose schedstat reads zeros)."""

    def __init__(self) -> None:
        pid = os.getpid()
        self._tasks = f"/proc/{pid}/task"
        self._seen: dict[str, int] = {}
        self._total = 0
        own = self._read(str(pid))
        self.available = own is not None and own[0] > 0

    def _read(self, thread: str) -> tuple[int, int] | None:
        """The thread's nanoseconds on a core and waiting for one, or None where it has exited."""
        try:
            fd = os.open(f"{self._tasks}/{thread}/schedstat", os.O_RDONLY)
        except OSError:
            return None
        try:
            ran, waited = os.read(fd, 128).split()[:2]
            return int(ran), int(waited)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)

    def __call__(self) -> float | None:
        if not self.available:
            return None
        try:
            threads = os.listdir(self._tasks)
        except OSError:
            return None
        for thread in threads:
            read = self._read(thread)
            if read is not None:
                self._total += max(0, read[1] - self._seen.get(thread, 0))
                self._seen[thread] = read[1]
        return self._total / 1e9


class CpuClock:
    """Reads the rank's process CPU time (all threads) and its loader workers' CPU time, in seconds so far."""

    def __init__(self, process: Callable[[], float] = time.process_time,
                 workers: Callable[[], float | None] | None = None) -> None:
        self.process = process
        self.workers = workers if workers is not None else WorkerCpu()

    def read(self) -> tuple[float, float | None]:
        return self.process(), self.workers()

    def total(self) -> float:
        """Process and worker CPU together: what a planted slowdown is sized against."""
        process, workers = self.read()
        return process + (workers or 0.0)
