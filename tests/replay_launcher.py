"""A launcher for the pytest sessions that test what perfgate makes of a run's records (verdicts, messages, history),
not how it measures them: each launch writes a real run's step records again, its times scaled, and starts no process.
Such a session compares the same records every time, so it holds however busy the machine is.

A session loads it with ``-p replay_launcher`` (this directory on PYTHONPATH) and ``PERFGATE_REPLAY``, the directory
of a run to replay; ``PERFGATE_REPLAY_SCALE=1.25`` makes every step take 25 % longer, as a slower commit's would.
``replay_in_sessions`` sets these for the sessions a test starts.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import perfgate.fixture
from perfgate.launch.agents import agent_command
from perfgate.launch.local import LocalLauncher
from perfgate.launch.spec import LaunchResult, LaunchSpec, Poll

SOURCE_ENV, SCALE_ENV = "PERFGATE_REPLAY", "PERFGATE_REPLAY_SCALE"
SCALED = ("step_s", "data_s", "cpu_s", "workers_cpu_s", "run_queue_s", "wall_s")


def scaled_records(source: Path, scale: float) -> str:
    """The run's records with each duration times ``scale``, timed as if the run had just ended."""
    records = [json.loads(line) for line in source.read_text().splitlines()]
    end, now = records[-1]["t"], time.time()
    for record in records:
        record["t"] = now - (end - record["t"]) * scale
        record.update({key: record[key] * scale for key in SCALED if record.get(key) is not None})
    return "".join(json.dumps(record) + "\n" for record in records)


class ReplayLauncher(LocalLauncher):
    """This host's hardware, as the local launcher sees it; launches that replay ``source``'s records."""

    def __init__(self, source: Path, scale: float) -> None:
        self.source, self.scale = source, scale

    def launch(self, spec: LaunchSpec, on_poll: Poll | None = None) -> LaunchResult:
        spec.workdir.mkdir(parents=True, exist_ok=True)
        (spec.workdir / "steps.jsonl").write_text(scaled_records(self.source / "steps.jsonl", self.scale))
        if on_poll is not None:
            on_poll(0.0)
        return LaunchResult(0.0, (tuple(agent_command(spec, 0, "127.0.0.1:0", "replay")),), ())


def record(script: Path, directory: Path, steps: int) -> Path:
    """``directory``, holding the step records of one run of ``script`` (one process, no torchrun)."""
    directory.mkdir(parents=True)
    subprocess.run([sys.executable, str(script), "--steps", str(steps), "--records", str(directory / "steps.jsonl")],
                   cwd=script.parent, check=True, timeout=120)
    return directory


def replay_in_sessions(monkeypatch, run_dir: Path, scale: float = 1.0) -> None:
    """The pytest sessions this test starts from now on launch nothing: each launch replays ``run_dir``."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                                   os.environ.get("PYTHONPATH")])))
    options = os.environ.get("PYTEST_ADDOPTS", "")
    if "-p replay_launcher" not in options:
        monkeypatch.setenv("PYTEST_ADDOPTS", f"{options} -p replay_launcher".strip())
    monkeypatch.setenv(SOURCE_ENV, str(run_dir))
    monkeypatch.setenv(SCALE_ENV, str(scale))


def pytest_configure(config) -> None:
    source = os.environ.get(SOURCE_ENV)
    if source:
        launcher = ReplayLauncher(Path(source), float(os.environ.get(SCALE_ENV, "1")))
        perfgate.fixture.node_launcher = lambda settings: launcher
