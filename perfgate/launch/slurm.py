"""The ``slurm`` launcher: each launch is one SLURM job step running one torchrun agent per node.

``srun --nodes N --ntasks-per-node 1`` starts ``python -m perfgate.launch.slurm`` on every node of the step
(inside an allocation, as under sbatch or salloc; outside one, srun asks for an allocation with
``--slurm-args``). That node side finds the step's first node and its address with ``scontrol`` and
replaces itself with the torchrun agent, whose c10d endpoint is that node. Each node's agent log is
``agent<node>.log`` in the run's directory (``srun --output``), srun's own messages ``srun.log``.
A timeout, Ctrl-C or SIGTERM cancels the step (``scancel``), which ends its tasks on every node; before a hung
step is cancelled, a step beside it asks its ranks for their stacks (``python -m perfgate.launch.on_host``).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from perfgate.launch.agents import (agent_command, free_port, kill_run, read_node_hardware, start_logged,
                                    wait_for_agents)
from perfgate.launch.diagnose import LaunchFailed, diagnose_failure, with_stacks
from perfgate.launch.hang_stacks import Stacks
from perfgate.launch.hardware import Hardware
from perfgate.launch.node_agent import become_agent
from perfgate.launch.spec import NODE_ENV, RUN_ID_ENV, LaunchResult, LaunchSpec, Poll

SRUN_TASK_ERROR = re.compile(r"srun: error: (?P<node>\S+): task (?P<task>\d+): (?P<what>.+)")
"""srun's line for each task that did not exit 0: ``srun: error: n2: task 1: Exited with exit code 1``."""


class SlurmLauncher:
    """Launches through ``srun``; ``extra_args`` (``--slurm-args``) go to srun before the command."""

    def __init__(self, extra_args: Sequence[str] = ()) -> None:
        self.extra_args = tuple(extra_args)

    def command(self, spec: LaunchSpec, run_id: str, port: int) -> list[str]:
        node_side = [
            spec.python, "-m", "perfgate.launch.slurm", "--port", str(port), "--run-id", run_id,
            "--workdir", str(spec.workdir), "--nodes", str(spec.nodes), "--procs-per-node", str(spec.procs_per_node),
            "--timeout", str(spec.timeout_s), *(["--gpu-samples"] if spec.node_gpu_samples else []), "--",
            *spec.entry,
        ]
        return [
            "srun", "--nodes", str(spec.nodes), "--ntasks-per-node", "1", "--job-name", run_id,
            "--output", str(spec.workdir / "agent%n.log"), "--kill-on-bad-exit=1", "--export=ALL",
            *self.extra_args, *node_side,
        ]

    def node_hardware(self, nodes: int, env: Mapping[str, str]) -> list[Hardware]:
        """One job step of ``python -m perfgate.launch.hardware`` on every node, its lines labelled by node."""
        command = ["srun", "--nodes", str(nodes), "--ntasks-per-node", "1", "--job-name", "perfgate-hardware",
                   "--label", *self.extra_args, sys.executable, "-m", "perfgate.launch.hardware"]
        return read_node_hardware(command, env, f"the {nodes} SLURM node(s)")

    def launch(self, spec: LaunchSpec, on_poll: Poll | None = None) -> LaunchResult:
        spec.workdir.mkdir(parents=True, exist_ok=True)
        run_id = f"perfgate-{uuid.uuid4().hex[:12]}"
        command = self.command(spec, run_id, free_port(spec.ports))
        logs = [spec.workdir / f"agent{node}.log" for node in range(spec.nodes)]
        srun_log = spec.workdir / "srun.log"
        start = time.monotonic()
        srun = start_logged(command, srun_log, f"$ {shlex.join(command)}", cwd=spec.workdir,
                            env={**os.environ, **spec.env, RUN_ID_ENV: run_id})
        try:
            wait_for_agents([srun], spec, start, on_poll, logs)
        except LaunchFailed as stopped:
            stopped.commands = (tuple(command),)
            if stopped.kind != "timeout":
                raise
            raise with_stacks(stopped, ask_for_stacks(spec, run_id), spec.workdir, " on its node") from None
        finally:
            if srun.poll() is None:
                cancel_steps(run_id)
            kill_run([srun], None)
        if srun.returncode != 0:
            failure = diagnose_srun(spec, srun.returncode, logs, srun_log)
            failure.commands = (tuple(command),)
            raise failure
        return LaunchResult(time.monotonic() - start, (tuple(command),), tuple(logs))


