"""A remote node's side of a launch: starts the node's GPU sampler, then becomes its torchrun agent.

``python -m perfgate.launch.node_agent --workdir RUN --node N --gpus G -- AGENT...``. The sampler watches this process,
which exec turns into the agent, and stops when it is gone; it carries the run's tag, so the launcher's cleanup
(scancel, the ssh reap) ends it with the rest of the run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from perfgate.launch.spec import NODE_SAMPLES


def start_node_sampler(workdir: Path, node: int, gpus: int) -> None:
    """Starts this node's GPU sampler (``python -m perfgate.measure.gpu_monitor``) beside the process that is about
    to become its torchrun agent: it samples the agent's first ``gpus`` visible devices until this process (the
    agent, after exec) is gone. A command, not an import: launching stays below measuring."""
    subprocess.Popen([sys.executable, "-m", "perfgate.measure.gpu_monitor",
                      "--out", str(workdir / NODE_SAMPLES.format(node=node)),
                      "--node", str(node), "--gpus", str(gpus), "--watch", str(os.getpid())],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def become_agent(agent: Sequence[str], *, workdir: Path, node: int, gpus: int | None) -> NoReturn:
    """Starts the GPU sampler of the node's first ``gpus`` devices (None: no sampling), then execs ``agent``."""
    if gpus is not None:
        start_node_sampler(workdir, node, gpus)
    os.execv(agent[0], list(agent))


def main(argv: Sequence[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="python -m perfgate.launch.node_agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True, help="the run's directory, where the samples go")
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--gpus", type=int, required=True, help="how many visible devices the node's ranks use")
    parser.add_argument("agent", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    agent = args.agent[1:] if args.agent[:1] == ["--"] else args.agent
    become_agent(agent, workdir=args.workdir, node=args.node, gpus=args.gpus)


if __name__ == "__main__":
    main()
