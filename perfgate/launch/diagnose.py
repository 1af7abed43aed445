"""What went wrong in a launch that did not finish cleanly: which rank failed, how, and where its log is.

A failed rank is named with its node and local rank, its exit code or signal, and the tail of its own
log; the kind (crashed, out-of-memory, setup-error, timeout) comes from what that log says.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Sequence

from perfgate.launch.hang_stacks import ANSWER_S, Stacks

if TYPE_CHECKING:
    from perfgate.launch.spec import LaunchSpec

LOG_TAIL_LINES = 25
OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|CUDA out of memory|\bMemoryError\b|Cannot allocate memory")
RENDEZVOUS_ERROR = re.compile(r"Rendezvous\w*(Error|Timeout)|EADDRINUSE|[Aa]ddress already in use")
"""An agent that could not host or join the c10d rendezvous (port taken, peers never came)."""
PEER_FAILED = re.compile(r"Connection (closed|reset) by peer|remote worker crash|NCCL communicator was aborted|"
                         r"Broken pipe")
"""A rank that failed because another one did (its collective lost the peer): a consequence, not the cause."""
NCCL_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout")
"""ProcessGroupNCCL's watchdog aborting a collective that did not finish within the group's timeout: a hang."""
USAGE_ERROR = re.compile(r"^[\w.-]+: error: ", re.M)
"""argparse's last line when a workload rejects its arguments: ``unet3d_train.py: error: ...``."""
EXCEPTION_LINE = re.compile(r"^(\[rank\d+\]:\s*)?[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", re.M)
"""The last line of a Python traceback (torch prefixes a distributed rank's with ``[rankN]:``)."""
RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:", re.M)
EXIT_ABORT = re.compile(r"terminate called without an active exception\s*\Z")
"""A rank's last words when a gloo worker thread released a finished collective's work (which holds a Python object)
after the interpreter had begun to exit: the thread exits while unwinding a noexcept destructor (pytorch PR 179291)."""
EXIT_ABORT_HINT = (
    "\nA rank whose log ends this way was most likely aborted in torch's gloo teardown race after its work was done: "
    "a gloo worker thread released the last collective while Python was exiting. End the script with "
    "dist.destroy_process_group(), flush its logs, then os._exit(0), as perfgate's workloads do.")


