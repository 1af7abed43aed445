"""What a launch is: the spec every launcher takes, its result, and the launcher protocol.

The stages above launching (measuring, judging) speak only this; the launchers (local, slurm, ssh) implement it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

from perfgate.launch.caches import ARTIFACTS_ENV
from perfgate.launch.hardware import Hardware

RUN_ID_ENV = "PERFGATE_RUN_ID"
NODE_ENV = "PERFGATE_NODE"
"""The node's number in the launch (0 .. nodes-1), set by every launcher for the agent and its ranks; torchrun's
GROUP_RANK is the order the nodes joined the rendezvous in, which can differ."""

NODE_SAMPLES = "gpus-node{node}.jsonl"
"""Where node N's GPU sampler writes, in the run's directory (see node_agent)."""

Poll = Callable[[float], "bool | None"]
"""Called every POLL_S with the seconds since the launch began; returns True once the run's work is done (its end
record written), which starts the teardown clock (LaunchSpec.teardown_s)."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to run and where. ``entry`` is a script path and its arguments, or ``-m module ...``."""

    entry: Sequence[str]
    workdir: Path
    nodes: int = 1
    procs_per_node: int = 1
    timeout_s: float = 600.0
    env: Mapping[str, str] = field(default_factory=dict)
    devices_per_node: Sequence[str] | None = None
    """CUDA_VISIBLE_DEVICES for each agent; None leaves the environment's visibility alone."""
    ports: range | None = None
    """Where to pick the rendezvous port (see port_share); None: any free port."""
    teardown_s: float = 60.0
    """How long the processes may take to exit once the run reports its work done (see wait_for_agents)."""
    node_gpu_samples: bool = False
    """Each node samples its own GPUs into the run's directory (NODE_SAMPLES): remote launchers'
    GPU cases, whose GPUs the pytest process cannot see."""
    rank_cores: Sequence[int] | None = None
    """Cores the local launcher pins the ranks to, rank i on ``rank_cores[i % len]`` (launch.cores); None leaves
    their placement to the kernel."""
    python: str = sys.executable
    """The interpreter that runs torchrun (and perfgate's node side) on every node: --perf-against-python's
    reference side runs another."""

    def for_reference(self, workdir: Path, *, checkout: Path | None = None, python: str | None = None) -> LaunchSpec:
        """The same launch for an A/B reference side, in ``workdir``: another revision's ``checkout`` first on
        PYTHONPATH (its workloads and its perfgate), or this checkout under another ``python``. Its compiled artifacts
        are its own: the two sides compile different code, and would each load what the other saved."""
        env = dict(self.env)
        if ARTIFACTS_ENV in env:
            env[ARTIFACTS_ENV] += "-reference"
        if python is not None:
            return dataclasses.replace(self, workdir=workdir, python=python, env=env)
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), self.env["PYTHONPATH"]])
        return dataclasses.replace(self, workdir=workdir, env=env)


@dataclass(frozen=True)
class LaunchResult:
    duration_s: float
    commands: tuple[tuple[str, ...], ...]
    agent_logs: tuple[Path, ...]


class NodeLauncher(Protocol):
    """How a case's nodes are started: every agent of one run, waited for to the end; raises LaunchFailed
    on a failed rank, a hang or a bad start, with no process of the run left behind."""

    def launch(self, spec: LaunchSpec, on_poll: Poll | None = None) -> LaunchResult: ...

    def node_hardware(self, nodes: int, env: Mapping[str, str]) -> list[Hardware]:
        """What each of ``nodes`` nodes offers (``python -m perfgate.launch.hardware`` there); LaunchFailed if unreadable."""
