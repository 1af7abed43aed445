"""The planted slowdown lengthens a step by what it says, whether the host or the device bounds the loop."""

import functools
import gc
import random
import statistics
import time
from datetime import timedelta
from typing import Sequence

import pytest
import torch

from perfgate.rank.plant import RankZeroTargets, SlowdownInjector, burn, busy_wait
from perfgate.records.steps import HostClock, StepRecorder

pytestmark = pytest.mark.floor
FRACTIONS = (0.03, 0.05, 0.10, 0.25)


class Pipeline:
    """A training loop's two timelines, simulated: each step costs the host ``host_s`` to issue and the device
    ``device_s`` to run, in order, once issued. The host runs at most ``ahead`` steps ahead of the device (as a
    caching allocator or a bounded launch queue holds it), and with ``sync`` waits for the device every step (a
    ``loss.item()``). A step ends at its end marker, which the device passes once everything before it ran."""

    def __init__(self, host_s: float, device_s: float, *, sync: bool = False, ahead: int = 2) -> None:
        self.host_s, self.device_s, self.sync, self.ahead = host_s, device_s, sync, ahead
        self.host = self.device = 0.0
        self.markers: list[float] = []
        self.step_times: list[float] = []

    def host_busy(self, seconds: float) -> None:
        self.host += seconds

    def device_spin(self, seconds: float) -> None:
        self.device = max(self.device, self.host) + seconds

    def run(self, steps: int, fraction: float) -> list[float]:
        injector = SlowdownInjector(fraction, "cuda", self.step_times, host_busy=self.host_busy,
                                    device_spin=self.device_spin)
        for step in range(steps):
            if step >= self.ahead:
                self.host = max(self.host, self.markers[step - self.ahead])
            self.host += self.host_s
            self.device = max(self.device, self.host) + self.device_s
            if self.sync:
                self.host = max(self.host, self.device)
            injector.pause()
            self.markers.append(max(self.device, self.host))
            self._resolve()
        return [b - a for a, b in zip([0.0, *self.markers], self.markers)]

    def _resolve(self) -> None:
        """Step times become known once the device has passed their marker (an event query), never sooner."""
        while len(self.step_times) < len(self.markers) and self.markers[len(self.step_times)] <= self.host:
            index = len(self.step_times)
            self.step_times.append(self.markers[index] - (self.markers[index - 1] if index else 0.0))


LOOPS = {
    "host-bound": dict(host_s=0.010, device_s=0.006),
    "device-bound": dict(host_s=0.004, device_s=0.010),
    "device busy 90 %": dict(host_s=0.009, device_s=0.010),
    "synchronized each step": dict(host_s=0.005, device_s=0.008, sync=True),
}


@pytest.mark.parametrize("fraction", FRACTIONS)
@pytest.mark.parametrize("loop", LOOPS)
def test_planted_slowdown_is_faithful_whatever_bounds_the_loop(loop, fraction):
    steps, warmup = 60, 10
    natural = statistics.fmean(Pipeline(**LOOPS[loop]).run(steps, 0.0)[warmup:])
    planted = statistics.fmean(Pipeline(**LOOPS[loop]).run(steps, fraction)[warmup:])
    assert natural / planted == pytest.approx(1 / (1 + fraction), abs=0.01)


def test_a_device_spin_alone_is_absorbed_by_a_host_bound_loop():
    """Why the host is delayed too: a spin-only plant measures less than it planted where the GPU idles between kernels
    (docs/measurements.md#why-the-rules-are-what-they-are)."""

    class SpinOnly(Pipeline):
        def host_busy(self, seconds: float) -> None:
            pass

    natural = statistics.fmean(Pipeline(**LOOPS["host-bound"]).run(60, 0.0)[10:])
    spun = statistics.fmean(SpinOnly(**LOOPS["host-bound"]).run(60, 0.25)[10:])
    assert spun == pytest.approx(natural, rel=0.01)


