"""The local launcher with real torchrun agents and gloo ranks (small scripts, no model; the ranks that only hang
need no torch)."""

import subprocess
import sys
import textwrap
import time

import pytest
from pace import launch_start_bound_s, most_past_a_bound_s, wait_until

from conftest import leftover_processes
from perfgate.launch.agents import ephemeral_range, free_port, port_share, until_an_exit
from perfgate.launch.caches import DATA_DIR_ENV, data_cache_env
from perfgate.launch.diagnose import LaunchFailed
from perfgate.launch.local import launch
from perfgate.launch.spec import LaunchSpec

PRELUDE = """
import os, signal, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
"""

SCRIPTS = {
    "ok": "t = torch.ones(1); dist.all_reduce(t); print(f'rank {rank}/{world} sum {int(t.item())}', flush=True)\n"
          "print('data in', os.environ.get('PERFGATE_DATA_DIR'), flush=True)",
    "crash": "if rank == 1:\n    print('boom on rank 1', file=sys.stderr, flush=True); sys.exit(3)\ndist.barrier()",
    "sigkill": "if rank == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\ndist.barrier()",
}

ENDING = "\ndist.destroy_process_group()\nsys.stdout.flush()\nos._exit(0)\n"
"""How a finished rank leaves, as the workloads do: Python's own exit can abort it (diagnose.EXIT_ABORT)."""

HANG = "import time\ntime.sleep(3600)\n"
"""Ranks that never exit. What ends them is the launcher's timeout or interrupt, not a peer, so they need no torch
(whose import is most of a rank's start on a small VM)."""


def spec(tmp_path, name, **kwargs):
    script = tmp_path / f"{name}.py"
    script.write_text(HANG if name == "hang" else PRELUDE + textwrap.dedent(SCRIPTS[name]) + ENDING)
    defaults = {"nodes": 1, "procs_per_node": 2, "timeout_s": 60.0}
    return LaunchSpec(entry=[str(script)], workdir=tmp_path / "run", **{**defaults, **kwargs})


def test_free_ports_are_distinct_and_bindable():
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 15 and all(1024 < p < 65536 for p in ports)


def test_xdist_workers_pick_rendezvous_ports_from_disjoint_shares_below_the_ephemeral_range():
    shares = [port_share(worker, 3) for worker in range(3)]
    assert all(len(share) > 1000 for share in shares)
    assert not set(shares[0]) & set(shares[1]) and not set(shares[1]) & set(shares[2])
    assert max(shares[2]) < ephemeral_range()[0]
    for share in shares:
        assert all(free_port(share) in share for _ in range(5))


def test_a_taken_port_is_never_picked():
    import socket

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        assert free_port(range(taken, taken + 1)) != taken


@pytest.mark.launches
def test_successful_run_keeps_agent_and_rank_logs(tmp_path, no_leftovers):
    result = launch(spec(tmp_path, "ok"))
    assert len(result.agent_logs) == 1
    assert "rank 0/2 sum 2" in result.agent_logs[0].read_text()
    # On this host, the data a workload generates is kept once per machine in perfgate's cache directory.
    assert f"data in {data_cache_env()[DATA_DIR_ENV]}" in result.agent_logs[0].read_text()
    assert sorted(p.parent.name for p in (tmp_path / "run" / "node0").glob("*/attempt_0/*/stdout.log")) == ["0", "1"]


@pytest.mark.launches
def test_two_agents_meet_through_c10d_rendezvous(tmp_path, no_leftovers):
    result = launch(spec(tmp_path, "ok", nodes=2))
    text = "".join(log.read_text() for log in result.agent_logs)
    assert {f"rank {r}/4 sum 4" for r in range(4)} <= {line.split("]:")[-1].strip() for line in text.splitlines()}


@pytest.mark.launches
def test_crashed_rank_is_named_with_exit_code_and_its_log_tail(tmp_path, no_leftovers):
    with pytest.raises(LaunchFailed) as failure:
        launch(spec(tmp_path, "crash"))
    assert failure.value.kind == "crashed"
    assert "rank 1 (node 0, local rank 1) failed: exit code 3" in failure.value.message
    assert "boom on rank 1" in failure.value.message
    assert failure.value.log_path.name == "stderr.log" and failure.value.log_path.parent.name == "1"
    assert failure.value.commands[0][:3] == (sys.executable, "-m", "torch.distributed.run")


