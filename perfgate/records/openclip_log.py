"""open_clip's per-step training log line: written by our workload, read from upstream runs.

Upstream ``open_clip_train`` logs, on rank 0, one line per ``--log-every-n-steps``:

    Train Epoch: 0 [ 32768/3200000 (1%)] Data (t): 0.029 Batch (t): 6.655, 2461.78/s, 76.9308/s/gpu
    LR: 0.000000 Logit Scale: 14.286 Contrastive_loss: 9.7031 (9.7031) Loss: 9.7031 (9.7031)

The MMoCLIP benchmark (jubench-mmoclip) scores a run from these lines: ``total_time_secs`` is the
sum of every ``Batch (t)`` value except the first (which includes start-up), and its JUBE table's
``throughput_avg`` and ``time_per_iteration_secs_avg`` are the means of all matched ``X/s`` and
``Batch (t)`` values, the first line included.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from perfgate.records.steps import RunRecords, StepRecord

LOG_FORMAT = "%(asctime)s | %(levelname)s | %(message)s"
LOG_DATEFMT = "%Y-%m-%d,%H:%M:%S"

_STEP_LINE = re.compile(
    r"Train Epoch: (?P<epoch>\d+) \[\s*(?P<done>\d+)/(?P<total>\d+) \((?P<percent>\d+)%\)\] "
    r"Data \(t\): (?P<data>\d+\.\d+) "
    r"Batch \(t\): (?P<batch>\d+\.\d+), (?P<sps>[\d.e+-]+)/s, (?P<sps_gpu>[\d.e+-]+)/s/gpu"
    r"(?:.*? Loss: (?P<loss>[\d.e+-]+|nan|inf))?"
)


@dataclass(frozen=True)
class LoggedStep:
    """The numbers of one logged step, as printed (3 decimals for times)."""

    epoch: int
    samples_done: int
    samples_total: int
    percent: int
    data_s: float
    batch_s: float
    samples_per_second: float
    samples_per_second_per_gpu: float
    loss: float | None


def format_step_line(
    *,
    epoch: int,
    samples_done: int,
    samples_total: int,
    percent: float,
    data_s: float,
    batch_s: float,
    global_batch: int,
    world_size: int,
    lr: float,
    logit_scale: float,
    losses: dict[str, tuple[float, float]],
) -> str:
    """Formats a step exactly as ``open_clip_train.train.train_one_epoch`` does (losses: name -> (value, mean))."""
    digits = len(str(samples_total))
    loss_log = " ".join(f"{name.capitalize()}: {val:#.5g} ({avg:#.5g})" for name, (val, avg) in losses.items())
    return (
        f"Train Epoch: {epoch} [{samples_done:>{digits}}/{samples_total} ({percent:.0f}%)] "
        f"Data (t): {data_s:.3f} "
        f"Batch (t): {batch_s:.3f}, {global_batch / batch_s:#g}/s, {global_batch / world_size / batch_s:#g}/s/gpu "
        f"LR: {lr:5f} "
        f"Logit Scale: {logit_scale:.3f} " + loss_log
    )


def parse_lines(lines: Iterable[str]) -> list[LoggedStep]:
    """Every step line in a log, in order; other lines (warnings, evaluation) are ignored."""
    steps = []
    for line in lines:
        match = _STEP_LINE.search(line)
        if match is None:
            continue
        steps.append(
            LoggedStep(
                epoch=int(match["epoch"]),
                samples_done=int(match["done"]),
                samples_total=int(match["total"]),
                percent=int(match["percent"]),
                data_s=float(match["data"]),
                batch_s=float(match["batch"]),
                samples_per_second=float(match["sps"]),
                samples_per_second_per_gpu=float(match["sps_gpu"]),
                loss=None if match["loss"] is None else float(match["loss"]),
            )
        )
    return steps


class LogError(ValueError):
    """A log that holds no open_clip step lines."""


def read_log(path: Path) -> list[LoggedStep]:
    path = Path(path)
    with path.open(errors="replace") as fh:
        steps = parse_lines(fh)
    if not steps:
        raise LogError(
            f"{path}: no open_clip step lines ('Train Epoch: ... Batch (t): ...') found; "
            "was the run started with --log-every-n-steps 1 and is this rank 0's log?"
        )
    return steps


@dataclass(frozen=True)
class MMoCLIPScore:
    """The jubench-mmoclip result columns for one run."""

    total_time_secs: float
    throughput_avg: float
    time_per_iteration_secs_avg: float
    done_percent_last: int
    logged_steps: int


def mmoclip_score(steps: list[LoggedStep]) -> MMoCLIPScore:
    if not steps:
        raise LogError("no logged steps to score")
    batch_times = [s.batch_s for s in steps]
    return MMoCLIPScore(
        total_time_secs=round(sum(batch_times[1:]), 6),
        throughput_avg=statistics.fmean(s.samples_per_second for s in steps),
        time_per_iteration_secs_avg=statistics.fmean(batch_times),
        done_percent_last=steps[-1].percent,
        logged_steps=len(steps),
    )


def records_from_log(steps: list[LoggedStep]) -> RunRecords:
    """Step records from a log logged every step, so upstream runs flow through the same metrics."""
    records = []
    previous_done = 0
    for index, logged in enumerate(steps):
        records.append(
            StepRecord(
                step=index,
                samples=logged.samples_done - previous_done,
                step_s=logged.batch_s,
                data_s=logged.data_s,
                loss=logged.loss,
            )
        )
        previous_done = logged.samples_done
    return RunRecords(start={"source": "open_clip log"}, steps=tuple(records), end=None)