class LaunchFailed(Exception):
    """A launch that did not finish cleanly; ``kind`` is crashed, out-of-memory, timeout or setup-error."""

    def __init__(self, kind: str, message: str, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.log_path = log_path
        self.commands: tuple[tuple[str, ...], ...] = ()
        """The agents' command lines, as LaunchResult has them (empty if none started)."""


def with_stacks(failure: LaunchFailed, stacks: Stacks, workdir: Path, place: str = "") -> LaunchFailed:
    """A hang's failure, saying where the stacks its processes wrote before the kill are: each rank's log under the
    run's ``workdir`` (``place``: on which machine, for the remote launchers); or why there are none."""
    logs = f"{workdir}/node*/*/attempt_*/RANK/stderr.log{place}"
    if stacks.wrote:
        unanswered = stacks.asked - stacks.wrote
        said = (f"Where it hung: {stacks.wrote} process(es) of the run wrote their Python stacks (every thread) at the "
                f"end of their logs, each rank's in {logs} (its loader workers' there too)"
                + (f"; {unanswered} more asked wrote nothing within {ANSWER_S:g} s" if unanswered else ""))
    elif stacks.asked:
        said = (f"Where it hung: unknown; {stacks.asked} process(es) of the run were asked for their Python stacks and "
                f"none wrote within {ANSWER_S:g} s (stopped, or the host too busy to run them); their logs: {logs}")
    elif stacks.processes:
        said = (f"Where it hung: unknown; none of the run's {stacks.processes} process(es) had set up its stack dump "
                "(a workload does so as it starts: perfgate.launch.hang_stacks.tell_stacks_on_request), so the ranks "
                "were still starting (importing, rendezvous) when the timeout came, or their script never asks for it")
    else:
        return failure
    amended = LaunchFailed(failure.kind, f"{failure.message}\n{said}", failure.log_path)
    amended.commands = failure.commands
    return amended


def teardown_hung(spec: LaunchSpec, logs: Sequence[Path]) -> LaunchFailed:
    """The run wrote its end record (its measurement is complete) and then did not exit: a hung teardown."""
    return LaunchFailed(
        "timeout",
        f"a rank did not exit within {spec.teardown_s:g} s of the run's end record (a hung teardown: NCCL's destroy, "
        f"a loader worker, a collective left pending); killed every process of the run "
        f"(--perf-teardown-timeout sets the bound). Agent log: {logs[0]}",
        logs[0],
    )


def timed_out(spec: LaunchSpec, logs: Sequence[Path]) -> LaunchFailed:
    """A hang in training is a timeout; a hang before any rank started is a rendezvous that never completed."""
    if not any(list((spec.workdir / f"node{node}").glob("*/attempt_*")) for node in range(spec.nodes)):
        return LaunchFailed(
            "setup-error",
            f"the c10d rendezvous did not complete within {spec.timeout_s:g} s, so no rank started: its port is "
            f"taken by another program, or a node never joined (--nodes {spec.nodes}); killed every process of the "
            f"run. Agent log: {logs[0]}",
            logs[0],
        )
    return LaunchFailed(
        "timeout",
        f"no exit after the {spec.timeout_s:g} s timeout (hung or too slow); killed every process of the run. "
        f"Raise --perf-timeout if the case is just slow. Agent log: {logs[0]}",
        logs[0],
    )


ROOT_CAUSE = "Root Cause (first observed failure):"
_REPORTED_RANK = re.compile(r"rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)\s+exitcode\s*:\s*(?P<code>-?\d+)")
"""One failed rank in the report torchrun's agent prints when its ranks fail (ChildFailedError)."""


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def rank_log(workdir: Path, node: int, local_rank: int) -> Path | None:
    return latest_rank_logs(workdir, node).get(local_rank)


def failure_kind(rank_log_tail: str) -> str:
    """What a failed rank's own last lines say: out of memory, a collective that hung (the NCCL watchdog ends
    those), a rejected setting, or another crash."""
    if NCCL_WATCHDOG.search(rank_log_tail):
        return "timeout"
    if OUT_OF_MEMORY.search(rank_log_tail):
        return "out-of-memory"
    if USAGE_ERROR.search(rank_log_tail):
        return "setup-error"
    return "crashed"


class FailedRank(NamedTuple):
    """A rank that failed, as its agent reported it or its own log shows; ``rank`` is "?" where neither says."""

    rank: str
    node: int
    local_rank: int
    code: int | None
    """None where the rank's agent did not report it (it was stopped, or lost the rendezvous, first)."""
    log: Path
    last_lines: str


def reported_failures(spec: LaunchSpec, codes: Sequence[int], logs: Sequence[Path]) -> list[FailedRank]:
    """The ranks each failed agent reports, with their exit codes: its root cause first, then its other failures
    (the root cause is only the first failure it observed, which can be a rank that lost its peer)."""
    found = []
    for node, log in enumerate(logs):
        text = log.read_text(errors="replace") if codes[node] != 0 and log.exists() else ""
        root = text.rfind(ROOT_CAUSE)
        if root < 0:
            continue
        others = max(text.rfind("Failures:", 0, root), 0)
        for entry in [*_REPORTED_RANK.finditer(text, root), *_REPORTED_RANK.finditer(text, others, root)]:
            local_rank = int(entry["local"])
            path = rank_log(spec.workdir, node, local_rank) or log
            found.append(FailedRank(entry["rank"], node, local_rank, int(entry["code"]), path, tail(path)))
    return found


def unreported_failures(spec: LaunchSpec, codes: Sequence[int], reported: Sequence[FailedRank]) -> list[FailedRank]:
    """Ranks on failed nodes whose own logs end in an exception that no agent reported: when one node fails first,
    SLURM's --kill-on-bad-exit stops the others' agents, and an agent whose rendezvous host left ends, before
    they see their own rank's crash."""
    named = {(failed.node, failed.local_rank) for failed in reported}
    found = []
    for node, code in enumerate(codes):
        if code == 0:
            continue
        for local_rank, path in latest_rank_logs(spec.workdir, node).items():
            last_lines = tail(path)
            if (node, local_rank) in named or not EXCEPTION_LINE.search(last_lines):
                continue
            said = RANK_PREFIX.search(last_lines)
            found.append(FailedRank(said[1] if said else "?", node, local_rank, None, path, last_lines))
    return found


def latest_rank_logs(workdir: Path, node: int) -> dict[int, Path]:
    """Each local rank's log from the node's last attempt."""
    by_rank = {}
    for path in sorted((workdir / f"node{node}").glob("*/attempt_*/*/stderr.log")):
        if path.parent.name.isdigit():
            by_rank[int(path.parent.name)] = path
    return dict(sorted(by_rank.items()))


def diagnose_failure(spec: LaunchSpec, codes: Sequence[int], logs: Sequence[Path],
                     node_names: Sequence[str] = ()) -> LaunchFailed:
    """Names the rank that failed first, how, and the tail of its own log; else the agent's log. Only nodes whose
    agent failed are searched; a rank that died of another's failure (its peer gone) is named only when no other
    cause is found, in its agent's report or its own log. ``node_names`` (a launcher's host names) join the node
    numbers."""
    def where(node: int) -> str:
        return f"node {node} ({node_names[node]})" if node < len(node_names) and node_names[node] else f"node {node}"

    def caused(failures: Sequence[FailedRank]) -> list[FailedRank]:
        return [failed for failed in failures if not PEER_FAILED.search(failed.last_lines)]

    reported = reported_failures(spec, codes, logs)
    causes = caused(reported)
    if not causes:
        unreported = unreported_failures(spec, codes, reported)
        causes = caused(unreported) or reported or unreported
    if causes:
        failed = causes[0]
        kind = failure_kind(failed.last_lines)
        hung = "a collective hung and the NCCL watchdog ended it: " if NCCL_WATCHDOG.search(failed.last_lines) else ""
        how = (f"{exit_description(failed.code)}." if failed.code is not None else
               "its exit code was not reported (its torchrun agent ended before it saw the rank fail).")
        if PEER_FAILED.search(failed.last_lines):
            hint = (f"\nThis rank lost its connection to another, which most likely failed first, but no other "
                    f"rank's log says why: look at every node's logs under {spec.workdir}.")
        elif failed.code == -signal.SIGABRT and EXIT_ABORT.search(failed.last_lines):
            hint = EXIT_ABORT_HINT
        else:
            hint = ""
        return LaunchFailed(
            kind,
            f"{hung}rank {failed.rank} ({where(failed.node)}, local rank {failed.local_rank}) failed: {how}\n"
            f"Last lines of {failed.log}:\n{failed.last_lines}{hint}",
            failed.log,
        )
    node = next(i for i, code in enumerate(codes) if code != 0)
    last_lines = tail(logs[node])
    cause = ("the c10d rendezvous failed (its port taken, or a node never joined)"
             if RENDEZVOUS_ERROR.search(last_lines) else "failed")
    return LaunchFailed(
        "setup-error",
        f"torchrun agent on {where(node)} {cause} before any rank ran ({exit_description(codes[node])}); "
        f"last lines of {logs[node]}:\n{last_lines}",
        logs[node],
    )
