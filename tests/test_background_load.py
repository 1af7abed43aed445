"""The loads that tests and benchmarks run beside themselves leave no process behind, even when their owner is
killed before its cleanup can run: a load left behind skews whatever runs next, for hours
(docs/measurements.md#why-the-rules-are-what-they-are)."""

import subprocess
import sys
import textwrap

import psutil
import pytest

from background_load import REPO

pytestmark = pytest.mark.launches


def test_busy_processes_end_with_an_owner_killed_without_cleanup(tmp_path):
    pids = tmp_path / "pids"
    owner = textwrap.dedent(f"""
        import os, pathlib, sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        from background_load import busy_processes
        with busy_processes(count=2, seconds=600) as procs:
            pathlib.Path({str(pids)!r}).write_text(" ".join(str(p.pid) for p in procs))
            os._exit(9)  # as a SIGKILL would: no finally, no with-block exit
    """)
    done = subprocess.run([sys.executable, "-c", owner], stdout=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 9
    busy = [psutil.Process(int(pid)) for pid in pids.read_text().split()]
    assert len(busy) == 2 and all(proc.is_running() for proc in busy)
    gone, alive = psutil.wait_procs(busy, timeout=15)
    for proc in alive:
        proc.kill()
    assert alive == [], "a busy process outlived its owner"