def test_the_natural_step_leaves_out_what_was_planted_so_the_plant_does_not_compound():
    times = [0.5, 0.12, 0.12, 0.12, 0.12, 0.12, 0.12]
    injector = SlowdownInjector(0.2, "cuda", times, host_busy=lambda s: None, device_spin=lambda s: None)
    injector.planted = [0.0, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02]
    assert injector.natural_step_s() == pytest.approx(0.10)
    injector.pause()
    assert injector.planted[-1] == pytest.approx(0.02)


def test_nothing_is_planted_before_a_step_after_the_first_resolved_or_at_fraction_zero():
    """The first step compiles and autotunes: a minute for a compiled ViT-L-14, never a step's natural length."""
    slept = []
    early = SlowdownInjector(0.1, "cuda", [60.0], host_busy=slept.append, device_spin=lambda s: None)
    early.pause()
    SlowdownInjector(0.0, "cuda", [60.0, 0.1], host_busy=slept.append, device_spin=lambda s: None).pause()
    assert slept == [] and early.planted == [0.0]
    later = SlowdownInjector(0.1, "cuda", [60.0, 0.1], host_busy=slept.append, device_spin=lambda s: None)
    later.planted = [0.0, 0.0]
    later.pause()
    assert slept == [pytest.approx(0.01)]
    with pytest.raises(ValueError, match=">= 0"):
        SlowdownInjector(-0.1, "cpu", [])


def cpu_work(seconds: float) -> None:
    """Burns ``seconds`` of this thread's CPU time, however long that takes on a shared core."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


def real_cpu_loop(path, fraction: float, step_work: Sequence[float]) -> list[float]:
    """A CPU loop through the real StepRecorder and SlowdownInjector, on this thread's CPU clock: its steps and plants
    are then fixed work, timed alike however the machine is shared. Wall-clock steps beside other work vary by the
    scheduler's slices (a busy wait can end milliseconds past its deadline:
    docs/measurements.md#why-the-rules-are-what-they-are), which is noise for benchmarks/planted_slowdown.py to
    average, not for a test. The garbage collector is off during the loop: late in a long pytest session a full
    collection costs tens of ms of this thread's CPU time, all of it in the one step it lands in."""
    gc.collect()
    gc.disable()
    try:
        return _timed_loop(path, fraction, step_work)
    finally:
        gc.enable()


def _timed_loop(path, fraction: float, step_work: Sequence[float]) -> list[float]:
    recorder = StepRecorder(path, device_type="cpu", clock=HostClock(time.thread_time))
    injector = SlowdownInjector(fraction, "cpu", recorder.step_times, clock=time.thread_time, cpu=time.thread_time,
                                cpu_burn=functools.partial(burn, cpu=time.thread_time, wall=time.thread_time))
    recorder.begin()
    injector.begin()
    for step, work in enumerate(step_work):
        cpu_work(work)
        injector.pause()
        recorder.end_step(step, samples=1, data_s=0.0, lr=None, scalars={"loss": torch.zeros(())})
    recorder.close()
    return recorder.step_times


@pytest.mark.parametrize("fraction", FRACTIONS)
def test_a_real_cpu_loop_runs_slower_by_the_planted_fraction(tmp_path, fraction):
    """Steps of 50 ms of work, with and without the plant, through the real recorder and injector: the median step
    grows by the fraction, within 1 point, on a quiet machine or a loaded one (the clock is the thread's CPU time).
    The median, because each step is planted F of itself: a step that costs more for a reason of its own does not move
    it, where it moves the mean by points (docs/measurements.md#why-the-rules-are-what-they-are)."""
    natural = real_cpu_loop(tmp_path / "none.jsonl", 0.0, [0.05] * 12)
    planted = real_cpu_loop(tmp_path / "planted.jsonl", fraction, [0.05] * 12)
    expected = 1 / (1 + fraction)
    assert statistics.median(natural[2:]) / statistics.median(planted[2:]) == pytest.approx(expected, abs=0.01)


