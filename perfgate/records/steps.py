"""Step records: the contract between a workload (writer) and the plugin (reader).

A workload's rank 0 appends one JSON object per line to a records file: a ``start`` record
(run facts), one ``step`` record per optimizer step, and an ``end`` record (peak memory), each stamped with
the wall-clock time it was written (``t``, for the launch's time accounting); optionally
a ``flops`` record (training FLOPs per sample), a ``probe`` record (the machine's speed right before
and after the measured window, see workloads/machine_probe.py) and ``phase`` records (benchy's IO and
SYNTHETIC throughputs, measured after the steps).
Records are written as soon as a step's timing is known, so the plugin can show progress by
tailing the file while the run is still going.

This module imports no pytest and no torch at import time: workloads import it under torchrun.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from perfgate.records.cpu_time import CpuClock, RunQueueWait
from perfgate.records.instructions import InstructionCounter, open_instruction_counter


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step as rank 0 saw it; ``step_s`` chains end-to-end with the previous step."""

    step: int
    samples: int
    step_s: float
    data_s: float
    loss: float | None = None
    lr: float | None = None
    t: float | None = None
    """Wall-clock time (``time.time()``) when rank 0 wrote the record, once the step was done."""
    planted_s: float | None = None
    """Seconds of planted slowdown in this step (``--inject-slowdown``); None where nothing was planted."""
    cpu_s: float | None = None
    """CPU seconds rank 0's process (all its threads) spent in the step, the second clock; None where the source
    cannot see the process (log lines)."""
    workers_cpu_s: float | None = None
    """CPU seconds rank 0's loader workers spent in the step (clock ticks: precise over a window, not a step)."""
    instructions: float | None = None
    """User-space instructions rank 0's process and loader workers retired in the step, the third clock; None where
    the host cannot count them (the start record's ``instruction_clock`` says why)."""
    run_queue_s: float | None = None
    """Seconds rank 0's threads were runnable in the step but waited for a core that ran another task: a neighbour's
    turns, read while the workload ran (and its own other tasks where they outnumber the cores). None on a GPU
    flavour, or where the kernel keeps no count."""


@dataclass(frozen=True)
class RunRecords:
    """Everything one run wrote: its start facts, its steps in order, and its end facts if it finished."""

    start: dict[str, Any] = field(default_factory=dict)
    steps: tuple[StepRecord, ...] = ()
    end: dict[str, Any] | None = None
    flops: dict[str, Any] | None = None
    probe: dict[str, Any] | None = None
    """Machine-speed probe readings around the window (``matmul_gflops``, ``copy_gbps``, and on a CPU each by the
    probe thread's CPU time, ``matmul_cpu_gflops`` and ``copy_cpu_gbps``)."""
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Benchy phases by name (``io``, ``synthetic``): their steps and samples/s."""


KINDS = {"start", "step", "end", "flops", "probe", "phase"}


class RecordsError(ValueError):
    """A records file that cannot be read as step records."""


def parse_line(line: str, source: str = "records") -> dict[str, Any] | None:
    """Decode one records line; blank lines are None, anything else malformed is an error."""
    line = line.strip()
    if not line:
        return None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordsError(f"{source}: not a JSON record: {line[:80]!r} ({exc.msg})") from None
    if not isinstance(obj, dict) or obj.get("kind") not in KINDS:
        raise RecordsError(f"{source}: record without a known 'kind': {line[:80]!r}")
    return obj


def optional_float(obj: dict[str, Any], name: str) -> float | None:
    return None if obj.get(name) is None else float(obj[name])


def step_from_dict(obj: dict[str, Any], source: str = "records") -> StepRecord:
    try:
        return StepRecord(
            step=int(obj["step"]),
            samples=int(obj["samples"]),
            step_s=float(obj["step_s"]),
            data_s=float(obj["data_s"]),
            loss=optional_float(obj, "loss"),
            lr=optional_float(obj, "lr"),
            t=optional_float(obj, "t"),
            planted_s=optional_float(obj, "planted_s"),
            cpu_s=optional_float(obj, "cpu_s"),
            workers_cpu_s=optional_float(obj, "workers_cpu_s"),
            instructions=optional_float(obj, "instructions"),
            run_queue_s=optional_float(obj, "run_queue_s"),
        )
    except KeyError as exc:
        raise RecordsError(f"{source}: step record without field {exc.args[0]!r}: {obj}") from None
    except (TypeError, ValueError):
        raise RecordsError(f"{source}: step record with a non-numeric field: {obj}") from None


def collect(objects: Iterator[dict[str, Any]], source: str = "records") -> RunRecords:
    facts: dict[str, dict[str, Any]] = {}
    steps: list[StepRecord] = []
    phases: dict[str, dict[str, Any]] = {}
    for obj in objects:
        kind = obj["kind"]
        body = {k: v for k, v in obj.items() if k != "kind"}
        if kind == "step":
            steps.append(step_from_dict(obj, source))
        elif kind == "phase":
            phases[str(body.get("phase"))] = body
        else:
            facts[kind] = body
    return RunRecords(start=facts.get("start", {}), steps=tuple(steps), end=facts.get("end"),
                      flops=facts.get("flops"), probe=facts.get("probe"), phases=phases)


def read_records(path: Path) -> RunRecords:
    """Read a whole records file. A missing file is an error: the run wrote nothing."""
    path = Path(path)
    if not path.exists():
        raise RecordsError(f"{path}: no step records were written (did rank 0 start training?). A workload writes "
                           "them with perfgate's StepRecorder at the path of its --records option; for a script that "
                           "does not, give its Case records=OptimizerSteps(...) or LogLines(...) (docs/own-script.md)")
    with path.open() as fh:
        return collect((obj for obj in (parse_line(line, str(path)) for line in fh) if obj), str(path))


class RecordsTail:
    """Reads the records appended since the last call, for live progress; tolerates a torn last line."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offset = 0
        self._partial = ""

    def new_records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open() as fh:
            fh.seek(self._offset)
            chunk = fh.read()
            self._offset = fh.tell()
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        return [obj for obj in (parse_line(line, str(self.path)) for line in lines) if obj]