def find_step(run_id: str) -> tuple[str, str] | None:
    """The job step srun started for this run (named after it): its id (JOB.STEP) and node list; None if gone."""
    listed = subprocess.run(["squeue", "--noheader", "--steps", "--format", "%i %j %N"], capture_output=True,
                            text=True, timeout=30)
    for line in listed.stdout.splitlines():
        step, name, nodes = (line.split() + ["", ""])[:3]
        if name == run_id:
            return step, nodes
    return None


def cancel_steps(run_id: str) -> None:
    """scancel the job step srun started for this run, so its tasks end on every node."""
    try:
        found = find_step(run_id)
        if found:
            subprocess.run(["scancel", found[0]], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"perfgate: could not cancel SLURM step {run_id}: {exc}; check squeue", file=sys.stderr)


def ask_for_stacks(spec: LaunchSpec, run_id: str) -> Stacks:
    """Before a hung step is cancelled: one more step in its job and on its nodes (``--overlap``, so the hung
    step's CPUs do not hold it back) asks the run's processes on each node for their stacks. Nothing found where that
    step cannot run (a SLURM before 20.11 has no ``--overlap``): the hang is still ended."""
    try:
        found = find_step(run_id)
        if not found:
            return Stacks()
        step, nodes = found
        asked = subprocess.run(["srun", "--jobid", step.split(".")[0], "--overlap", "--nodelist", nodes,
                                "--ntasks-per-node", "1", spec.python, "-m", "perfgate.launch.on_host",
                                "--stacks", run_id], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return Stacks()
    return Stacks.from_lines(asked.stdout)


def diagnose_srun(spec: LaunchSpec, code: int, logs: Sequence[Path], srun_log: Path) -> LaunchFailed:
    """Every node whose task srun saw fail is searched for the failed rank. srun's order does not name the cause:
    --kill-on-bad-exit stops the other agents, so a node whose rank only lost its peer can be the first to end."""
    text = srun_log.read_text(errors="replace") if srun_log.exists() else ""
    failed = [m for m in SRUN_TASK_ERROR.finditer(text) if int(m["task"]) < spec.nodes]
    names = {int(m["task"]): m["node"] for m in failed}
    codes = [0] * spec.nodes
    for match in failed:
        codes[int(match["task"])] = code or 1
    if not failed:
        codes = [code or 1] * spec.nodes
    failure = diagnose_failure(spec, codes, logs, node_names=[names.get(n, "") for n in range(spec.nodes)])
    if not failed:
        failure.message += f"\nsrun exited with {code}; its messages are in {srun_log}"
    return failure


def first_node_address() -> str:
    """The address of this step's first node, as SLURM knows it (NodeAddr: what its slurmd listens on)."""
    nodes = os.environ.get("SLURM_STEP_NODELIST") or os.environ["SLURM_JOB_NODELIST"]
    names = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, check=True)
    first = names.stdout.split()[0]
    shown = subprocess.run(["scontrol", "show", "node", "--oneliner", first], capture_output=True, text=True,
                           check=True)
    match = re.search(r"\bNodeAddr=(\S+)", shown.stdout)
    return match[1] if match else first


def node_side(argv: Sequence[str] | None = None) -> None:
    """On each node of the step: become this node's torchrun agent, its endpoint the step's first node."""
    parser = argparse.ArgumentParser(prog="python -m perfgate.launch.slurm")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--procs-per-node", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--gpu-samples", action="store_true", help="sample this node's GPUs into the run's directory")
    parser.add_argument("entry", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    entry = args.entry[1:] if args.entry[:1] == ["--"] else args.entry
    spec = LaunchSpec(entry=entry, workdir=args.workdir, nodes=args.nodes, procs_per_node=args.procs_per_node,
                      timeout_s=args.timeout)
    node = int(os.environ["SLURM_NODEID"])
    os.environ[NODE_ENV] = str(node)
    command = agent_command(spec, node, f"{first_node_address()}:{args.port}", args.run_id)
    print(f"# node {node} of the step: {os.environ.get('SLURMD_NODENAME', '?')}\n$ {' '.join(command)}", flush=True)
    become_agent(command, workdir=args.workdir, node=node, gpus=args.procs_per_node if args.gpu_samples else None)


if __name__ == "__main__":
    node_side()
