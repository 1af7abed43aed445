"""What the GPUs were doing while a case measured, sampled through NVML (nvidia-ml-py) from a thread.

Per GPU and sample: utilisation, memory used, power, SM clock and the clock-event (throttle) reasons.
The plugin keeps the samples taken during the measured window (from the moment the warm-up steps are
done to the last step) and summarises them: mean utilisation, peak memory, mean power, throttling
seen. Without NVML (no driver, no GPU) the monitor is absent, with its reason in one line.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

THROTTLE_REASONS = {
    "nvmlClocksEventReasonSwPowerCap": "power cap",
    "nvmlClocksEventReasonHwSlowdown": "hardware slowdown",
    "nvmlClocksEventReasonHwThermalSlowdown": "hardware thermal",
    "nvmlClocksEventReasonSwThermalSlowdown": "software thermal",
    "nvmlClocksEventReasonHwPowerBrakeSlowdown": "power brake",
}
"""Clock-event reasons that slow a busy GPU (idle, sync boost and application clocks are not throttling)."""


def load_nvml() -> tuple[Any | None, str]:
    """(the initialised pynvml module, "") or (None, why NVML cannot be used here)."""
    try:
        import pynvml
    except ImportError:
        return None, "GPU monitoring off: nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"GPU monitoring off: NVML cannot start here ({exc})"
    return pynvml, ""


@dataclass(frozen=True)
class Sample:
    t: float
    gpu: int
    utilization: float
    """Fraction of the sample period a kernel ran (NVML utilization.gpu / 100)."""
    memory_used_bytes: int
    power_w: float
    sm_clock_mhz: int
    throttle: tuple[str, ...]


@dataclass
class GpuMonitor:
    """Samples the given GPUs every ``interval_s`` until stopped; a context manager."""

    nvml: Any
    indices: Sequence[int]
    interval_s: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    error: str = ""
    """Why sampling stopped early (a query the GPU does not support, as on MIG slices); empty if it did not."""

    def __post_init__(self) -> None:
        self._handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="perfgate-gpu-monitor", daemon=True)

    def __enter__(self) -> "GpuMonitor":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for index, handle in zip(self.indices, self._handles):
                try:
                    self.samples.append(self._read(index, handle, now))
                except self.nvml.NVMLError as exc:
                    self.error = f"GPU monitoring stopped: NVML query failed on GPU {index} ({exc})"
                    return
            self._stop.wait(self.interval_s)

    def _read(self, index: int, handle: Any, now: float) -> Sample:
        nvml = self.nvml
        reasons = nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        return Sample(
            t=now, gpu=index,
            utilization=nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0,
            memory_used_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            sm_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            throttle=tuple(text for name, text in THROTTLE_REASONS.items() if reasons & getattr(nvml, name)),
        )


def summarize(samples: Sequence[Sample], start: float | None = None, end: float | None = None) -> dict[str, Any] | None:
    """Mean utilisation, peak memory, mean power, mean SM clock and throttling seen, per GPU and overall,
    over the samples between ``start`` and ``end`` (monotonic seconds); None without samples there."""
    window = [s for s in samples if (start is None or s.t >= start) and (end is None or s.t <= end)]
    if not window:
        return None
    per_gpu = {}
    for gpu in sorted({s.gpu for s in window}):
        mine = [s for s in window if s.gpu == gpu]
        per_gpu[str(gpu)] = {
            "mean_utilization": statistics.mean(s.utilization for s in mine),
            "peak_memory_bytes": max(s.memory_used_bytes for s in mine),
            "mean_power_w": statistics.mean(s.power_w for s in mine),
            "mean_sm_clock_mhz": statistics.mean(s.sm_clock_mhz for s in mine),
            "throttle": sorted({reason for s in mine for reason in s.throttle}),
        }
    return {
        "samples": len(window),
        "mean_utilization": min(g["mean_utilization"] for g in per_gpu.values()),
        "peak_memory_bytes": max(g["peak_memory_bytes"] for g in per_gpu.values()),
        "mean_power_w": statistics.mean(g["mean_power_w"] for g in per_gpu.values()),
        "throttle": sorted({reason for g in per_gpu.values() for reason in g["throttle"]}),
        "per_gpu": per_gpu,
    }


def timeline(samples: Sequence[Sample], start: float | None) -> list[dict[str, Any]]:
    """The samples as JSON rows timed from ``start`` (the window's opening), for the report's GPU plots."""
    return [{"t_s": round(s.t - (start or s.t), 3), "gpu": s.gpu, "utilization": s.utilization,
             "power_w": s.power_w, "memory_used_bytes": s.memory_used_bytes, "sm_clock_mhz": s.sm_clock_mhz}
            for s in samples]


def fingerprint(nvml: Any | None) -> dict[str, Any]:
    """GPU names, memory and UUIDs and the driver and CUDA driver versions, from NVML; {} without it."""
    if nvml is None:
        return {}
    gpus = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append({"name": _text(nvml.nvmlDeviceGetName(handle)),
                     "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                     "uuid": _text(nvml.nvmlDeviceGetUUID(handle))})
    cuda = nvml.nvmlSystemGetCudaDriverVersion()
    return {"driver": _text(nvml.nvmlSystemGetDriverVersion()), "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "gpu_count": len(gpus), "gpus": gpus}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
