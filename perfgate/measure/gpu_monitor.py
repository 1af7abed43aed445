"""What the GPUs were doing while a case measured, sampled through NVML (nvidia-ml-py) from a thread.

Per GPU and sample: utilisation, memory used, power, SM clock and the clock-event (throttle) reasons.
The plugin keeps the samples taken during the measured window (from the moment the warm-up steps are
done to the last step) and summarises them: mean utilisation, peak memory, mean power, throttling
seen. Without NVML (no driver, no GPU) the monitor is absent, with its reason in one line.

Monitoring never fails a case, and one query a driver lacks costs only that field: drivers before R535 have no
``nvmlDeviceGetCurrentClocksEventReasons`` (the older ``...ThrottleReasons`` answers instead), and MIG slices
answer NotSupported for utilisation. Each query that fails is left out of the samples and named in ``error``.

The local launcher's GPUs are sampled from the pytest process. On other launchers each node samples its own
(``python -m perfgate.measure.gpu_monitor``, started by ``perfgate.launch.node_agent`` beside its torchrun agent) into a JSON-lines file
in the run's directory (one Sample per line, and ``{"problem": ...}`` lines), which the plugin reads back: NVML sees only the host it runs on.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from perfgate.launch.spec import NODE_SAMPLES

THROTTLE_REASONS = {
    "SwPowerCap": "power cap",
    "HwSlowdown": "hardware slowdown",
    "HwThermalSlowdown": "hardware thermal",
    "SwThermalSlowdown": "software thermal",
    "HwPowerBrakeSlowdown": "power brake",
}
"""Clock-event reasons that slow a busy GPU (idle, sync boost and application clocks are not throttling), by the
suffix of their constant: ``nvmlClocksEventReason*`` in nvidia-ml-py 12.535+, ``nvmlClocksThrottleReason*`` before
(the same bits)."""

REASON_QUERIES = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
"""The clock-event reasons query, newest first: the first is in drivers from R535 only (older ones raise
"Function Not Found"), the second is deprecated there but answers on every driver."""


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
    """One reading of one GPU; a field is None where its query failed (see GpuMonitor.error)."""

    t: float
    """Wall-clock time (``time.time()``): comparable with the step records' and other nodes' stamps."""
    gpu: str
    """The device as CUDA_VISIBLE_DEVICES names it (an index or a UUID), prefixed ``nodeN:`` on remote nodes."""
    utilization: float | None
    """Fraction of the sample period a kernel ran (NVML utilization.gpu / 100)."""
    memory_used_bytes: int | None
    power_w: float | None
    sm_clock_mhz: int | None
    throttle: tuple[str, ...] | None


def visible_devices(cuda_visible: str | None, count: int) -> list[str]:
    """The first ``count`` devices a node's ranks use: CUDA_VISIBLE_DEVICES' entries (indices, GPU or MIG UUIDs),
    or indices 0.. when it is unset."""
    if cuda_visible is None:
        return [str(i) for i in range(count)]
    return [entry.strip() for entry in cuda_visible.split(",") if entry.strip()][:count]


def device_handle(nvml: Any, device: str) -> Any:
    """The NVML handle of a CUDA_VISIBLE_DEVICES entry: an index, or a GPU/MIG UUID (CUDA accepts a unique prefix
    of one, NVML only the whole UUID, so a prefix is matched against the GPUs' UUIDs)."""
    if device.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(device))
    try:
        return nvml.nvmlDeviceGetHandleByUUID(device)
    except nvml.NVMLError:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            if _text(nvml.nvmlDeviceGetUUID(handle)).startswith(device):
                return handle
        raise


@dataclass
class GpuMonitor:
    """Samples the given devices (CUDA_VISIBLE_DEVICES entries) every ``interval_s`` until stopped; a context
    manager. ``on_sample`` sees each sample as it is taken (the node side writes them to its file)."""

    nvml: Any
    devices: Sequence[str]
    interval_s: float = 0.5
    label: str = ""
    """Put before each sample's device name (``node1:`` on a remote node)."""
    on_sample: Callable[[Sample], None] | None = None
    samples: list[Sample] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """What could not be sampled, one line each (a device without a handle, a query a driver lacks)."""

    def __post_init__(self) -> None:
        self.devices = [str(d) for d in self.devices]
        self._handles: dict[str, Any] = {}
        for device in self.devices:
            try:
                self._handles[device] = device_handle(self.nvml, device)
            except Exception as exc:
                self._note(f"no NVML handle for GPU {self.label}{device} ({exc}): not sampled")
        self._failed: set[tuple[str, str]] = set()
        self._reason_query: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="perfgate-gpu-monitor", daemon=True)

    @property
    def error(self) -> str:
        """Everything that could not be sampled, in one line; empty if nothing failed."""
        return "; ".join(self.problems)

    def __enter__(self) -> "GpuMonitor":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _note(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            for device, handle in self._handles.items():
                try:
                    sample = self._read(device, handle, now)
                except Exception as exc:
                    self._note(f"GPU monitoring stopped: reading GPU {self.label}{device} failed ({exc!r})")
                    return
                self.samples.append(sample)
                if self.on_sample is not None:
                    self.on_sample(sample)
            self._stop.wait(self.interval_s)

    def _query(self, device: str, what: str, read: Callable[[], Any]) -> Any:
        """One field of a sample; None once its query has failed on this device (named once in ``problems``)."""
        if (device, what) in self._failed:
            return None
        try:
            return read()
        except Exception as exc:
            self._failed.add((device, what))
            self._note(f"GPU {self.label}{device}: no {what} ({exc})")
            return None

    def _reasons(self, device: str, handle: Any) -> int:
        """The clock-event reasons bitmask, through the first query of REASON_QUERIES this driver answers."""
        names = [self._reason_query[device]] if device in self._reason_query else REASON_QUERIES
        failed: Exception = LookupError("this nvidia-ml-py has no clock-event reasons query")
        for name in names:
            query = getattr(self.nvml, name, None)
            if query is None:
                continue
            try:
                reasons = int(query(handle))
            except self.nvml.NVMLError as exc:
                failed = exc
                continue
            self._reason_query[device] = name
            return reasons
        raise failed

    def _read(self, device: str, handle: Any, now: float) -> Sample:
        nvml = self.nvml
        reasons = self._query(device, "clock-event reasons", lambda: self._reasons(device, handle))
        utilization = self._query(device, "utilisation", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0)
        memory = self._query(device, "memory", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used))
        power = self._query(device, "power", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        clock = self._query(device, "SM clock", lambda: int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)))
        throttle = None if reasons is None else tuple(
            text for suffix, text in THROTTLE_REASONS.items() if reasons & reason_bit(nvml, suffix))
        return Sample(t=now, gpu=f"{self.label}{device}", utilization=utilization, memory_used_bytes=memory,
                      power_w=power, sm_clock_mhz=clock, throttle=throttle)


