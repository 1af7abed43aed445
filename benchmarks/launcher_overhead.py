"""What a multi-node launcher adds to a launch, beyond torchrun's own start: the same two-node launch of a
script that only exits, through the local launcher and through slurm and ssh, interleaved.

    python benchmarks/launcher_overhead.py --rounds 5

It starts the tests' own SLURM cluster (two slurmd) and sshd on loopback (tests/slurm_cluster.py,
tests/ssh_server.py; needs root and Debian's slurm-wlm, munge and openssh-server). A launch's time is
LaunchResult.duration_s: from the first agent's start to the last one's exit, cleanup included. perfgate's
budget: a launcher adds at most 5 s per launch over local.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import slurm_cluster  # noqa: E402
import ssh_server  # noqa: E402

from perfgate.config.settings import arguments  # noqa: E402
from perfgate.launch.local import LocalLauncher  # noqa: E402
from perfgate.launch.slurm import SlurmLauncher  # noqa: E402
from perfgate.launch.spec import LaunchSpec  # noqa: E402
from perfgate.launch.ssh import SshLauncher  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for module in (slurm_cluster, ssh_server):
        if module.missing():
            raise SystemExit(module.missing())
    with tempfile.TemporaryDirectory(prefix="perfgate-launchers-") as tmp:
        root = Path(tmp)
        (root / "slurm").mkdir()
        (root / "sshd").mkdir()
        cluster = slurm_cluster.SlurmCluster(root / "slurm").start()
        server = ssh_server.SshServer(root / "sshd").start()
        try:
            os.environ["SLURM_CONF"] = str(cluster.conf)
            script = root / "exit.py"
            script.write_text("pass\n")
            launchers = {"local": LocalLauncher(), "slurm": SlurmLauncher(),
                         "ssh": SshLauncher(ssh_server.HOSTS, arguments(server.client_args))}
            env = {"PYTHONPATH": str(REPO)}
            seconds: dict[str, list[float]] = {name: [] for name in launchers}
            for round_ in range(args.rounds):
                for name, launcher in launchers.items():
                    spec = LaunchSpec(entry=[str(script)], workdir=root / f"{name}{round_}", nodes=2, procs_per_node=1,
                                      timeout_s=120, env=env)
                    seconds[name].append(launcher.launch(spec).duration_s)
        finally:
            server.stop()
            cluster.stop()
    local = statistics.median(seconds["local"])
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"{name:6s} median {median:5.2f} s  (range {min(values):.2f} .. {max(values):.2f}, {len(values)} launches)"
              f"  added over local: {median - local:+.2f} s")


if __name__ == "__main__":
    main()
