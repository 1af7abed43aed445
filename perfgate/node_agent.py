"""A remote node's side of a launch: starts the node's GPU sampler, then becomes its torchrun agent.

``python -m perfgate.node_agent --workdir RUN --node N --gpus G -- AGENT...``. The sampler watches this process,
which exec turns into the agent, and stops when it is gone; it carries the run's tag, so the launcher's cleanup
(scancel, the ssh reap) ends it with the rest of the run.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NoReturn, Sequence

from perfgate.gpu_monitor import start_node_sampler


def become_agent(agent: Sequence[str], *, workdir: Path, node: int, gpus: int | None) -> NoReturn:
    """Starts the GPU sampler of the node's first ``gpus`` devices (None: no sampling), then execs ``agent``."""
    if gpus is not None:
        start_node_sampler(workdir, node, gpus)
    os.execv(agent[0], list(agent))


def main(argv: Sequence[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="python -m perfgate.node_agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True, help="the run's directory, where the samples go")
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--gpus", type=int, required=True, help="how many visible devices the node's ranks use")
    parser.add_argument("agent", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    agent = args.agent[1:] if args.agent[:1] == ["--"] else args.agent
    become_agent(agent, workdir=args.workdir, node=args.node, gpus=args.gpus)


if __name__ == "__main__":
    main()
