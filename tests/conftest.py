"""Shared helpers for the harness's tests."""

from pathlib import Path

import psutil
import pytest

from perfgate.launch.spec import RUN_ID_ENV

pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parent.parent


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
