"""Shared helpers for the harness's tests."""

import os
import tempfile
from pathlib import Path

import postgres_server
import psutil
import pytest

from perfgate.launch.local import launch
from perfgate.launch.spec import RUN_ID_ENV, LaunchSpec
from perfgate.records.steps import read_records

pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "workloads"

NESTED_SESSION_OPTIONS = "-p no:anyio"
"""What every pytest session a test starts is given (PYTEST_ADDOPTS): no anyio plugin. Selenium, the dashboard tests'
browser driver, brings trio, and anyio's plugin imports it in every session: 0.7 of a session's 1.7 CPU-s on a
2-core VM, in a suite that starts a few hundred sessions, none of them with an async test."""
os.environ["PYTEST_ADDOPTS"] = " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"), NESTED_SESSION_OPTIONS]))
# The launches of the tests and of the sessions they start keep what they compile and generate (launch.caches) in the
# temp dir, shared by the tests' runs as a machine's cache is, and never in the user's ~/.cache.
os.environ.setdefault("PERFGATE_CACHE_DIR", str(Path(tempfile.gettempdir()) / "perfgate-tests-cache"))


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytest's own, whose sessions get NESTED_SESSION_OPTIONS too (it drops the outer PYTEST_ADDOPTS)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", NESTED_SESSION_OPTIONS)
    return pytester


def leftover_processes(marker: str) -> list[psutil.Process]:
    """Live processes of a perfgate run whose command line or working directory mentions ``marker``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if RUN_ID_ENV not in proc.environ() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if marker in " ".join(proc.cmdline()) or marker in proc.cwd():
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def no_leftovers(tmp_path):
    """Asserts, after the test, that no process of a run under ``tmp_path`` is still alive."""
    yield
    assert leftover_processes(str(tmp_path)) == []


def train(tmp_path, script, *args):
    """Runs a workload for a few steps on 2 gloo ranks; returns rank 0's records."""
    records = tmp_path / "steps.jsonl"
    launch(LaunchSpec(entry=[str(WORKLOADS / script), "--device", "cpu", "--records", str(records), *args],
                      workdir=tmp_path / "run", procs_per_node=2, timeout_s=240,
                      env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}))
    return read_records(records)


def skip_without_server(why_not: str | None) -> None:
    """Skips a test whose real server (slurmd, sshd, PostgreSQL, a browser) this machine lacks, saying why; under
    PERFGATE_REQUIRE_SERVERS=1 (which .ci/run, CI's entry point, sets) it fails instead: a green CI run must not hide
    their tests. Not CI=true, which every CI service sets for any job, whether it can install them or not."""
    if not why_not:
        return
    if os.environ.get("PERFGATE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{why_not}; PERFGATE_REQUIRE_SERVERS=1 (.ci/run) says this run must have it: install the "
                    "packages (.ci/servers, as root on Debian or Ubuntu), so that this test may not skip")
    pytest.skip(why_not)


@pytest.fixture(scope="module")
def postgres():
    """A real PostgreSQL server for the module's tests (tests/postgres_server.py), or a skip that says what is missing."""
    skip_without_server(postgres_server.missing())
    server = postgres_server.PostgresServer()
    try:
        yield server.start()
    finally:
        server.stop()
