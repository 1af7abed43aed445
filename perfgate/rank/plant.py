"""A planted slowdown, to prove the gate catches one (``--perf-inject-slowdown F``).

Every step is made longer by F times its natural duration, whatever bounds the loop. A training step
has two timelines, the host's (Python, kernel launches, the input pipeline) and, on GPU, the device
stream's; the step takes as long as the busier one. So the delay goes on both: the device stream
spins for it (``torch.cuda._sleep``), then the host spins for it. A GPU-bound loop waits out the device spin,
a host-bound one the host's, and the two overlap instead of adding up. A device spin alone falls short where the
GPU idles between kernels: the spin fills gaps the GPU idled through anyway
(docs/measurements.md#why-the-rules-are-what-they-are).

The host's delay is work, a busy loop, never a sleep: the plant models slower code, and slower code keeps
costing time when the cores are shared. A sleeping process hands its core to the neighbours, and Linux's
scheduler then credits it for the time it slept (CFS places a waking task ahead of the ones that kept
running), so its next step runs with more of the core than an unplanted step had, and a sleep plants far less
than it says beside other work (docs/measurements.md#why-the-rules-are-what-they-are); a busy loop has no such
credit.

On CPU a step's work is done when its Python calls return, so a step's natural duration is its own elapsed time on
the host clock and each step is lengthened by F of itself: the fastest step, the median and the mean all move by F
(planting F of a typical step instead moves a CPU case's fastest step, which the CPU flavour gates, by more than
F: docs/measurements.md#why-the-rules-are-what-they-are). Every rank plants: the code is slower everywhere, not on
one rank. The CPU flavour gates a second clock, CPU time, so the plant moves it by F too: it works until the rank
has spent F of the step's CPU time (its process's and its loader workers') and only then, if the step's wall time
is not yet F longer, waits out the rest, which is F of the time the step spent off a core (waiting for the other
rank, for I/O). A rank that keeps more than one core busy reaches the wall target first; its CPU clock then moves
by less than F. The wall time planted is rank 0's on every rank, shared through torchrun's store
(``RankZeroTargets``): a rank's own step includes its wait at the all-reduce for a rank that planted more, and
when each rank planted F of its own step it planted that excess again, so the ranks' plants fed each other and the
window grew by far more than F (docs/measurements.md#why-the-rules-are-what-they-are).

On GPU the host runs ahead of the device, so the natural duration is the median of the last few resolved steps
(never the first, which compiles) with what was planted in them taken out, so nothing waits for the device to
find it and the plant does not compound. Only rank 0 resolves its steps, so only rank 0 plants there: the others
wait for it at the next gradient all-reduce. Imports torch only on GPU, or to share a target between ranks.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from datetime import timedelta
from typing import Any, Callable, Sequence

from perfgate.records.cpu_time import CpuClock


class DeviceSpin:
    """Keeps the current CUDA stream busy for a time: ``torch.cuda._sleep`` spins a number of SM clock cycles.

    Cycles per second are calibrated once (one synchronize, before the first planted delay), then
    corrected from each spin's own CUDA events once the device has passed them, without a synchronize:
    the SM clock moves with power and temperature (an H100 under a long run sits at its power cap).
    """

    CALIBRATION_CYCLES = 50_000_000

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._cycles_per_s: float | None = None
        self._pending: deque[tuple[int, Any, Any]] = deque()

    def __call__(self, seconds: float) -> None:
        cycles_per_s = self._cycles_per_s or self._calibrate()
        self._learn()
        cycles = max(1, int(seconds * cycles_per_s))
        start, end = self._event(), self._event()
        start.record()
        self._torch.cuda._sleep(cycles)
        end.record()
        self._pending.append((cycles, start, end))

    def _event(self) -> Any:
        return self._torch.cuda.Event(enable_timing=True)

    def _calibrate(self) -> float:
        start, end = self._event(), self._event()
        start.record()
        self._torch.cuda._sleep(self.CALIBRATION_CYCLES)
        end.record()
        end.synchronize()
        self._cycles_per_s = self.CALIBRATION_CYCLES / (start.elapsed_time(end) / 1000.0)
        return self._cycles_per_s

    def _learn(self) -> None:
        """Averages in the clock rate of every spin the device has finished since the last call."""
        while self._pending and self._pending[0][2].query():
            cycles, start, end = self._pending.popleft()
            seconds = start.elapsed_time(end) / 1000.0
            if seconds > 0 and self._cycles_per_s:
                self._cycles_per_s = 0.5 * self._cycles_per_s + 0.5 * cycles / seconds


def busy_wait(seconds: float) -> None:
    """Keeps this thread busy on its core for ``seconds`` of wall time, as slower code would."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def burn(cpu_s: float, wall_s: float, *, cpu: Callable[[], float] = time.process_time,
         wall: Callable[[], float] = time.perf_counter) -> None:
    """Works on this thread until the process has spent ``cpu_s`` more CPU seconds or ``wall_s`` have passed, then
    sleeps out the rest of ``wall_s``: slower code costs CPU time, and the waits between its work grow with it."""
    cpu_deadline, wall_deadline = cpu() + cpu_s, wall() + wall_s
    while cpu() < cpu_deadline and wall() < wall_deadline:
        pass
    rest = wall_deadline - wall()
    if rest > 0:
        time.sleep(rest)


