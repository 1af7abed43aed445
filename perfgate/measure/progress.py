"""The live progress line of a case while it runs: ``case  step k/N  X samples/s  elapsed m:ss``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from perfgate.records.steps import StepRecord

NON_TTY_EVERY_S = 15.0


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


@dataclass
class Progress:
    """Formats ``case  step k/N  X samples/s  elapsed m:ss`` from step records as they arrive.

    ``write`` gets a line and whether it may overwrite the previous one (a terminal) or must be a new
    line (a CI log, where it is written at most every NON_TTY_EVERY_S seconds).
    """

    case: str
    total_steps: int | None
    write: Callable[[str, bool], None]
    overwrite: bool
    unit: str = "samples"
    steps_done: int = 0
    recent: list[StepRecord] = field(default_factory=list)
    _last_written: float = float("-inf")

    def line(self, elapsed_s: float) -> str:
        total = f"/{self.total_steps}" if self.total_steps else ""
        if self.steps_done == 0:
            state = "starting (torchrun, imports, model build)"
        else:
            seconds = sum(s.step_s for s in self.recent)
            rate = sum(s.samples for s in self.recent) / seconds if seconds > 0 else 0.0
            state = f"step {self.steps_done}{total}  {rate:,.1f} {self.unit}/s"
        return f"[perfgate] {self.case}  {state}  elapsed {clock(elapsed_s)}"

    def update(self, new_steps: Sequence[StepRecord], elapsed_s: float, now: float | None = None) -> None:
        self.steps_done += len(new_steps)
        self.recent = (self.recent + list(new_steps))[-10:]
        now = time.monotonic() if now is None else now
        if self.overwrite or now - self._last_written >= NON_TTY_EVERY_S:
            self.write(self.line(elapsed_s), self.overwrite)
            self._last_written = now
