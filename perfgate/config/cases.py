"""Cases: what the perf suite declares. A case is one workload configuration with a CPU flavour
(gloo, small settings) and/or a GPU flavour (nccl, full settings) of the same code.

    CASES = [Case("openclip", "fp32", entry=("workloads/openclip_train.py",),
                  cpu=Flavour({"model": "perfgate-ViT-tiny", "device": "cpu"}),
                  gpu=Flavour({"model": "ViT-B-32", "device": "cuda"}))]

    @parametrize(CASES)
    def test_openclip(perfgate, case):
        perfgate.check(case)

gives the test ids ``test_openclip[fp32-cpu]`` (marked ``cpu``) and ``test_openclip[fp32-gpu]``
(marked ``gpu``), gated against ``baselines/<hardware-class>/openclip-fp32-cpu.json`` and so on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pytest

from perfgate.records.sources import JsonRecords, RecordSource

DEFAULT_CPU_RANKS = 2
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
"""What may name a baseline directory or file: nothing that could climb out of the baseline root."""
CPU_TOLERANCE_FLOOR = 0.06
"""The least tolerance of a CPU flavour. A baseline's spread is measured over minutes, but a shared VM's speed drifts
further than that within an hour, so a 3 % floor cried wolf (docs/measurements.md#why-the-rules-are-what-they-are)."""
GPU_TOLERANCE_FLOOR = 0.02
"""The least tolerance of a GPU flavour: a dedicated GPU's steps are steady, and a smaller floor catches less."""
CPU_CLOCK_GATED = "cpu_seconds_per_sample"
"""The CPU clock's gated metric: CPU time per sample, which a source that reads logs cannot give."""
DEFAULT_GATED = {
    "gpu": ("samples_per_second", "total_time_secs"),
    "cpu": ("fastest_step_samples_per_second", CPU_CLOCK_GATED),
}
"""What a case gates unless it says otherwise. A dedicated GPU's steps are steady, so its mean throughput is
the truth. Shared CPU runners interfere in bursts that only ever add time, and the fastest step is what they move
least (docs/measurements.md#why-the-rules-are-what-they-are); a regression confined to a few steps is left to the
GPU flavour. The CPU flavour gates a second clock beside it, CPU time per sample, which the slices given to other
work do not reach: more work per step moves both, a wait only the wall clock. A GPU flavour records host CPU per step
and gates it where the flavour asks (``Flavour(gated=(..., "host_cpu_per_step_s"))``)."""


@dataclass(frozen=True)
class Flavour:
    """One flavour's settings. ``steps=None`` lets the workload's own arguments decide its length."""

    args: Mapping[str, Any]
    steps: int | None = 40
    warmup: int = 5
    windows: int = 4
    """How many consecutive windows each launch's measured steps are split into (at least 2 steps each): the verdict's
    model reads them as the level below the launch."""
    ranks_per_node: int | None = None
    """Ranks per node; None means 2 on CPU and one per visible GPU on GPU."""
    tolerance: float | None = None
    """A fixed tolerance (fraction); None derives it from the noise measured at --update-baselines."""
    tolerance_floor: float | None = None
    """The least tolerance a noise-derived one may be; None: the kind's, CPU_TOLERANCE_FLOOR for a CPU flavour and
    GPU_TOLERANCE_FLOOR for a GPU one."""
    cpu_tolerance: float | None = None
    """The CPU clock's fixed tolerance (its metrics': CPU time per sample or per step); None: ``tolerance`` where that
    is fixed, else derived from noise."""
    cpu_tolerance_floor: float = 0.05
    """The least tolerance a noise-derived one of the CPU clock may be, against a stored baseline. CPU time does not
    count the slices a shared machine gives other work, so launches in one session agree within 1-2 %, but it drifts
    between sessions too (caches, clocks), past a 2 % floor even on an idle machine
    (docs/measurements.md#why-the-rules-are-what-they-are). A/B, which cancels drift, judges it with
    --perf-ab-tolerance (2 %)."""
    timeout_s: float = 600.0
    target_ci: float | None = None
    """Adaptive length: stop once the ~95 % interval of the median step time is within this fraction of it
    (0.01 = +-1 %); ``steps`` is then the most steps, ``min_steps`` the fewest."""
    min_steps: int | None = None
    skip: str | None = None
    """Why this flavour cannot run (an invalid combination, a missing package): the test skips saying so."""
    benchy_steps: int = 0
    """Steps of the IO and SYNTHETIC phases the first run of the case measures after its window (0: none)."""
    gated: tuple[str, ...] | None = None
    """This flavour's gated metrics, over the case's ``gated`` and the defaults."""

    def fewest_steps(self, warmup: int) -> int:
        """An adaptive-length launch's fewest steps: ``min_steps``, else ten past the warm-up."""
        return self.min_steps or warmup + 10

    def fixed_tolerance(self, clock: str = "wall") -> float | None:
        """The fixed tolerance of a metric read on ``clock`` (``wall`` or ``cpu``); None: derived from noise. A fixed
        ``tolerance`` holds for both clocks unless ``cpu_tolerance`` sets the CPU clock's."""
        if clock == "cpu" and self.cpu_tolerance is not None:
            return self.cpu_tolerance
        return self.tolerance

    def least_tolerance(self, clock: str, kind: str) -> float:
        """The least relative change that counts on ``clock`` for a flavour of ``kind`` (``cpu`` or ``gpu``): the
        fixed tolerance, else the noise floor."""
        fixed = self.fixed_tolerance(clock)
        if fixed is not None:
            return fixed
        if clock == "cpu":
            return self.cpu_tolerance_floor
        if self.tolerance_floor is not None:
            return self.tolerance_floor
        return CPU_TOLERANCE_FLOOR if kind == "cpu" else GPU_TOLERANCE_FLOOR


def default_steps_args(steps: int, world_size: int, local_batch: int | None) -> dict[str, Any]:
    return {"steps": steps}


@dataclass(frozen=True)
class Case:
    workload: str
    name: str
    entry: tuple[str, ...]
    """A script path relative to the rootdir, or ``("-m", "package.module")``."""
    cpu: Flavour | None = None
    gpu: Flavour | None = None
    gated: tuple[str, ...] | None = None
    """Metrics judged against the baseline; None: DEFAULT_GATED for each flavour."""
    records: RecordSource = field(default_factory=JsonRecords)
    steps_args: Callable[[int, int, int | None], Mapping[str, Any]] = default_steps_args
    """Maps (steps, world size, local batch) to the workload arguments that set its length."""
    marks: tuple[Any, ...] = ()
    version: str = "1"
    """Bump when the workload changes what it measures: baselines of other versions are not compared."""
    inject_flag: str | None = "--inject-slowdown"
    """The workload's planted-slowdown option; None when it has none (upstream programs)."""
    family: str | None = None
    """Cases of one family differ only in DDP size; the report shows their scaling."""
    later_runs_args: tuple[str, ...] = ()
    """Flags for every launch of the case after its first, which skip what the workload measures once per case
    (perfgate's workloads: ``--no-count-flops``); the flavour's benchy phases likewise run in the first only."""
    cwd: str | None = None
    """The directory an instrumented script (``records=OptimizerSteps(...)``) starts in, relative to the rootdir; its
    entry is then relative to it too. None: the run's own directory, with the entry relative to the rootdir."""

    def __post_init__(self) -> None:
        if not self.records.instruments:
            if self.cwd is not None:
                raise ValueError(f"{self.workload}-{self.name}: cwd= is for unmodified scripts "
                                 "(records=OptimizerSteps(...)); perfgate's own workloads start in the run's directory")
            return
        for kind in ("cpu", "gpu"):
            flavour = getattr(self, kind)
            if flavour is None:
                continue
            if flavour.steps is None or flavour.target_ci is not None or flavour.benchy_steps:
                raise ValueError(f"{self.workload}-{self.name}-{kind}: an unmodified script's length is a number of "
                                 "optimizer steps: give Flavour(steps=N), without target_ci or benchy_steps")


@dataclass(frozen=True)
class CaseRun:
    """One flavour of one case: what one test item launches, measures and gates."""

    case: Case
    kind: str

    @property
    def flavour(self) -> Flavour:
        flavour = self.case.cpu if self.kind == "cpu" else self.case.gpu
        assert flavour is not None
        return flavour

    @property
    def gated(self) -> tuple[str, ...]:
        """The flavour's own, else the case's, else the defaults, less the CPU clock where the source cannot read it."""
        chosen = self.flavour.gated or self.case.gated
        if chosen:
            return chosen
        return tuple(m for m in DEFAULT_GATED[self.kind] if m != CPU_CLOCK_GATED or self.case.records.cpu_clock)

    @property
    def id(self) -> str:
        return f"{self.case.name}-{self.kind}"

    @property
    def key(self) -> str:
        """The baseline file's name (without .json) within its hardware class."""
        return f"{self.case.workload}-{self.id}"

    def baseline_path(self, root: Path, hardware_class: str) -> Path:
        """``root/<hardware class>/<key>.json``; ValueError for a name that cannot be a path there."""
        return baseline_path(root, hardware_class, self.key)

    def argv(self, workdir: Path, steps: int | None, world_size: int, warmup: int = 0,
             inject_slowdown: float = 0.0, first_run: bool = True, root: Path | None = None,
             timeout_s: float | None = None) -> list[str]:
        """The workload's command line, its script resolved against ``root`` (the rootdir) where given; the case's
        first run adds the flavour's IO/SYNTHETIC phases, later runs ``later_runs_args``. An instrumented script gets
        only its own arguments, behind the wrapper that counts its optimizer steps."""
        flavour = self.flavour
        entry = list(self.case.entry)
        later = [] if first_run else list(self.case.later_runs_args)
        if self.case.records.instruments:
            cwd = Path(root or ".") / self.case.cwd if self.case.cwd is not None else None
            if entry[0] != "-m" and cwd is None and root is not None:
                entry[0] = str((root / entry[0]).resolve())
            assert steps is not None
            return self.case.records.wrap([*entry, *to_flags(flavour.args), *later], workdir,
                                          device="cuda" if self.kind == "gpu" else "cpu", steps=steps,
                                          inject_slowdown=inject_slowdown, cwd=cwd,
                                          timeout_s=timeout_s or flavour.timeout_s)
        if root is not None and entry[0] != "-m":
            entry[0] = str((root / entry[0]).resolve())
        args = dict(flavour.args)
        if first_run and flavour.benchy_steps:
            args["benchy-steps"] = flavour.benchy_steps
        if steps is not None:
            args.update(self.case.steps_args(steps, world_size, args.get("batch-size")))
        if flavour.target_ci is not None:
            args.update({"target-ci": flavour.target_ci, "min-steps": flavour.fewest_steps(warmup),
                         "warmup": warmup})
        planted = [self.case.inject_flag, str(inject_slowdown)] if inject_slowdown and self.case.inject_flag else []
        return [*entry, *to_flags(args), *self.case.records.args(workdir), *planted, *later]


def to_flags(args: Mapping[str, Any]) -> list[str]:
    """``{"batch-size": 32, "grad-checkpointing": True, "sync-buffers": False}`` -> CLI flags."""
    flags: list[str] = []
    for name, value in args.items():
        if value is True:
            flags.append(f"--{name}")
        elif value is False:
            flags.append(f"--no-{name}")
        elif value is not None:
            flags.extend([f"--{name}", str(value)])
    return flags


def runs(cases: Sequence[Case]) -> list[Any]:
    """One ``pytest.param`` per flavour of every case, with a readable id and its marks."""
    params = []
    for case in cases:
        for kind in ("cpu", "gpu"):
            if getattr(case, kind) is None:
                continue
            run = CaseRun(case, kind)
            marks = [getattr(pytest.mark, kind), *case.marks]
            if run.flavour.skip:
                marks.append(pytest.mark.skip(reason=f"{run.key}: {run.flavour.skip}"))
            params.append(pytest.param(run, id=run.id, marks=marks))
    return params


def parametrize(cases: Sequence[Case]) -> pytest.MarkDecorator:
    keys = [CaseRun(c, k).key for c in cases for k in ("cpu", "gpu") if getattr(c, k) is not None]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"perfgate: case names must be unique per workload; repeated: {', '.join(duplicates)}")
    return pytest.mark.parametrize("case", runs(cases))


def check_name(kind: str, name: str) -> str:
    if not SAFE_NAME.match(name):
        raise ValueError(f"{kind} {name!r} cannot name a baseline file: use letters, digits and . _ + -")
    return name


def baseline_path(root: Path, hardware_class: str, key: str) -> Path:
    """Where a case's baseline for a hardware class lives: one reviewable file per case per class."""
    return Path(root) / check_name("hardware class", hardware_class) / f"{check_name('case', key)}.json"
