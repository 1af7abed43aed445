"""The third clock: instructions retired by the rank, counted by the CPU's performance monitoring unit.

Wall time and CPU time both read the host's speed: on a VM whose neighbours slow the same instructions in spells,
CPU time per sample spreads by several percent even across quiet launches
(docs/measurements.md#why-the-rules-are-what-they-are). The number of instructions a step retires does not depend
on how fast they ran, so it is the clock a shared host cannot move (CodSpeed's approach); it still moves with more
work, another code path or a different kernel choice, and not with a wait.

Counted with ``perf_event_open`` (Linux), user-space instructions only (``exclude_kernel``, as an unprivileged
process may under ``perf_event_paranoid`` 2), on every thread of the process: one counter per thread that exists
when it opens, each inherited by the threads and processes started after it (gloo's and the loader workers:
their counts are read live and added to the parent's when they exit). Where the host has no PMU (most VMs
without PMU passthrough), forbids counting (a container's seccomp, a paranoid setting of 3) or is not Linux,
``open`` says which in one line and the step records carry no count.

No torch import: workloads import this under torchrun.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from typing import Callable, Sequence

PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE = 0, 1
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_TASK_CLOCK = 1
"""A software event every Linux kernel has (nanoseconds on a core): the same syscall and inheritance, where no
hardware PMU is exposed; the tests count it to exercise this module on any host."""
INSTRUCTIONS = (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS)

SYSCALL_NUMBERS = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "riscv64": 241}
PERF_FLAG_FD_CLOEXEC = 8
READ_TIMES = 1 | 2
"""PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING: whether the PMU multiplexed the counter."""
INHERIT, EXCLUDE_KERNEL, EXCLUDE_HV = 1 << 1, 1 << 5, 1 << 6


class _EventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to ``config1`` (PERF_ATTR_SIZE_VER0, 64 bytes), which every kernel accepts."""

    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("wakeup_events", ctypes.c_uint32),
                ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64)]


class CounterUnavailable(OSError):
    """This host cannot count the event for this process; the message says why and what would allow it."""

    def __init__(self, reason: str, error_number: int | None = None) -> None:
        super().__init__(reason)
        self.error_number = error_number


def paranoid_level() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"


def why_not(error_number: int) -> str:
    """What a failed ``perf_event_open`` means for counting instructions, and what to do about it."""
    if error_number in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        return ("this host exposes no hardware counter of instructions (a VM without PMU passthrough: "
                "/sys/bus/event_source/devices has no 'cpu'); run on bare metal or a VM with a virtual PMU")
    if error_number in (errno.EACCES, errno.EPERM):
        return (f"counting is not allowed here (kernel.perf_event_paranoid is {paranoid_level()}; containers often "
                "block perf_event_open in seccomp): set the sysctl to 2 or less, or grant CAP_PERFMON")
    if error_number == errno.ENOSYS:
        return "this kernel has no perf_event_open"
    return f"perf_event_open failed: {os.strerror(error_number)}"


def perf_event_open(attr: _EventAttr, pid: int) -> int:
    """One counter of ``attr`` on thread ``pid``, on whichever CPU it runs; raises CounterUnavailable."""
    number = SYSCALL_NUMBERS.get(platform.machine())
    if os.name != "posix" or platform.system() != "Linux" or number is None:
        raise CounterUnavailable(f"perf_event_open is for Linux on {', '.join(SYSCALL_NUMBERS)}; this is "
                                 f"{platform.system()} on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(ctypes.c_long(number), ctypes.byref(attr), ctypes.c_int(pid), ctypes.c_int(-1),
                      ctypes.c_int(-1), ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        error_number = ctypes.get_errno()
        raise CounterUnavailable(why_not(error_number), error_number)
    return int(fd)


def this_process_threads() -> list[int]:
    return sorted(int(tid) for tid in os.listdir("/proc/self/task"))


class InstructionCounter:
    """Instructions retired in user space by this process (every thread) and the processes it starts after
    opening, as one running total; ``read`` costs one ``read`` syscall per thread counted at the start."""

    def __init__(self, event: tuple[int, int] = INSTRUCTIONS,
                 opener: Callable[[_EventAttr, int], int] = perf_event_open,
                 threads: Callable[[], Sequence[int]] = this_process_threads) -> None:
        self.event = event
        self._opener = opener
        self._threads = threads
        self._fds: list[int] = []

    def open(self) -> InstructionCounter:
        """Starts counting now, on every thread (one that ended since the listing is passed over); raises
        CounterUnavailable, with every counter it opened closed."""
        attr = _EventAttr(type=self.event[0], size=ctypes.sizeof(_EventAttr), config=self.event[1],
                          read_format=READ_TIMES, flags=INHERIT | EXCLUDE_KERNEL | EXCLUDE_HV)
        try:
            for tid in self._threads():
                try:
                    self._fds.append(self._opener(attr, tid))
                except CounterUnavailable as exc:
                    if exc.error_number != errno.ESRCH:
                        raise
        except CounterUnavailable:
            self.close()
            raise
        return self

    @property
    def threads(self) -> int:
        """How many threads were counted from the start (each with the threads and processes it started since)."""
        return len(self._fds)

    def read(self) -> float:
        """The count since ``open``; where the PMU shared its counters among more events than it has (another
        profiler, the NMI watchdog), each thread's count is scaled up from the time it was counted."""
        total = 0.0
        for fd in self._fds:
            value, enabled, running = struct.unpack("QQQ", os.read(fd, 24))
            total += value * enabled / running if 0 < running < enabled else value
        return total

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def open_instruction_counter() -> tuple[InstructionCounter | None, str]:
    """This process's instruction counter, started, and a line for the run's facts: what is counted, or why
    nothing is."""
    try:
        counter = InstructionCounter().open()
    except CounterUnavailable as exc:
        return None, f"not counted: {exc}"
    return counter, f"user-space instructions retired (perf_event_open, {counter.threads} threads at the start)"
