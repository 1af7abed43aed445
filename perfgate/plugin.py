"""The pytest plugin: options and markers, the session's hooks, the ``perfgate`` fixture (its object is
fixture.PerfGate) and the terminal summary.

It only wires the stages to pytest; a case flows settings + case -> plan (plan.py) -> launches
(measure.py, through a NodeLauncher) -> step records -> metrics -> verdict (gate.py, against a
Reference) -> report (through ResultSinks: the terminal summary, --perf-json, --perf-report). Stages
raise CaseSkipped and CaseFailed, which become pytest's skip and fail here. Results travel from test
items to the summary as ``user_properties``, so they reach the controller under pytest-xdist; JUnit XML
gets each case's verdict and gated metrics as perfgate.* properties.
"""

from __future__ import annotations

import importlib
import math
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from perfgate.config.settings import Settings, add_options, resolve
from perfgate.fixture import PROPERTY, PerfGate
from perfgate.judge import known, revision
from perfgate.launch import hardware
from perfgate.launch.diagnose import LaunchFailed
from perfgate.launch.plan import import_env
from perfgate.launch.spec import NodeLauncher
from perfgate.measure import gpu_monitor
from perfgate.measure.budget import SessionBudget
from perfgate.outcome import CaseFailed
from perfgate.report import terminal
from perfgate.report.benchmark_json import BenchmarkJson
from perfgate.report.directory import ReportDirectory
from perfgate.report.results_file import ResultsFile
from perfgate.result import Result

MARKERS = {
    "gpu": "GPU flavour of a case: nccl, one rank per GPU; skipped where no CUDA GPU is visible",
    "cpu": "CPU flavour of a case: gloo ranks on the CPU, small settings; runs anywhere",
    "multinode": "meant for several nodes (see --nodes and --launcher)",
    "slow": "takes many minutes even on its target hardware",
    "full_matrix": "a matrix case outside the representative default subset; runs with --full-matrix",
}
CREATE_BASELINES_ENV = "PERFGATE_BASELINES_COMMAND"
"""Names the command that creates missing baselines in the summary (the Makefile sets `make baselines`)."""