def reason_bit(nvml: Any, suffix: str) -> int:
    return getattr(nvml, f"nvmlClocksEventReason{suffix}", None) or getattr(nvml, f"nvmlClocksThrottleReason{suffix}", 0)


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.mean(present) if present else None


def _peak(values: Sequence[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def summarize(samples: Sequence[Sample], start: float | None = None, end: float | None = None) -> dict[str, Any] | None:
    """Mean utilisation, peak memory, mean power, mean SM clock and throttling seen, per GPU and overall,
    over the samples between ``start`` and ``end`` (wall-clock seconds); None without samples there. A field no
    sample has is None."""
    window = [s for s in samples if (start is None or s.t >= start) and (end is None or s.t <= end)]
    if not window:
        return None
    per_gpu = {}
    for gpu in sorted({s.gpu for s in window}):
        mine = [s for s in window if s.gpu == gpu]
        per_gpu[gpu] = {
            "mean_utilization": _mean([s.utilization for s in mine]),
            "peak_memory_bytes": _peak([s.memory_used_bytes for s in mine]),
            "mean_power_w": _mean([s.power_w for s in mine]),
            "mean_sm_clock_mhz": _mean([s.sm_clock_mhz for s in mine]),
            "throttle": sorted({reason for s in mine for reason in s.throttle or ()}),
        }
    utilizations = [g["mean_utilization"] for g in per_gpu.values() if g["mean_utilization"] is not None]
    return {
        "samples": len(window),
        "mean_utilization": min(utilizations) if utilizations else None,
        "peak_memory_bytes": _peak([g["peak_memory_bytes"] for g in per_gpu.values()]),
        "mean_power_w": _mean([g["mean_power_w"] for g in per_gpu.values()]),
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


PR_SET_PDEATHSIG = 1
"""prctl(2): the signal this process gets when its parent exits."""


def sample_node(out: Path, node: int, gpus: int, alive: Callable[[], bool], nvml_loader=load_nvml,
                interval_s: float = 0.5) -> None:
    """Writes this node's samples to ``out`` while ``alive()``; a line saying why where it cannot sample."""
    with out.open("a") as fh:
        def write(obj: dict[str, Any]) -> None:
            fh.write(json.dumps(obj) + "\n")
            fh.flush()

        nvml, why_not = nvml_loader()
        if nvml is None:
            write({"problem": f"node {node}: {why_not}"})
            return
        devices = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), gpus)
        written = 0

        def write_problems() -> None:
            nonlocal written
            for problem in monitor.problems[written:]:
                write({"problem": problem})
                written += 1

        with GpuMonitor(nvml, devices, interval_s=interval_s, label=f"node{node}:",
                        on_sample=lambda s: write(dataclasses.asdict(s))) as monitor:
            while alive():
                write_problems()
                time.sleep(interval_s)
        write_problems()


def read_node_samples(workdir: Path, nodes: int) -> tuple[list[Sample], list[str]]:
    """Every node's samples and problems from the run's directory; a node that wrote nothing is a problem too
    (a torn last line, cut off when the run ended, is skipped)."""
    samples, problems = [], []
    for node in range(nodes):
        path = workdir / NODE_SAMPLES.format(node=node)
        lines = path.read_text().splitlines() if path.exists() else []
        if not lines:
            problems.append(f"node {node} wrote no GPU samples ({path.name} is missing or empty)")
        for line in lines:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "problem" in obj:
                problems.append(obj["problem"])
            else:
                samples.append(Sample(**{**obj, "throttle": None if obj["throttle"] is None else tuple(obj["throttle"])}))
    return samples, problems


def _watching(pid: int) -> Callable[[], bool]:
    """While ``pid`` lives. It is this sampler's parent (the node side exec'd into the agent), so on Linux the kernel
    also sends SIGTERM the moment it exits (PR_SET_PDEATHSIG), and nothing of the run outlives it by a poll."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass

    def alive() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().rpartition(")")[2].split()[0] != "Z"
        except OSError:
            return False
    return alive


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m perfgate.measure.gpu_monitor",
                                     description="sample this node's GPUs into a file while a process lives")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--gpus", type=int, required=True, help="how many of the visible devices the ranks use")
    parser.add_argument("--watch", type=int, required=True, help="sample while this process lives")
    cli = parser.parse_args()
    sample_node(cli.out, cli.node, cli.gpus, _watching(cli.watch))
