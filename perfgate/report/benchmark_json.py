"""The session's results in pytest-benchmark's JSON format (``--perf-json PATH``).

`pytest-benchmark compare`, github-action-benchmark's "pytest" tool and dashboards built on them read
this format. One benchmark per case flavour that ran: its rounds are the optimizer steps of every
run's measured window (warm-up left out), so ``stats.ops`` is steps per second and ``stats.mean`` the
mean step time. perfgate's verdict, gated metrics, baseline and hardware class go into ``extra_info``.
The statistics, machine_info and commit_info come from pytest-benchmark's own code, imported only
when the file is written (pytest-benchmark is optional).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from perfgate.result import Result

if TYPE_CHECKING:
    from perfgate.config.settings import Settings


def window_step_times(result: Result) -> list[float]:
    """Every run's step times after its warm-up steps, in run order."""
    times: list[float] = []
    for run in result.per_run:
        times.extend(run["step_times_s"][int(run["metrics"].get("warmup_steps") or 0):])
    return times


def extra_info(result: Result) -> dict[str, Any]:
    measured = result.measured
    info = {
        "perfgate_verdict": result.verdict,
        "case": result.case,
        "hardware_class": result.hardware_class,
        "world_size": result.world_size,
        "runs": len(result.per_run),
        "samples_per_second": measured.get("samples_per_second"),
        "total_time_secs": measured.get("total_time_secs"),
        "cpu_seconds_per_sample": measured.get("cpu_seconds_per_sample"),
        "host_cpu_per_step_s": measured.get("host_cpu_per_step_s"),
        "instructions_per_sample": measured.get("instructions_per_sample"),
        "baseline_file": result.baseline_file,
        "injected_slowdown": result.injected_slowdown,
        "gated": [{key: row.get(key) for key in ("metric", "unit", "measured", "baseline", "change", "tolerance",
                                                  "verdict")} for row in result.metrics],
        "warnings": result.warnings,
    }
    if result.reference:
        reference = result.reference
        info["against"] = {key: reference[key] for key in ("revision", "commit", "python", "environment")
                           if key in reference}
    if result.environment:
        info["environment"] = result.environment
    return info


def benchmark(result: Result) -> dict[str, Any] | None:
    """One benchmark entry, laid out as pytest-benchmark's ``Metadata.as_dict``; None for a case with no steps."""
    from pytest_benchmark.stats import Stats

    times = window_step_times(result)
    if not times:
        return None
    stats = Stats()
    for seconds in times:
        stats.update(seconds)
    runs = result.per_run
    return {
        "group": result.family or result.case,
        "name": result.test.rpartition("::")[2],
        "fullname": result.test,
        "params": {"case": result.case},
        "param": result.case,
        "extra_info": extra_info(result),
        "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": len(times), "max_time": 0,
                    "min_time": 0, "warmup": int(runs[0]["metrics"].get("warmup_steps") or 0)},
        "stats": {**stats.as_dict(), "data": times, "iterations": 1},
    }


def document(results: Sequence[Result], hardware: dict[str, Any]) -> dict[str, Any]:
    """The whole file: pytest-benchmark's machine_info (with perfgate's hardware) and commit_info, and benchmarks."""
    import pytest_benchmark
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info
    from pytest_benchmark.utils import get_commit_info

    entries = [benchmark(result) for result in sorted(results, key=lambda r: r.test)]
    return {
        "machine_info": {**pytest_benchmark_generate_machine_info(), **hardware},
        "commit_info": get_commit_info(),
        "benchmarks": [entry for entry in entries if entry is not None],
        "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "version": pytest_benchmark.__version__,
    }


class BenchmarkJson:
    """A ResultSink writing ``path`` (atomically) at the end of the session."""

    def __init__(self, path: Path, hardware: dict[str, Any]) -> None:
        self.path = path
        self.hardware = hardware

    def write(self, results: Sequence[Result], settings: Settings) -> None:
        if not results:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(document(results, self.hardware), indent=2) + "\n")
        partial.replace(self.path)
