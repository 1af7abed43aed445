"""The second clock: each step's CPU time, the rank's process and its loader workers, read by the real recorder."""

import contextlib
import gc
import os
import subprocess
import sys
import time

import pytest
import torch
from fakes import FakeDeviceClock

from perfgate.measure.metrics import compute
from perfgate.rank.plant import SlowdownInjector, busy_wait
from perfgate.records.cpu_time import CpuClock, RunQueueWait, WorkerCpu
from perfgate.records.steps import RunRecords, StepRecord, StepRecorder, read_records

pytestmark = pytest.mark.floor
LOSS = {"loss": torch.zeros(())}
BURN_THEN_WAIT = ("import os, sys, time\n"
                  "end = time.process_time() + float(sys.argv[1])\n"
                  "while time.process_time() < end: pass\n"
                  "print('burnt', time.process_time(), flush=True)\n"
                  "time.sleep(float(sys.argv[2]))\n"
                  "os._exit(0)\n")
"""A child that spends a given CPU time, says so with all it spent (its interpreter's start included), then waits
(alive, spending nothing) for a given time and exits without the interpreter's teardown, whose CPU time it could not
have said (it grows on a slower machine, and with a coverage tracer that saves its data at exit)."""


@contextlib.contextmanager
def collector_paused():
    """Keeps Python's cyclic garbage collector out of a measured loop. In a pytest process a full pass costs tens of ms
    of CPU time (its whole object graph, not the loop's): one inside a short window moves that window's CPU time by
    several percent, which no clock under test caused (docs/measurements.md#why-the-rules-are-what-they-are)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def cpu_work(seconds: float) -> None:
    """Burns ``seconds`` of this process's CPU time, however long that takes on a shared core."""
    deadline = time.process_time() + seconds
    while time.process_time() < deadline:
        pass


def child(cpu_s: float, then_wait_s: float) -> tuple[subprocess.Popen, float]:
    """The child, and the CPU seconds it has spent by its own clock."""
    proc = subprocess.Popen([sys.executable, "-c", BURN_THEN_WAIT, str(cpu_s), str(then_wait_s)],
                            stdout=subprocess.PIPE, text=True)
    said, spent = proc.stdout.readline().split()
    assert said == "burnt"
    return proc, float(spent)


def test_worker_cpu_counts_live_children_and_reaped_ones():
    workers = WorkerCpu()
    assert workers.available, "this kernel has no /proc/<pid>/task/<pid>/children"
    before = workers()
    live, spent = child(0.3, 30)
    try:
        assert workers() - before == pytest.approx(spent, abs=0.02)
    finally:
        live.kill()
        live.wait()
    reaped, spent_too = child(0.2, 0)
    reaped.wait()
    assert workers() - before == pytest.approx(spent + spent_too, abs=0.04)


def test_each_step_carries_the_process_cpu_time_and_the_workers(tmp_path):
    """A step of 100 ms of the process's CPU work, then one in which a child worked 200 ms and the process waited."""
    recorder = StepRecorder(tmp_path / "steps.jsonl", device_type="cpu")
    with collector_paused():
        recorder.begin()
        cpu_work(0.1)
        recorder.end_step(0, samples=4, data_s=0.0, lr=None, scalars=LOSS)
        worker, spent = child(0.2, 0)
        worker.wait()
        recorder.end_step(1, samples=4, data_s=0.0, lr=None, scalars=LOSS)
        recorder.close()
    first, second = read_records(tmp_path / "steps.jsonl").steps
    assert first.cpu_s == pytest.approx(0.1, abs=0.01) and first.workers_cpu_s == pytest.approx(0.0, abs=0.011)
    # The kernel counts CPU time in ticks of 10 ms.
    assert second.cpu_s < 0.05 and second.workers_cpu_s == pytest.approx(spent, abs=0.02)


ITEM_CPU_S = 0.04
"""Enough work per item that a worker's own costs (fork, pickling), which grow on a slower machine, stay a small
share of it."""


class Burning(torch.utils.data.Dataset):
    """Each item costs its loader worker ITEM_CPU_S of CPU time."""

    def __len__(self):
        return 64

    def __getitem__(self, index):
        cpu_work(ITEM_CPU_S)
        return torch.zeros(4)


def test_a_dataloaders_workers_count_on_the_cpu_clock_so_a_slower_pipeline_shows_there(tmp_path):
    loader = torch.utils.data.DataLoader(Burning(), batch_size=2, num_workers=2)
    recorder = StepRecorder(tmp_path / "steps.jsonl", device_type="cpu")
    recorder.write("start", world_size=1)
    recorder.begin()
    for step, _ in enumerate(loader):
        cpu_work(0.005)
        recorder.end_step(step, samples=2, data_s=0.0, lr=None, scalars=LOSS)
    recorder.close()
    records = read_records(tmp_path / "steps.jsonl")
    workers = sum(s.workers_cpu_s for s in records.steps)
    measured = compute(records, warmup=0)
    # What the items and steps burnt is a floor; forking, pickling and a host's slow spells only add to it. Counting a
    # worker twice would read about +90 %.
    assert 0.95 <= workers / (64 * ITEM_CPU_S) <= 1.6
    assert 0.95 <= measured.cpu_seconds_per_sample / (ITEM_CPU_S + 0.0025) <= 1.6
    assert measured.workers_cpu_share > 0.6


