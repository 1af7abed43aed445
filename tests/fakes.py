"""Stand-ins shared by the unit tests: a planned case that launches nothing, a measurer that hands out chosen values,
and a device clock the test advances."""

import json

from perfgate.config.cases import Case, CaseRun, Flavour
from perfgate.launch.hardware import Hardware
from perfgate.launch.plan import Plan
from perfgate.launch.spec import LaunchSpec
from perfgate.measure.measurer import Measurement
from perfgate.result import Result

METRIC = "samples_per_second"
DETECTED = "cpu-test-2c-n1"


def make_plan(tmp_path, version="1", tolerance=None, gated=(METRIC,)):
    case = Case("w", "c", ("w.py",), cpu=Flavour({}, tolerance=tolerance, tolerance_floor=0.05),
                gated=gated, version=version)
    return Plan(CaseRun(case, "cpu"), LaunchSpec(entry=(), workdir=tmp_path / "work"), Hardware("cpu", 2),
                "k", DETECTED, 2, 10, 2, tmp_path / "b" / "k" / "w-c-cpu.json", "suite.py::test[c-cpu]")


def record(case="w-c-cpu", **fields):
    """A case's result record with the fields a test sets, and placeholders for the identity it does not care about."""
    identity = {"test": f"suite.py::test[{case}]", "hardware_class": "k", "world_size": 2, "workload_version": "1"}
    return Result.from_json({**identity, "case": case, **fields})


class FakeMeasurer:
    """Stands in for measure.Measurer: each launch appends the next of ``values`` as one run; ``probe``: its
    ``probe_matmul_gflops``, or a dict of probe readings."""

    def __init__(self, plan, values, probe=None, log=None, name="", profiles=None):
        """``profiles``: each profiled launch's ranks' operators ({rank: {op: self CPU us per step}}), in turn."""
        self.plan = plan
        self._profiles = list(profiles or [])
        self.profiled = 0
        self.result = record(plan.run.key)
        self._log, self._name = log if log is not None else [], name
        self.measurement = Measurement(command="python -m torch.distributed.run w.py")
        self._values = list(values)
        self._probe = probe
        self.launches = 0

    def measure(self, repeats):
        for _ in range(repeats):
            self.launch_once(repeats)
        return self.measurement

    last_records = None
    why_not_profiled = ""

    def profile(self):
        """Writes the next of ``profiles`` as a profiled launch's summaries, as the workloads' ranks do."""
        if not self._profiles:
            raise ValueError("the fake measurer launches nothing to profile")
        directory = self.plan.spec.workdir / f"profile{self.profiled}"
        directory.mkdir(parents=True, exist_ok=True)
        for rank, ops in self._profiles.pop(0).items():
            summary = {"steps": 5, "rank": rank, "ops": {name: {"calls": 1.0, "self_cpu_us": us, "self_device_us": 0.0}
                                                        for name, us in ops.items()}}
            (directory / f"profile-rank{rank}.json").write_text(json.dumps(summary))
        self.profiled += 1
        return directory

    def launch_once(self, planned, stop=None, cores=None):
        self.cores = cores
        value = self._values[self.launches]
        run_metrics = dict(value) if isinstance(value, dict) else {METRIC: value}
        if self._probe is not None:
            run_metrics.update(self._probe if isinstance(self._probe, dict) else {"probe_matmul_gflops": self._probe})
        self.measurement.runs.append({"run": self.launches, "metrics": run_metrics})
        self.launches += 1
        self.result.runs = self.launches
        self._log.append(self._name)


class FakeDeviceClock:
    """Markers the test completes by hand, like CUDA events the device has not reached yet."""

    def __init__(self):
        self.now = 0.0
        self.reached = 0
        self.waits = 0

    def mark(self):
        self.now += 1.5
        return self.now

    def done(self, marker):
        return marker <= self.reached

    def wait(self, marker):
        self.waits += 1
        self.reached = max(self.reached, marker)

    @staticmethod
    def seconds(earlier, later):
        return later - earlier


class LaunchClock:
    """A clock that each launch moves on by its seconds: the fake measurers launch in no time."""

    def __init__(self, seconds_per_launch):
        self.now, self.seconds_per_launch = 0.0, seconds_per_launch

    def __call__(self):
        return self.now

    def wrap(self, measurer):
        launch_once = measurer.launch_once

        def timed(planned):
            launch_once(planned)
            self.now += self.seconds_per_launch
        measurer.launch_once = timed
