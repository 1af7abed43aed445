"""One A/B verdict of a bisect: a pytest session in the candidate commit's worktree, ``--perf-against`` the reference.

The session is the gate itself, with everything the user passed to pytest (``-k``, ``--launcher``, ``--nodes``),
so a bisect measures exactly what the gate measures, on every launcher. It runs in its own process group with
its own ``TMPDIR`` inside the bisect's scratch directory: ``stop`` ends it as CI cancels a job (SIGTERM, which the
plugin turns into killing the running case's processes), and whatever it left there goes with the scratch
directory. Its output, and its cases' run directories (``--basetemp``: agent and rank logs, records), are kept in
the bisect's log directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from perfgate.bisect.commits import BisectUsageError
from perfgate.result import Result

STOP_GRACE_S = 30.0
"""How long a stopped session may take to kill its case's processes before it is killed."""


@dataclass
class Outcome:
    """What one session said: each case's result record, by test id, and how it ended."""

    results: dict[str, Result]
    exit_code: int
    seconds: float
    log: Path


class Sessions:
    """Runs A/B pytest sessions one at a time; ``stop`` ends the running one."""

    def __init__(self, pytest_args: Sequence[str], scratch: Path, logs: Path, python: str = sys.executable) -> None:
        self.pytest_args = list(pytest_args)
        self.scratch = scratch
        self.logs = logs
        self.python = python
        self.count = 0
        self.process: subprocess.Popen | None = None

    def run(self, tree: Path, reference: str, label: str, *, extra: Sequence[str] = ()) -> Outcome:
        """The cases of the user's selection (narrowed by ``extra``), judged in ``tree`` against commit ``reference``."""
        self.count += 1
        results = self.scratch / f"session-{self.count}.json"
        tmp = self.scratch / f"tmp-{self.count}"
        tmp.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        name = f"{self.count:02d}-{label}"
        log = self.logs / f"{name}.log"
        command = [self.python, "-m", "pytest", *self.pytest_args, *extra, "-p", "no:cacheprovider",
                   "--basetemp", str(self.logs / name), "--perf-against", reference, "--perf-results", str(results)]
        began = time.monotonic()
        with log.open("w") as out:
            out.write(f"# in {tree}\n# {' '.join(command)}\n")
            out.flush()
            self.process = subprocess.Popen(command, cwd=tree, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            env={**os.environ, "TMPDIR": str(tmp)})
            exit_code = self.process.wait()
        self.process = None
        try:
            found = [Result.from_json(record, f"a result in {results}")
                     for record in (json.loads(results.read_text())["results"] if results.exists() else [])]
        except (ValueError, KeyError, TypeError) as exc:
            raise BisectUsageError(f"the session in {tree} wrote results this perfgate cannot read: {exc} (its log: "
                                   f"{log}). That commit's perfgate writes another record: bisect a range whose "
                                   "perfgate writes this one's, or run the bisect with that commit's perfgate") from None
        return Outcome({record.test: record for record in found}, exit_code, time.monotonic() - began, log)

    def stop(self) -> None:
        """Ends the running session as CI cancels a job: SIGTERM (the plugin kills its case's processes), then, after
        the grace period, SIGKILL to its process group."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
