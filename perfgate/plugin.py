"""The pytest plugin: options, the ``perfgate`` fixture that runs a case end to end, and the report.

A case flows: settings + case -> launch (torchrun) -> step records -> metrics -> baseline verdict
-> report. Each stage lives in its own module; this one wires them to pytest's hooks and fixtures.
Results travel from test items to the summary as ``user_properties``, so they reach the controller
under pytest-xdist and appear in JUnit XML.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from perfgate import baselines, hardware, metrics, report
from perfgate.metrics import METRICS
from perfgate.cases import DEFAULT_CPU_RANKS, CaseRun
from perfgate.launch import LaunchFailed, LaunchSpec, launch
from perfgate.records import RecordsError
from perfgate.settings import Settings, add_options, resolve

MARKERS = {
    "gpu": "GPU flavour of a case: nccl, one rank per GPU; skipped where no CUDA GPU is visible",
    "cpu": "CPU flavour of a case: gloo ranks on the CPU, small settings; runs anywhere",
    "multinode": "meant for several nodes (see --nodes and --launcher)",
    "slow": "takes many minutes even on its target hardware",
}
PROPERTY = "perfgate"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class SessionState:
    """The session's perfgate state, registered as a plugin: settings, hardware, collected results."""

    def __init__(self, settings: Settings, root: Path) -> None:
        self.settings = settings
        self.root = root
        self.results: list[dict[str, Any]] = []
        self._hardware: hardware.Hardware | None = None

    def hardware(self) -> hardware.Hardware:
        if self._hardware is None:
            self._hardware = hardware.detect()
        return self._hardware

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.results.extend(value for name, value in report.user_properties if name == PROPERTY)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.results:
            return
        results = sorted(self.results, key=lambda r: r["case"])
        classes = sorted({r["hardware_class"] for r in results if r.get("hardware_class")})
        terminalreporter.section(f"perfgate: {len(results)} case(s), hardware class {', '.join(classes) or '-'}")
        for line in report.table(report.summary_rows(results)):
            terminalreporter.write_line(line)
        missing = [r for r in results if r["verdict"] == "no-baseline"]
        if missing:
            terminalreporter.write_line(
                f"{len(missing)} case(s) have no baseline for this hardware class: nothing was gated for them. "
                "Create baselines with --update-baselines, review them, and commit the files under "
                f"{self.settings.baseline_dir}.",
                yellow=True,
            )
        for result in results:
            if result["verdict"] == "updated":
                terminalreporter.write_line(f"wrote {result['baseline_file']}")