def test_on_cpu_each_step_is_lengthened_by_the_fraction_of_itself_so_the_fastest_step_moves_by_it_too(tmp_path):
    """The CPU flavour gates the fastest step. Steps of 40 and 120 ms of work alternate: planting 25 % of a typical
    step (80 ms) would make the fast ones 50 % slower and the slow ones 17 %; the plant must make each 25 % slower.
    Each step is compared with its unplanted twin and the median taken per kind: the thread's CPU clock can still
    count time a host took from the VM mid-step, which moves a mean but not the median
    (docs/measurements.md#why-the-rules-are-what-they-are)."""
    work = [0.04 if step % 2 else 0.12 for step in range(10)]
    natural = real_cpu_loop(tmp_path / "none.jsonl", 0.0, work)
    planted = real_cpu_loop(tmp_path / "planted.jsonl", 0.25, work)
    assert min(natural[1:]) / min(planted[1:]) == pytest.approx(1 / 1.25, abs=0.01)
    ratios = [unplanted / with_plant for unplanted, with_plant in zip(natural, planted)]
    assert statistics.median(ratios[1::2]) == pytest.approx(1 / 1.25, abs=0.01)
    assert statistics.median(ratios[2::2]) == pytest.approx(1 / 1.25, abs=0.01)


class FakeClock:
    """Host time and CPU time that only the test moves: each plant advances each clock by what was asked plus an
    overrun (below 0 for the CPU clock: a plant that reached its wall target first)."""

    def __init__(self, overruns=(), cpu_overshoots=()):
        self.now = 0.0
        self.cpu_now = 0.0
        self.overruns = list(overruns)
        self.cpu_overshoots = list(cpu_overshoots)
        self.waits = []
        self.burns = []

    def __call__(self):
        return self.now

    def cpu(self):
        return self.cpu_now

    def step(self, wall_s, cpu_s=None):
        self.now += wall_s
        self.cpu_now += wall_s if cpu_s is None else cpu_s

    def burn(self, cpu_s, wall_s):
        self.waits.append(wall_s)
        self.burns.append(cpu_s)
        self.cpu_now += cpu_s + (self.cpu_overshoots.pop(0) if self.cpu_overshoots else 0.0)
        self.now += wall_s + (self.overruns.pop(0) if self.overruns else 0.0)

    def injector(self, fraction, step_times=(), targets=lambda: None):
        return SlowdownInjector(fraction, "cpu", list(step_times), clock=self, cpu=self.cpu, cpu_burn=self.burn,
                                targets=targets)


def test_every_rank_plants_on_cpu_each_by_its_own_step_whether_it_records_or_not():
    """Slower code is slower on every rank; only rank 0 records steps."""
    clock = FakeClock()
    injector = clock.injector(0.5, StepRecorder(None, device_type="cpu").step_times)
    injector.begin()
    clock.step(0.4)
    assert injector.pause() == pytest.approx(0.2)
    clock.step(0.2)
    assert injector.pause() == pytest.approx(0.1)
    assert clock.waits == [pytest.approx(0.2), pytest.approx(0.1)]


def test_every_rank_plants_rank_zeros_wall_time_through_the_launchs_store_not_f_of_its_own_wait():
    """Through a real TCPStore, as torchrun's workers share one: rank 1's step of 0.5 s includes 0.1 s waiting at the
    all-reduce for rank 0, so F of it would plant that wait again; it plants rank 0's 0.2 s, and its own CPU target."""
    server = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                        timeout=timedelta(seconds=30))
    client = torch.distributed.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=30))
    rank0, rank1 = FakeClock(), FakeClock()
    plants = [clock.injector(0.5, targets=lambda store=store, rank=rank: RankZeroTargets(store, rank))
              for clock, store, rank in ((rank0, server, 0), (rank1, client, 1))]
    for injector in plants:
        injector.begin()
    rank0.step(0.4)
    rank1.step(0.5, cpu_s=0.3)
    assert [injector.pause() for injector in plants] == [pytest.approx(0.2), pytest.approx(0.2)]
    assert rank1.burns == [pytest.approx(0.15)] and rank1.waits == [pytest.approx(0.2)]


