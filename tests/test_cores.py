"""Duet pairs' ranks pinned by the launcher (launch.cores), on real processes and their threads."""

import os
import subprocess
import sys
import uuid

import pytest

from perfgate.launch.cores import RankPinner, duet_cores
from perfgate.launch.spec import NODE_ENV, RUN_ID_ENV

RANK = ("import os, sys, threading\n"
        "stop = threading.Event()\n"
        "threads = [threading.Thread(target=stop.wait) for _ in range(3)]\n"
        "[thread.start() for thread in threads]\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "worker = os.fork()\n"
        "if worker == 0:\n"
        "    print(sorted(os.sched_getaffinity(0)), flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(worker, 0)\n"
        "stop.set()\n")
"""A stand-in rank: three threads started before it is pinned, then a loader worker forked after."""


def test_sides_get_cores_of_their_own_where_the_host_has_enough_else_share_rank_by_rank():
    assert duet_cores(range(16), 2) == ((0, 1), (2, 3))
    assert duet_cores([3, 1, 2, 0], 2) == ((0, 1), (2, 3))
    assert duet_cores([0, 1], 1) == ((0,), (1,))
    assert duet_cores([0, 1], 2) == ((0, 1), (0, 1))
    assert duet_cores([0, 1, 2], 2) == ((0, 1), (0, 1))


def thread_cores(pid):
    """Each thread's allowed cores, as the kernel reports them."""
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as fh:
            found.append(next(line.split()[1] for line in fh if line.startswith("Cpus_allowed_list")))
    return found


def start(run_id, **env):
    proc = subprocess.Popen([sys.executable, "-c", RANK], env={**os.environ, RUN_ID_ENV: run_id, **env},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning cannot be seen on a host with one core")
def test_every_thread_of_each_rank_is_pinned_by_its_place_and_a_worker_forked_later_inherits_it():
    cores = sorted(os.sched_getaffinity(0))[:2]
    run_id = f"perfgate-test-{uuid.uuid4().hex[:8]}"
    ranks = [start(run_id, LOCAL_RANK="0", **{NODE_ENV: "1"}), start(run_id, LOCAL_RANK="0", **{NODE_ENV: "0"})]
    agent = start(run_id)  # tagged, but no LOCAL_RANK: torchrun's agent is left where it is
    unpinned = thread_cores(agent.pid)
    pin = RankPinner(run_id, cores, nodes=2, ranks_per_node=1)
    try:
        pin()
        assert thread_cores(ranks[0].pid) == [str(cores[1])] * 4  # node 1's rank: the second place
        assert thread_cores(ranks[1].pid) == [str(cores[0])] * 4
        assert thread_cores(agent.pid) == unpinned
        for rank, core in zip(ranks, (cores[1], cores[0])):
            rank.stdin.write("go\n")
            rank.stdin.flush()
            assert rank.stdout.readline().strip() == f"[{core}]"
            assert rank.wait(timeout=30) == 0
        pin()  # its ranks gone, a later poll leaves them be
    finally:
        for proc in (*ranks, agent):
            proc.kill()
            proc.wait()

