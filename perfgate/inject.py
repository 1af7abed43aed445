"""A planted slowdown, to prove the gate catches one (``--perf-inject-slowdown``).

Each step is stretched by ``fraction`` of its own duration: on CPU the step sleeps that long on the
host; on GPU the device spins (``torch.cuda._sleep``) for that long, sized from the last step time
the recorder resolved, so the host never waits for the device. Imports torch only on GPU.
"""

from __future__ import annotations

import time
from typing import Callable


class SlowdownInjector:
    def __init__(self, fraction: float, device_type: str, last_step_s: Callable[[], float | None]) -> None:
        if fraction < 0:
            raise ValueError(f"slowdown fraction must be >= 0, got {fraction}")
        self.fraction = fraction
        self._device_type = device_type
        self._last_step_s = last_step_s
        self._step_started = time.perf_counter()
        self._cycles_per_s: float | None = None

    def step_started(self) -> None:
        self._step_started = time.perf_counter()

    def pause(self) -> None:
        """Adds the planted delay; call after the step's work is queued, before its end is marked."""
        if self.fraction <= 0:
            return
        if self._device_type != "cuda":
            time.sleep(self.fraction * (time.perf_counter() - self._step_started))
            return
        reference = self._last_step_s()
        if reference:
            import torch

            torch.cuda._sleep(int(self.fraction * reference * self._gpu_cycles_per_s()))

    def _gpu_cycles_per_s(self) -> float:
        """Calibrates the device spin once (one synchronize, before the first planted delay)."""
        if self._cycles_per_s is None:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            cycles = 50_000_000
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            self._cycles_per_s = cycles / (start.elapsed_time(end) / 1000.0)
        return self._cycles_per_s
