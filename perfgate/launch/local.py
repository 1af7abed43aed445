"""The ``local`` launcher: one torchrun agent per node, all on this host.

Agents meet through c10d rendezvous on a free port, the same code path as agents on separate hosts, so
``--nodes 2`` rehearses a two-node run on one machine.
"""

from __future__ import annotations

import os
import shlex
import time
import uuid
from typing import Mapping

from perfgate.launch.agents import agent_command, free_port, kill_run, run_processes, start_logged, wait_for_agents
from perfgate.launch.caches import data_cache_env
from perfgate.launch.cores import RankPinner
from perfgate.launch.diagnose import LaunchFailed, diagnose_failure, with_stacks
from perfgate.launch.hang_stacks import request_stacks
from perfgate.launch.hardware import Hardware, detect
from perfgate.launch.spec import NODE_ENV, RUN_ID_ENV, LaunchResult, LaunchSpec, Poll


def launch(spec: LaunchSpec, on_poll: Poll | None = None) -> LaunchResult:
    """Runs all agents to completion; raises LaunchFailed on a failed rank, a hang, or a bad start."""
    spec.workdir.mkdir(parents=True, exist_ok=True)
    run_id = f"perfgate-{uuid.uuid4().hex[:12]}"
    endpoint = f"127.0.0.1:{free_port(spec.ports)}"
    env = {**os.environ, **data_cache_env(), **spec.env, RUN_ID_ENV: run_id}
    commands, logs, agents = [], [], []
    start = time.monotonic()
    try:
        for node in range(spec.nodes):
            command = agent_command(spec, node, endpoint, run_id)
            node_env = {**env, NODE_ENV: str(node)}
            if spec.devices_per_node is not None:
                node_env["CUDA_VISIBLE_DEVICES"] = spec.devices_per_node[node]
            log_path = spec.workdir / f"agent{node}.log"
            agents.append(start_logged(command, log_path, f"$ {shlex.join(command)}", cwd=spec.workdir, env=node_env))
            commands.append(tuple(command))
            logs.append(log_path)
        wait_for_agents(agents, spec, start, pinning(spec, run_id, on_poll), logs)
    except LaunchFailed as timed_out:
        timed_out.commands = tuple(commands)
        stacks = request_stacks(proc.pid for proc in run_processes(run_id))
        raise with_stacks(timed_out, stacks, spec.workdir) from None
    finally:
        kill_run(agents, run_id)
    codes = [agent.returncode for agent in agents]
    if any(code != 0 for code in codes):
        failure = diagnose_failure(spec, codes, logs)
        failure.commands = tuple(commands)
        raise failure
    return LaunchResult(time.monotonic() - start, tuple(commands), tuple(logs))


def pinning(spec: LaunchSpec, run_id: str, on_poll: Poll | None) -> Poll | None:
    """``on_poll``, first pinning the ranks where ``spec.rank_cores`` asks for it."""
    if spec.rank_cores is None:
        return on_poll
    pin = RankPinner(run_id, spec.rank_cores, spec.nodes, spec.procs_per_node)

    def poll(elapsed: float) -> bool | None:
        pin()
        return on_poll(elapsed) if on_poll is not None else None
    return poll


class LocalLauncher:
    """Every node's torchrun agent on this host (``--nodes 2`` rehearses two nodes on one machine)."""

    def launch(self, spec: LaunchSpec, on_poll: Poll | None = None) -> LaunchResult:
        return launch(spec, on_poll)

    def node_hardware(self, nodes: int, env: Mapping[str, str]) -> list[Hardware]:
        """This host, once: every node is on it."""
        return [detect()]
