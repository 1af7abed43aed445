"""What every launcher does with torchrun agents: their command lines, a free rendezvous port, waiting for them,
and making sure every process a run started is gone afterwards.

Each agent and its ranks carry a ``PERFGATE_RUN_ID`` in their environment, so processes that outlive their parent
(torchrun starts ranks in new sessions) are still found and killed.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import psutil

from perfgate.launch.diagnose import LOG_TAIL_LINES, LaunchFailed, teardown_hung, timed_out
from perfgate.launch.hardware import Hardware
from perfgate.launch.spec import NODE_ENV, RUN_ID_ENV, LaunchSpec, Poll

PEER_GRACE_S = 10.0
KILL_GRACE_S = 5.0
POLL_S = 0.5

RENDEZVOUS_PORTS_FROM = 10000
"""Rendezvous ports come from here up to the kernel's ephemeral range."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the source ports of outgoing connections (gloo opens many)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def port_share(worker: int, workers: int) -> range:
    """The rendezvous ports of pytest-xdist worker ``worker`` of ``workers``: disjoint slices below the
    ephemeral range, so parallel cases never pick the same port, nor one that an outgoing connection of
    another case (a gloo rank's socket) holds as its source port between the pick and torchrun's bind."""
    low, high = RENDEZVOUS_PORTS_FROM, ephemeral_range()[0]
    size = (high - low) // max(workers, 1)
    return range(low + worker * size, low + (worker + 1) * size)


def free_port(share: range | None = None) -> int:
    """A TCP port nobody listens on right now, from ``share`` (see port_share) when given."""
    candidates = random.sample(share, min(len(share), 200)) if share else []
    for port in [*candidates, 0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise OSError("no free TCP port for the rendezvous")


def agent_command(spec: LaunchSpec, node: int, endpoint: str, run_id: str) -> list[str]:
    return [
        spec.python, "-m", "torch.distributed.run",
        "--nnodes", str(spec.nodes),
        "--nproc-per-node", str(spec.procs_per_node),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint,
        "--rdzv-id", run_id,
        "--rdzv-conf", f"join_timeout={int(min(spec.timeout_s, 300))}",
        "--max-restarts", "0",
        "--log-dir", str(spec.workdir / f"node{node}"),
        "--redirects", "3",
        "--tee", "3",
        *spec.entry,
    ]


def node_agent_command(spec: LaunchSpec, node: int, endpoint: str, run_id: str) -> list[str]:
    """What a remote node runs: its torchrun agent, behind ``python -m perfgate.launch.node_agent`` where the node samples
    its GPUs (which starts the sampler, then becomes the agent)."""
    agent = agent_command(spec, node, endpoint, run_id)
    if not spec.node_gpu_samples:
        return agent
    return [spec.python, "-m", "perfgate.launch.node_agent", "--workdir", str(spec.workdir), "--node", str(node),
            "--gpus", str(spec.procs_per_node), "--", *agent]


def read_node_hardware(command: Sequence[str], env: Mapping[str, str], what: str) -> list[Hardware]:
    """Runs a hardware probe command and parses its JSON lines (``N: {...}`` with srun --label, sorted by N)."""
    try:
        done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchFailed("setup-error", f"could not read the hardware of {what}: {exc}") from None
    found = []
    for line in done.stdout.splitlines():
        label, _, data = line.partition("{")
        if data:
            found.append((int(label.strip(" :") or 0), Hardware.from_json(json.loads("{" + data))))
    if done.returncode != 0 or not found:
        last = "\n".join((done.stderr or done.stdout).strip().splitlines()[-LOG_TAIL_LINES:])
        raise LaunchFailed("setup-error", f"could not read the hardware of {what}: {shlex.join(command)} exited "
                                          f"{done.returncode}:\n{last}")
    return [hardware for _, hardware in sorted(found, key=lambda item: item[0])]


def start_logged(command: Sequence[str], log_path: Path, header: str, **popen: Any) -> subprocess.Popen:
    """Starts an agent (or srun, or ssh) in a session of its own, its output going to ``log_path`` after ``header``
    (the command, and where it runs)."""
    with log_path.open("w") as log:
        log.write(header + "\n")
        log.flush()
        return subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, **popen)


def wait_for_agents(agents: Sequence[subprocess.Popen], spec: LaunchSpec, start: float,
                    on_poll: Poll | None, logs: Sequence[Path]) -> None:
    """Returns once every agent exited, or PEER_GRACE_S after the first failed (its peers may hang in a
    collective); raises LaunchFailed at the timeout, or ``spec.teardown_s`` after ``on_poll`` said the run's work
    was done (a teardown that hangs, as NCCL's destroy can, would otherwise cost the whole timeout)."""
    first_failure = work_done = None
    while True:
        codes = [agent.poll() for agent in agents]
        now = time.monotonic()
        if all(code is not None for code in codes):
            return
        if first_failure is None and any(code not in (None, 0) for code in codes):
            first_failure = now
        if first_failure is not None and now - first_failure > PEER_GRACE_S:
            return
        if now - start > spec.timeout_s:
            raise timed_out(spec, logs)
        if work_done is not None and now - work_done > spec.teardown_s:
            raise teardown_hung(spec, logs)
        if on_poll is not None and on_poll(now - start) and work_done is None:
            work_done = now
        until_an_exit(agents, POLL_S)


def until_an_exit(agents: Sequence[subprocess.Popen], seconds: float) -> None:
    """Waits up to ``seconds``, but no longer than the first agent still running takes to exit (the loop around it
    comes back for the others): a launch ends when its last agent does, not up to a poll later (a quarter of a second
    of every launch, on average)."""
    running = [agent for agent in agents if agent.poll() is None]
    if not running:
        return
    try:
        running[0].wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


def run_processes(run_id: str, node: int | None = None) -> list[psutil.Process]:
    """Every live process tagged with this run's id, whoever its parent is now; with ``node``, only that node's
    (several nodes of a run can share a host, as in the launchers' tests)."""
    found = []
    for proc in psutil.process_iter():
        try:
            environ = proc.environ()
            if environ.get(RUN_ID_ENV) == run_id and (node is None or environ.get(NODE_ENV) == str(node)):
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def wait_gone(procs: Sequence[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Waits until every process has exited, at most ``timeout_s``; those still running. A zombie has exited: a rank
    whose parent has not reaped it yet is gone, where psutil.wait_procs would wait out the timeout for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        running = [proc for proc in procs if still_running(proc)]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.05)


def still_running(proc: psutil.Process) -> bool:
    """Alive and not a zombie; is_running also tells a pid the kernel gave to a new process since."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_run(agents: Sequence[subprocess.Popen], run_id: str | None) -> None:
    """SIGTERM the whole run (agents, ranks, loader workers), SIGKILL what survives the grace period. With
    ``run_id`` None only the agents' own process trees: a remote launcher's local processes (srun, ssh), whose
    nodes it cleans up itself."""
    procs: dict[int, psutil.Process] = {}
    for agent in agents:
        try:
            root = psutil.Process(agent.pid)
            for proc in [root, *root.children(recursive=True)]:
                procs[proc.pid] = proc
        except psutil.NoSuchProcess:
            continue
    for proc in run_processes(run_id) if run_id else []:
        procs.setdefault(proc.pid, proc)
    alive = []
    for proc in procs.values():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                proc.send_signal(signal.SIGTERM)
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    survivors = wait_gone(alive, KILL_GRACE_S)
    for proc in survivors:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    wait_gone(survivors, KILL_GRACE_S)
    for agent in agents:
        try:
            agent.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