@pytest.mark.launches
def test_killed_rank_reports_the_signal(tmp_path, no_leftovers):
    with pytest.raises(LaunchFailed, match="rank 1 .* failed: killed by signal SIGKILL") as failure:
        launch(spec(tmp_path, "sigkill"))
    assert failure.value.kind == "crashed"


@pytest.mark.launches
def test_hang_times_out_and_kills_the_whole_tree(tmp_path, no_leftovers):
    """The timeout comes once the ranks surely run here: before that, a hang is a rendezvous that never completed."""
    timeout_s = round(launch_start_bound_s())
    started = time.monotonic()
    with pytest.raises(LaunchFailed, match=f"no exit after the {timeout_s} s timeout") as failure:
        launch(spec(tmp_path, "hang", timeout_s=timeout_s))
    assert failure.value.kind == "timeout" and len(failure.value.commands) == 1
    assert time.monotonic() - started < timeout_s + most_past_a_bound_s()


@pytest.mark.launches
def test_ctrl_c_kills_the_run(tmp_path, no_leftovers):
    def interrupt(elapsed):
        if leftover_processes(str(tmp_path)) and elapsed > 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launch(spec(tmp_path, "hang"), on_poll=interrupt)


@pytest.mark.launches
def test_missing_script_is_a_clear_failure(tmp_path, no_leftovers):
    bad = LaunchSpec(entry=[str(tmp_path / "nope.py")], workdir=tmp_path / "run", procs_per_node=1, timeout_s=60)
    with pytest.raises(LaunchFailed, match="rank 0 .* failed: exit code 2") as failure:
        launch(bad)
    assert "nope.py" in failure.value.message


def test_leftover_detector_sees_a_stray_tagged_process(tmp_path):
    import os
    import subprocess
    import sys

    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path,
                             env={**os.environ, "PERFGATE_RUN_ID": "stray"})
    try:
        for _ in range(50):
            if leftover_processes(str(tmp_path)):
                break
            time.sleep(0.1)
        assert [p.pid for p in leftover_processes(str(tmp_path))] == [stray.pid]
    finally:
        stray.kill()
        stray.wait()


IGNORES_SIGTERM = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                   "time.sleep(600)\n")


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_and_its_agent_reaped(tmp_path, monkeypatch):
    """A rank stuck with SIGTERM ignored (a C extension's handler, a stuck teardown) gets SIGKILL after the grace."""
    import os
    import subprocess
    import sys

    from perfgate.launch import agents

    monkeypatch.setattr(agents, "KILL_GRACE_S", 0.5)
    stubborn = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PERFGATE_RUN_ID": "stubborn"})
    assert stubborn.stdout.readline().strip() == "ready"
    agents.kill_run([stubborn], "stubborn")
    assert stubborn.returncode == -9 and agents.run_processes("stubborn") == []


def test_a_zombie_has_exited_and_is_not_waited_for(tmp_path):
    """A rank whose parent has not reaped it yet: waiting for it to go would take the whole grace."""
    import subprocess
    import sys

    import psutil

    from perfgate.launch.agents import wait_gone

    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    process = psutil.Process(exited.pid)
    wait_until(lambda: process.status() == psutil.STATUS_ZOMBIE, "the child is a zombie")
    started = time.monotonic()
    assert wait_gone([process], timeout_s=60) == []
    assert time.monotonic() - started < 30, "returned at once, not at the 60 s timeout"
    exited.wait()


WATCHDOG = ("[rank1]:[E1124 06:01:02.123456 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=412, OpType=ALLREDUCE, NumelIn=25557032, NumelOut=25557032, Timeout(ms)=600000) "
            "ran for 600012 milliseconds before timing out.")
"""What ProcessGroupNCCL's watchdog prints before it aborts a rank whose collective never finished."""


