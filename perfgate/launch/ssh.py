"""The ``ssh`` launcher (milabench's way): one torchrun agent per host of ``--hosts``, started over ssh.

ssh runs in BatchMode (a missing key fails at once instead of asking for a password). The remote command
is perfgate's own argument list, each argument quoted for the remote shell, so nothing the user typed is
run by a shell. Hosts share the repository's and the virtual environment's paths (a shared filesystem,
or the same checkout on each), and the first host is the c10d endpoint. Each agent and rank carries the
run's tag in its environment; when a run ends, ``python -m perfgate.launch.on_host --reap TAG`` on every host
ends whatever of it is still alive there (a timeout, Ctrl-C and SIGTERM included). A run that hung is first asked
for its stacks there (``--stacks TAG``), so each rank's log says where it was.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
import time
import uuid
from typing import Callable, Mapping, Sequence

from perfgate.launch.agents import (free_port, kill_run, node_agent_command, read_node_hardware,
                                    start_logged, wait_for_agents)
from perfgate.launch.diagnose import LaunchFailed, diagnose_failure, with_stacks
from perfgate.launch.hang_stacks import Stacks
from perfgate.launch.hardware import Hardware
from perfgate.launch.spec import NODE_ENV, RUN_ID_ENV, LaunchResult, LaunchSpec, Poll

BATCH = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")


class SshLauncher:
    """``hosts``: one per node, the first the endpoint; ``ssh_args`` (``--ssh-args``) go to every ssh call."""

    def __init__(self, hosts: Sequence[str], ssh_args: Sequence[str] = ()) -> None:
        self.hosts = tuple(hosts)
        self.ssh_args = tuple(ssh_args)

    def ssh(self, host: str, remote: str) -> list[str]:
        return ["ssh", *BATCH, *self.ssh_args, host, "--", remote]

    @staticmethod
    def remote_agent(spec: LaunchSpec, node: int, endpoint: str, run_id: str) -> str:
        """In the run's directory, the agent with the run's environment; every argument quoted for the shell."""
        environment = [f"{name}={value}" for name, value in {**spec.env, RUN_ID_ENV: run_id, NODE_ENV: node}.items()]
        agent = ["env", *environment, *node_agent_command(spec, node, endpoint, run_id)]
        return f"cd {shlex.quote(str(spec.workdir))} && exec {shlex.join(agent)}"

    def node_hardware(self, nodes: int, env: Mapping[str, str]) -> list[Hardware]:
        """``python -m perfgate.launch.hardware`` on each host, named as --hosts names it."""
        found = []
        for host in self.hosts[:nodes]:
            probe = shlex.join(["env", *[f"{name}={value}" for name, value in env.items()], sys.executable, "-m",
                                "perfgate.launch.hardware"])
            node, = read_node_hardware(self.ssh(host, probe), {}, f"host {host}")
            found.append(dataclasses.replace(node, host=host))
        return found

    def launch(self, spec: LaunchSpec, on_poll: Poll | None = None) -> LaunchResult:
        if spec.nodes > len(self.hosts):
            raise LaunchFailed("setup-error", f"--nodes {spec.nodes} needs as many --hosts, got {len(self.hosts)}: "
                                              f"{','.join(self.hosts)}")
        spec.workdir.mkdir(parents=True, exist_ok=True)
        run_id = f"perfgate-{uuid.uuid4().hex[:12]}"
        hosts = self.hosts[:spec.nodes]
        endpoint = f"{hosts[0]}:{free_port(spec.ports)}"
        commands, logs, agents = [], [], []
        start = time.monotonic()
        try:
            for node, host in enumerate(hosts):
                command = self.ssh(host, self.remote_agent(spec, node, endpoint, run_id))
                log_path = spec.workdir / f"agent{node}.log"
                agents.append(start_logged(command, log_path, f"# node {node}: {host}\n$ {shlex.join(command)}"))
                commands.append(tuple(command))
                logs.append(log_path)
            wait_for_agents(agents, spec, start, on_poll, logs)
        except LaunchFailed as stopped:
            stopped.commands = tuple(commands)
            if stopped.kind != "timeout":
                raise
            raise with_stacks(stopped, self.ask_for_stacks(hosts, run_id), spec.workdir, " on its host") from None
        finally:
            self.reap(hosts, run_id)
            kill_run(agents, None)
        codes = [agent.returncode for agent in agents]
        if any(code != 0 for code in codes):
            failure = diagnose_failure(spec, codes, logs, node_names=hosts)
            failure.commands = tuple(commands)
            raise failure
        return LaunchResult(time.monotonic() - start, tuple(commands), tuple(logs))

    def on_every_host(self, hosts: Sequence[str], action: Callable[[int], Sequence[str]]
                      ) -> list[tuple[str, int, str, str]]:
        """``python -m perfgate.launch.on_host ACTION`` on every host at once, ``action(node)`` its options; each host's
        (host, exit code, stdout, stderr), a host that does not answer in 60 s killed and saying so."""
        started = [(host, subprocess.Popen(
            self.ssh(host, shlex.join([sys.executable, "-m", "perfgate.launch.on_host", *action(node)])),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True))
            for node, host in enumerate(hosts)]
        answers = []
        for host, process in started:
            try:
                out, err = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
                err = f"no answer in 60 s {err}"
            answers.append((host, process.returncode, out, err))
        return answers

    def reap(self, hosts: Sequence[str], run_id: str) -> None:
        """Ends the run's processes on every host, found by their tag (an ssh client's death does not reach a
        remote process without a terminal)."""
        for host, code, _, err in self.on_every_host(hosts, lambda node: ("--reap", run_id)):
            if code:
                print(f"perfgate: could not clean up run {run_id} on {host}: {err.strip()}; "
                      f"look for processes with {RUN_ID_ENV}={run_id} there", file=sys.stderr)

    def ask_for_stacks(self, hosts: Sequence[str], run_id: str) -> Stacks:
        """Before a hung run is reaped: its processes on all hosts asked for their stacks, and how many wrote them."""
        answers = self.on_every_host(hosts, lambda node: ("--stacks", run_id, "--node", str(node)))
        return sum((Stacks.from_lines(out) for _, code, out, _ in answers if code == 0), Stacks())
