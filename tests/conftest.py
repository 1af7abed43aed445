"""Shared helpers for the harness's tests."""

from pathlib import Path

import psutil
import pytest

from perfgate.launch.spec import RUN_ID_ENV

pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parent.parent

LONGEST_FILES_FIRST = ("test_slurm.py", "test_ssh.py", "test_bisect.py", "test_ab.py", "test_faults.py",
                       "test_optimizer_steps.py", "test_plugin_e2e.py", "test_trend.py", "test_against_python.py")
"""The files whose tests took minutes in CI (`--durations`), longest first. `make test`'s two xdist workers are each
handed the next file in collection order when they run low (`--dist loadfile --no-loadscope-reorder`); a file of
a few long tests handed out last keeps one worker busy while the other idles, as xdist's own order (most tests
first) did with the slurm and ssh files."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Puts the longest files first (a stable sort: each file's tests keep their order)."""
    rank = {name: position for position, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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