class RankZeroTargets:
    """Rank 0's wall-time plant for each step, read by every other rank, so that all ranks lengthen a step alike.

    Rank 0 waits at the all-reduce only for what the other ranks really do, so F of its own step is F of the
    step's critical path. The exchange goes through a client of the store torchrun's workers already use
    (``MASTER_ADDR``/``MASTER_PORT``): one ``set`` on rank 0 and one ``get`` on each other rank per step, inside the
    plant's own time. Ranks that train apart, with no collective between them, are paced by rank 0 while planting."""

    PREFIX = "perfgate/plant/"

    def __init__(self, store: Any, rank: int) -> None:
        self.store = store
        self.rank = rank

    @classmethod
    def of_this_launch(cls, timeout_s: float = 300.0) -> RankZeroTargets | None:
        """The store of this torchrun launch; None for a launch of one rank (nothing to agree on)."""
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return None
        import torch.distributed as dist

        client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                               timeout=timedelta(seconds=timeout_s))
        return cls(dist.PrefixStore(cls.PREFIX, client), int(os.environ["RANK"]))

    def agree(self, step: int, own_target_s: float) -> float:
        """Rank 0 publishes its target for ``step`` and keeps it; every other rank waits for it and takes it."""
        key = str(step)
        if self.rank == 0:
            self.store.set(key, repr(own_target_s))
            return own_target_s
        return float(self.store.get(key))


