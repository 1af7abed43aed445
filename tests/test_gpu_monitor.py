"""The NVML monitor and fingerprint, driven by a stand-in for pynvml (this machine has no NVIDIA driver),
and the report's GPU table."""

import time
from types import SimpleNamespace

import pytest

from perfgate import gpu_monitor, report


class FakeNvml:
    """The slice of pynvml the monitor calls, for two GPUs; GPU 1 is throttled by its power cap."""

    class NVMLError(Exception):
        pass

    NVML_CLOCK_SM = 1
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
    nvmlClocksEventReasonGpuIdle = 0x1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=[97, 60][handle])

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=(handle + 1) * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 650_000

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return [self.nvmlClocksEventReasonGpuIdle, self.nvmlClocksEventReasonSwPowerCap][handle]

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle}"

    def nvmlSystemGetDriverVersion(self):
        return "580.65.06"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000


def test_without_nvml_the_monitor_is_absent_with_one_line_why():
    nvml, why = gpu_monitor.load_nvml()
    if nvml is not None:
        pytest.skip("this host has an NVIDIA driver")
    assert why.startswith("GPU monitoring off: ") and "\n" not in why
    assert gpu_monitor.fingerprint(None) == {}


def test_monitor_samples_every_gpu_from_a_thread_until_stopped():
    with gpu_monitor.GpuMonitor(FakeNvml(), [0, 1], interval_s=0.01) as monitor:
        time.sleep(0.1)
    count = len(monitor.samples)
    time.sleep(0.05)
    assert count == len(monitor.samples) >= 4
    assert {s.gpu for s in monitor.samples} == {0, 1}
    first = next(s for s in monitor.samples if s.gpu == 1)
    assert (first.utilization, first.memory_used_bytes, first.power_w, first.sm_clock_mhz, first.throttle) == (
        0.6, 2 * 2**30, 650.0, 1980, ("power cap",))


class MigSliceNvml(FakeNvml):
    """A MIG slice: NVML answers NotSupported for utilisation."""

    def nvmlDeviceGetUtilizationRates(self, handle):
        raise self.NVMLError("Not Supported")


def test_a_query_the_gpu_does_not_support_stops_the_monitor_with_the_reason_not_the_case():
    with gpu_monitor.GpuMonitor(MigSliceNvml(), [0], interval_s=0.01) as monitor:
        time.sleep(0.05)
    assert monitor.samples == []
    assert monitor.error == "GPU monitoring stopped: NVML query failed on GPU 0 (Not Supported)"


def test_summary_covers_the_window_only_and_reports_the_least_busy_gpu():
    def sample(t, gpu, util):
        return gpu_monitor.Sample(t, gpu, util, (gpu + 1) * 2**30, 600.0 + t, 1900, ("power cap",) if t > 5 else ())

    samples = [sample(t, g, u) for t in range(10) for g, u in ((0, 0.95 if t else 0.0), (1, 0.9))]
    summary = gpu_monitor.summarize(samples, start=1, end=5)
    assert summary["samples"] == 10
    assert summary["mean_utilization"] == 0.9
    assert summary["per_gpu"]["0"]["mean_utilization"] == 0.95
    assert summary["peak_memory_bytes"] == 2 * 2**30
    assert summary["mean_power_w"] == 603.0
    assert summary["throttle"] == []
    assert gpu_monitor.summarize(samples, start=6)["throttle"] == ["power cap"]
    assert gpu_monitor.summarize(samples, start=20) is None


def test_the_timeline_for_the_report_times_samples_from_the_window_opening():
    samples = [gpu_monitor.Sample(100.0 + t, 0, 0.9, 2**30, 640.0, 1980, ()) for t in (0.5, 1.0)]
    assert gpu_monitor.timeline(samples, 100.0) == [
        {"t_s": t, "gpu": 0, "utilization": 0.9, "power_w": 640.0, "memory_used_bytes": 2**30, "sm_clock_mhz": 1980}
        for t in (0.5, 1.0)]


def test_fingerprint_names_gpus_memory_driver_and_cuda():
    print_ = gpu_monitor.fingerprint(FakeNvml())
    assert print_["driver"] == "580.65.06" and print_["cuda_driver"] == "13.0" and print_["gpu_count"] == 2
    assert print_["gpus"][0] == {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 2**30, "uuid": "GPU-0"}


def test_report_flags_a_case_under_the_utilisation_floor():
    gpu = {"mean_utilization": 0.62, "peak_memory_bytes": 40 * 2**30, "mean_power_w": 410.0, "throttle": []}
    rows = report.gpu_rows([{"case": "a", "gpu": gpu}, {"case": "b", "gpu": {**gpu, "mean_utilization": 0.97,
                                                                              "throttle": ["power cap"]}},
                            {"case": "cpu-case"}], min_utilization=0.9)
    assert rows == [["a", "62%", "40.0 GiB", "410 W", "none", "LOW UTILISATION (< 90%)"],
                    ["b", "97%", "40.0 GiB", "410 W", "power cap", ""]]