@pytest.mark.parametrize("last_lines, kind", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory"),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] Cannot allocate memory", "out-of-memory"),
    ("usage: unet3d_train.py [-h]\nunet3d_train.py: error: --base-channels must be >= 1, got 0", "setup-error"),
    ("ValueError: something else broke", "crashed"),
    (WATCHDOG, "timeout"),
])
def test_a_failed_ranks_last_lines_classify_the_failure(last_lines, kind):
    from perfgate.launch.diagnose import failure_kind

    assert failure_kind(last_lines) == kind


@pytest.mark.launches
def test_a_rendezvous_that_cannot_start_is_a_setup_error(tmp_path, monkeypatch, no_leftovers):
    """Something else holds the rendezvous port: the agent cannot host the c10d store and no rank runs."""
    import socket

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        monkeypatch.setattr("perfgate.launch.local.free_port", lambda share: squatter.getsockname()[1])
        with pytest.raises(LaunchFailed, match="rendezvous") as failure:
            launch(spec(tmp_path, "ok", timeout_s=10.0))
    assert failure.value.kind == "setup-error"


def test_a_timeout_before_any_rank_started_is_a_rendezvous_that_never_completed(tmp_path):
    from perfgate.launch.diagnose import timed_out

    spec = LaunchSpec(entry=["w.py"], workdir=tmp_path, nodes=2, timeout_s=30.0)
    failure = timed_out(spec, [tmp_path / "agent0.log", tmp_path / "agent1.log"])
    assert failure.kind == "setup-error"
    assert failure.message == ("the c10d rendezvous did not complete within 30 s, so no rank started: its port is "
                               "taken by another program, or a node never joined (--nodes 2); killed every process "
                               f"of the run. Agent log: {tmp_path / 'agent0.log'}")
    (tmp_path / "node0" / "run_x" / "attempt_0").mkdir(parents=True)
    assert timed_out(spec, [tmp_path / "agent0.log"]).kind == "timeout", "a rank had started: a hang in training"


def test_a_rank_that_lost_its_peer_is_not_blamed_for_the_crash_that_caused_it(tmp_path):
    """Node 0's rank died of the gloo connection node 1's crash closed; node 1's rank is the cause, although
    node 0 comes first."""
    from perfgate.launch.diagnose import diagnose_failure

    logs = rank_logs(tmp_path, ["RuntimeError: [gloo/transport/tcp/pair.cc:561] Connection closed by peer "
                                "[127.0.0.1]:23938.", "RuntimeError: planted crash on node 1"], code=1)
    spec = LaunchSpec(entry=["w.py"], workdir=tmp_path, nodes=2)
    failure = diagnose_failure(spec, [1, 1], logs, node_names=["h1", "h2"])
    assert (failure.kind, failure.message.splitlines()[0]) == ("crashed", "rank 1 (node 1 (h2), local rank 0) failed: "
                                                                          "exit code 1.")
    assert diagnose_failure(spec, [1, 0], logs).message.startswith("rank 0 (node 0, local rank 0) failed")


PEER_CLOSED = ("[rank1]: RuntimeError: [gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:8069."
               "\nterminate called without an active exception")
STOPPED_AGENT = ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 22642 got signal: 15")
"""The last line of a torchrun agent that srun's --kill-on-bad-exit stopped before it saw its own rank fail."""


@pytest.mark.parametrize("srun_says", [
    "srun: error: n1: task 0: Exited with exit code 1\nsrun: error: n2: task 1: Exited with exit code 1",
    "srun: error: n1: task 0: Exited with exit code 1\nsrun: error: n2: task 1: Terminated",
])
def test_a_crash_whose_agent_was_stopped_first_is_named_from_the_ranks_own_log(tmp_path, srun_says):
    """An order SLURM's --kill-on-bad-exit can give (docs/measurements.md#why-the-rules-are-what-they-are): node 1's
    rank crashed, node 0's rank lost its peer and its agent ended first, and srun stopped node 1's agent before that
    agent reported. Node 1's rank is still the one named, from its own log."""
    from perfgate.launch.slurm import diagnose_srun

    logs = rank_logs(tmp_path, [PEER_CLOSED, "[rank0]: RuntimeError: planted crash on node 1"], code=-6)
    logs[1].write_text(f"Traceback (most recent call last):\n{STOPPED_AGENT}\n")
    (tmp_path / "srun.log").write_text(f"$ srun ...\n{srun_says}\n")
    spec = LaunchSpec(entry=["w.py"], workdir=tmp_path, nodes=2)
    failure = diagnose_srun(spec, 1, logs, tmp_path / "srun.log")
    assert failure.kind == "crashed"
    assert failure.message.splitlines()[0] == ("rank 0 (node 1 (n2), local rank 0) failed: its exit code was not "
                                               "reported (its torchrun agent ended before it saw the rank fail).")
    assert failure.message.splitlines()[-1] == "[rank0]: RuntimeError: planted crash on node 1"


