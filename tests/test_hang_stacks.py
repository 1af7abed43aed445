"""Where a hung run was: processes that registered for it write their stacks, forked children included, and a
process that did not (torchrun's agent) is left alone rather than killed by the signal's default action."""

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from perfgate.launch import hang_stacks
from perfgate.launch.hang_stacks import catches, request_stacks
from perfgate.launch.spec import NODE_ENV, RUN_ID_ENV

REPO = Path(__file__).resolve().parent.parent
HANGS = """
import os, sys, time
from perfgate.launch.hang_stacks import tell_stacks_on_request
{register}
def waiting_for_a_peer_that_never_comes():
    time.sleep(600)
if {fork} and os.fork() == 0:
    waiting_for_a_peer_that_never_comes()
print("ready", flush=True)
waiting_for_a_peer_that_never_comes()
"""


def start(tmp_path, name, register, fork=False, **env):
    log = (tmp_path / f"{name}.log").open("w")
    proc = subprocess.Popen([sys.executable, "-c", HANGS.format(register=register, fork=fork)], stdout=subprocess.PIPE,
                            stderr=log, text=True, env={**os.environ, "PYTHONPATH": str(REPO), **env})
    assert proc.stdout.readline().strip() == "ready"
    return proc, tmp_path / f"{name}.log"


def test_a_hung_rank_and_its_forked_worker_write_their_stacks_and_an_unregistered_process_lives_on(tmp_path):
    rank, rank_log = start(tmp_path, "rank", "tell_stacks_on_request()", fork=True)
    agent, agent_log = start(tmp_path, "agent", "")
    try:
        worker = psutil.Process(rank.pid).children()
        assert len(worker) == 1
        pids = [rank.pid, worker[0].pid, agent.pid]
        assert [catches(pid) for pid in pids] == [True, True, False]
        assert request_stacks(pids) == 2
        time.sleep(0.5)
        text = rank_log.read_text()
        assert text.count("most recent call first") == 2, text
        assert text.count("in waiting_for_a_peer_that_never_comes") == 2, text
        assert agent.poll() is None and rank.poll() is None, "the signal ended a process"
        assert agent_log.read_text() == ""
    finally:
        for proc in psutil.Process(rank.pid).children() + [psutil.Process(rank.pid), psutil.Process(agent.pid)]:
            proc.kill()
        rank.wait()
        agent.wait()


def test_a_process_that_is_gone_is_passed_over():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not catches(gone.pid) and request_stacks([gone.pid]) == 0


def test_on_a_shared_host_the_stacks_of_one_node_are_asked_for_and_the_reap_ends_only_the_run(tmp_path):
    """What the remote launchers run on each host: two nodes of a run share this one, as in their tests."""
    tag = {RUN_ID_ENV: f"perfgate-test-{os.getpid()}"}
    node0, node0_log = start(tmp_path, "node0", "tell_stacks_on_request()", **tag, **{NODE_ENV: "0"})
    node1, node1_log = start(tmp_path, "node1", "tell_stacks_on_request()", **tag, **{NODE_ENV: "1"})
    other, _ = start(tmp_path, "other", "tell_stacks_on_request()")
    try:
        on_host = [sys.executable, "-m", "perfgate.launch.on_host"]
        asked = subprocess.run([*on_host, "--stacks", tag[RUN_ID_ENV], "--node", "0"], capture_output=True,
                               text=True, cwd=REPO, check=True)
        assert asked.stdout.split() == ["1"]
        assert "in waiting_for_a_peer_that_never_comes" in node0_log.read_text()
        assert node1_log.read_text() == ""
        subprocess.run([*on_host, "--reap", tag[RUN_ID_ENV]], cwd=REPO, check=True, timeout=60)
        assert node0.wait(timeout=10) is not None and node1.wait(timeout=10) is not None
        assert other.poll() is None, "the reap ended a process of no run"
    finally:
        for proc in (node0, node1, other):
            proc.kill()
            proc.wait()


def test_processes_that_share_a_stderr_are_asked_in_turns_and_the_others_at_once(monkeypatch):
    """A rank and its two loader workers write to rank0.log, another rank to rank1.log: asked at once, the three
    stacks in rank0.log would interleave."""
    streams = {10: "rank0.log", 11: "rank0.log", 12: "rank0.log", 20: "rank1.log"}
    events = []
    monkeypatch.setattr(hang_stacks, "catches", lambda pid: True)
    monkeypatch.setattr(hang_stacks, "stderr_of", streams.get)
    monkeypatch.setattr(hang_stacks.os, "kill", lambda pid, signum: events.append(pid))
    monkeypatch.setattr(hang_stacks.time, "sleep", lambda seconds: events.append(seconds))
    assert request_stacks(streams) == 4
    assert events == [10, 20, hang_stacks.TURN_S, 11, hang_stacks.TURN_S, 12, hang_stacks.ANSWER_S]