STATE = pytest.StashKey[SessionState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for marker, text in MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {text}")
    state = SessionState(resolve(config), Path(config.rootpath))
    config.stash[STATE] = state
    config.pluginmanager.register(state, "perfgate-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is not None and config.pluginmanager.is_registered(state):
        config.pluginmanager.unregister(state)


@dataclass(frozen=True)
class Plan:
    """One case flavour resolved against the settings and this host, ready to launch."""

    spec: LaunchSpec
    hardware: hardware.Hardware
    hardware_class: str
    world_size: int
    steps: int | None
    warmup: int
    baseline_file: Path


class PerfGate:
    """Runs one case flavour end to end and gates it; what the ``perfgate`` fixture returns."""

    def __init__(self, request: pytest.FixtureRequest, workdir: Path) -> None:
        self.request = request
        self.config = request.config
        self.state = self.config.stash[STATE]
        self.settings = self.state.settings
        self.workdir = workdir

    def check(self, run: CaseRun) -> dict[str, Any]:
        """Launches ``run``, measures it and asserts it against its baseline; returns the result."""
        plan = self._plan(run)
        result: dict[str, Any] = {
            "case": run.key,
            "test": self.request.node.nodeid,
            "hardware_class": plan.hardware_class,
            "world_size": plan.world_size,
            "workdir": str(self.workdir),
            "baseline_file": str(plan.baseline_file),
            "verdict": "error",
            "metrics": [],
        }
        self.request.node.user_properties.append((PROPERTY, result))
        baseline = None
        if not self.settings.update_baselines:
            try:
                baseline = baselines.load(plan.baseline_file)
            except baselines.BaselineError as exc:
                self._fail(result, f"{run.key}: {exc}")
        measured, command = self._measure(run, plan, result)
        if self.settings.update_baselines:
            return self._update(run, plan, result, measured, command)
        if baseline is None:
            return self._no_baseline(run, plan, result, measured)
        return self._judge(run, plan, result, baseline, measured, command)

    def _plan(self, run: CaseRun) -> Plan:
        """Resolves the case against the settings and this host; skips or fails before any launch."""
        settings, flavour = self.settings, run.flavour
        hw = self.state.hardware()
        if run.kind == "gpu" and not hw.has_gpu:
            pytest.skip("GPU flavour: torch sees no CUDA GPU on this machine (the CPU flavour runs with -m cpu)")
        nodes = settings.nodes
        per_node, devices = self._ranks_per_node(run, hw, nodes)
        steps = settings.steps if settings.steps is not None else flavour.steps
        warmup = settings.warmup if settings.warmup is not None else flavour.warmup
        if steps is not None and warmup >= steps:
            pytest.fail(f"{run.key}: {warmup} warm-up steps leave nothing to measure out of {steps}; "
                        "lower --perf-warmup or raise --perf-steps", pytrace=False)
        hw_class = settings.hardware_class or hardware.hardware_class(hw, kind=run.kind, per_node=per_node, nodes=nodes)
        argv = run.argv(self.workdir, steps, nodes * per_node)
        if argv[0] != "-m":
            argv[0] = str((self.state.root / argv[0]).resolve())
        spec = LaunchSpec(
            entry=argv,
            workdir=self.workdir,
            nodes=nodes,
            procs_per_node=per_node,
            timeout_s=settings.timeout or flavour.timeout_s,
            env=self._child_env(),
            devices_per_node=devices,
        )
        try:
            path = baselines.baseline_path(settings.baseline_dir, hw_class, run.key)
        except baselines.BaselineError as exc:
            pytest.fail(f"{run.key}: {exc}", pytrace=False)
        return Plan(spec, hw, hw_class, nodes * per_node, steps, warmup, path)

    def _measure(self, run: CaseRun, plan: Plan, result: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Launches the run with live progress and turns its step records into metrics."""
        progress = report.Progress(run.key, plan.steps, self._say, overwrite=self._is_tty())
        follow = run.case.records.follow(self.workdir)

        def show_progress(elapsed: float) -> None:
            try:
                new_steps = follow()
            except RecordsError:
                new_steps = []
            progress.update(new_steps, elapsed)

        try:
            launched = launch(plan.spec, on_poll=show_progress)
        except LaunchFailed as failure:
            result["verdict"] = failure.kind
            self._fail(result, f"{run.key}: {failure.kind}: {failure.message}\nlogs kept in {self.workdir}")
        finally:
            self._end_progress()
        command = self._portable(shlex.join(launched.commands[0]))
        try:
            measured = metrics.compute(run.case.records.read(self.workdir), plan.warmup, plan.world_size).as_dict()
        except (RecordsError, metrics.MetricsError, ValueError) as exc:
            self._fail(result, f"{run.key}: the run finished but gave no measurement: {exc}\n"
                               f"logs kept in {self.workdir}")
        result["measured"] = measured
        (self.workdir / "result.json").write_text(json.dumps({**result, "command": command}, indent=2) + "\n")
        return measured, command

    def _judge(self, run, plan, result, baseline, measured, command) -> dict[str, Any]:
        try:
            verdicts = baselines.compare(baseline, measured)
        except baselines.BaselineError as exc:
            self._fail(result, f"{run.key}: {exc}")
        result["metrics"] = [self._row(v, "FAIL" if v.regressed else "pass") for v in verdicts]
        failed = [v for v in verdicts if v.regressed]
        result["verdict"] = "FAIL" if failed else "pass"
        if failed:
            lines = "\n".join(f"  {v.describe()}" for v in failed)
            self._fail(result, f"{run.key}: performance regression on {plan.hardware_class}\n{lines}\n"
                               f"baseline: {plan.baseline_file}\ncommand: {command}\nlogs kept in {self.workdir}")
        return result

    def _ranks_per_node(self, run: CaseRun, hw: hardware.Hardware, nodes: int) -> tuple[int, list[str] | None]:
        if run.kind == "cpu":
            return run.flavour.ranks_per_node or DEFAULT_CPU_RANKS, None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [d for d in visible.split(",") if d] if visible else [str(i) for i in range(hw.gpu_count)]
        per_node = self.settings.gpus_per_node or run.flavour.ranks_per_node or len(ids) // nodes
        if per_node < 1 or per_node * nodes > len(ids):
            pytest.fail(
                f"{run.key}: --nodes {nodes} x {max(per_node, 1)} GPUs per node needs {nodes * max(per_node, 1)} GPUs "
                f"on this host for the local launcher, but {len(ids)} are visible; lower --nodes or --gpus-per-node",
                pytrace=False,
            )
        return per_node, [",".join(ids[i * per_node:(i + 1) * per_node]) for i in range(nodes)]

    def _update(self, run, plan, result, measured, command) -> dict[str, Any]:
        path, hw_class = plan.baseline_file, plan.hardware_class
        try:
            old = baselines.load(path)
        except baselines.BaselineError:
            old = None
        new = baselines.Baseline(
            case=run.key,
            hardware_class=hw_class,
            metrics={
                name: baselines.MetricBaseline(
                    value=float(f"{measured[name]:.6g}"), better=METRICS[name].better,
                    tolerance=run.flavour.tolerance, unit=METRICS[name].unit,
                )
                for name in run.case.gated
            },
            provenance={
                **hardware.provenance(plan.hardware, root=self.state.root, command=command, hardware_class_name=hw_class),
                "pytest_args": shlex.join(self.config.invocation_params.args),
                "measured": measured,
            },
        )
        baselines.write(path, new)
        rows = []
        for name, ref in new.metrics.items():
            before = old.metrics.get(name) if old else None
            rows.append({
                "metric": name, "unit": ref.unit, "measured": ref.value,
                "baseline": before.value if before else None,
                "change": (ref.value - before.value) / before.value if before else None,
                "verdict": "updated",
            })
        result.update(verdict="updated", metrics=rows)
        return result

    def _no_baseline(self, run, plan, result, measured) -> dict[str, Any]:
        path, hw_class = plan.baseline_file, plan.hardware_class
        result["verdict"] = "no-baseline"
        result["metrics"] = [
            {"metric": name, "unit": METRICS[name].unit, "measured": measured[name], "verdict": "no-baseline"}
            for name in run.case.gated
        ]
        message = (
            f"{run.key}: no baseline for hardware class {hw_class} ({path} does not exist), so nothing was gated. "
            f"Create it: pytest '{self.request.node.nodeid}' --update-baselines, then review and commit the file."
        )
        if self.settings.strict_baselines:
            self._fail(result, message)
        pytest.skip(message)

    @staticmethod
    def _row(verdict: baselines.MetricVerdict, outcome: str) -> dict[str, Any]:
        return {
            "metric": verdict.metric, "unit": verdict.unit, "measured": verdict.measured,
            "baseline": verdict.baseline, "change": verdict.change, "tolerance": verdict.tolerance,
            "verdict": outcome,
        }

    def _portable(self, command: str) -> str:
        """The launch command as it can be rerun from the repository root on another host."""
        return (command.replace(str(self.workdir), "$WORKDIR")
                .replace(str(self.state.root) + "/", "").replace(sys.executable, "python"))

    def _fail(self, result: dict[str, Any], message: str) -> None:
        result["message"] = message
        pytest.fail(message, pytrace=False)

    def _child_env(self) -> dict[str, str]:
        """Children import perfgate (records) and resolve workloads even when it is not installed."""
        paths = [str(PACKAGE_ROOT), str(self.state.root), os.environ.get("PYTHONPATH", "")]
        return {"PYTHONPATH": os.pathsep.join(p for p in dict.fromkeys(paths) if p), "PYTHONUNBUFFERED": "1"}

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


@pytest.fixture
def perfgate(request: pytest.FixtureRequest, tmp_path: Path) -> PerfGate:
    """Runs perf cases: ``perfgate.check(case)`` launches, measures and gates one case flavour.

    Each case runs in its own directory under pytest's tmp path (kept for the last runs), holding
    the agent and per-rank logs, the step records and ``result.json``.
    """
    return PerfGate(request, tmp_path)