class HostClock:
    """Host timestamps; used on CPU, where a step's work is done when the Python call returns. ``now`` is the
    time source: wall time (``time.perf_counter``) for measuring, another (a thread's CPU time) for tests."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now

    def mark(self) -> float:
        return self._now()

    @staticmethod
    def done(marker: float) -> bool:
        return True

    @staticmethod
    def wait(marker: float) -> None:
        return None

    @staticmethod
    def seconds(earlier: float, later: float) -> float:
        return later - earlier


class _CudaClock:
    """CUDA events on the current stream: a marker is read only once the device has passed it."""

    def __init__(self, torch_module: Any) -> None:
        self._torch = torch_module

    def mark(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def done(marker: Any) -> bool:
        return bool(marker.query())

    @staticmethod
    def wait(marker: Any) -> None:
        marker.synchronize()

    @staticmethod
    def seconds(earlier: Any, later: Any) -> float:
        return earlier.elapsed_time(later) / 1000.0


@dataclass
class _PendingStep:
    step: int | None
    """None for a gap: an interval that is not a step (see StepRecorder.end_gap)."""
    samples: int
    data_s: float
    lr: float | None
    end_marker: Any
    scalars: Any
    cpu: tuple[float, float | None]
    """The CPU clock when the step's end was marked on the host."""
    instructions: float | None
    """The instruction count then."""
    planted_s: float | None = None
    waited: float | None = None
    """The threads' wait in the run queue then."""