def steps(cpu_s, workers_cpu_s=None, samples=8, step_s=0.1):
    return tuple(StepRecord(i, samples, step_s, 0.0, cpu_s=c, workers_cpu_s=w)
                 for i, (c, w) in enumerate(zip(cpu_s, workers_cpu_s or [None] * len(cpu_s))))


def test_cpu_metrics_are_per_sample_of_one_rank_and_the_median_step_of_the_process():
    records = RunRecords(start={"world_size": 2}, steps=steps([9.0, 0.2, 0.1, 0.3], [0.0, 0.1, 0.1, 0.1]))
    measured = compute(records, warmup=1)
    # 2 ranks share the 8 samples of a step: rank 0 trained 4 per step, 12 in the window, on 0.9 CPU seconds.
    assert measured.cpu_seconds_per_sample == pytest.approx(0.9 / 12)
    assert measured.host_cpu_per_step_s == pytest.approx(0.2)
    assert measured.workers_cpu_share == pytest.approx(0.3 / 0.9)
    # The CPU clock's best-of: the least step's process time per sample (0.1 s over 4), plus the workers' over the
    # window (their clock ticks are only precise summed): 0.025 + 0.3 / 12.
    assert measured.least_step_cpu_seconds_per_sample == pytest.approx(0.025 + 0.025)


def test_records_without_cpu_time_give_no_cpu_metrics():
    measured = compute(RunRecords(steps=steps([None, None, None])), warmup=1)
    assert (measured.cpu_seconds_per_sample, measured.least_step_cpu_seconds_per_sample, measured.host_cpu_per_step_s,
            measured.workers_cpu_share) == (None,) * 4


def real_loop(tmp_path, name, fraction=0.0, wait_s=0.0):
    """Steps of 40 ms of CPU work (and ``wait_s`` of sleeping), through the real recorder and injector."""
    recorder = StepRecorder(tmp_path / f"{name}.jsonl", device_type="cpu")
    recorder.write("start", world_size=1)
    injector = SlowdownInjector(fraction, "cpu", recorder.step_times)
    with collector_paused():
        recorder.begin()
        injector.begin()
        for step in range(8):
            cpu_work(0.04)
            time.sleep(wait_s)
            planted = injector.pause()
            recorder.end_step(step, samples=1, data_s=0.0, lr=None, scalars=LOSS, planted_s=planted or None)
        recorder.close()
    return compute(read_records(tmp_path / f"{name}.jsonl"), warmup=2)


@pytest.mark.serial
def test_the_planted_slowdown_moves_the_cpu_clock_by_the_fraction(tmp_path):
    """The rate moves to 1 / (1 + F) within 3 points, what the plant must hold beside two busy processes (there a
    plant that owed nothing after a step whose wall target came first fell short of F on the CPU time). Run alone:
    more load than that (the other xdist worker's launches) moves the median step well past 3 points (docs/clocks.md,
    docs/measurements.md#why-the-rules-are-what-they-are); a busy process this test started would count as its
    loader worker."""
    natural, planted = real_loop(tmp_path, "none"), real_loop(tmp_path, "planted", fraction=0.25)
    assert natural.cpu_seconds_per_sample / planted.cpu_seconds_per_sample == pytest.approx(0.8, abs=0.03)
    assert natural.host_cpu_per_step_s / planted.host_cpu_per_step_s == pytest.approx(0.8, abs=0.03)


def test_a_wait_moves_the_wall_clock_and_not_the_cpu_clock(tmp_path):
    """What each clock catches: a sleep (a lock, I/O, a slower peer) costs the wall clock all of it, the CPU clock
    only its wake-up (cold caches, the scheduler), about a millisecond a step
    (docs/measurements.md#why-the-rules-are-what-they-are). A CPU clock that counted the wait would read +100 ms; the
    bound is a tenth of that."""
    wait_s = 0.1
    natural = real_loop(tmp_path, "none")
    waiting = real_loop(tmp_path, "waiting", wait_s=wait_s)
    # One sample a step: per sample is per step.
    assert abs(waiting.cpu_seconds_per_sample - natural.cpu_seconds_per_sample) < 0.1 * wait_s
    assert abs(waiting.host_cpu_per_step_s - natural.host_cpu_per_step_s) < 0.1 * wait_s
    # The wall clock holds the step's CPU time and the wait on top. (Not compared with the natural steps: beside busy
    # processes the scheduler favours a task that slept, so a waiting loop's steps grow by less than the wait.)
    assert waiting.step_time_median_s >= waiting.host_cpu_per_step_s + wait_s


