"""Record sources: where a case's workload leaves its step records, and how perfgate reads them, whole after a run
or as they grow during it (live progress, the teardown clock).

A case names its source (``Case(records=...)``); the default is perfgate's own JSON lines, which the workloads write
with ``StepRecorder``. ``OpenClipLog`` reads upstream open_clip_train's log instead, so an unmodified program is gated.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Protocol

from perfgate.records import openclip_log
from perfgate.records.steps import RecordsError, RecordsTail, RunRecords, StepRecord, read_records, step_from_dict


class Follower:
    """The step records a run has added since the last call, for live progress; ``finished`` once its end record
    has been seen (a source without one never finishes, and its teardown is then bounded by the timeout only)."""

    def __init__(self, read_new: Callable[[], tuple[list[StepRecord], bool]]) -> None:
        self._read_new = read_new
        self.finished = False

    def __call__(self) -> list[StepRecord]:
        steps, finished = self._read_new()
        self.finished = self.finished or finished
        return steps


class RecordSource(Protocol):
    """Where a workload leaves its step records, and how to read them (whole, or as they grow).

    A source that ``instruments`` runs the program unmodified and counts its steps from outside: ``wrap`` gives the
    command that does so. Otherwise the program writes its records itself, with ``args`` telling it where."""

    instruments: bool
    cpu_clock: bool
    """Whether its step records carry the CPU time of each step (perfgate's recorder does; a log does not)."""
    unit: str
    """What the records count as a sample (samples, tokens, images): results say "tokens/s" where it is tokens."""

    def args(self, workdir: Path) -> list[str]: ...

    def read(self, workdir: Path) -> RunRecords: ...

    def follow(self, workdir: Path) -> Follower: ...


@dataclass(frozen=True)
class JsonRecords:
    """perfgate's own step records: the workload is told where to write them with ``--records``."""

    filename: str = "steps.jsonl"
    instruments = False
    cpu_clock = True
    unit = "samples"

    def args(self, workdir: Path) -> list[str]:
        return ["--records", str(workdir / self.filename)]

    def read(self, workdir: Path) -> RunRecords:
        return read_records(workdir / self.filename)

    def follow(self, workdir: Path) -> Follower:
        tail = RecordsTail(workdir / self.filename)

        def read_new() -> tuple[list[StepRecord], bool]:
            new = tail.new_records()
            return [step_from_dict(obj) for obj in new if obj["kind"] == "step"], any(o["kind"] == "end" for o in new)

        return Follower(read_new)


@dataclass(frozen=True)
class OpenClipLog:
    """Upstream open_clip_train's rank-0 log (``--log-every-n-steps 1``), read as step records."""

    relpath: str
    instruments = False
    cpu_clock = False
    unit = "samples"

    def args(self, workdir: Path) -> list[str]:
        return []

    def read(self, workdir: Path) -> RunRecords:
        return openclip_log.records_from_log(openclip_log.read_log(workdir / self.relpath))

    def follow(self, workdir: Path) -> Follower:
        path = workdir / self.relpath
        seen = [0]

        def new_steps() -> tuple[list[StepRecord], bool]:
            if not path.exists():
                return [], False
            steps = openclip_log.records_from_log(openclip_log.parse_lines(path.read_text(errors="replace").splitlines()))
            fresh = list(steps.steps[seen[0]:])
            seen[0] = len(steps.steps)
            return fresh, False

        return Follower(new_steps)


@dataclass(frozen=True)
class OptimizerSteps:
    """An unmodified training script's optimizer steps as the step records (``perfgate.rank.instrument``).

    ``samples_per_step`` is per rank and per optimizer step (with gradient accumulation: micro-batches x micro-batch
    size); ``unit`` names what a sample is (samples, tokens, images). ``optimizer`` names the primary optimizer's
    class where a script steps several; ``flops_per_sample`` gives TFLOP/s and MFU. The script's argv stays exactly
    the case's entry and arguments: the length, the records and the plant all go through the wrapper."""

    samples_per_step: int
    unit: str = "samples"
    optimizer: str | None = None
    flops_per_sample: float | None = None
    precision: str | None = None
    """fp32, tf32, amp (fp16) or amp_bf16: the peak MFU is taken against, with ``flops_per_sample``."""
    filename: str = "steps.jsonl"
    instruments = True
    cpu_clock = True

    def __post_init__(self) -> None:
        if self.samples_per_step < 1:
            raise ValueError(f"OptimizerSteps(samples_per_step=...) must be >= 1, got {self.samples_per_step}")

    def wrap(self, program: list[str], workdir: Path, *, device: str, steps: int, inject_slowdown: float,
             cwd: Path | None, timeout_s: float) -> list[str]:
        """The rank's command: the wrapper, its settings, then ``--`` and the program as it is."""
        options = ["--records", str(workdir / self.filename), "--steps", str(steps),
                   "--samples-per-step", str(self.samples_per_step), "--unit", self.unit, "--device", device,
                   "--no-step-timeout", f"{0.9 * timeout_s:g}"]
        if self.optimizer:
            options += ["--optimizer", self.optimizer]
        if self.flops_per_sample:
            options += ["--flops-per-sample", str(self.flops_per_sample)]
        if self.precision:
            options += ["--precision", self.precision]
        if inject_slowdown:
            options += ["--inject-slowdown", str(inject_slowdown)]
        if cwd is not None:
            options += ["--cwd", str(cwd)]
        return ["-m", "perfgate.rank.instrument", *options, "--", *program]

    def args(self, workdir: Path) -> list[str]:
        return []

    def read(self, workdir: Path) -> RunRecords:
        return JsonRecords(self.filename).read(workdir)

    def follow(self, workdir: Path) -> Follower:
        return JsonRecords(self.filename).follow(workdir)


@dataclass(frozen=True)
class LogLines:
    """Step records from a script's own per-step log lines: ``pattern`` is a regular expression with named groups,
    ``step_s`` (seconds per step) or ``rate`` (samples per second), and optionally ``step``, searched in every line
    rank 0 wrote (its stdout and stderr as torchrun keeps them). The script runs its own length and has no plant.

    ``samples_per_step`` counts all ranks together, per logged step, as the log's rate does."""

    pattern: str
    samples_per_step: int
    unit: str = "samples"
    instruments = False
    cpu_clock = False

    def __post_init__(self) -> None:
        groups = re.compile(self.pattern).groupindex
        if "step_s" not in groups and "rate" not in groups:
            raise ValueError(f"LogLines pattern {self.pattern!r} needs a named group step_s (seconds per step) or "
                             "rate (samples per second)")

    def args(self, workdir: Path) -> list[str]:
        return []

    def steps(self, lines: Iterable[str]) -> list[StepRecord]:
        found = []
        regex = re.compile(self.pattern)
        for line in lines:
            match = regex.search(line)
            if match is None:
                continue
            values = match.groupdict()
            step_s = float(values["step_s"]) if values.get("step_s") else self.samples_per_step / float(values["rate"])
            step = int(values["step"]) if values.get("step") else len(found)
            found.append(StepRecord(step, self.samples_per_step, step_s, 0.0))
        return found

    def _lines(self, workdir: Path) -> list[str]:
        """Rank 0's output, stdout first: torchrun's ``node0/<run>/attempt_0/0/std{out,err}.log``."""
        lines: list[str] = []
        for name in ("stdout.log", "stderr.log"):
            for path in sorted(workdir.glob(f"node0/*/attempt_0/0/{name}")):
                lines.extend(path.read_text(errors="replace").splitlines())
        return lines

    def read(self, workdir: Path) -> RunRecords:
        steps = self.steps(self._lines(workdir))
        if not steps:
            logs = [path for name in ("stdout.log", "stderr.log")
                    for path in sorted(workdir.glob(f"node0/*/attempt_0/0/{name}")) if path.stat().st_size]
            log = shlex.quote(str(logs[0])) if logs else "LOG"
            raise RecordsError(f"no line of rank 0's output under {workdir} matches the LogLines pattern "
                               f"{self.pattern!r}. Try the pattern on that log: perfgate import-log lines {log} "
                               f"--pattern {shlex.quote(self.pattern)} --samples-per-step {self.samples_per_step}")
        return RunRecords(start={"source": "log_lines", "pattern": self.pattern}, steps=tuple(steps))

    def follow(self, workdir: Path) -> Follower:
        seen = [0]

        def new_steps() -> tuple[list[StepRecord], bool]:
            steps = self.steps(self._lines(workdir))
            fresh = steps[seen[0]:]
            seen[0] = len(steps)
            return fresh, False

        return Follower(new_steps)