class StepRecorder:
    """Times steps on rank 0 without adding a device synchronize.

    Each step's end is a marker (a CUDA event on GPU); the step's time is the span between the
    previous step's end marker and this one, so consecutive step times add up to wall time. Markers
    are resolved late: a step is written once the device has reached its end marker, checked with a
    non-blocking query. Loss and other scalars are copied to pinned host memory asynchronously before
    the marker, so reading them then costs nothing. ``close`` waits for the last steps once. The CPU clock,
    the instruction counter and, on a CPU flavour, the threads' wait in the run queue are read on the host beside
    each marker (a step's CPU time is the host's between two step ends, on GPU too). ``instruction_clock`` says
    what the counter counts, or why nothing is counted, for the start record.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        device_type: str,
        on_step: Callable[[StepRecord, dict[str, float]], None] | None = None,
        clock: Any = None,
        cpu_clock: CpuClock | None = None,
        open_instructions: Callable[[], tuple[InstructionCounter | None, str]] = open_instruction_counter,
        run_queue: Callable[[], float | None] | None = None,
    ) -> None:
        self._path = Path(path) if path else None
        self._file = self._path.open("w") if self._path else None
        self._on_step = on_step
        self._cuda = device_type == "cuda"
        self._torch: Any = None
        if self._cuda:
            self._torch_module()
        self._clock = clock or (_CudaClock(self._torch) if self._cuda else HostClock())
        self._cpu_clock = cpu_clock or CpuClock()
        self._last_cpu: tuple[float, float | None] = (0.0, None)
        self._instructions: InstructionCounter | None = None
        self.instruction_clock = "not counted: this rank records no steps"
        if self.active:
            self._instructions, self.instruction_clock = open_instructions()
        self._last_instructions: float | None = None
        self._run_queue = None if self._cuda else (run_queue or RunQueueWait())
        """Read on a CPU flavour, where a neighbour's turns are what the verdict must tell from the code's."""
        self._last_waited: float | None = None
        self._pending: list[_PendingStep] = []
        self._spare_pinned: list[Any] = []
        """Pinned host buffers of resolved steps, reused: the device has passed their copies."""
        self.step_times: list[float] = []
        self.last_step_s: float | None = None
        self._last_end: Any = None
        self._data_started = 0.0

    @property
    def active(self) -> bool:
        return self._file is not None

    def write(self, kind: str, **facts: Any) -> None:
        """Appends one record, stamped with the wall-clock time it was written (``t``)."""
        if self._file is not None:
            self._file.write(json.dumps({"kind": kind, "t": time.time(), **facts}) + "\n")
            self._file.flush()

    def begin(self) -> None:
        """Marks the origin of the first step; call right before fetching its first batch."""
        if self.active:
            self._last_end = self._clock.mark()
            self._last_cpu = self._cpu_clock.read()
            self._last_instructions = self._count()
            self._last_waited = self._waited()
            self._data_started = time.perf_counter()

    def data_ready(self) -> float:
        """Host seconds the step waited for its batch (the loader's exposed latency)."""
        return time.perf_counter() - self._data_started

    def end_step(self, step: int, samples: int, data_s: float, lr: float | None, scalars: dict[str, Any],
                 planted_s: float | None = None) -> None:
        """Closes a step; ``scalars`` are 0-d tensors (loss, logit scale...) read once the step is done;
        ``planted_s`` what a planted slowdown added to it. A nonzero ``update_skipped`` scalar (a fused optimizer's
        ``found_inf``) makes the step a gap: its interval is left out, as an update that did not happen."""
        if not self.active:
            return
        names = list(scalars)
        host = None
        if names:
            stacked = self._torch_module().stack([scalars[name].detach().float().reshape(()) for name in names])
            if self._cuda:
                host = self._pinned_buffer(len(names))
                host.copy_(stacked, non_blocking=True)
            else:
                host = stacked
        self._pending.append(_PendingStep(step, samples, data_s, lr, self._clock.mark(), (names, host),
                                          self._cpu_clock.read(), self._count(), planted_s, self._waited()))
        self._data_started = time.perf_counter()
        self._resolve(block=False)

    def end_gap(self) -> None:
        """Ends an interval that is not a step (an update the GradScaler skipped): the next step is timed from here."""
        if self.active:
            self._pending.append(_PendingStep(None, 0, 0.0, None, self._clock.mark(), ([], None),
                                              self._cpu_clock.read(), self._count(), waited=self._waited()))

    def _torch_module(self) -> Any:
        """torch, imported once a step has scalars to keep or the clock is CUDA's: a loop that records neither (a test's
        toy of sleeps) starts without it."""
        if self._torch is None:
            import torch

            self._torch = torch
        return self._torch

    def _count(self) -> float | None:
        return self._instructions.read() if self._instructions is not None else None

    def _waited(self) -> float | None:
        return self._run_queue() if self._run_queue is not None else None

    def _pinned_buffer(self, size: int) -> Any:
        """A pinned buffer for one step's scalars: a spare one once steps resolve, so a step allocates nothing."""
        while self._spare_pinned:
            buffer = self._spare_pinned.pop()
            if buffer.numel() == size:
                return buffer
        return self._torch.empty(size, dtype=self._torch.float32, pin_memory=True)

    def _resolve(self, block: bool) -> None:
        while self._pending and (block or self._clock.done(self._pending[0].end_marker)):
            pending = self._pending.pop(0)
            if block:
                self._clock.wait(pending.end_marker)
            step_s = self._clock.seconds(self._last_end, pending.end_marker)
            self._last_end = pending.end_marker
            (process, workers), (process_before, workers_before) = pending.cpu, self._last_cpu
            self._last_cpu = pending.cpu
            instructions_before, self._last_instructions = self._last_instructions, pending.instructions
            waited_before, self._last_waited = self._last_waited, pending.waited
            names, host = pending.scalars
            values = dict(zip(names, (float(v) for v in host.tolist()))) if host is not None else {}
            if self._cuda and host is not None:
                self._spare_pinned.append(host)
            if pending.step is None or values.pop("update_skipped", 0.0) > 0:
                continue
            self.last_step_s = step_s
            self.step_times.append(step_s)
            record = StepRecord(pending.step, pending.samples, step_s, pending.data_s, values.get("loss"), pending.lr,
                                time.time(), pending.planted_s, cpu_s=process - process_before,
                                workers_cpu_s=None if workers is None or workers_before is None
                                else workers - workers_before,
                                instructions=None if pending.instructions is None or instructions_before is None
                                else pending.instructions - instructions_before,
                                run_queue_s=None if pending.waited is None or waited_before is None
                                else pending.waited - waited_before)
            self.write("step", **{k: v for k, v in asdict(record).items() if v is not None})
            if self._on_step is not None:
                self._on_step(record, values)

    def flush(self) -> None:
        """Writes the steps still in flight, waiting once for the device: call when the window is over, so the
        last step's timestamp is when it ended, not when the run closed."""
        if self.active:
            self._resolve(block=True)

    def close(self, **end_facts: Any) -> None:
        """Writes the steps still in flight (one wait for the device) and the end record, with the cores the rank
        could run on (a duet pair's launcher pins them: launch.cores)."""
        if not self.active:
            return
        self._resolve(block=True)
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        self.write("end", cores=cores, **end_facts)
        assert self._file is not None
        self._file.close()
        self._file = None
        if self._instructions is not None:
            self._instructions.close()
