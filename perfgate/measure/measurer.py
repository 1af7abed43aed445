"""Measures a planned case: whole torchrun launches with live progress and GPU sampling, each read back
from its step records into one run's metrics, gathered in a ``Measurement``.

A launch that fails ends the case with its cause (a NaN loss before a crash is reported as diverged);
a rank that fails only after its end record keeps the run's measurement, with a warning.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from perfgate.launch.diagnose import LaunchFailed
from perfgate.launch.plan import Plan
from perfgate.launch.spec import NodeLauncher
from perfgate.measure import gpu_monitor, metrics, stats
from perfgate.measure.metrics import METRICS
from perfgate.measure.progress import Progress
from perfgate.outcome import CaseFailed
from perfgate.records.sources import JsonRecords
from perfgate.records.steps import RecordsError, RunRecords
from perfgate.result import Result

PROFILE_STEPS = 5
"""Steps a profiled launch records: enough that each operator's calls per step are whole, few enough that the
profiler's trace stays small."""

Say = Callable[[str, bool], None]
"""Writes a progress line to the terminal; True overwrites the previous one."""


class TeardownFailureWarning(UserWarning):
    """A run finished and recorded its measurement, then a rank crashed or hung while exiting."""


class CompileCacheBypassWarning(UserWarning):
    """torch.compile could not cache some of a launch's graphs: they compile again in every launch."""


class LowGpuUtilizationWarning(UserWarning):
    """A GPU case kept its GPUs busy less than --perf-min-gpu-util of the window: it measures something else."""


class LaunchStopped(Exception):
    """A launch of a duet pair was stopped, its processes killed, because the other one failed or the session was
    interrupted."""


class Window:
    """When the measured window ran, in wall-clock time (as GPU samples are stamped, on every node), as seen by
    tailing the records: it opens once the warm-up steps are recorded and closes at the last step (records arrive
    up to a poll late)."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.steps = 0
        self.start: float | None = None
        self.end: float | None = None

    def saw(self, new_steps: int) -> None:
        if not new_steps:
            return
        self.steps += new_steps
        now = time.time()
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

    def start_facts(self, fact: str) -> list[Any]:
        """What the runs' start records say of ``fact``, where they say something."""
        return [run["facts"]["start"][fact] for run in self.runs
                if (run.get("facts") or {}).get("start", {}).get(fact)]

    def disturbed(self, floors: Mapping[str, float]) -> list[int]:
        """The numbers of the runs that any gated metric finds disturbed (see stats.disturbed); ``floors`` maps each
        gated metric to its least tolerance."""
        found = set()
        for name, floor in floors.items():
            runs = [run for run in self.runs if run["metrics"].get(name) is not None]
            values = [run["metrics"][name] for run in runs]
            found.update(runs[i]["run"] for i in stats.disturbed(values, METRICS[name].better, floor))
        return sorted(found)

    def medians(self) -> dict[str, float | None]:
        names = self.runs[0]["metrics"].keys() if self.runs else ()
        return {name: stats.median(self.values(name)) if self.values(name) else None for name in names}