def test_a_rank_that_only_lost_its_peer_is_named_when_no_other_rank_says_why(tmp_path):
    """No other node's rank log ends in an exception: the peer-lost rank is all there is to show, and it says so
    (not the gloo exit race's hint, which its SIGABRT and last line would otherwise bring)."""
    from perfgate.launch.diagnose import diagnose_failure

    logs = rank_logs(tmp_path, [PEER_CLOSED, "still training"], code=-6)
    logs[1].write_text(f"{STOPPED_AGENT}\n")
    failure = diagnose_failure(LaunchSpec(entry=["w.py"], workdir=tmp_path, nodes=2), [1, 1], logs)
    assert failure.message.startswith("rank 0 (node 0, local rank 0) failed: killed by signal SIGABRT.")
    assert failure.message.splitlines()[-1] == (f"This rank lost its connection to another, which most likely "
                                                f"failed first, but no other rank's log says why: look at every "
                                                f"node's logs under {tmp_path}.")


def test_a_root_cause_that_only_lost_its_peer_gives_way_to_the_agents_other_failure(tmp_path):
    """torchrun's root cause is the failure its agent observed first; on one node, that can be the rank whose
    collective lost the rank that crashed. The crashed rank, in the report's other failures, is named instead."""
    from perfgate.launch.diagnose import diagnose_failure

    for local_rank, last_line in enumerate([PEER_CLOSED, "[rank1]: ValueError: bad batch"]):
        rank_dir = tmp_path / "node0" / "run_x" / "attempt_0" / str(local_rank)
        rank_dir.mkdir(parents=True)
        (rank_dir / "stderr.log").write_text(f"Traceback (most recent call last):\n{last_line}\n")
    agent_log = tmp_path / "agent0.log"
    agent_log.write_text(
        "Failures:\n[1]:\n  time      : 2026-11-26_14:02:44\n  host      : localhost\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : 13 (pid: 12)\n  error_file: <N/A>\n------\nRoot Cause (first observed failure):\n[0]:\n"
        "  time      : 2026-11-26_14:02:43\n  host      : localhost\n  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : -6 (pid: 11)\n  error_file: <N/A>\n")
    failure = diagnose_failure(LaunchSpec(entry=["w.py"], workdir=tmp_path, nodes=1), [1], [agent_log])
    assert failure.message.splitlines()[0] == "rank 1 (node 0, local rank 1) failed: exit code 13."


def test_an_agent_that_fails_before_any_rank_ran_is_named_with_its_own_last_lines(tmp_path):
    """torchrun itself failed (here its Python could not import torch): no rank log exists, and srun's own messages
    are named where srun refused the job."""
    from perfgate.launch.diagnose import diagnose_failure
    from perfgate.launch.slurm import diagnose_srun

    agent_log = tmp_path / "agent0.log"
    agent_log.write_text("Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n")
    spec = LaunchSpec(entry=["w.py"], workdir=tmp_path, nodes=1)
    failure = diagnose_failure(spec, [1], [agent_log])
    assert failure.kind == "setup-error"
    assert failure.message == (f"torchrun agent on node 0 failed before any rank ran (exit code 1); last lines of "
                               f"{agent_log}:\nTraceback (most recent call last):\nModuleNotFoundError: No module "
                               "named 'torch'")
    (tmp_path / "srun.log").write_text("$ srun ...\nsrun: error: Unable to allocate resources: Invalid partition\n")
    refused = diagnose_srun(spec, 1, [agent_log], tmp_path / "srun.log")
    assert refused.message.splitlines()[-1] == f"srun exited with 1; its messages are in {tmp_path / 'srun.log'}"