class SlowdownInjector:
    """Plants ``fraction`` of each step's natural duration in that step; call ``begin`` where the first step
    starts, and ``pause`` once per step, after the step's work is queued and before its end is marked."""

    RECENT_STEPS = 5
    """How many resolved steps the natural step duration is the median of."""

    def __init__(self, fraction: float, device_type: str, step_times: Sequence[float], *,
                 host_busy: Callable[[float], None] = busy_wait,
                 device_spin: Callable[[float], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_burn: Callable[[float, float], None] = burn,
                 cpu: Callable[[], float] | None = None,
                 targets: Callable[[], RankZeroTargets | None] = RankZeroTargets.of_this_launch) -> None:
        """``step_times``: on GPU, the recorder's resolved step times, a list that grows as steps resolve (empty
        on ranks that record nothing, which then plant nothing). On CPU each rank times its own steps on
        ``clock`` and ``cpu`` (its process's and workers' CPU seconds), plants with ``cpu_burn(cpu_s, wall_s)``, and
        takes the wall time from ``targets()``, called at the first plant (by then the script has started
        torch.distributed)."""
        if fraction < 0:
            raise ValueError(f"slowdown fraction must be >= 0, got {fraction}")
        self.fraction = fraction
        self._step_times = step_times
        self._on_cpu = device_type != "cuda"
        self._clock = clock
        self._step_began: float | None = None
        self._cpu_ahead = 0.0
        """CPU: CPU seconds planted beyond the plan, which the next step takes up to its own share of: below 0, a
        shortfall it owes (a rank whose threads keep more than one core busy reaches the wall target first every step);
        above 0, an overshoot taken off it (a host's stolen time counted as the thread's)."""
        self._cpu_burn = cpu_burn
        self._cpu_clock = cpu or (CpuClock().total if self._on_cpu and fraction > 0 else time.process_time)
        self._cpu_began = 0.0
        self._connect_targets = targets
        self._targets: RankZeroTargets | None = None
        self._host_busy = host_busy
        self._device_spin = device_spin
        if device_spin is None and device_type == "cuda" and fraction > 0:
            self._device_spin = DeviceSpin()
        self.planted: list[float] = []
        """Seconds planted in each step so far, in step order."""

    def natural_step_s(self) -> float | None:
        """The median of the last resolved steps, less what was planted in each; None until a step after the first
        resolved. The first step is left out: it carries compilation and autotuning (a compiled ViT-L-14's first
        step takes a minute), and a quarter of that planted into the next steps would only waste warm-up time."""
        resolved = len(self._step_times)
        if resolved < 2:
            return None
        recent = range(max(1, resolved - self.RECENT_STEPS), resolved)
        return statistics.median(self._step_times[i] - self.planted[i] for i in recent)

    def begin(self) -> None:
        """Marks where the first step begins (CPU: its natural duration is timed from here)."""
        self._step_began = self._clock()
        self._cpu_began = self._cpu_clock()

    def pause(self) -> float:
        """Plants this step's share; returns the seconds planted."""
        if self.fraction <= 0:
            return 0.0
        if self._on_cpu:
            return self._pause_cpu()
        natural = self.natural_step_s()
        delay = self.fraction * natural if natural else 0.0
        self.planted.append(delay)
        if delay > 0:
            if self._device_spin is not None:
                self._device_spin(delay)
            self._host_busy(delay)
        return delay

    def _pause_cpu(self) -> float:
        """F of this step's own elapsed time and CPU time, as measured. On shared cores a busy wait can end a
        scheduler slice past its wall deadline; that overrun stays in its step, as a slice lost by slower code would.
        Taken off the next step's plant instead, it left that step short of F, and the fastest step, which the CPU
        flavour gates, was often that one: beside two busy processes a 20 % plant moved it by as little as 15 %
        (docs/measurements.md#why-the-rules-are-what-they-are). The CPU clock's gated metric is the window's total, so
        its shortfall or overshoot is carried to the next step, one step's share at most."""
        now, cpu_now = self._clock(), self._cpu_clock()
        natural = now - self._step_began if self._step_began is not None else 0.0
        natural_cpu = cpu_now - self._cpu_began
        target, cpu_target = self._agreed(self.fraction * natural), self.fraction * natural_cpu
        share = max(0.0, cpu_target)
        owed = min(share, max(-share, self._cpu_ahead))
        if target > 0:
            agreeing = self._clock() - now
            self._cpu_burn(max(0.0, cpu_target - owed), max(0.0, target - agreeing))
        self._step_began, self._cpu_began = self._clock(), self._cpu_clock()
        planted = self._step_began - now
        self._cpu_ahead = owed + self._cpu_began - cpu_now - cpu_target
        self.planted.append(planted)
        return planted

    def _agreed(self, own_target_s: float) -> float:
        if not self.planted:
            self._targets = self._connect_targets()
        if self._targets is None:
            return own_target_s
        return self._targets.agree(len(self.planted), own_target_s)
