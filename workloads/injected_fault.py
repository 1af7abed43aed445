"""A deliberate failure planted in a rank (``--inject-fault KIND@RANK:STEP``), for perfgate's own fault-injection
tests: a crash, a kill, a hang, an out-of-memory error or a NaN loss, at a step or after the end record."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

import torch_compat


@dataclass(frozen=True)
class Fault:
    """A deliberate failure (``--inject-fault``), for the harness's own fault-injection tests."""

    kind: str
    rank: int
    step: int | None
    """None: at teardown, after the end record (``KIND@RANK:end``)."""

    KINDS = ("crash", "kill", "hang", "oom", "nan")

    @classmethod
    def parse(cls, text: str) -> "Fault":
        kind, _, where = text.partition("@")
        rank, _, step = where.partition(":")
        at_end_ok = step == "end" and kind != "nan"
        if kind not in cls.KINDS or not rank.isdigit() or not (step.isdigit() or at_end_ok):
            raise argparse.ArgumentTypeError(
                f"expected KIND@RANK:STEP with KIND one of {', '.join(cls.KINDS)} and STEP a number or 'end' "
                f"(not for nan), e.g. crash@1:3; got {text!r}")
        return cls(kind, int(rank), None if step == "end" else int(step))

    def strike(self, rank: int, step: int, batch: Any) -> Any:
        """Fails here if this is the rank and step; returns the batch (poisoned with NaN for ``nan``)."""
        if rank != self.rank or self.step is None or step < self.step:
            return batch
        if self.kind == "nan":
            return poisoned(batch)
        if step > self.step:
            return batch
        self._fail(f"perfgate injected fault: {self.kind} on rank {rank} at step {step}")

    def strike_at_end(self, rank: int) -> None:
        """Fails here, after the run's end record, if this is the rank of an ``end`` fault.

        A crash here leaves at once with its exit code: Python's own teardown would first spend about a second
        freeing torch (and can deadlock in gloo's, see leave_without_teardown), which a loaded host stretches
        past the launcher's teardown bound and turns the planted crash into a hang."""
        if rank == self.rank and self.step is None:
            self._fail(f"perfgate injected fault: {self.kind} on rank {rank} at teardown, after the end record",
                       at_once=True)

    def _fail(self, message: str, at_once: bool = False) -> NoReturn:
        print(message, file=sys.stderr, flush=True)
        if self.kind == "crash":
            if at_once:
                sys.stdout.flush()
                os._exit(13)
            raise SystemExit(13)
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind == "oom":
            raise torch_compat.OutOfMemoryError(f"{message} (as if the device ran out of memory)")
        while True:
            time.sleep(3600)


def poisoned(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch * float("nan") if batch.is_floating_point() else batch
    return type(batch)(poisoned(item) for item in batch)
