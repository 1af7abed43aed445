"""This machine's pace, measured now, for the tests that must bound a time: a bound in fixed seconds holds on the
machine it was written on and fails on a slower or busier one. A test waits for what it expects to happen
(``wait_until``), and where a run must be past its start before a timeout fires, the timeout comes from how long a
start takes here (``launch_start_bound_s``)."""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from typing import Callable

from perfgate.launch.agents import KILL_GRACE_S, POLL_S


@functools.cache
def python_start_s() -> float:
    """Seconds a Python that imports torch.distributed takes to start on this machine, measured once per test process:
    what a torchrun agent, and then each of its ranks, pays before any work."""
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch.distributed"], check=True, capture_output=True, timeout=600)
    return time.monotonic() - began


def launch_start_bound_s() -> float:
    """More than a local launch takes here until its ranks run their workload: the agent's start, its ranks' (side by
    side on cores that another test may share), and the rendezvous; a timeout shorter than this can fire before any
    rank began its work, and a hang must then read as one that happened in start-up."""
    return 10.0 + 6.0 * python_start_s()


def most_past_a_bound_s() -> float:
    """How long a launch may run on past a bound it enforces (its timeout, its teardown bound): its last poll, killing
    the run (SIGTERM, SIGKILL, then the agents' exit, each KILL_GRACE_S at most), and this host's pace for the rest."""
    return POLL_S + 3 * KILL_GRACE_S + python_start_s()


def wait_until(condition: Callable[[], object], what: str, timeout_s: float = 120.0, poll_s: float = 0.02) -> object:
    """Polls ``condition`` until it returns something true, which is returned; fails the test after ``timeout_s`` (a
    hang in the code under test, not a slow machine: it is minutes), saying what never happened."""
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
        time.sleep(poll_s)
    return found
