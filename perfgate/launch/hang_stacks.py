"""Where a hung run was: its Python processes' stacks, written into their own logs before it is killed.

A timeout says that a run hung, not where. Ranks (the workloads, and an unmodified script under OptimizerSteps'
wrapper) register ``faulthandler`` on ``STACKS_SIGNAL``, and the loader workers they fork inherit it; before
killing a hung run the launcher sends that signal to each of its processes that catches it, and each writes
every thread's Python stack to its stderr, the rank's log. faulthandler writes from the signal handler itself,
so a process stuck in C (a lock, a collective) still answers. A rank and the workers it forked share that stderr,
and faulthandler writes a stack in many small writes: asked at once, their stacks interleave into lines no one can
read (seen in a test run: "Current thread 0xCurrent thread 0x..."), so processes that share a stderr are asked in
turns.

A real-time signal, not SIGUSR1, which frameworks use for their own ends (SLURM requeue); and only processes
whose kernel status shows it caught are sent it: to the others (torchrun's agent, a forkserver's workers) its
default action would be to terminate them.
"""

from __future__ import annotations

import faulthandler
import itertools
import os
import signal
import time
from typing import Iterable

STACKS_SIGNAL = signal.SIGRTMIN + 7
ANSWER_S = 1.0
"""How long the processes get to write their stacks before the run is killed."""
TURN_S = 0.25
"""How long one process gets to write its stacks before the next that shares its stderr is asked: a dump takes
milliseconds, and a loaded host may take tens of them to run the handler."""


def tell_stacks_on_request() -> None:
    """In a rank: write every thread's stack to stderr whenever STACKS_SIGNAL arrives (and in forked children)."""
    faulthandler.register(STACKS_SIGNAL, all_threads=True, chain=False)


def catches(pid: int, signum: int = STACKS_SIGNAL) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its /proc status's SigCgt mask)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            caught = next((line.split()[1] for line in fh if line.startswith("SigCgt:")), "0")
    except OSError:
        return False
    return bool(int(caught, 16) >> (signum - 1) & 1)


def stderr_of(pid: int) -> str:
    """What process ``pid`` writes its stderr to (a file's path, ``pipe:[inode]``), or its pid where that is unknown."""
    try:
        return os.readlink(f"/proc/{pid}/fd/2")
    except OSError:
        return f"pid {pid}"


def request_stacks(pids: Iterable[int]) -> int:
    """Asks each process that catches STACKS_SIGNAL for its stacks, those that share a stderr TURN_S apart, and waits
    ANSWER_S for the last; returns how many were asked."""
    sharing: dict[str, list[int]] = {}
    for pid in pids:
        if pid != os.getpid() and catches(pid):
            sharing.setdefault(stderr_of(pid), []).append(pid)
    asked = 0
    for turn in itertools.zip_longest(*sharing.values()):
        if asked:
            time.sleep(TURN_S)
        for pid in turn:
            if pid is None:
                continue
            try:
                os.kill(pid, STACKS_SIGNAL)
                asked += 1
            except ProcessLookupError:
                continue
    if asked:
        time.sleep(ANSWER_S)
    return asked
