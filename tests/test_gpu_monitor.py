"""The NVML monitor and fingerprint, driven by a stand-in for pynvml (this machine has no NVIDIA driver) that
fails where real drivers do, and the report's GPU table."""

import json
import threading
import time
from types import SimpleNamespace

import pytest
from fakes import record
from pace import wait_until

from perfgate.config.cases import Case, CaseRun, Flavour
from perfgate.launch.hardware import Hardware
from perfgate.launch.plan import Plan
from perfgate.launch.spec import LaunchResult, LaunchSpec
from perfgate.measure import gpu_monitor
from perfgate.measure.measurer import LowGpuUtilizationWarning, Measurer
from perfgate.report import tables


class FakeNvml:
    """The slice of pynvml the monitor calls, for two GPUs; GPU 1 is throttled by its power cap. Errors are
    raised as pynvml raises them: NVMLError subclasses carrying NVML's return code."""

    class NVMLError(Exception):
        def __init__(self, value, text):
            super().__init__(text)
            self.value = value

    UUIDS = ("GPU-aaaa0000-1111-2222-3333-444455556666", "GPU-bbbb0000-1111-2222-3333-444455556666")

    NVML_CLOCK_SM = 1
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
    nvmlClocksEventReasonGpuIdle = 0x1

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= self.nvmlDeviceGetCount():
            raise self.NVMLError(2, "Invalid Argument")
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.UUIDS:
            raise self.NVMLError(6, "Not Found")
        return self.UUIDS.index(uuid)

    def nvmlDeviceGetCount(self):
        return 2

    reads = 0
    """Utilisation queries so far: one a sample of one GPU, so a test waits on them rather than sleeping."""

    def nvmlDeviceGetUtilizationRates(self, handle):
        self.reads += 1
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
        return self.UUIDS[handle]

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


def sampled(monitor, count):
    """Waits until the monitor has taken ``count`` samples: its thread may wait its turn for a core."""
    wait_until(lambda: len(monitor.samples) >= count, f"{count} GPU samples")


def test_monitor_samples_every_gpu_from_a_thread_until_stopped():
    with gpu_monitor.GpuMonitor(FakeNvml(), ["0", "1"], interval_s=0.01) as monitor:
        sampled(monitor, 4)
    assert len(monitor.samples) >= 4
    assert not [thread for thread in threading.enumerate() if thread.name == "perfgate-gpu-monitor"], \
        "the sampling thread has ended with the context"
    assert {s.gpu for s in monitor.samples} == {"0", "1"}
    first = next(s for s in monitor.samples if s.gpu == "1")
    assert (first.utilization, first.memory_used_bytes, first.power_w, first.sm_clock_mhz, first.throttle) == (
        0.6, 2 * 2**30, 650.0, 1980, ("power cap",))
    assert monitor.error == ""


class OldDriverNvml(FakeNvml):
    """A driver before R535 under a current nvidia-ml-py: the clock-event reasons query is not in the driver's
    library, so pynvml raises NVMLError_FunctionNotFound (code 13) on each call; the older throttle-reasons query
    answers."""

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        raise self.NVMLError(13, "Function Not Found")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return [0x1, 0x4][handle]


class OldPynvml(OldDriverNvml):
    """An nvidia-ml-py from before the rename: no clock-event names at all, only ...ThrottleReason... ones."""

    nvmlDeviceGetCurrentClocksEventReasons = None
    nvmlClocksEventReasonSwPowerCap = None
    nvmlClocksThrottleReasonSwPowerCap = 0x4


@pytest.mark.parametrize("nvml", [OldDriverNvml(), OldPynvml()], ids=["driver-before-r535", "old-nvidia-ml-py"])
def test_an_older_driver_is_sampled_through_the_throttle_reasons_query(nvml):
    with gpu_monitor.GpuMonitor(nvml, ["0", "1"], interval_s=0.01) as monitor:
        sampled(monitor, 4)
    throttled = [s for s in monitor.samples if s.gpu == "1"]
    assert len(throttled) >= 2 and all(s.throttle == ("power cap",) and s.utilization == 0.6 for s in throttled)
    assert monitor.error == ""


