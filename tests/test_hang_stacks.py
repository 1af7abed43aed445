"""Where a hung run was: processes that registered for it write their stacks, forked children included, and a
process that did not (torchrun's agent) is left alone rather than killed by the signal's default action."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from perfgate.launch import hang_stacks
from perfgate.launch.diagnose import LaunchFailed, with_stacks
from perfgate.launch.hang_stacks import Stacks, catches, request_stacks
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
        assert request_stacks(pids) == Stacks(processes=3, asked=2, wrote=2)
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
    assert not catches(gone.pid) and request_stacks([gone.pid]) == Stacks(processes=1)


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
        assert asked.stdout.split() == ["1", "1", "1"], "found, asked, wrote"
        assert "in waiting_for_a_peer_that_never_comes" in node0_log.read_text()
        assert node1_log.read_text() == ""
        subprocess.run([*on_host, "--reap", tag[RUN_ID_ENV]], cwd=REPO, check=True, timeout=60)
        assert node0.wait(timeout=10) is not None and node1.wait(timeout=10) is not None
        assert other.poll() is None, "the reap ended a process of no run"
    finally:
        for proc in (node0, node1, other):
            proc.kill()
            proc.wait()


def test_processes_that_share_a_stderr_are_asked_in_turns_each_once_the_last_dump_is_whole(monkeypatch):
    """A rank and its two loader workers write to rank0.log, another rank to rank1.log: asked at once, the three
    stacks in rank0.log would interleave. On a slow host a dump can land later than a fixed turn would wait, so each
    turn waits for the last dump to be whole (docs/measurements.md#why-the-rules-are-what-they-are)."""
    streams = {10: "rank0.log", 11: "rank0.log", 12: "rank0.log", 20: "rank1.log"}
    sizes = dict.fromkeys(streams.values(), 0)
    clock, asked, landing = [0.0], [], []

    def kill(pid, signum):
        asked.append((pid, clock[0]))
        landing.append((clock[0] + 0.5, streams[pid]))

    def size_of(stream):
        for dump in [dump for dump in landing if dump[0] <= clock[0] and dump[1] == stream]:
            landing.remove(dump)
            sizes[stream] += 100
        return sizes[stream]

    monkeypatch.setattr(hang_stacks, "catches", lambda pid: True)
    monkeypatch.setattr(hang_stacks, "stderr_of", streams.get)
    monkeypatch.setattr(hang_stacks, "size_of", size_of)
    monkeypatch.setattr(hang_stacks.os, "kill", kill)
    monkeypatch.setattr(hang_stacks.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(hang_stacks.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    assert request_stacks(streams) == Stacks(processes=4, asked=4, wrote=4)
    assert [pid for pid, _ in asked] == [10, 20, 11, 12]
    (_, first), (_, other), (_, second), (_, third) = asked
    assert first == other == 0.0
    assert second >= first + 0.5 + hang_stacks.QUIET_S and third >= second + 0.5 + hang_stacks.QUIET_S
    assert clock[0] < hang_stacks.ANSWER_S


def test_a_process_that_cannot_answer_is_asked_and_counted_as_silent_after_the_answer_time(tmp_path, monkeypatch):
    """A stopped process catches the signal but runs no handler: the request waits ANSWER_S for it, no longer."""
    monkeypatch.setattr(hang_stacks, "ANSWER_S", 1.0)
    rank, rank_log = start(tmp_path, "rank", "tell_stacks_on_request()")
    try:
        rank.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        assert request_stacks([rank.pid]) == Stacks(processes=1, asked=1, wrote=0)
        assert time.monotonic() - started >= 1.0
        assert rank_log.read_text() == ""
    finally:
        rank.kill()
        rank.wait()


HUNG = LaunchFailed("timeout", "no exit after the 15 s timeout")


def test_a_hangs_message_says_where_its_stacks_are_or_why_there_are_none(tmp_path):
    def said(stacks):
        amended = with_stacks(HUNG, stacks, tmp_path, " on its host")
        assert amended.kind == "timeout" and amended.message.startswith(HUNG.message)
        return amended.message.removeprefix(HUNG.message)

    assert said(Stacks(4, 2, 2)).startswith("\nWhere it hung: 2 process(es) of the run wrote their Python stacks")
    assert f"{tmp_path}/node*/*/attempt_*/RANK/stderr.log on its host" in said(Stacks(4, 2, 2))
    assert said(Stacks(4, 3, 2)).endswith(f"; 1 more asked wrote nothing within {hang_stacks.ANSWER_S:g} s")
    assert said(Stacks(4, 2, 0)).startswith("\nWhere it hung: unknown; 2 process(es) of the run were asked for their "
                                            f"Python stacks and none wrote within {hang_stacks.ANSWER_S:g} s")
    assert said(Stacks(3, 0, 0)).startswith("\nWhere it hung: unknown; none of the run's 3 process(es) had set up its "
                                            "stack dump")
    assert "were still starting" in said(Stacks(3, 0, 0))
    assert with_stacks(HUNG, Stacks(), tmp_path) is HUNG, "no process found: nothing to say"


def test_a_process_writing_to_a_pipe_is_asked_unobserved_and_this_process_is_never_asked(tmp_path):
    """A stderr that is no file cannot be watched: its process is asked, given UNSEEN_S, and not counted as written."""
    piped = subprocess.Popen([sys.executable, "-c", HANGS.format(register="tell_stacks_on_request()", fork=False)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert piped.stdout.readline().strip() == "ready"
        assert hang_stacks.size_of(hang_stacks.stderr_of(piped.pid)) is None
        assert request_stacks([piped.pid, os.getpid()]) == Stacks(processes=1, asked=1, wrote=0)
    finally:
        piped.kill()
        piped.communicate()
    assert hang_stacks.size_of(str(tmp_path / "absent.log")) is None


def test_the_hosts_counts_add_up_and_lines_that_are_not_counts_are_passed_over():
    said = "3 2 2\nWarning: Permanently added '127.0.0.2' to the list of known hosts.\n2 2 1\n"
    assert Stacks.from_lines(said) == Stacks(processes=5, asked=4, wrote=3)
    assert Stacks.from_lines("") == Stacks()
