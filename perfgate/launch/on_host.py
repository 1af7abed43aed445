"""A run's side on one of its hosts, for the remote launchers: ``python -m perfgate.launch.on_host``.

``--reap TAG`` ends whatever of the run is still alive on this host (SIGTERM, then SIGKILL): the ssh launcher runs
it on every host after each launch, since an ssh client's death does not reach a remote process without a
terminal. ``--stacks TAG`` asks the run's processes of one node on this host for their Python stacks
(launch.hang_stacks) before a hung run is ended, and prints how many processes it found, asked and saw write them;
the ssh launcher runs it over ssh, the slurm launcher as a step beside the hung one. Processes are found by the run's
tag in their environment.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence

from perfgate.launch.agents import kill_run, run_processes
from perfgate.launch.hang_stacks import request_stacks


def reap(run_id: str) -> None:
    """SIGTERM, then SIGKILL, every process on this host tagged with the run (any node's)."""
    kill_run([], run_id)
    left = run_processes(run_id)
    if left:
        raise SystemExit(f"{len(left)} process(es) of {run_id} survived SIGKILL: {[p.pid for p in left]}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perfgate.launch.on_host", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--reap", metavar="TAG", help="end this run's processes on this host")
    action.add_argument("--stacks", metavar="TAG", help="ask this run's processes of --node on this host for their "
                        "Python stacks; prints how many processes it found, asked and saw write them")
    parser.add_argument("--node", type=int, default=os.environ.get("SLURM_NODEID"),
                        help="with --stacks: the run's node on this host (default: SLURM_NODEID, under srun); "
                        "several nodes of a run can share a host")
    args = parser.parse_args(argv)
    if args.reap:
        reap(args.reap)
    else:
        print(request_stacks(proc.pid for proc in run_processes(args.stacks, args.node)).line())


if __name__ == "__main__":
    main()