class MigSliceNvml(FakeNvml):
    """A MIG slice: NVML answers NotSupported for utilisation."""

    def nvmlDeviceGetUtilizationRates(self, handle):
        raise self.NVMLError(3, "Not Supported")


def test_a_query_the_gpu_does_not_support_leaves_that_field_out_and_says_so_once():
    with gpu_monitor.GpuMonitor(MigSliceNvml(), ["0"], interval_s=0.01) as monitor:
        sampled(monitor, 2)
    assert len(monitor.samples) >= 2
    assert all(s.utilization is None and s.power_w == 650.0 and s.memory_used_bytes == 2**30 for s in monitor.samples)
    assert monitor.error == "GPU 0: no utilisation (Not Supported)"
    summary = gpu_monitor.summarize(monitor.samples)
    assert summary["mean_utilization"] is None and summary["mean_power_w"] == 650.0
    assert tables.gpu_rows([record("a", gpu=summary)], 0.9) == [["a", "-", "1.0 GiB", "650 W", "none", ""]]


class NoHandleNvml(FakeNvml):
    """A GPU NVML cannot open (lost off the bus, or not visible to this container)."""

    def nvmlDeviceGetHandleByIndex(self, index):
        if index == 1:
            raise self.NVMLError(15, "GPU is lost")
        return index


def test_a_gpu_without_a_handle_is_left_out_and_named_never_raised():
    with gpu_monitor.GpuMonitor(NoHandleNvml(), ["0", "1"], interval_s=0.01) as monitor:
        sampled(monitor, 2)
    assert {s.gpu for s in monitor.samples} == {"0"}
    assert monitor.error == "no NVML handle for GPU 1 (GPU is lost): not sampled"


@pytest.mark.parametrize("visible", [FakeNvml.UUIDS[1], FakeNvml.UUIDS[1][:12]], ids=["uuid", "uuid-prefix"])
def test_gpus_named_by_uuid_in_cuda_visible_devices_are_the_ones_sampled(visible):
    with gpu_monitor.GpuMonitor(FakeNvml(), [visible], interval_s=0.01) as monitor:
        sampled(monitor, 1)
    assert monitor.samples and all(s.gpu == visible and s.utilization == 0.6 for s in monitor.samples)


def test_a_visible_devices_list_of_uuids_and_mig_slices_is_kept_as_cuda_names_it():
    visible = f"{FakeNvml.UUIDS[1]},MIG-1234abcd-0000-0000-0000-000000000000"
    assert gpu_monitor.visible_devices(visible, 1) == [FakeNvml.UUIDS[1]]
    assert gpu_monitor.visible_devices(visible, 4) == visible.split(",")
    assert gpu_monitor.visible_devices(None, 2) == ["0", "1"]


def gpu_plan(tmp_path, devices_per_node, node_gpu_samples=False, nodes=1):
    case = Case("w", "c", ("w.py",), gpu=Flavour({}, steps=4, warmup=1))
    spec = LaunchSpec(entry=(), workdir=tmp_path / "work", nodes=nodes, devices_per_node=devices_per_node,
                      node_gpu_samples=node_gpu_samples)
    return Plan(CaseRun(case, "gpu"), spec, Hardware("cpu", 2, "NVIDIA H100 80GB HBM3", 2), "k", "k", nodes, 4, 1,
                tmp_path / "b.json", "suite.py::test[c-gpu]")


