"""The pytest plugin: options, the ``perfgate`` fixture that runs a case end to end, and the report.

A case flows: settings + case -> launch (torchrun) -> step records -> metrics -> baseline verdict
-> report. Each stage lives in its own module; this one wires them to pytest's hooks and fixtures.
Results travel from test items to the summary as ``user_properties``, so they reach the controller
under pytest-xdist and appear in JUnit XML.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import os
import shlex
import signal
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from perfgate import baselines, gpu_monitor, hardware, metrics, report, stats
from perfgate.cases import DEFAULT_CPU_RANKS, CaseRun
from perfgate.launch import LaunchFailed, LaunchSpec, launch, port_share
from perfgate.metrics import METRICS
from perfgate.records import RecordsError
from perfgate.settings import Settings, add_options, resolve

MARKERS = {
    "gpu": "GPU flavour of a case: nccl, one rank per GPU; skipped where no CUDA GPU is visible",
    "cpu": "CPU flavour of a case: gloo ranks on the CPU, small settings; runs anywhere",
    "multinode": "meant for several nodes (see --nodes and --launcher)",
    "slow": "takes many minutes even on its target hardware",
    "full_matrix": "a matrix case outside the representative default subset; runs with --full-matrix",
}
PROPERTY = "perfgate"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class StaleBaselineWarning(UserWarning):
    """A case ran significantly faster than its baseline allows: re-measure and review the baseline."""


class TeardownFailureWarning(UserWarning):
    """A run finished and recorded its measurement, then a rank crashed or hung while exiting."""


class LowGpuUtilizationWarning(UserWarning):
    """A GPU case kept its GPUs busy less than --perf-min-gpu-util of the window: it measures something else."""


class SessionState:
    """The session's perfgate state, registered as a plugin: settings, hardware, collected results."""

    def __init__(self, settings: Settings, root: Path) -> None:
        self.settings = settings
        self.root = root
        self.results: list[dict[str, Any]] = []
        self.left_out: dict[str, int] = {}
        """Cases deselected by mark (full_matrix, slow) because their option was not given."""
        self._hardware: hardware.Hardware | None = None
        self._nvml: tuple[Any, str] | None = None

    def hardware(self) -> hardware.Hardware:
        if self._hardware is None:
            self._hardware = hardware.detect()
        return self._hardware

    def nvml(self) -> tuple[Any, str]:
        """(pynvml, "") once NVML started, or (None, why not); tried once per session."""
        if self._nvml is None:
            self._nvml = gpu_monitor.load_nvml()
        return self._nvml

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        for mark, wanted in (("full_matrix", self.settings.full_matrix), ("slow", self.settings.slow)):
            left_out = [] if wanted else [item for item in items if item.get_closest_marker(mark)]
            if left_out:
                config.hook.pytest_deselected(items=left_out)
                items[:] = [item for item in items if not item.get_closest_marker(mark)]
                self.left_out[mark] = len(left_out)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.results.extend(value for name, value in report.user_properties if name == PROPERTY)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.left_out.get("full_matrix"):
            terminalreporter.write_line(f"perfgate: {self.left_out['full_matrix']} full-matrix case(s) deselected; "
                                        "--full-matrix runs them")
        if self.left_out.get("slow"):
            terminalreporter.write_line(f"perfgate: {self.left_out['slow']} slow case(s) deselected (hours each); "
                                        "--perf-slow runs them, --perf-steps N shortens them")
        if not self.results:
            return
        results = sorted(self.results, key=lambda r: r["case"])
        classes = sorted({r["hardware_class"] for r in results if r.get("hardware_class")})
        planted = self.settings.inject_slowdown
        title = f"perfgate: {len(results)} case(s), hardware class {', '.join(classes) or '-'}"
        terminalreporter.section(title + (f", PLANTED SLOWDOWN {planted:.0%}" if planted else ""))
        judged = [r for r in results if r["verdict"] != "updated"]
        if judged:
            for line in report.table(report.summary_rows(judged)):
                terminalreporter.write_line(line)
            if self.settings.calibrate:
                terminalreporter.write_line("measured: scaled to the machine speed of each baseline (--perf-calibrate; "
                                            "the probe's change is in each case's result.json)")
        updated = [r for r in results if r["verdict"] == "updated"]
        if updated:
            terminalreporter.write_line("baselines written (review the diff before committing):")
            for line in report.table(report.update_rows(updated), report.UPDATE_HEADER):
                terminalreporter.write_line(line)
            for result in updated:
                terminalreporter.write_line(f"wrote {result['baseline_file']}")
                if result.get("disturbed_runs"):
                    terminalreporter.write_line(
                        f"  {result['disturbed_runs']} disturbed run(s) left out and re-measured (far slower than the "
                        "others: a slow spell of the machine); they are listed in the file's provenance", yellow=True)
        for heading, rows, header in (
            ("what each case achieved (medians over runs; IO / SYNTHETIC from the first run):",
             report.profile_rows(results), report.PROFILE_HEADER),
            ("GPUs during the measured windows (NVML):", report.gpu_rows(results, self.settings.min_gpu_util),
             report.GPU_HEADER),
            ("scaling over DDP size (efficiency = speedup / ranks):", report.scaling_rows(results),
             report.SCALING_HEADER),
        ):
            if rows:
                terminalreporter.write_line(heading)
                for line in report.table(rows, header):
                    terminalreporter.write_line(line)
        missing = [r for r in results if r["verdict"] == "no-baseline"]
        if missing:
            terminalreporter.write_line(
                f"{len(missing)} case(s) have no baseline for this hardware class: nothing was gated for them. "
                "Create baselines with --update-baselines, review them, and commit the files under "
                f"{self.settings.baseline_dir}.",
                yellow=True,
            )


