"""The ``perfgate`` fixture's object: one case flavour per ``check``, through plan, launches, measuring and the
verdict, with progress on the terminal and the stages' skips and failures turned into pytest's."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import pytest

from perfgate.config.cases import CaseRun
from perfgate.config.settings import Settings
from perfgate.judge import known, revision
from perfgate.judge.ab import ABGate, RevisionReference, runs_duet
from perfgate.judge.baselines import StoredBaseline
from perfgate.judge.gate import Gate
from perfgate.launch import hardware
from perfgate.launch.plan import Plan, node_launcher, plan
from perfgate.launch.spec import NodeLauncher
from perfgate.measure.budget import SessionBudget
from perfgate.measure.measurer import Measurer
from perfgate.outcome import CaseFailed, CaseSkipped
from perfgate.report import tables, terminal
from perfgate.result import Result

if TYPE_CHECKING:
    from perfgate.trend.history import SessionHistory

PROPERTY = "perfgate"
"""The name under which each case's result travels in its report's user_properties."""
SAYING = threading.Lock()
"""Held while a progress line is written: the launches of a duet pair report from two threads."""


class Session(Protocol):
    """What a case asks of the session (plugin.SessionState)."""

    settings: Settings
    root: Path
    reference: revision.ReferenceSide | None
    nvml: Callable[[], tuple[Any, str]]
    budget: SessionBudget | None

    def node_hardware(self, launcher: NodeLauncher) -> list[hardware.Hardware]: ...


class PerfGate:
    """What the ``perfgate`` fixture returns: plans, measures and gates one case flavour per ``check``."""

    def __init__(self, request: pytest.FixtureRequest, workdir: Path, state: Session) -> None:
        self.request = request
        self.config = request.config
        self.state = state
        self.workdir = workdir

    def check(self, run: CaseRun) -> Result:
        """Launches ``run`` (repeatedly), measures it and judges it against its baseline; returns the result."""
        state, settings = self.state, self.state.settings
        launcher = node_launcher(settings)
        with _as_pytest_outcome(None):
            planned = plan(run, settings, state.node_hardware(launcher), workdir=self.workdir, root=state.root,
                           test_id=self.request.node.nodeid)
            try:
                reference = state.reference.revision() if state.reference else None
            except revision.RevisionError as exc:
                raise CaseFailed(f"{run.key}: {exc}") from None
            if reference is not None and revision.entry_in(reference, run, state.root) is None:
                raise CaseSkipped(f"{run.key}: a new case: {settings.against} has no {run.case.entry[-1]}, so there "
                                  "is nothing to compare it against")
        result = Result(case=run.key, test=self.request.node.nodeid, hardware_class=planned.hardware_class,
                        world_size=planned.world_size, family=run.case.family, workload_version=run.case.version,
                        workdir=str(self.workdir), baseline_file=str(planned.baseline_file),
                        injected_slowdown=settings.inject_slowdown)
        self.request.node.user_properties.append((PROPERTY, result))
        measurer = Measurer(planned, result, launcher=launcher, root=state.root,
                            inject_slowdown=settings.inject_slowdown, nvml=state.nvml, say=self._say,
                            tty=self._is_tty(planned))
        if reference is None:
            history = self._session_history(planned, result)
            if history is not None and state.budget is not None:
                state.budget.known[run.key] = history.launch_costs() or {}
            gate = Gate(planned, settings, measurer, StoredBaseline(planned.baseline_file), root=state.root,
                        pytest_args=shlex.join(self.config.invocation_params.args), nvml=state.nvml,
                        sessions=history.sessions if history is not None else None, budget=state.budget)
        else:
            result.candidate_commit = state.reference.commits[1]
            if state.reference.environment is not None:
                result.environment = state.reference.environment
            gate = ABGate(planned, settings, measurer, RevisionReference(reference, self._reference_measurer(
                planned, reference, launcher), planned, settings.ab_tolerance), root=state.root, nvml=state.nvml,
                budget=state.budget)
        try:
            with _as_pytest_outcome(result):
                try:
                    return gate.check()
                finally:
                    result.known = known.comparisons(result, settings.baseline_dir, state.published)
        finally:
            measurer.finish(settings.min_gpu_util)
            self.request.node.user_properties.extend(terminal.junit_properties(result))

    def _session_history(self, planned: Plan, result: Result) -> SessionHistory | None:
        """What the results history (--perf-history) tells the stored baseline's verdict; none when there is none,
        and under --update-baselines. Its libraries were found at configure."""
        settings, run = self.state.settings, planned.run
        if not settings.history_url or settings.update_baselines:
            return None
        from perfgate.trend.history import SessionHistory

        return SessionHistory(settings.history_url, settings.history_branch, run.key, planned.hardware_class,
                              warn=result.warn)

    def _reference_measurer(self, planned: Plan, reference: revision.Revision, launcher: NodeLauncher) -> Measurer:
        """Measures the reference side of a case, with no plant: a revision's checkout (its workloads and perfgate
        first on PYTHONPATH), or this checkout under the reference interpreter."""
        spec = planned.spec.for_reference(self.workdir / "reference", checkout=reference.root, python=reference.python)
        side = Result(case=planned.run.key, test=self.request.node.nodeid, hardware_class=planned.hardware_class,
                      world_size=planned.world_size, workload_version=planned.run.case.version)
        return Measurer(dataclasses.replace(planned, spec=spec), side, launcher=launcher,
                        root=reference.root, nvml=self.state.nvml, say=self._say, tty=self._is_tty(planned),
                        label=f"{planned.run.key} @ {reference.name}")

    def _terminal(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def _is_tty(self, planned: Plan) -> bool:
        """Whether progress may rewrite its line: on a terminal, unless a duet pair's two launches share it."""
        terminal = self._terminal()
        settings = self.state.settings
        duet = bool(settings.against or settings.against_python) and runs_duet(settings, planned.run.kind)
        return bool(terminal is not None and terminal.isatty()) and not duet

    def _say(self, line: str, overwrite: bool) -> None:
        """Writes past pytest's output capture, so progress shows while a case runs."""
        terminal = self._terminal()
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if terminal is None or capture is None:
            return
        with SAYING, capture.global_and_fixture_disabled():
            if overwrite:
                terminal.rewrite(line)
            else:
                terminal.ensure_newline()
                terminal.write_line(line)


@contextlib.contextmanager
def _as_pytest_outcome(result: Result | None) -> Iterator[None]:
    """Turns a stage's CaseSkipped and CaseFailed into pytest's skip and fail, keeping the message in ``result``.
    A generator's exception leaves the ``with`` statement as context of the one raised here, so the fail suppresses
    it: pytest would otherwise print the message twice, "During handling of the above exception" between them."""
    try:
        yield
        return
    except CaseSkipped as skipped:
        skip, fail = str(skipped), None
    except CaseFailed as failed:
        skip, fail = None, str(failed)
    if fail is None:
        if result is not None and result.known:
            skip += "\n" + "\n".join([f"{tables.KNOWN_HEADING}:", *known.describe(result.known)])
        pytest.skip(skip)
    if result is not None:
        result.conclude(result.verdict, fail)
    raise pytest.fail.Exception(fail, pytrace=False) from None