class SessionState:
    """The session's perfgate state, registered as a plugin: settings, hardware, collected results."""

    def __init__(self, settings: Settings, root: Path, worker: bool = False) -> None:
        self.settings = settings
        self.root = root
        self.results: list[dict[str, Any]] = []
        self.left_out: dict[str, int] = {}
        """Cases deselected by mark (full_matrix, slow) because their option was not given."""
        self._nodes: list[hardware.Hardware] | str | None = None
        self._nvml: tuple[Any, str] | None = None
        self.reference: revision.ReferenceSide | None = None
        """Under --perf-against(-python): the other side of every pair."""
        self.worker = worker
        self.published: list[known.PublishedFigure] = []
        """A pytest-xdist worker: its results go to the controller, which writes the reports."""
        self.budget = SessionBudget(settings.budget * 60) if settings.budget else None
        """--perf-budget, counted from the session's start (each xdist worker's, for its share of the cases)."""
        self._cases: dict[str, tuple[int, bool]] = {}
        self._workers = 1

    def node_hardware(self, launcher: NodeLauncher) -> list[hardware.Hardware]:
        """Each node's hardware, read once per session through the launcher; CaseFailed (every case) if unreadable."""
        if self._nodes is None:
            try:
                self._nodes = launcher.node_hardware(self.settings.nodes, import_env(self.root))
            except LaunchFailed as failure:
                self._nodes = f"--launcher {self.settings.launcher}: {failure.message}"
        if isinstance(self._nodes, str):
            raise CaseFailed(self._nodes)
        return self._nodes

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

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The session's perfgate cases in the order they run, each with whether it is a GPU flavour, so that
        --perf-budget knows how many are to come."""
        cases = [item for item in session.items if "perfgate" in getattr(item, "fixturenames", ())]
        self._cases = {item.nodeid: (index, bool(item.get_closest_marker("gpu"))) for index, item in enumerate(cases)}
        self._workers = int(getattr(session.config, "workerinput", {}).get("workercount", 1))

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """The cases still to come after this one (this worker's share under xdist), less GPU flavours once the
        nodes are known to have no GPU: those skip without a launch."""
        if self.budget is None or item.nodeid not in self._cases:
            return
        here = self._cases[item.nodeid][0]
        no_gpu = isinstance(self._nodes, list) and not any(node.has_gpu for node in self._nodes)
        to_come = sum(1 for index, gpu in self._cases.values() if index > here and not (gpu and no_gpu))
        self.budget.cases_to_come = math.ceil(to_come / self._workers)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
        """A report carries each case's record as plain JSON, which pytest-xdist sends from worker to controller."""
        report = yield
        report.user_properties = [(name, value.to_json() if isinstance(value, Result) else value)
                                  for name, value in report.user_properties]
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collects each case's result. The whole record travels to the controller in user_properties; once
        there, it is taken out, so JUnit XML gets the flat perfgate.* properties (terminal.junit_properties)."""
        if report.when == "call":
            self.results.extend(Result.from_json(value, f"{report.nodeid}'s result")
                                for name, value in report.user_properties if name == PROPERTY)
        if not self.worker:
            report.user_properties = [(name, value) for name, value in report.user_properties if name != PROPERTY]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.left_out.get("full_matrix"):
            terminalreporter.write_line(f"perfgate: {self.left_out['full_matrix']} full-matrix case(s) deselected; "
                                        "--full-matrix runs them")
        if self.left_out.get("slow"):
            terminalreporter.write_line(f"perfgate: {self.left_out['slow']} slow case(s) deselected (hours each); "
                                        "--perf-slow runs them, --perf-steps N shortens them")
        sinks: list[terminal.ResultSink] = [terminal.TerminalSummary(
            terminalreporter.section, terminalreporter.write_line, os.environ.get(CREATE_BASELINES_ENV))]
        if self.settings.history_url and not self.worker:
            from perfgate.trend.recorder import HistoryRecorder

            # Before the files: it sets each result's standing in its history, which they then carry.
            sinks.append(HistoryRecorder(self.settings.history_url, self.root,
                                         lambda text, warning: terminalreporter.write_line(text, yellow=warning),
                                         self.reference.environment if self.reference else None))
        if self.settings.json_path and not self.worker:
            sinks.append(BenchmarkJson(self.settings.json_path, self._hardware_info()))
        if self.settings.results_path and not self.worker:
            sinks.append(ResultsFile(self.settings.results_path))
        if self.settings.report_dir and not self.worker:
            sinks.append(ReportDirectory(self.settings.report_dir, os.environ.get("GITHUB_STEP_SUMMARY"),
                                         os.environ.get(CREATE_BASELINES_ENV)))
        for sink in sinks:
            sink.write(self.results, self.settings)
        for path in (self.settings.json_path, self.settings.results_path, self.settings.report_dir):
            if path and self.results and not self.worker:
                terminalreporter.write_line(f"perfgate: wrote {path}")
        if self.budget is not None:
            stopped = sum(1 for result in self.results if result.budget_stop and result.verdict == "unresolved")
            terminalreporter.write_line(
                f"perfgate: --perf-budget {self.settings.budget:g} min: the session took {self.budget.used_s():.0f} s "
                f"of its {self.budget.seconds:.0f} s; {stopped} case(s) left unresolved by it", yellow=bool(stopped))

    def _hardware_info(self) -> dict[str, Any]:
        """The session's hardware class(es) and nodes, for the JSON's machine_info."""
        nodes = self._nodes if isinstance(self._nodes, list) else []
        return {"perfgate_hardware_classes": sorted({r.hardware_class for r in self.results}),
                "perfgate_nodes": [node.to_json() for node in nodes]}


STATE = pytest.StashKey[SessionState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for marker, text in MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {text}")
    state = SessionState(resolve(config), Path(config.rootpath), worker=hasattr(config, "workerinput"))
    try:
        state.published = known.load_published(state.settings.published)
    except known.PublishedError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    if state.settings.history_url:
        _check_history_url(state.settings.history_url)
        if "://" not in state.settings.history_url:
            _refuse_a_rootdir_taken_from(config, "--perf-history", state.settings.history_url)
    if state.settings.against_python:
        _refuse_a_rootdir_taken_from(config, "--perf-against-python", state.settings.against_python)
    if state.settings.against or state.settings.against_python:
        try:
            state.reference = revision.ReferenceSide(state.root, state.settings.against, state.settings.against_python)
        except revision.RevisionError as exc:
            raise pytest.UsageError(f"perfgate: {exc}") from None
    config.stash[STATE] = state
    config.pluginmanager.register(state, "perfgate-session")
    _stop_cleanly_on_sigterm()


def _check_history_url(url: str) -> None:
    """--perf-history's libraries are an extra (perfgate[trend]): imported only when it is given."""
    try:
        importlib.import_module("perfgate.trend.recorder")  # what the summary will need
        from perfgate.trend.database import DatabaseError, url_of
    except ImportError as exc:
        raise pytest.UsageError(f"perfgate: --perf-history needs {exc.name}: pip install 'perfgate[trend]', then "
                                "pip install --no-deps apache-otava==0.8.0 (requirements-nodeps.txt)") from None
    try:
        url_of(url)
    except DatabaseError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None


def _refuse_a_rootdir_taken_from(config: pytest.Config, option: str, value: str) -> None:
    """pytest picks its rootdir before it knows plugins' options, from every argument that names an existing file, so
    ``--perf-against-python /x/bin/python`` or ``--perf-history /shared/history.db`` can make a directory above both
    the checkout and that file the rootdir: the suite's ini, cases and checkout would then be the wrong ones.
    ``OPTION=VALUE`` is one argument, which pytest leaves alone."""
    invocation = Path(config.invocation_params.dir)
    if value not in [str(arg) for arg in config.invocation_params.args]:
        return
    path, rootpath = Path(os.path.abspath(invocation / value)), Path(config.rootpath)
    if path.exists() and path.is_relative_to(rootpath) and not path.is_relative_to(invocation):
        raise pytest.UsageError(f"perfgate: pytest took {value} for a test path when it chose its rootdir "
                                f"({rootpath}); write it as one argument: {option}={value}")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is not None and config.pluginmanager.is_registered(state):
        config.pluginmanager.unregister(state)
        if state.reference is not None:
            try:
                state.reference.close()
            except revision.RevisionError as exc:  # the verdicts stand; what is left behind is named
                sys.stderr.write(f"perfgate: WARNING: {exc}\n")
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


@pytest.fixture
def perfgate(request: pytest.FixtureRequest, tmp_path: Path) -> PerfGate:
    """Runs perf cases: ``perfgate.check(case)`` launches, measures and gates one case flavour.

    Each case runs in its own directory under pytest's tmp path (kept for the last runs), holding
    the agent and per-rank logs, the step records and ``result.json``.
    """
    return PerfGate(request, tmp_path, request.config.stash[STATE])