class RecordsWritingLauncher:
    """Stands in for a launcher: writes a finished run's records while polling, as a real launch would. With
    ``sampled_by`` (a FakeNvml), the last step waits for two more of its samples, so that one falls inside the window
    however late the monitor's thread gets a core. The nodes' samples are stamped inside the window the measurer saw
    (after its poll of the second step)."""

    def __init__(self, node_samples=None, sampled_by=None):
        self.node_samples = node_samples or {}
        self.sampled_by = sampled_by

    def launch(self, spec, on_poll=None):
        spec.workdir.mkdir(parents=True)
        records = spec.workdir / "steps.jsonl"
        with records.open("w") as fh:
            fh.write(json.dumps({"kind": "start", "t": time.time(), "world_size": 1, "global_batch": 8}) + "\n")
            for step in range(4):
                if step == 3 and self.sampled_by is not None:
                    before = self.sampled_by.reads
                    wait_until(lambda: self.sampled_by.reads >= before + 2, "two GPU samples in the window")
                fh.write(json.dumps({"kind": "step", "step": step, "samples": 8, "step_s": 0.03, "data_s": 0.0,
                                     "loss": 1.0, "t": time.time()}) + "\n")
                fh.flush()
                on_poll(0.03 * step)
                if step == 1:
                    inside = time.time()
            time.sleep(0.03)
            on_poll(0.2)
            fh.write(json.dumps({"kind": "end", "t": time.time(), "peak_memory_bytes": 1}) + "\n")
        for node, rows in self.node_samples.items():
            (spec.workdir / gpu_monitor.NODE_SAMPLES.format(node=node)).write_text("".join(
                json.dumps({**row, "t": inside} if "gpu" in row else row) + "\n" for row in rows))
        return LaunchResult(0.2, (("torchrun", "w.py"),), ())


def test_the_case_samples_the_gpus_its_uuids_name_not_nvml_indices(tmp_path):
    plan, nvml = gpu_plan(tmp_path, [FakeNvml.UUIDS[1]]), FakeNvml()
    measurer = Measurer(plan, record("w-c-gpu"), launcher=RecordsWritingLauncher(sampled_by=nvml), root=tmp_path,
                        nvml=lambda: (nvml, ""))
    measurer.launch_once(1)
    assert list(measurer.result.gpu["per_gpu"]) == [FakeNvml.UUIDS[1]]
    assert measurer.result.gpu["mean_utilization"] == 0.6
    assert measurer.result.gpu_monitor is None


def test_a_gpu_busy_less_than_asked_is_flagged_naming_what_else_binds_the_case(tmp_path):
    plan, nvml = gpu_plan(tmp_path, [FakeNvml.UUIDS[1]]), FakeNvml()
    measurer = Measurer(plan, record("w-c-gpu"), launcher=RecordsWritingLauncher(sampled_by=nvml), root=tmp_path,
                        nvml=lambda: (nvml, ""))
    measurer.launch_once(1)
    with pytest.warns(LowGpuUtilizationWarning, match=r"w-c-gpu: the least busy GPU was utilised 60% of the measured "
                                                      r"window \(< 90%, --perf-min-gpu-util\): the case is bound by "
                                                      r"something other than the GPU \(input pipeline, host"):
        measurer.finish(0.9)
    assert json.loads((plan.spec.workdir / "result.json").read_text())["warnings"][0]["category"] == \
        "LowGpuUtilizationWarning"


def test_an_nvml_that_cannot_open_a_gpu_never_fails_the_case(tmp_path):
    plan = gpu_plan(tmp_path, ["1"])
    measurer = Measurer(plan, record("w-c-gpu"), launcher=RecordsWritingLauncher(), root=tmp_path,
                        nvml=lambda: (NoHandleNvml(), ""))
    measurer.launch_once(1)
    assert measurer.result.runs == 1 and measurer.result.gpu is None
    assert measurer.result.gpu_monitor == "no NVML handle for GPU 1 (GPU is lost): not sampled"