def test_a_cpu_clock_reads_the_process_and_its_workers():
    clock = CpuClock(process=lambda: 1.5, workers=lambda: 0.25)
    assert clock.read() == (1.5, 0.25) and clock.total() == 1.75
    assert CpuClock(process=lambda: 1.5, workers=lambda: None).total() == 1.5
    before = CpuClock().read()[0]
    busy_wait(0.05)
    assert CpuClock().read()[0] - before > 0


def test_on_gpu_a_steps_cpu_time_is_the_hosts_between_its_step_ends_however_late_the_step_resolves(tmp_path):
    """The host runs ahead of the device: a step's CPU time is read when the host ends it, not when it resolves."""
    host = {"cpu": 0.0}
    recorder = StepRecorder(tmp_path / "steps.jsonl", device_type="cpu", clock=FakeDeviceClock(),
                            cpu_clock=CpuClock(process=lambda: host["cpu"], workers=lambda: None))
    recorder.begin()
    for index, cpu_s in enumerate((0.1, 0.2, 0.3)):
        host["cpu"] += cpu_s
        recorder.end_step(index, samples=1, data_s=0.0, lr=None, scalars=LOSS)
    host["cpu"] += 5.0  # the host waits for the device at the end: not a step's CPU time
    recorder.close()
    got = read_records(tmp_path / "steps.jsonl").steps
    assert [s.cpu_s for s in got] == pytest.approx([0.1, 0.2, 0.3])
    assert all(s.workers_cpu_s is None for s in got)


RUN_QUEUE_CHILD = ("import os, sys, time\n"
                   "from perfgate.records.cpu_time import RunQueueWait\n"
                   "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
                   "waited = RunQueueWait()\n"
                   "wall, cpu, before = time.perf_counter(), time.process_time(), waited()\n"
                   "while time.perf_counter() < wall + 0.4: pass\n"
                   "spun = (waited() - before, time.perf_counter() - wall, time.process_time() - cpu)\n"
                   "before = waited()\n"
                   "time.sleep(0.4)\n"
                   "print(*spun, waited() - before)\n")
"""A child on one core: it spins for 0.4 s of wall time, then sleeps as long; it prints its threads' run-queue wait,
wall and CPU time while it spun, and its wait while it slept."""


@pytest.mark.serial
def test_the_run_queue_counts_a_neighbours_turns_and_not_the_processs_own_waits():
    """A process that shares its only core with a busy one: while it spins, its wall time is its CPU time and its wait
    for the core, and the wait is what the run queue counts; while it sleeps it is not runnable, so its blocked waits
    (a sleep, a lock, a barrier) do not count as a neighbour's. (Run serially: the busy process on the core would
    move the other worker's timings for a second.)"""
    if not RunQueueWait().available:
        pytest.skip("this kernel keeps no run-queue wait per thread (/proc/<pid>/task/<tid>/schedstat)")
    core = min(os.sched_getaffinity(0))
    neighbour = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\n"
                                  "print('pinned', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE, text=True)
    try:
        assert neighbour.stdout.readline().strip() == "pinned"
        done = subprocess.run([sys.executable, "-c", RUN_QUEUE_CHILD, str(core)], capture_output=True, text=True,
                              timeout=60, check=True)
    finally:
        neighbour.kill()
        neighbour.wait()
    spun_wait, wall, cpu, slept_wait = map(float, done.stdout.split())
    assert spun_wait > 0.2 * wall, "the neighbour took turns on the only core"
    # A spinning thread is running or waiting for the core; what else its wall time holds (a hypervisor's steal,
    # interrupts) is in neither count.
    assert 0.7 * (wall - cpu) <= spun_wait <= 1.05 * (wall - cpu)
    assert slept_wait < spun_wait / 3, "a sleep is not a wait for the core"


def test_a_steps_run_queue_wait_and_the_windows_turns(tmp_path):
    """Each step carries what its threads waited for a core; the window's turns are its CPU time and that wait over
    its CPU time, and a window where one step has no count has no turns."""
    waited = {"s": 0.0}
    recorder = StepRecorder(tmp_path / "steps.jsonl", device_type="cpu", clock=FakeDeviceClock(),
                            cpu_clock=CpuClock(process=lambda: 0.0, workers=lambda: None),
                            run_queue=lambda: waited["s"])
    recorder.begin()
    for index, wait_s in enumerate((0.0, 0.05, 0.1)):
        waited["s"] += wait_s
        recorder.end_step(index, samples=1, data_s=0.0, lr=None, scalars=LOSS)
    recorder.close()
    assert [s.run_queue_s for s in read_records(tmp_path / "steps.jsonl").steps] == pytest.approx([0.0, 0.05, 0.1])
    window = tuple(StepRecord(i, 8, 0.3, 0.0, cpu_s=0.2, run_queue_s=w) for i, w in enumerate((0.0, 0.1, 0.2)))
    assert compute(RunRecords(steps=window), warmup=1).run_queue_turns == pytest.approx((0.4 + 0.3) / 0.4)
    assert compute(RunRecords(steps=(*window, StepRecord(3, 8, 0.3, 0.0, cpu_s=0.2))), warmup=1).run_queue_turns \
        is None
