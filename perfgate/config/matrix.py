"""A workload's configuration matrix, declared as one table: axes, a base point, the default subset.

    MATRIX = Matrix(
        workload="unet3d", entry=("workloads/unet3d_train.py",), cpu=Flavour({...}), gpu=Flavour({...}),
        axes=(Axis("precision", ("fp32", "amp")), Axis("workers", (1, 4), label="w{}"), DDP_AXIS),
        base={"precision": "fp32", "workers": 1, "ddp": 2},
        default=({}, {"precision": "amp"}),
    )
    CASES = MATRIX.cases()

The full matrix is the default subset, plus every value of every axis with the other axes at the base
point (one knob at a time, so a change names the knob that moved performance), plus any ``combos``.
Cases outside the default subset carry the ``full_matrix`` mark and run only with ``--full-matrix``.
Ids list every axis, e.g. ``amp-dali-w4-bucket100-ddp2``; switches that are usually off label their
off value "" and appear only when on (``compile``). ``rules`` return a skip reason for combinations that cannot run on a flavour.
Cases that differ only in DDP size form a scaling family, reported as speedup and efficiency.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pytest

from perfgate.config.cases import Case, Flavour

Point = Mapping[str, Any]
Rule = Callable[[Point, str], "str | None"]
"""(point, flavour kind "cpu"/"gpu") -> why this combination cannot run there, or None."""


def set_arg(arg: str) -> Callable[[Flavour, Any], Flavour]:
    return lambda flavour, value: dataclasses.replace(flavour, args={**flavour.args, arg: value})


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Any, ...]
    label: str | Mapping[Any, str] = "{}"
    """A value's part of the test id: a format (``"w{}"``) or a mapping; "" leaves the axis out of the id."""
    apply: Callable[[Flavour, Any], Flavour] | None = None
    """How a value changes a flavour; by default it sets the workload argument named like the axis."""

    def id_part(self, value: Any) -> str:
        return self.label[value] if isinstance(self.label, Mapping) else self.label.format(value)

    def applied(self, flavour: Flavour, value: Any) -> Flavour:
        return (self.apply or set_arg(self.name.replace("_", "-")))(flavour, value)


DDP_AXIS = Axis("ddp", (None, 1, 2, 4, 8), label={None: "", 1: "ddp1", 2: "ddp2", 4: "ddp4", 8: "ddp8"},
                apply=lambda flavour, ranks: dataclasses.replace(flavour, ranks_per_node=ranks))
"""DDP ranks per node: the scaling axis. None, the default cases' value, is the host's own size: one rank per
visible GPU (so ``pytest -m gpu`` runs every default case on a runner of 1, 2, 4 or 8 GPUs, judged per
hardware class, which counts the GPUs) and 2 gloo ranks on CPU. Its id leaves the size out; the sizes
1-8 are the full matrix's scaling family."""


@dataclass(frozen=True)
class Matrix:
    workload: str
    entry: tuple[str, ...]
    axes: tuple[Axis, ...]
    base: Point
    """Every axis's value when a point does not say otherwise."""
    cpu: Flavour | None = None
    gpu: Flavour | None = None
    default: tuple[Point, ...] = ({},)
    """The representative subset the main job runs, as changes from the base point."""
    combos: tuple[Point, ...] = ()
    """Extra full-matrix points beyond one-knob-at-a-time (e.g. the SC21 tutorial's optimisation path)."""
    rules: tuple[Rule, ...] = ()
    normalize: Callable[[dict[str, Any]], dict[str, Any]] = lambda point: point
    """Makes a point consistent before it is named (e.g. no loader workers without a loader)."""
    version: str = "1"
    marks: tuple[Any, ...] = ()
    later_runs_args: tuple[str, ...] = ()
    """See Case.later_runs_args."""

    def __post_init__(self) -> None:
        names = [axis.name for axis in self.axes]
        missing = [name for name in names if name not in self.base]
        unknown = [key for point in (self.base, *self.default, *self.combos) for key in point if key not in names]
        if missing or unknown:
            raise ValueError(f"matrix {self.workload}: base point lacks {missing or '-'}; unknown axes {unknown or '-'}")
        for axis in self.axes:
            if self.base[axis.name] not in axis.values:
                raise ValueError(f"matrix {self.workload}: base {axis.name}={self.base[axis.name]!r} "
                                 f"is not one of {axis.values}")

    def point_id(self, point: Point, leave_out: str | None = None) -> str:
        return "-".join(part for axis in self.axes if axis.name != leave_out
                        for part in [axis.id_part(point[axis.name])] if part)

    def points(self) -> list[tuple[dict[str, Any], bool]]:
        """Every point of the full matrix, once, with whether it belongs to the default subset."""
        chosen: dict[str, tuple[dict[str, Any], bool]] = {}
        sweeps = [{axis.name: value} for axis in self.axes for value in axis.values]
        for changes, is_default in [(c, True) for c in self.default] + [(c, False) for c in (*sweeps, *self.combos)]:
            point = self.normalize({**self.base, **changes})
            chosen.setdefault(self.point_id(point), (point, is_default))
        return list(chosen.values())

    def cases(self) -> list[Case]:
        cases = []
        for point, is_default in self.points():
            flavours = {kind: self._flavour(kind, point) for kind in ("cpu", "gpu")}
            marks = self.marks if is_default else (*self.marks, pytest.mark.full_matrix)
            cases.append(Case(
                self.workload, self.point_id(point), self.entry, cpu=flavours["cpu"], gpu=flavours["gpu"],
                marks=marks, version=self.version, family=self._family(point), later_runs_args=self.later_runs_args,
            ))
        return cases

    def _flavour(self, kind: str, point: Point) -> Flavour | None:
        flavour = self.cpu if kind == "cpu" else self.gpu
        if flavour is None:
            return None
        for axis in self.axes:
            flavour = axis.applied(flavour, point[axis.name])
        reasons = [reason for rule in self.rules for reason in [rule(point, kind)] if reason]
        return dataclasses.replace(flavour, skip="; ".join(reasons)) if reasons else flavour

    def _family(self, point: Point) -> str | None:
        if not any(axis.name == DDP_AXIS.name for axis in self.axes):
            return None
        return f"{self.workload}-{self.point_id(point, leave_out=DDP_AXIS.name)}"


def needs_module(module: str, axis: str, value: Any, why: str) -> Rule:
    """A rule: points with ``axis == value`` skip where ``module`` cannot be imported."""

    def rule(point: Point, kind: str) -> str | None:
        if point.get(axis) != value:
            return None
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        return None if found else why

    return rule


def gpu_only(axis: str, values: Sequence[Any], why: str) -> Rule:
    """A rule: the CPU flavour of points with ``axis`` in ``values`` skips, saying why."""
    return lambda point, kind: why if kind == "cpu" and point.get(axis) in values else None
