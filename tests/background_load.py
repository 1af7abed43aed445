"""Load beside a test or a benchmark, as a shared CI runner has it: busy processes, or a second training job.

Each load is bounded in time (it ends itself after ``seconds`` even if its owner dies; busy processes end with
their owner) and is stopped, with every process it started, when its ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import psutil

from perfgate.records.steps import RecordsTail

REPO = Path(__file__).resolve().parent.parent
BUSY = ("import os, time\ndeadline = time.monotonic() + {seconds}\n"
        "while time.monotonic() < deadline and os.getppid() == {parent}:\n    for _ in range(100_000):\n        pass\n")
"""One core kept busy until ``seconds`` pass or its parent goes (a benchmark killed by a signal runs no cleanup)."""


@contextlib.contextmanager
def busy_processes(count: int = 2, seconds: float = 900) -> Iterator[list[subprocess.Popen]]:
    """``count`` processes that each keep one core busy, as a neighbour's compile or test job does."""
    busy = BUSY.format(seconds=seconds, parent=os.getpid())
    procs = [subprocess.Popen([sys.executable, "-c", busy], stdin=subprocess.DEVNULL) for _ in range(count)]
    try:
        yield procs
    finally:
        _stop(procs)


@contextlib.contextmanager
def training_job(seconds: float = 900, ranks: int = 2) -> Iterator[subprocess.Popen]:
    """A second DDP training job (the tiny OpenCLIP, ``ranks`` gloo ranks) that trains until ``seconds`` pass.

    It is handed over once it trains: its first 10-20 s are imports and a model build on one core, so a session
    started beside it would measure its first runs against a half-idle neighbour and its later ones against the
    whole job, and a baseline taken so reads faster than the sessions after it
    (docs/measurements.md#why-the-rules-are-what-they-are)."""
    with tempfile.TemporaryDirectory(prefix="perfgate-neighbour-") as scratch:
        records = Path(scratch) / "steps.jsonl"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
                   str(REPO / "workloads" / "openclip_train.py"), "--model", "perfgate-ViT-tiny", "--device", "cpu",
                   "--batch-size", "32", "--workers", "0", "--steps", "100000", "--no-count-flops",
                   "--records", str(records)]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        job = subprocess.Popen(["timeout", "--signal=TERM", "--kill-after=10", str(int(seconds)), *command],
                               cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait_until_training(job, records)
            yield job
        finally:
            _stop([job])


def _wait_until_training(job: subprocess.Popen, records: Path, steps: int = 3, timeout_s: float = 300) -> None:
    """Returns once the job has written ``steps`` step records; a job that ends or stalls first is an error."""
    deadline, tail, seen = time.monotonic() + timeout_s, RecordsTail(records), 0
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise RuntimeError(f"the background training job exited with {job.returncode} before it trained")
        seen += sum(record["kind"] == "step" for record in tail.new_records())
        if seen >= steps:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the background training job wrote no {steps} steps within {timeout_s:.0f} s")


def _stop(procs: list[subprocess.Popen]) -> None:
    """Ends the processes and everything they started."""
    victims = []
    for proc in procs:
        try:
            root = psutil.Process(proc.pid)
            victims += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for victim in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.terminate()
    _, alive = psutil.wait_procs(victims, timeout=10)
    for victim in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.kill()
    for proc in procs:
        proc.wait()