def rank_logs(tmp_path, tails, code=-6):
    """Agent and rank logs as torchrun leaves them when node N's only rank, rank N, failed with the Nth last line
    and exit code ``code``."""
    logs = []
    for node, last_line in enumerate(tails):
        rank_dir = tmp_path / f"node{node}" / "run_x" / "attempt_0" / "0"
        rank_dir.mkdir(parents=True)
        (rank_dir / "stderr.log").write_text(f"Traceback (most recent call last):\n{last_line}\n")
        logs.append(tmp_path / f"agent{node}.log")
        logs[-1].write_text(f"Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-23_05:20:33\n"
                            f"  rank      : {node} (local_rank: 0)\n  exitcode  : {code} (pid: 9)\n")
    return logs


def test_the_nccl_watchdog_ending_a_collective_is_a_hang_not_a_crash(tmp_path):
    from perfgate.launch.diagnose import diagnose_failure

    spec = LaunchSpec(entry=["w.py"], workdir=tmp_path, nodes=1)
    failure = diagnose_failure(spec, [1], rank_logs(tmp_path, [WATCHDOG]))
    assert failure.kind == "timeout"
    assert failure.message.splitlines()[0] == ("a collective hung and the NCCL watchdog ended it: rank 0 (node 0, "
                                               "local rank 0) failed: killed by signal SIGABRT.")


@pytest.mark.launches
def test_a_run_that_hangs_after_its_work_is_done_is_killed_after_the_teardown_bound(tmp_path, no_leftovers):
    """on_poll says when the run's work is done (the plugin: its end record was seen); a teardown that hangs then
    costs teardown_s, not the whole timeout."""
    done = tmp_path / "done"
    script = tmp_path / "hang_at_exit.py"
    script.write_text(f"import pathlib, time\npathlib.Path({str(done)!r}).touch()\ntime.sleep(3600)\n")
    seen = []

    def work_done(elapsed):
        if done.exists() and not seen:
            seen.append(time.monotonic())
        return bool(seen)

    with pytest.raises(LaunchFailed) as failure:
        launch(LaunchSpec(entry=[str(script)], workdir=tmp_path / "run", timeout_s=600, teardown_s=2),
               on_poll=work_done)
    assert failure.value.kind == "timeout"
    assert failure.value.message.startswith("a rank did not exit within 2 s of the run's end record")
    assert time.monotonic() - seen[0] < 2 + most_past_a_bound_s()


def test_a_rank_aborted_in_the_gloo_exit_race_is_a_crash_that_says_how_to_end_the_script(tmp_path):
    """The last words a rank leaves when a gloo worker thread releases a collective while Python exits (a script that
    ends the ordinary way can meet it: docs/measurements.md#why-the-rules-are-what-they-are): still a crash, with how
    to end a script so it cannot happen."""
    from perfgate.launch.diagnose import diagnose_failure

    spec = LaunchSpec(entry=["w.py"], workdir=tmp_path, nodes=1)
    aborted = diagnose_failure(spec, [1], rank_logs(tmp_path, ["terminate called without an active exception"]))
    assert aborted.kind == "crashed" and "killed by signal SIGABRT" in aborted.message
    assert aborted.message.endswith("then os._exit(0), as perfgate's workloads do.")
    crashed = LaunchSpec(entry=["w.py"], workdir=tmp_path / "crashed", nodes=1)
    other = diagnose_failure(crashed, [1], rank_logs(crashed.workdir, ["RuntimeError: planted"]))
    assert "killed by signal SIGABRT" in other.message and "os._exit" not in other.message


def test_the_wait_between_polls_ends_when_an_agent_exits_not_at_the_next_poll():
    """An agent that exits is seen at once (a wait of ten minutes returns), one that does not is waited for no longer
    than asked, and with none running there is nothing to wait for."""
    quick = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    stuck = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        until_an_exit([stuck], 0.01)
        assert stuck.poll() is None
        quick.stdin.close()
        began = time.monotonic()
        until_an_exit([quick, stuck], 600)
        assert quick.returncode == 0 and stuck.poll() is None
        assert time.monotonic() - began < 300, "the wait ran on to its end after the agent had exited"
        until_an_exit([quick], 600)
    finally:
        stuck.kill()
        stuck.wait()