class Measurer:
    """Launches a planned case run after run; ``result`` is the case's record, filled in as runs finish."""

    def __init__(self, plan: Plan, result: Result, *, launcher: NodeLauncher, root: Path,
                 inject_slowdown: float = 0.0, nvml: Callable[[], tuple[Any, str]] = gpu_monitor.load_nvml,
                 say: Say | None = None, tty: bool = False, label: str | None = None) -> None:
        self.plan = plan
        self.result = result
        self.measurement = Measurement()
        result.per_run = self.measurement.runs
        self._launcher = launcher
        self._root = root
        self._inject_slowdown = inject_slowdown
        self._nvml = nvml
        self._say = say or (lambda line, overwrite: None)
        self._tty = tty
        self.label = label or plan.run.key
        self.last_records: RunRecords | None = None
        """The last run's records, which a duet pair measures again on the span both sides ran in."""

    def measure(self, repeats: int) -> Measurement:
        for _ in range(repeats):
            self.launch_once(repeats)
        return self.measurement

    def launch_once(self, planned: int, stop: threading.Event | None = None,
                    cores: Sequence[int] | None = None) -> None:
        """One whole torchrun launch in its own directory, with live progress; appends its metrics. Once ``stop`` is
        set the launch is stopped at its next poll, its processes killed (LaunchStopped). ``cores``: where the
        launcher pins the ranks (LaunchSpec.rank_cores)."""
        plan, result, measurement = self.plan, self.result, self.measurement
        index = len(measurement.runs)
        run_dir = plan.spec.workdir / f"run{index}"
        argv = plan.run.argv(run_dir, plan.steps, plan.world_size, plan.warmup, self._inject_slowdown,
                             first_run=index == 0, root=self._root, timeout_s=plan.spec.timeout_s)
        spec = dataclasses.replace(plan.spec, workdir=run_dir, entry=argv, rank_cores=cores)
        label = f"{self.label} run {index + 1}/{max(planned, index + 1)}"
        progress = Progress(label, plan.steps, self._say, overwrite=self._tty, unit=plan.run.case.records.unit)
        follow = plan.run.case.records.follow(run_dir)
        window = Window(plan.warmup)

        def show_progress(elapsed: float) -> bool:
            if stop is not None and stop.is_set():
                raise LaunchStopped(f"{label}: stopped, as the other launch of its pair failed or the session "
                                    "was interrupted")
            try:
                new_steps = follow()
            except RecordsError:
                new_steps = []
            window.saw(len(new_steps))
            progress.update(new_steps, elapsed)
            return follow.finished

        launched_at = time.time()
        try:
            with self._gpu_monitor() as monitor:
                commands = self._launcher.launch(spec, on_poll=show_progress).commands
        except LaunchFailed as failure:
            if failure.commands:
                measurement.command = self._portable(shlex.join(failure.commands[0]), run_dir)
            self._diverged_first(run_dir, index, argv, failure)
            if not self._failed_in_teardown(run_dir, index, failure):
                result.conclude(failure.kind)
                raise CaseFailed(f"{self.label}: {failure.kind} in run {index + 1}: {failure.message}\n"
                                 f"{plant_refused(failure.message, plan.run.case.inject_flag)}"
                                 f"configuration: {shlex.join(argv)}\nlogs kept in {run_dir}") from None
            commands = failure.commands
        finally:
            if self._tty:
                self._say("", False)
        finished_at = time.time()
        measurement.command = self._portable(shlex.join(commands[0]), run_dir)
        try:
            records = plan.run.case.records.read(run_dir)
            if records.flops is None:
                records = dataclasses.replace(records, flops=measurement.flops)
            measurement.flops = records.flops
            measured = metrics.compute(records, plan.warmup, plan.world_size).as_dict()
            windows = metrics.windows(records, plan.warmup, plan.world_size, plan.run.flavour.windows)
            self.last_records = records
        except metrics.DivergedError as exc:
            result.conclude("diverged")
            raise CaseFailed(f"{self.label}: diverged in run {index + 1}: {exc}\n"
                             f"configuration: {shlex.join(argv)}\nlogs kept in {run_dir}") from None
        except (RecordsError, metrics.MetricsError, ValueError) as exc:
            raise CaseFailed(f"{self.label}: run {index + 1} finished but gave no measurement: {exc}\n"
                             f"logs kept in {run_dir}") from None
        run = {
            "run": index,
            "metrics": measured,
            "windows": windows,
            "step_times_s": [s.step_s for s in records.steps],
            "data_times_s": [s.data_s for s in records.steps],
            "time_s": metrics.time_accounting(records, plan.warmup, launched_at, finished_at),
            "facts": {kind: {k: v for k, v in (facts or {}).items() if k != "t"}
                      for kind, facts in (("start", records.start), ("end", records.end))},
        }
        samples, problems = self._gpu_samples(monitor, run_dir)
        if samples is not None:
            in_window = window.samples(samples)
            measurement.gpu_samples.extend(in_window)
            result.gpu = gpu_monitor.summarize(measurement.gpu_samples)
            run["gpu_samples"] = gpu_monitor.timeline(in_window, window.start)
        if problems:
            result.gpu_monitor = "; ".join(problems)
        measurement.runs.append(run)
        self._say_compile_cache_bypassed(run)
        result.measured = measurement.medians()
        result.runs = len(measurement.runs)

    @property
    def why_not_profiled(self) -> str:
        """Why this case cannot be profiled, or "" where it can."""
        if isinstance(self.plan.run.case.records, JsonRecords):
            return ""
        return ("only perfgate's own workloads record torch.profiler (workloads/train_common.py); this case's script "
                "is run unmodified")

    def profile(self, steps: int = PROFILE_STEPS) -> Path:
        """One more launch, never judged, with torch.profiler over ``steps`` steps after the warm-up (the plant, if the
        session has one, included): returns the directory its ranks wrote their summaries and traces to, beside the
        runs' logs. LaunchFailed where it fails; ValueError where the case cannot be profiled."""
        plan = self.plan
        if self.why_not_profiled:
            raise ValueError(self.why_not_profiled)
        profile_dir = plan.spec.workdir / "profile"
        steps = min(steps, (plan.steps or steps + plan.warmup) - plan.warmup)
        argv = plan.run.argv(profile_dir, self.profiled_length(steps), plan.world_size, plan.warmup,
                             self._inject_slowdown, first_run=False, root=self._root, timeout_s=plan.spec.timeout_s)
        argv += ["--warmup", str(plan.warmup), "--profile-steps", str(steps), "--profile-dir", str(profile_dir)]
        self._say(f"{self.label}: profiling {steps} steps (torch.profiler, a launch that is not judged)", False)
        self._launcher.launch(dataclasses.replace(plan.spec, workdir=profile_dir, entry=argv))
        return profile_dir

    def profiled_length(self, steps: int) -> int | None:
        """A profiled launch's length: the warm-up, the ``steps`` profiled and as many after them, against which the
        profiler's own cost is measured (profile_diff.overhead). The case's other steps would buy nothing in a launch
        that is never judged, and on a GPU they are minutes; an adaptive-length flavour keeps its fewest steps."""
        plan, flavour = self.plan, self.plan.run.flavour
        if plan.steps is None:
            return None
        fewest = flavour.fewest_steps(plan.warmup) if flavour.target_ci is not None else 0
        return min(plan.steps, max(plan.warmup + 2 * steps, fewest))

    def _say_compile_cache_bypassed(self, run: dict[str, Any]) -> None:
        """A warm start that compiles anyway costs nearly what a cold one does: say so, rather than bill it silently."""
        cache = run["facts"]["end"].get("compile_cache") or {}
        if cache.get("bypasses"):
            reasons = cache.get("bypass_reasons") or []
            why = ("; ".join(reasons) if reasons else "run with TORCH_LOGS=+inductor to see why")
            self.result.warn(CompileCacheBypassWarning(
                f"{self.label} run {run['run'] + 1}: torch.compile could not cache {cache['bypasses']} graph(s) in "
                f"{cache.get('dir') or 'its cache directory'} (inductor's FX graph cache bypassed them): they compile "
                f"again in every launch: {why}"))

    def finish(self, min_gpu_util: float) -> None:
        """Flags GPUs that idled and writes ``result.json`` (the record, the command and every run) next to
        the runs' directories, whatever the outcome."""
        gpu = self.result.gpu
        if gpu and gpu["mean_utilization"] is not None and gpu["mean_utilization"] < min_gpu_util:
            self.result.warn(LowGpuUtilizationWarning(
                f"{self.result.case}: the least busy GPU was utilised {gpu['mean_utilization']:.0%} of the "
                f"measured window (< {min_gpu_util:.0%}, --perf-min-gpu-util): the case is bound by something other "
                "than the GPU (input pipeline, host, communication); see the benchy IO / SYNTHETIC columns"))
        self.result.command = self.measurement.command or None
        (self.plan.spec.workdir / "result.json").write_text(json.dumps(self.result.to_json(), indent=2) + "\n")

    def _diverged_first(self, run_dir: Path, index: int, argv: list[str], failure: LaunchFailed) -> None:
        """A loss that went NaN or infinite before a rank failed is the root cause: ranks fed NaN often abort (gloo's
        teardown can call std::terminate after a finished NaN run:
        docs/measurements.md#why-the-rules-are-what-they-are), so the verdict is diverged."""
        try:
            metrics.check_finite(self.plan.run.case.records.read(run_dir))
        except metrics.DivergedError as exc:
            self.result.conclude("diverged")
            raise CaseFailed(f"{self.label}: diverged in run {index + 1}: {exc}; then {failure.kind}: "
                             f"{failure.message.splitlines()[0]}\nconfiguration: {shlex.join(argv)}\n"
                             f"logs kept in {run_dir}") from None
        except (RecordsError, OSError):
            return

    def _failed_in_teardown(self, run_dir: Path, index: int, failure: LaunchFailed) -> bool:
        """A rank that crashed or hung after the end record failed in teardown, not in what was measured: rank 0
        writes that record after every rank's last collective (gloo can call std::terminate as a finished run exits:
        docs/measurements.md#why-the-rules-are-what-they-are). The run's measurement stands, with a warning that names
        the failure."""
        if failure.kind not in ("crashed", "timeout"):
            return False
        try:
            finished = self.plan.run.case.records.read(run_dir).end is not None
        except (RecordsError, OSError):
            return False
        if finished:
            cause = failure.message.splitlines()[0]
            self.result.teardown_failures.append({"run": index, "kind": failure.kind, "cause": cause})
            self.result.warn(TeardownFailureWarning(
                f"{self.plan.run.key}: run {index + 1} finished its steps and end record, then {failure.kind} in "
                f"teardown: {cause} The measurement is kept; a rank that cannot exit cleanly is worth a look: logs "
                f"kept in {run_dir}"))
        return finished

    @contextlib.contextmanager
    def _gpu_monitor(self) -> Iterator[gpu_monitor.GpuMonitor | None]:
        """Samples the case's GPUs through NVML while it runs, from here for the local launcher; None for CPU cases,
        without NVML, and where the nodes sample their own GPUs (LaunchSpec.node_gpu_samples)."""
        plan = self.plan
        if plan.run.kind != "gpu" or plan.spec.node_gpu_samples:
            yield None
            return
        nvml, why_not = self._nvml()
        if nvml is None:
            self.result.gpu_monitor = why_not
            yield None
            return
        devices = [d for node in plan.spec.devices_per_node or [] for d in node.split(",")]
        with gpu_monitor.GpuMonitor(nvml, devices or gpu_monitor.visible_devices(None, plan.hardware.gpu_count)) as monitor:
            yield monitor

    def _gpu_samples(self, monitor: gpu_monitor.GpuMonitor | None,
                     run_dir: Path) -> tuple[list[gpu_monitor.Sample] | None, list[str]]:
        """This run's GPU samples (None where nothing sampled) and what could not be sampled."""
        if self.plan.spec.node_gpu_samples:
            return gpu_monitor.read_node_samples(run_dir, self.plan.spec.nodes)
        if monitor is None:
            return None, []
        return monitor.samples, monitor.problems

    def _portable(self, command: str, run_dir: Path) -> str:
        """The launch command as it can be rerun from the repository root on another host."""
        return (command.replace(str(run_dir), "$WORKDIR")
                .replace(str(self._root) + "/", "").replace(sys.executable, "python"))


def plant_refused(message: str, flag: str | None) -> str:
    """What to do where a workload rejected the planted slowdown's option (``--perf-inject-slowdown``); else ""."""
    if not flag or "unrecognized arguments" not in message or flag not in message:
        return ""
    return (f"its workload does not take {flag}: apply the plant there (perfgate.rank.plant.SlowdownInjector), name "
            "its own option in Case(inject_flag=...), or give it inject_flag=None, and --perf-inject-slowdown skips it "
            "(docs/writing-cases.md)\n")
