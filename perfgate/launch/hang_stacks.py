"""Where a hung run was: its Python processes' stacks, written into their own logs before it is killed.

A timeout says that a run hung, not where. Ranks (the workloads, and an unmodified script under OptimizerSteps'
wrapper) register ``faulthandler`` on ``STACKS_SIGNAL``, and the loader workers they fork inherit it; before
killing a hung run the launcher sends that signal to each of its processes that catches it, and each writes
every thread's Python stack to its stderr, the rank's log. The launcher watches those logs grow, so it waits as long
as a slow host needs and no longer, and it says how many wrote. faulthandler writes from the signal handler itself,
so a process stuck in C (a lock, a collective) still answers. A rank and the workers it forked share that stderr,
and faulthandler writes a stack in many small writes: asked at once, their stacks interleave into lines no one can
read ("Current thread 0xCurrent thread 0x..."), so processes that share a stderr are asked in turns.

A real-time signal, not SIGUSR1, which frameworks use for their own ends (SLURM requeue); and only processes
whose kernel status shows it caught are sent it: to the others (torchrun's agent, a forkserver's workers) its
default action would be to terminate them.
"""

from __future__ import annotations

import faulthandler
import itertools
import os
import signal
import stat
import time
from dataclasses import dataclass
from typing import Iterable

STACKS_SIGNAL = signal.SIGRTMIN + 7
ANSWER_S = 10.0
"""How long the asked processes get, all turns together, to write their stacks before the run is killed. A dump
takes milliseconds, but a loaded host can take seconds to run a handler; the request ends as soon as all wrote."""
QUIET_S = 0.1
"""A stderr that grew and then stayed still this long holds a whole dump: the next process that shares it is asked."""
UNSEEN_S = 0.25
"""How long a process whose stderr is not a file (a pipe, a terminal) gets, unobserved, before the next is asked."""
POLL_S = 0.02


@dataclass(frozen=True)
class Stacks:
    """What a request for a hung run's stacks found: the run's processes, those of them asked (they catch
    STACKS_SIGNAL), and those whose log grew afterwards, within ANSWER_S."""

    processes: int = 0
    asked: int = 0
    wrote: int = 0

    def __add__(self, other: Stacks) -> Stacks:
        return Stacks(self.processes + other.processes, self.asked + other.asked, self.wrote + other.wrote)

    def line(self) -> str:
        """How ``python -m perfgate.launch.on_host --stacks`` reports it: three counts."""
        return f"{self.processes} {self.asked} {self.wrote}"

    @classmethod
    def from_lines(cls, text: str) -> Stacks:
        """The sum of every host's or node's line (see ``line``); lines that are not three counts are passed over."""
        total = cls()
        for line in text.splitlines():
            counts = line.split()
            if len(counts) == 3 and all(count.isdigit() for count in counts):
                total += cls(*(int(count) for count in counts))
        return total


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


def size_of(stream: str) -> int | None:
    """The size of a stderr that is a regular file; None for anything whose writes cannot be seen so."""
    try:
        found = os.stat(stream)
    except OSError:
        return None
    return found.st_size if stat.S_ISREG(found.st_mode) else None


def request_stacks(pids: Iterable[int]) -> Stacks:
    """Asks each process that catches STACKS_SIGNAL for its stacks, those that share a stderr in turns (the next once
    the last one's dump is whole), and waits for their dumps, at most ANSWER_S in all."""
    processes = 0
    sharing: dict[str, list[int]] = {}
    for pid in pids:
        if pid == os.getpid():
            continue
        processes += 1
        if catches(pid):
            sharing.setdefault(stderr_of(pid), []).append(pid)
    deadline = time.monotonic() + ANSWER_S
    asked = wrote = 0
    for turn in itertools.zip_longest(*sharing.values()):
        sent: dict[str, int | None] = {}
        for stream, pid in zip(sharing, turn):
            if pid is None:
                continue
            before = size_of(stream)
            try:
                os.kill(pid, STACKS_SIGNAL)
            except ProcessLookupError:
                continue
            asked += 1
            sent[stream] = before
        wrote += wait_for_dumps(sent, deadline)
    return Stacks(processes, asked, wrote)


def wait_for_dumps(sent: dict[str, int | None], deadline: float) -> int:
    """Waits until each stream in ``sent`` (its size before the ask, None where unseen) grew and then stayed still
    for QUIET_S, or the deadline passed; how many grew."""
    sizes = {stream: before for stream, before in sent.items() if before is not None}
    grew: dict[str, float] = {}
    if len(sizes) < len(sent):
        time.sleep(max(0.0, min(UNSEEN_S, deadline - time.monotonic())))
    while sizes and time.monotonic() < deadline:
        now = time.monotonic()
        for stream in list(sizes):
            size = size_of(stream)
            if size is not None and size != sizes[stream]:
                sizes[stream], grew[stream] = size, now
            elif stream in grew and now - grew[stream] >= QUIET_S:
                del sizes[stream]
        time.sleep(POLL_S)
    return len(grew)
