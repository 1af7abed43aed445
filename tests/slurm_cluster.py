"""A real two-node SLURM cluster on this host, for the slurm launcher's tests.

Debian's slurm-wlm is built with multiple-slurmd support: two ``slurmd -N`` daemons, each its own node
(n1, n2) on its own port, beside one slurmctld, all authenticated by a munged with a key made for the
test. Nothing of the machine's own SLURM or munge configuration is read or touched.

Each node's tasks get a TMPDIR of their own (a TaskProlog exports it, as clusters give jobs a node-local one):
whatever one node writes there, the other cannot read.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from perfgate.launch.agents import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "salloc", "scancel", "squeue", "scontrol")
NODES = ("n1", "n2")


def missing() -> str | None:
    """Why no cluster can start here, or None."""
    absent = [name for name in DAEMONS if shutil.which(name) is None]
    if absent:
        return f"SLURM is not installed ({', '.join(absent)} missing): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root (SlurmUser=root); run the tests as root"
    return None


class SlurmCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._daemons: list[subprocess.Popen] = []
        self.tmpdirs = {name: root / f"tmp-{name}" for name in NODES}
        """Each node's TMPDIR."""

    def start(self) -> "SlurmCluster":
        root, host = self.root, socket.gethostname().split(".")[0]
        for folder in ("munge", "state", "log", "spool-n1", "spool-n2", *(path.name for path in self.tmpdirs.values())):
            (root / folder).mkdir(mode=0o700)
        prolog = root / "task_prolog.sh"
        prolog.write_text(f'#!/bin/sh\necho "export TMPDIR={root}/tmp-$SLURMD_NODENAME"\n')
        prolog.chmod(0o755)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = root / "munge" / "sock"
        ctld, node_ports = free_port(), [free_port() for _ in NODES]
        nodes = "\n".join(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={os.cpu_count()} "
                          "State=UNKNOWN" for name, port in zip(NODES, node_ports))
        self.conf.write_text(f"""ClusterName=perfgate-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket_path}
CryptoType=crypto/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool-%n
SlurmctldPidFile={root}/state/slurmctld.pid
SlurmdPidFile={root}/state/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
TaskProlog={prolog}
{nodes}
PartitionName=test Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
""")
        self._start("munged", "-F", "--force", f"--key-file={key}", f"--socket={socket_path}",
                    f"--pid-file={root}/munge/pid", f"--log-file={root}/munge/log", f"--seed-file={root}/munge/seed")
        self._wait_for(socket_path.exists, "munged to open its socket")
        self._start("slurmctld", "-D", "-i")
        for name in NODES:
            self._start("slurmd", "-D", "-N", name)
        self._wait_for(self._nodes_idle, "both slurmd nodes to be idle (sinfo)")
        return self

    def stop(self) -> None:
        for daemon in reversed(self._daemons):
            daemon.terminate()
        for daemon in reversed(self._daemons):
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()

    def run(self, *command: str) -> str:
        return subprocess.run(command, env=self.env, capture_output=True, text=True, check=True, timeout=60).stdout

    def jobs(self) -> list[str]:
        """Jobs and steps the controller still knows as pending or running."""
        return self.run("squeue", "--noheader", "--steps", "--format", "%i %j").split("\n")[:-1]

    def _start(self, *command: str) -> None:
        log = (self.root / "log" / f"{command[0]}-{len(self._daemons)}.out").open("w")
        self._daemons.append(subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL))

    def _nodes_idle(self) -> bool:
        states = subprocess.run(["sinfo", "--noheader", "--Node", "--format", "%N %T"], env=self.env,
                                capture_output=True, text=True).stdout.split()
        return states.count("idle") == len(NODES)

    def _wait_for(self, ready, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            exited = [d.args[0] for d in self._daemons if d.poll() is not None]
            if exited or time.monotonic() > deadline:
                self.stop()
                logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                                 for p in sorted((self.root / "log").glob("*")))
                raise RuntimeError(f"the test SLURM cluster did not start: waited for {what}; "
                                   f"exited: {exited or 'none'}\n{logs}")
            time.sleep(0.2)