STATE = pytest.StashKey[SessionState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for marker, text in MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {text}")
    state = SessionState(resolve(config), Path(config.rootpath))
    config.stash[STATE] = state
    config.pluginmanager.register(state, "perfgate-session")
    _stop_cleanly_on_sigterm()


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is not None and config.pluginmanager.is_registered(state):
        config.pluginmanager.unregister(state)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("perfgate: SIGTERM received; the running case's processes were killed")


def _stop_cleanly_on_sigterm() -> None:
    """CI cancels a job with SIGTERM: end like Ctrl-C, so the running launch kills its ranks (they live in
    their own sessions and would outlive pytest) and no baseline is left half-measured. A handler someone
    else installed is kept."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm)


@dataclass(frozen=True)
class Plan:
    """One case flavour resolved against the settings and this host, ready to launch."""

    run: CaseRun
    spec: LaunchSpec
    """Topology, timeout and environment; each run fills in its own directory and arguments."""
    hardware: hardware.Hardware
    hardware_class: str
    detected_class: str
    world_size: int
    steps: int | None
    warmup: int
    baseline_file: Path


class Window:
    """When the measured window ran, in monotonic time, as seen by tailing the records: it opens once the
    warm-up steps are recorded and closes at the last step (records arrive up to a poll late)."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.steps = 0
        self.start: float | None = None
        self.end: float | None = None

    def saw(self, new_steps: int) -> None:
        if not new_steps:
            return
        self.steps += new_steps
        now = time.monotonic()
        if self.start is None and self.steps >= self.warmup:
            self.start = now
        self.end = now

    def samples(self, samples: list[gpu_monitor.Sample]) -> list[gpu_monitor.Sample]:
        if self.start is None:
            return []
        return [s for s in samples if self.start <= s.t <= (self.end or s.t)]


@dataclass
class Measurement:
    """Every run of a case so far: one metrics dict per run, with its step times."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    command: str = ""
    gpu_samples: list[gpu_monitor.Sample] = field(default_factory=list)
    """NVML samples taken during the runs' measured windows."""
    flops: dict[str, Any] | None = None
    """The FLOP count of the case's first run, which later runs skip (Case.later_runs_args)."""

    def values(self, metric: str) -> list[float]:
        return [run["metrics"][metric] for run in self.runs if run["metrics"].get(metric) is not None]

    def disturbed(self, gated: Sequence[str], floor: float) -> list[int]:
        """The numbers of the runs that any gated metric finds disturbed (see stats.disturbed)."""
        found = set()
        for name in gated:
            runs = [run for run in self.runs if run["metrics"].get(name) is not None]
            values = [run["metrics"][name] for run in runs]
            found.update(runs[i]["run"] for i in stats.disturbed(values, METRICS[name].better, floor))
        return sorted(found)

    def medians(self) -> dict[str, float | None]:
        names = self.runs[0]["metrics"].keys() if self.runs else ()
        return {name: stats.median(self.values(name)) if self.values(name) else None for name in names}


class PerfGate:
    """Runs one case flavour end to end and gates it; what the ``perfgate`` fixture returns."""

    def __init__(self, request: pytest.FixtureRequest, workdir: Path) -> None:
        self.request = request
        self.config = request.config
        self.state = self.config.stash[STATE]
        self.settings = self.state.settings
        self.workdir = workdir
        self._measurement = Measurement()

    def check(self, run: CaseRun) -> dict[str, Any]:
        """Launches ``run`` (repeatedly), measures it and judges it against its baseline; returns the result."""
        plan = self._plan(run)
        result: dict[str, Any] = {
            "case": run.key,
            "test": self.request.node.nodeid,
            "hardware_class": plan.hardware_class,
            "world_size": plan.world_size,
            "family": run.case.family,
            "workdir": str(self.workdir),
            "baseline_file": str(plan.baseline_file),
            "injected_slowdown": self.settings.inject_slowdown,
            "verdict": "error",
            "metrics": [],
        }
        self.request.node.user_properties.append((PROPERTY, result))
        try:
            return self._check(plan, result)
        finally:
            self._flag_idle_gpus(result)
            (self.workdir / "result.json").write_text(json.dumps(
                {**result, "command": self._measurement.command, "per_run": self._measurement.runs}, indent=2) + "\n")

    def _check(self, plan: Plan, result: dict[str, Any]) -> dict[str, Any]:
        run = plan.run
        try:
            baseline = baselines.load(plan.baseline_file)
        except baselines.BaselineError as exc:
            if not self.settings.update_baselines:
                self._fail(result, f"{run.key}: {exc}")
            baseline = None
        if self.settings.update_baselines:
            self._refuse_foreign_overwrite(plan, baseline, result)
            return self._update(plan, result, baseline, self._measure_baseline(plan, result))
        if baseline is not None and baseline.workload_version != run.case.version:
            self._fail(result, f"{run.key}: {plan.baseline_file} was measured with workload version "
                               f"{baseline.workload_version}, the case is version {run.case.version}: the numbers are "
                               "not comparable. Re-measure: --update-baselines --force-baseline-update")
        measurement = self._measure(plan, result, self.settings.repeats)
        if baseline is None:
            return self._no_baseline(plan, result, measurement)
        return self._judge(plan, result, baseline, measurement)

    def _plan(self, run: CaseRun) -> Plan:
        """Resolves the case against the settings and this host; skips or fails before any launch."""
        settings, flavour = self.settings, run.flavour
        hw = self.state.hardware()
        if run.kind == "gpu" and not hw.has_gpu:
            pytest.skip("GPU flavour: torch sees no CUDA GPU on this machine (the CPU flavour runs with -m cpu)")
        if settings.inject_slowdown and run.case.inject_flag is None:
            pytest.skip(f"{run.key}: its workload has no way to plant a slowdown (--perf-inject-slowdown)")
        nodes = settings.nodes
        per_node, devices = self._ranks_per_node(run, hw, nodes)
        steps = settings.steps if settings.steps is not None else flavour.steps
        warmup = settings.warmup if settings.warmup is not None else flavour.warmup
        if steps is not None and warmup >= steps:
            pytest.fail(f"{run.key}: {warmup} warm-up steps leave nothing to measure out of {steps}; "
                        "lower --perf-warmup or raise --perf-steps", pytrace=False)
        detected = hardware.hardware_class(hw, kind=run.kind, per_node=per_node, nodes=nodes)
        hw_class = settings.hardware_class or detected
        spec = LaunchSpec(
            entry=(),
            workdir=self.workdir,
            nodes=nodes,
            procs_per_node=per_node,
            timeout_s=settings.timeout or flavour.timeout_s,
            env=self._child_env(run.kind),
            devices_per_node=devices,
            ports=port_share(*xdist_worker()),
        )
        try:
            path = baselines.baseline_path(settings.baseline_dir, hw_class, run.key)
        except baselines.BaselineError as exc:
            pytest.fail(f"{run.key}: {exc}", pytrace=False)
        return Plan(run, spec, hw, hw_class, detected, nodes * per_node, steps, warmup, path)

    def _measure(self, plan: Plan, result: dict[str, Any], repeats: int) -> Measurement:
        for _ in range(repeats):
            self._launch_once(plan, result, repeats)
        return self._measurement

    def _measure_baseline(self, plan: Plan, result: dict[str, Any]) -> Measurement:
        """The baseline's runs; a disturbed run (see stats.disturbed) is measured again, up to half as many
        extra launches as planned, so one slow spell of a shared machine does not become the reference."""
        planned = self.settings.baseline_repeats
        measurement = self._measure(plan, result, planned)
        floor = self._tolerance_floor(plan)
        for _ in range(planned // 2):
            if len(measurement.runs) - len(measurement.disturbed(plan.run.gated, floor)) >= planned:
                break
            self._launch_once(plan, result, planned + planned // 2)
        return measurement

    @staticmethod
    def _tolerance_floor(plan: Plan) -> float:
        flavour = plan.run.flavour
        return flavour.tolerance if flavour.tolerance is not None else flavour.tolerance_floor

    def _launch_once(self, plan: Plan, result: dict[str, Any], planned: int) -> None:
        """One whole torchrun launch in its own directory, with live progress; appends its metrics."""
        measurement = self._measurement
        index = len(measurement.runs)
        run_dir = self.workdir / f"run{index}"
        argv = plan.run.argv(run_dir, plan.steps, plan.world_size, plan.warmup, self.settings.inject_slowdown,
                             first_run=index == 0)
        if argv[0] != "-m":
            argv[0] = str((self.state.root / argv[0]).resolve())
        spec = dataclasses.replace(plan.spec, workdir=run_dir, entry=argv)
        label = f"{plan.run.key} run {index + 1}/{max(planned, index + 1)}"
        progress = report.Progress(label, plan.steps, self._say, overwrite=self._is_tty())
        follow = plan.run.case.records.follow(run_dir)
        window = Window(plan.warmup)

        def show_progress(elapsed: float) -> None:
            try:
                new_steps = follow()
            except RecordsError:
                new_steps = []
            window.saw(len(new_steps))
            progress.update(new_steps, elapsed)

        launched_at = time.time()
        try:
            with self._gpu_monitor(plan, result) as monitor:
                commands = launch(spec, on_poll=show_progress).commands
        except LaunchFailed as failure:
            self._diverged_first(plan, result, run_dir, index, argv, failure)
            if not self._failed_in_teardown(plan, result, run_dir, index, failure):
                result["verdict"] = failure.kind
                self._fail(result, f"{plan.run.key}: {failure.kind} in run {index + 1}: {failure.message}\n"
                                   f"configuration: {shlex.join(argv)}\nlogs kept in {run_dir}")
            commands = failure.commands
        finally:
            self._end_progress()
        finished_at = time.time()
        measurement.command = self._portable(shlex.join(commands[0]), run_dir)
        try:
            records = plan.run.case.records.read(run_dir)
            if records.flops is None:
                records = dataclasses.replace(records, flops=measurement.flops)
            measurement.flops = records.flops
            measured = metrics.compute(records, plan.warmup, plan.world_size).as_dict()
        except metrics.DivergedError as exc:
            result["verdict"] = "diverged"
            self._fail(result, f"{plan.run.key}: diverged in run {index + 1}: {exc}\n"
                               f"configuration: {shlex.join(argv)}\nlogs kept in {run_dir}")
        except (RecordsError, metrics.MetricsError, ValueError) as exc:
            self._fail(result, f"{plan.run.key}: run {index + 1} finished but gave no measurement: {exc}\n"
                               f"logs kept in {run_dir}")
        if monitor is not None:
            measurement.gpu_samples.extend(window.samples(monitor.samples))
            result["gpu"] = gpu_monitor.summarize(measurement.gpu_samples)
            if monitor.error:
                result["gpu_monitor"] = monitor.error
        measurement.runs.append({
            "run": index,
            "metrics": measured,
            "step_times_s": [s.step_s for s in records.steps],
            "data_times_s": [s.data_s for s in records.steps],
            "time_s": metrics.time_accounting(records, plan.warmup, launched_at, finished_at),
        })
        result["measured"] = measurement.medians()
        result["runs"] = len(measurement.runs)

    def _diverged_first(self, plan: Plan, result: dict[str, Any], run_dir: Path, index: int, argv: list[str],
                        failure: LaunchFailed) -> None:
        """A loss that went NaN or infinite before a rank failed is the root cause: ranks fed NaN often abort
        (seen: gloo's teardown calling std::terminate after a finished NaN run), so the verdict is diverged."""
        try:
            metrics.check_finite(plan.run.case.records.read(run_dir))
        except metrics.DivergedError as exc:
            result["verdict"] = "diverged"
            self._fail(result, f"{plan.run.key}: diverged in run {index + 1}: {exc}; then {failure.kind}: "
                               f"{failure.message.splitlines()[0]}\nconfiguration: {shlex.join(argv)}\n"
                               f"logs kept in {run_dir}")
        except (RecordsError, OSError):
            return

    @staticmethod
    def _failed_in_teardown(plan: Plan, result: dict[str, Any], run_dir: Path, index: int,
                            failure: LaunchFailed) -> bool:
        """A rank that crashed or hung after the end record failed in teardown, not in what was measured: rank 0
        writes that record after every rank's last collective (seen in CI: gloo calling std::terminate as a
        finished run exited). The run's measurement stands, with a warning that names the failure."""
        if failure.kind not in ("crashed", "timeout"):
            return False
        try:
            finished = plan.run.case.records.read(run_dir).end is not None
        except (RecordsError, OSError):
            return False
        if finished:
            cause = failure.message.splitlines()[0]
            result.setdefault("teardown_failures", []).append({"run": index, "kind": failure.kind, "cause": cause})
            warnings.warn(TeardownFailureWarning(
                f"{plan.run.key}: run {index + 1} finished its steps and end record, then {failure.kind} in teardown: "
                f"{cause} The measurement is kept; a rank that cannot exit cleanly is worth a look: logs kept in "
                f"{run_dir}"))
        return finished

    def _judge(self, plan: Plan, result: dict[str, Any], baseline: baselines.Baseline,
               measurement: Measurement) -> dict[str, Any]:
        """Decides from the runs so far; an inconclusive verdict launches more runs, up to the cap."""
        run = plan.run
        while True:
            try:
                verdicts = baselines.judge(baseline, self._values(plan, result, baseline, measurement))
            except baselines.BaselineError as exc:
                self._fail(result, f"{run.key}: {exc}")
            undecided = any(v.outcome == "inconclusive" for v in verdicts)
            if not undecided or len(measurement.runs) >= self.settings.repeat_cap:
                break
            self._launch_once(plan, result, self.settings.repeat_cap)
        outcomes = [stats.settle(v.decision).outcome for v in verdicts]
        result["metrics"] = [self._row(v, outcome) for v, outcome in zip(verdicts, outcomes)]
        planted = (f" (with a PLANTED slowdown of {self.settings.inject_slowdown:.0%})"
                   if self.settings.inject_slowdown else "")
        details = "\n".join([f"  {v.describe()}" for v in verdicts] + calibration_note(result.get("calibration")))
        context = (f"baseline: {plan.baseline_file}\ncommand: {measurement.command}\n"
                   f"logs kept in {self.workdir}")
        if "FAIL" in outcomes:
            result["verdict"] = "FAIL"
            self._fail(result, f"{run.key}: performance regression on {plan.hardware_class}{planted}\n"
                               f"{details}\n{machine_speed(baseline, measurement)}{context}")
        if "stale" in outcomes:
            result["verdict"] = "stale"
            message = (f"{run.key}: stale baseline on {plan.hardware_class}{planted}: significantly faster than "
                       f"{plan.baseline_file} allows\n{details}\nre-measure with --update-baselines and review")
            if self.settings.fail_stale:
                self._fail(result, message)
            warnings.warn(StaleBaselineWarning(message))
            return result
        result["verdict"] = "pass"
        return result

    def _values(self, plan: Plan, result: dict[str, Any], baseline: baselines.Baseline,
                measurement: Measurement) -> dict[str, list[float]]:
        """The runs' values of each gated metric; under --perf-calibrate scaled by the baseline's probe over the
        median probe of these runs. The median, not each run's own: the probe's snapshots around a window track
        a machine that is slower for hours, but miss or exaggerate a burst of a few seconds in one run."""
        if not self.settings.calibrate:
            return {name: measurement.values(name) for name in baseline.metrics}
        probe = metrics.CALIBRATION_PROBE
        reference = baseline.provenance.get("measured", {}).get(probe)
        readings = measurement.values(probe)
        if not reference:
            self._fail(result, f"{plan.run.key}: --perf-calibrate needs the machine-speed probe ({probe}) of the "
                               f"baseline, and {plan.baseline_file} has none: re-measure it with --update-baselines")
        if len(readings) < len(measurement.runs):
            self._fail(result, f"{plan.run.key}: --perf-calibrate needs the machine-speed probe ({probe}) of every "
                               "run, and this workload records none; run it without --perf-calibrate")
        result["calibration"] = {"probe": probe, "baseline": reference, "runs": readings}
        now = stats.median(readings)
        return {name: [metrics.calibrated(name, value, now, reference) for value in measurement.values(name)]
                for name in baseline.metrics}

    def _flag_idle_gpus(self, result: dict[str, Any]) -> None:
        gpu, floor = result.get("gpu"), self.settings.min_gpu_util
        if gpu and gpu["mean_utilization"] < floor:
            warnings.warn(LowGpuUtilizationWarning(
                f"{result['case']}: the least busy GPU was utilised {gpu['mean_utilization']:.0%} of the measured "
                f"window (< {floor:.0%}, --perf-min-gpu-util): the case is bound by something other than the GPU "
                "(input pipeline, host, communication); see the benchy IO / SYNTHETIC columns"))

    @contextlib.contextmanager
    def _gpu_monitor(self, plan: Plan, result: dict[str, Any]) -> Iterator[gpu_monitor.GpuMonitor | None]:
        """Samples the case's GPUs through NVML while it runs; None for CPU cases or without NVML."""
        if plan.run.kind != "gpu":
            yield None
            return
        nvml, why_not = self.state.nvml()
        if nvml is None:
            result["gpu_monitor"] = why_not
            yield None
            return
        ids = [i for node in plan.spec.devices_per_node or [] for i in node.split(",")]
        indices = [int(i) for i in ids] if all(i.isdigit() for i in ids) else list(range(plan.hardware.gpu_count))
        with gpu_monitor.GpuMonitor(nvml, indices) as monitor:
            yield monitor

    def _ranks_per_node(self, run: CaseRun, hw: hardware.Hardware, nodes: int) -> tuple[int, list[str] | None]:
        if run.kind == "cpu":
            per_node = run.flavour.ranks_per_node or DEFAULT_CPU_RANKS
            self._check_cpu_ranks(run, per_node, nodes)
            return per_node, None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [d for d in visible.split(",") if d] if visible else [str(i) for i in range(hw.gpu_count)]
        worker, workers = xdist_worker()
        if workers > 1:
            ids = hardware.gpus_for_worker(ids, worker, workers)
            if not ids:
                pytest.skip(f"{run.key}: {workers} pytest-xdist workers share {hw.gpu_count} GPU(s) and worker "
                            f"{worker} got none (cases never share a GPU); run fewer workers (-n)")
        per_node = self.settings.gpus_per_node or run.flavour.ranks_per_node or len(ids) // nodes
        if (run.flavour.ranks_per_node and self.settings.gpus_per_node is None
                and run.flavour.ranks_per_node * nodes > len(ids)):
            pytest.skip(f"{run.key}: the case runs {run.flavour.ranks_per_node} GPU ranks per node x {nodes} node(s), "
                        f"{len(ids)} GPU(s) visible")
        if per_node < 1 or per_node * nodes > len(ids):
            pytest.fail(
                f"{run.key}: --nodes {nodes} x {max(per_node, 1)} GPUs per node needs {nodes * max(per_node, 1)} GPUs "
                f"on this host for the local launcher, but {len(ids)} are visible; lower --nodes or --gpus-per-node",
                pytrace=False,
            )
        return per_node, [",".join(ids[i * per_node:(i + 1) * per_node]) for i in range(nodes)]

    @staticmethod
    def _check_cpu_ranks(run: CaseRun, per_node: int, nodes: int) -> None:
        """Ranks beyond this host's cores time-share them: their timing would measure the scheduler."""
        cores = len(os.sched_getaffinity(0))
        if per_node * nodes <= cores:
            return
        if nodes == 1:
            pytest.skip(f"{run.key}: {per_node} CPU ranks need {per_node} cores, this host has {cores}")
        pytest.fail(f"{run.key}: --nodes {nodes} x {per_node} CPU ranks per node needs {nodes * per_node} cores for "
                    f"the local launcher, but {cores} are available; lower --nodes (at most {cores // per_node})",
                    pytrace=False)

    def _refuse_foreign_overwrite(self, plan: Plan, old: baselines.Baseline | None, result: dict[str, Any]) -> None:
        """--update-baselines must not silently replace numbers from other hardware or another workload."""
        if old is None or self.settings.force_baseline_update:
            return
        measured_on = old.provenance.get("hardware", {}).get("detected_class")
        if old.workload_version != plan.run.case.version:
            reason = f"workload version {old.workload_version} (the case is version {plan.run.case.version})"
        elif measured_on is None:
            reason = "a baseline perfgate did not measure on this kind of machine (a published reference?)"
        elif measured_on != plan.detected_class:
            reason = f"hardware class {measured_on} (this machine is {plan.detected_class})"
        else:
            return
        self._fail(result, f"{plan.run.key}: refusing to overwrite {plan.baseline_file}: it holds {reason}. "
                           "Pass --force-baseline-update to replace it anyway.")

    def _update(self, plan: Plan, result: dict[str, Any], old: baselines.Baseline | None,
                measurement: Measurement) -> dict[str, Any]:
        run, flavour = plan.run, plan.run.flavour
        dropped = measurement.disturbed(run.gated, self._tolerance_floor(plan))
        kept = Measurement([r for r in measurement.runs if r["run"] not in dropped], measurement.command)
        new_metrics = {}
        for name in run.gated:
            runs = tuple(float(f"{v:.6g}") for v in kept.values(name))
            tolerance = flavour.tolerance
            if tolerance is None:
                tolerance = round(stats.noise_tolerance(runs, flavour.tolerance_floor), 4)
            new_metrics[name] = baselines.MetricBaseline(
                value=float(f"{stats.median(runs):.6g}"), better=METRICS[name].better,
                tolerance=tolerance, unit=METRICS[name].unit, runs=runs,
            )
        provenance = hardware.provenance(plan.hardware, root=self.state.root, command=measurement.command,
                                         hardware_class_name=plan.hardware_class)
        provenance["hardware"]["detected_class"] = plan.detected_class
        if run.kind == "gpu":
            nvml, why_not = self.state.nvml()
            provenance["hardware"]["nvml"] = gpu_monitor.fingerprint(nvml) or why_not
        new = baselines.Baseline(
            case=run.key,
            hardware_class=plan.hardware_class,
            workload_version=run.case.version,
            metrics=new_metrics,
            provenance={**provenance, "pytest_args": shlex.join(self.config.invocation_params.args),
                        "warmup_steps": plan.warmup, "steps": plan.steps, "measured": kept.medians(),
                        "disturbed_runs": [{"run": r["run"], **{name: r["metrics"][name] for name in run.gated}}
                                           for r in measurement.runs if r["run"] in dropped]},
        )
        baselines.write(plan.baseline_file, new)
        rows = []
        for name, ref in new.metrics.items():
            before = old.metrics.get(name) if old else None
            rows.append({
                "metric": name, "unit": ref.unit, "measured": ref.value, "tolerance": ref.tolerance,
                "noise": stats.relative_spread(ref.runs), "runs": len(ref.runs),
                "baseline": before.value if before else None,
                "change": (ref.value - before.value) / before.value if before else None, "verdict": "updated",
            })
        result.update(verdict="updated", metrics=rows, disturbed_runs=len(dropped))
        return result

    def _no_baseline(self, plan: Plan, result: dict[str, Any], measurement: Measurement) -> dict[str, Any]:
        measured = measurement.medians()
        result["verdict"] = "no-baseline"
        result["metrics"] = [
            {"metric": name, "unit": METRICS[name].unit, "measured": measured[name], "verdict": "no-baseline"}
            for name in plan.run.gated
        ]
        message = (
            f"{plan.run.key}: no baseline for hardware class {plan.hardware_class} ({plan.baseline_file} does not "
            f"exist), so nothing was gated. Create it: pytest '{self.request.node.nodeid}' --update-baselines, "
            "then review and commit the file."
        )
        if self.settings.strict_baselines:
            self._fail(result, message)
        pytest.skip(message)

    @staticmethod
    def _row(verdict: baselines.MetricVerdict, outcome: str) -> dict[str, Any]:
        c = verdict.comparison
        return {
            "metric": verdict.metric, "unit": verdict.unit, "measured": verdict.measured,
            "baseline": verdict.baseline, "change": verdict.change, "tolerance": verdict.tolerance,
            "ci": [c.ci_low, c.ci_high], "p_value": c.p_value, "runs": verdict.runs,
            "reason": verdict.decision.reason, "verdict": outcome,
        }

    def _portable(self, command: str, run_dir: Path) -> str:
        """The launch command as it can be rerun from the repository root on another host."""
        return (command.replace(str(run_dir), "$WORKDIR")
                .replace(str(self.state.root) + "/", "").replace(sys.executable, "python"))

    def _fail(self, result: dict[str, Any], message: str) -> None:
        result["message"] = message
        pytest.fail(message, pytrace=False)

    def _child_env(self, kind: str) -> dict[str, str]:
        """Children import perfgate (records) and resolve workloads even when it is not installed.

        CPU ranks get one thread each (torchrun's own choice for several ranks per node), so a DDP size
        family on CPU compares 1 core with N cores; an OMP_NUM_THREADS of the user's wins.
        """
        paths = [str(PACKAGE_ROOT), str(self.state.root), os.environ.get("PYTHONPATH", "")]
        env = {"PYTHONPATH": os.pathsep.join(p for p in dict.fromkeys(paths) if p), "PYTHONUNBUFFERED": "1"}
        if kind == "cpu":
            env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
        return env

    def _terminal(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def _is_tty(self) -> bool:
        terminal = self._terminal()
        return bool(terminal is not None and terminal.isatty())

    def _end_progress(self) -> None:
        terminal = self._terminal()
        if terminal is not None and self._is_tty():
            self._say("", False)

    def _say(self, line: str, overwrite: bool) -> None:
        terminal = self._terminal()
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if terminal is None or capture is None:
            return
        with capture.global_and_fixture_disabled():
            if overwrite:
                terminal.rewrite(line)
            else:
                terminal.ensure_newline()
                terminal.write_line(line)


def calibration_note(calibration: dict[str, Any] | None) -> list[str]:
    """The line that says a verdict compared calibrated values, and by how much the machine had moved."""
    if not calibration:
        return []
    now, then = stats.median(calibration["runs"]), calibration["baseline"]
    return [f"  calibrated (--perf-calibrate): values scaled by the machine-speed probe, {calibration['probe']} "
            f"{now:.4g} now vs {then:.4g} for the baseline ({now / then - 1:+.1%})"]


def machine_speed(baseline: baselines.Baseline, measurement: Measurement) -> str:
    """A line comparing the machine-speed probe now with the probe when the baseline was measured.

    The probe's kernels do not change with the workload: if it dropped as much as the workload did, the
    machine (other tenants, clocks) is the likelier suspect than the code. Empty without probe readings.
    """
    then = baseline.provenance.get("measured", {})
    now = measurement.medians()
    lines = []
    for name in ("probe_matmul_gflops", "probe_copy_gbps"):
        if then.get(name) and now.get(name):
            change = now[name] / then[name] - 1
            lines.append(f"{name} {now[name]:.4g} vs {then[name]:.4g} ({change:+.1%})")
    if not lines:
        return ""
    return ("machine-speed probe now vs when the baseline was measured: " + ", ".join(lines)
            + " (a drop as large as the workload's points at the machine, not the code)\n")


def xdist_worker() -> tuple[int, int]:
    """(this worker's index, how many workers) under pytest-xdist; (0, 1) without it."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name.removeprefix("gw") or 0), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


@pytest.fixture
def perfgate(request: pytest.FixtureRequest, tmp_path: Path) -> PerfGate:
    """Runs perf cases: ``perfgate.check(case)`` launches, measures and gates one case flavour.

    Each case runs in its own directory under pytest's tmp path (kept for the last runs), holding
    the agent and per-rank logs, the step records and ``result.json``.
    """
    return PerfGate(request, tmp_path)