def test_remote_nodes_samples_are_read_from_the_run_directory_with_what_they_could_not_sample(tmp_path):
    """--launcher slurm / ssh: NVML here sees only this host, so each node's sampler writes its own file."""
    sample = {"gpu": "node0:0", "utilization": 0.9, "memory_used_bytes": 2**30, "power_w": 500.0,
              "sm_clock_mhz": 1900, "throttle": []}
    launcher = RecordsWritingLauncher({0: [sample] * 5,
                                       1: [{"problem": "node 1: GPU monitoring off: NVML cannot start here "
                                                       "(Driver Not Loaded)"}]})
    plan = gpu_plan(tmp_path, None, node_gpu_samples=True, nodes=2)

    def unused_nvml():
        raise AssertionError("remote nodes' GPUs are not sampled from the pytest process")

    measurer = Measurer(plan, record("w-c-gpu"), launcher=launcher, root=tmp_path, nvml=unused_nvml)
    measurer.launch_once(1)
    assert measurer.result.gpu_monitor == "node 1: GPU monitoring off: NVML cannot start here (Driver Not Loaded)"
    assert list(measurer.result.gpu["per_gpu"]) == ["node0:0"]


def test_a_node_sampler_writes_samples_while_its_process_lives_and_why_it_cannot(tmp_path):
    beats = iter([True] * 4 + [False])
    out = tmp_path / "gpus-node1.jsonl"
    gpu_monitor.sample_node(out, 1, 2, lambda: next(beats), nvml_loader=lambda: (MigSliceNvml(), ""), interval_s=0.01)
    samples, problems = gpu_monitor.read_node_samples(tmp_path, 2)
    assert {s.gpu for s in samples} == {"node1:0", "node1:1"} and all(s.utilization is None for s in samples)
    assert problems == ["node 0 wrote no GPU samples (gpus-node0.jsonl is missing or empty)",
                        "GPU node1:0: no utilisation (Not Supported)", "GPU node1:1: no utilisation (Not Supported)"]
    off = tmp_path / "off"
    off.mkdir()
    gpu_monitor.sample_node(off / "gpus-node0.jsonl", 0, 1, lambda: True, nvml_loader=lambda: (None, "GPU monitoring "
                            "off: NVML cannot start here (Driver Not Loaded)"))
    assert gpu_monitor.read_node_samples(off, 1) == (
        [], ["node 0: GPU monitoring off: NVML cannot start here (Driver Not Loaded)"])


def test_summary_covers_the_window_only_and_reports_the_least_busy_gpu():
    def sample(t, gpu, util):
        return gpu_monitor.Sample(t, str(gpu), util, (gpu + 1) * 2**30, 600.0 + t, 1900, ("power cap",) if t > 5 else ())

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
    samples = [gpu_monitor.Sample(100.0 + t, "0", 0.9, 2**30, 640.0, 1980, ()) for t in (0.5, 1.0)]
    assert gpu_monitor.timeline(samples, 100.0) == [
        {"t_s": t, "gpu": "0", "utilization": 0.9, "power_w": 640.0, "memory_used_bytes": 2**30, "sm_clock_mhz": 1980}
        for t in (0.5, 1.0)]


def test_fingerprint_names_gpus_memory_driver_and_cuda():
    print_ = gpu_monitor.fingerprint(FakeNvml())
    assert print_["driver"] == "580.65.06" and print_["cuda_driver"] == "13.0" and print_["gpu_count"] == 2
    assert print_["gpus"][0] == {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 2**30,
                                 "uuid": FakeNvml.UUIDS[0]}


def test_report_flags_a_case_under_the_utilisation_floor():
    gpu = {"mean_utilization": 0.62, "peak_memory_bytes": 40 * 2**30, "mean_power_w": 410.0, "throttle": []}
    rows = tables.gpu_rows([record("a", gpu=gpu),
                            record("b", gpu={**gpu, "mean_utilization": 0.97, "throttle": ["power cap"]}),
                            record("cpu-case")], min_utilization=0.9)
    assert rows == [["a", "62%", "40.0 GiB", "410 W", "none", "LOW UTILISATION (< 90%)"],
                    ["b", "97%", "40.0 GiB", "410 W", "power cap", ""]]