class AllReducingRanks:
    """Two ranks' clocks in one simulated time, each step ending at a gradient all-reduce: a rank's work begins
    when its own plant ends, both ranks leave the all-reduce when the later one arrives, and each then runs its
    optimizer step, which takes each rank a little more or less time, before it plants."""

    def __init__(self, fraction: float, *, shared: bool, seed: int = 0) -> None:
        self.clocks = [FakeClock(), FakeClock()]
        store: dict[str, str] = {}
        fake_store = type("Store", (), {"set": store.__setitem__, "get": store.__getitem__})()
        self.plants = [clock.injector(fraction, targets=(lambda rank=rank: RankZeroTargets(fake_store, rank))
                                      if shared else (lambda: None)) for rank, clock in enumerate(self.clocks)]
        self.random = random.Random(seed)

    def window_s(self, steps: int, work_s: float = 0.012, optimizer_s: float = 0.002, jitter: float = 0.2) -> float:
        for injector in self.plants:
            injector.begin()
        for _ in range(steps):
            for clock in self.clocks:
                clock.step(work_s * (1 + self.random.uniform(-jitter, jitter)))
            left = max(clock.now for clock in self.clocks)
            for clock, injector in zip(self.clocks, self.plants):
                clock.now = left
                clock.step(optimizer_s * (1 + self.random.uniform(-jitter, jitter)))
                injector.pause()
        return max(clock.now for clock in self.clocks)


@pytest.mark.parametrize("fraction", (0.25, 1.0))
def test_ranks_sharing_rank_zeros_wall_time_plant_f_of_the_window_where_their_own_steps_fed_each_other(fraction):
    """Each rank planting F of its own step plants the other's excess over it again (its wait at the all-reduce): at
    100 % the excess never decays and the window grows by far more than F
    (docs/measurements.md#why-the-rules-are-what-they-are). With rank 0's wall time on both ranks, the window grows
    by F, within 1 point."""
    natural = AllReducingRanks(0.0, shared=True).window_s(200)
    shared = AllReducingRanks(fraction, shared=True).window_s(200)
    assert natural / shared == pytest.approx(1 / (1 + fraction), abs=0.01)
    if fraction == 1.0:
        apart = AllReducingRanks(fraction, shared=False).window_s(200)
        assert natural / apart < 1 / (1 + fraction) - 0.02, "the simulation no longer shows the feedback it guards"


def test_a_busy_wait_that_overran_its_deadline_keeps_the_overrun_in_its_step_so_the_fastest_step_moves_by_f():
    """On shared cores a busy wait can end a scheduler slice late. The overrun stays in its step, as a slice lost by
    slower code would: taken off the next plant, it left that step short of F, and the fastest step was that one."""
    clock = FakeClock(overruns=[0.004, 0.0, 0.004, 0.0])
    injector = clock.injector(0.1)
    injector.begin()
    steps = []
    for _ in range(4):
        clock.step(0.05)
        steps.append(0.05 + injector.pause())
    assert clock.waits == [pytest.approx(0.005)] * 4
    assert steps == [pytest.approx(0.059), pytest.approx(0.055), pytest.approx(0.059), pytest.approx(0.055)]
    assert min(steps) == pytest.approx(1.1 * 0.05)


def test_a_cpu_clock_that_overshot_its_plant_takes_at_most_one_steps_share_off_the_next():
    """The CPU clock's gated metric is the window's total, so an overshoot is taken off the next plant; one that
    outlasts the next step's share (a host's stolen time counted as the thread's, after a long first step) takes
    that share and no more, so the steps after it are planted whole."""
    clock = FakeClock(cpu_overshoots=[0.2])
    injector = clock.injector(0.1)
    injector.begin()
    for step_s in (0.5, 0.05, 0.05, 0.05):
        clock.step(step_s)
        injector.pause()
    assert clock.burns == [pytest.approx(0.05), 0.0, pytest.approx(0.005), pytest.approx(0.005)]


def test_a_cpu_shortfall_is_owed_to_the_next_step_up_to_its_share():
    """A rank whose threads keep more than one core busy reaches the wall target before its CPU target: the next step
    works for what was missing, up to its own share again."""
    clock = FakeClock(cpu_overshoots=[-0.03])
    injector = clock.injector(0.1)
    injector.begin()
    for step_s in (0.5, 0.05, 0.05):
        clock.step(step_s)
        injector.pause()
    assert clock.burns == [pytest.approx(0.05), pytest.approx(0.01), pytest.approx(0.005)]


def test_the_plant_is_work_on_the_core_not_a_sleep_that_hands_the_core_away():
    """A sleeping process gets its core back with the scheduler's credit (CFS favours a task that slept), so beside
    other work a sleep plants far less than it says (docs/measurements.md#why-the-rules-are-what-they-are). The plant
    must burn its own CPU time: a step of work is planted as work, on both clocks."""
    injector = SlowdownInjector(1.0, "cpu", [])
    injector.begin()
    cpu_work(0.05)
    cpu_before = time.process_time()
    planted = injector.pause()
    assert planted >= 0.05
    # The step's CPU time is planted again as CPU time, up to its wall target: idle, all 50 ms of it; on a shared core
    # the plant's share can be smaller than its step's was (beside busy processes:
    # docs/measurements.md#why-the-rules-are-what-they-are). A sleep would use microseconds, so the floor is a fifth
    # of the step's: its share would have to fall fivefold from one 50 ms to the next. The plant never works beyond
    # the step's CPU time.
    assert 0.01 < time.process_time() - cpu_before < 0.05 + 0.005, "the plant slept instead of working"


def test_on_cpu_the_plant_moves_both_clocks_by_the_fraction_working_for_the_cpu_time_and_waiting_for_the_rest():
    """A step of 40 ms on a core and 10 ms waiting (for the other rank, for I/O): a 25 % plant works 10 ms of CPU time
    and waits 2.5 ms more, so the step's CPU time and its wall time both grow by 25 %."""
    clock = FakeClock()
    injector = clock.injector(0.25)
    injector.begin()
    clock.step(0.05, cpu_s=0.04)
    assert injector.pause() == pytest.approx(0.0125)
    assert clock.burns == [pytest.approx(0.01)] and clock.waits == [pytest.approx(0.0125)]


def test_burn_works_for_the_cpu_time_then_waits_out_the_wall_time_or_stops_at_the_wall_time():
    # A wall target 15 times the CPU time: the process needs only a 15th of a core to finish its work inside it.
    began_wall, began_cpu = time.perf_counter(), time.process_time()
    burn(0.02, 0.3)
    assert time.perf_counter() - began_wall >= 0.3
    assert time.process_time() - began_cpu == pytest.approx(0.02, abs=0.01)
    began_wall = time.perf_counter()
    burn(10.0, 0.03)
    assert 0.03 <= time.perf_counter() - began_wall < 1.0, "a rank that keeps more than a core busy stops at the wall"


def test_records_carry_what_was_planted_and_the_metrics_what_the_window_applied(tmp_path):
    from perfgate.measure.metrics import compute
    from perfgate.records.steps import read_records

    recorder = StepRecorder(tmp_path / "steps.jsonl", device_type="cpu")
    injector = SlowdownInjector(0.25, "cpu", recorder.step_times)
    recorder.begin()
    injector.begin()
    for step in range(6):
        busy_wait(0.02)
        planted = injector.pause()
        recorder.end_step(step, samples=1, data_s=0.0, lr=None, scalars={"loss": torch.zeros(())}, planted_s=planted)
    recorder.close()
    records = read_records(tmp_path / "steps.jsonl")
    assert all(s.planted_s > 0 for s in records.steps)
    window = records.steps[1:]
    planted = sum(s.planted_s for s in window)
    unplanted = sum(s.step_s for s in window) - planted
    assert compute(records, warmup=1).planted_fraction == pytest.approx(planted / unplanted)
    unplanted = StepRecorder(tmp_path / "none.jsonl", device_type="cpu")
    unplanted.begin()
    unplanted.end_step(0, samples=1, data_s=0.0, lr=None, scalars={"loss": torch.zeros(())})
    unplanted.close()
    assert "planted_s" not in (tmp_path / "none.jsonl").read_text()
