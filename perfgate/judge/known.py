"""This machine against the ones we know: every committed hardware class's baseline of the same case, and
the published figures whose configuration the case matches.

It answers "how fast is this machine next to the others?" for a procurement check or a new runner,
including before the machine has baselines of its own. It informs and is never the verdict, which
stays with this hardware class's own baseline. A ratio above 1 means this machine is faster (a higher
rate, or a shorter time). Machines of different sizes are compared per rank (per GPU).

Published figures live in a reviewable JSON file (``references/published.json``): each names the
cases (ids or globs) whose configuration it measured, the hardware and its GPU count, the value
with its unit, the source and the date.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from perfgate.judge import baselines
from perfgate.launch.hardware import without_vector_tier
from perfgate.measure.metrics import METRICS
from perfgate.result import Result

SCHEMA = 1
RATES = ("samples_per_second",)
"""Rates compared per rank when the machines run different numbers of ranks."""


class PublishedError(ValueError):
    """The published figures file cannot be read; the message names the file and the figure."""


@dataclass(frozen=True)
class PublishedFigure:
    id: str
    cases: tuple[str, ...]
    """Case ids or globs whose configuration the figure measured."""
    configuration: str
    hardware: str
    gpus: int
    metric: str
    value: float
    unit: str
    source: str
    date: str

    def matches(self, case: str) -> bool:
        return any(fnmatch.fnmatchcase(case, pattern) for pattern in self.cases)


FIELDS = {"id": str, "cases": list, "configuration": str, "hardware": str, "gpus": int, "metric": str,
          "value": (int, float), "unit": str, "source": str, "date": str}


def load_published(path: Path) -> list[PublishedFigure]:
    """The figures of ``path``; none if it does not exist; PublishedError naming what is wrong otherwise."""
    if not path.exists():
        return []
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PublishedError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA or not isinstance(document.get("figures"),
                                                                                            list):
        raise PublishedError(f"{path}: expected {{\"schema\": {SCHEMA}, \"figures\": [...]}}")
    figures = []
    for index, raw in enumerate(document["figures"], 1):
        where = f"{path}: figure {index} ({raw.get('id', '?') if isinstance(raw, dict) else '?'})"
        if not isinstance(raw, dict):
            raise PublishedError(f"{where}: must be an object")
        for name, kind in FIELDS.items():
            if not isinstance(raw.get(name), kind) or isinstance(raw.get(name), bool):
                raise PublishedError(f"{where}: field {name!r} is missing or not a {getattr(kind, '__name__', 'number')}")
        if raw["metric"] not in METRICS:
            raise PublishedError(f"{where}: unknown metric {raw['metric']!r}; known: {', '.join(sorted(METRICS))}")
        if raw["value"] <= 0 or raw["gpus"] < 1:
            raise PublishedError(f"{where}: value and gpus must be positive")
        figures.append(PublishedFigure(**{**{k: raw[k] for k in FIELDS}, "cases": tuple(raw["cases"]),
                                          "value": float(raw["value"])}))
    return figures


def _row(kind: str, against: str, metric: str, this: float, theirs: float, unit: str, basis: str,
         source: str = "") -> dict[str, Any]:
    faster = this / theirs if METRICS[metric].better == "higher" else theirs / this
    return {"kind": kind, "against": against, "metric": metric, "this": this, "theirs": theirs, "unit": unit,
            "basis": basis, "ratio": faster, "source": source}


def _per_rank(metric: str, this: float, theirs: float, world: int, their_world: int) -> tuple[float, float, str] | None:
    """Both values on one basis: the job's when the ranks match, per rank for rates otherwise (None: not comparable)."""
    if world == their_world:
        return this, theirs, "job"
    if metric in RATES:
        return this / world, theirs / their_world, f"per rank ({world} vs {their_world} ranks)"
    return None


def against_baselines(result: Result, baseline_dir: Path) -> list[dict[str, Any]]:
    """The case's throughput (or, for a published-style baseline, its gated metrics) against every other class."""
    measured, world = result.measured, int(result.world_size)
    rows = []
    for path in sorted(baseline_dir.glob(f"*/{result.case}.json")):
        if path.parent.name == result.hardware_class:
            continue
        try:
            other = baselines.load(path)
        except baselines.BaselineError:
            continue
        if other is None:
            continue
        theirs = other.provenance.get("measured") or {}
        kernels = ", this processor on other vector extensions" \
            if without_vector_tier(other.hardware_class) == without_vector_tier(result.hardware_class) else ""
        if measured.get("samples_per_second") and theirs.get("samples_per_second_per_rank"):
            their_world = round(theirs["samples_per_second"] / theirs["samples_per_second_per_rank"])
            basis = _per_rank("samples_per_second", measured["samples_per_second"], theirs["samples_per_second"],
                              world, their_world)
            if basis:
                rows.append(_row("baseline", other.hardware_class, "samples_per_second", *basis[:2], "samples/s",
                                 basis[2] + kernels, str(path)))
            continue
        hardware = other.provenance.get("hardware") or {}
        their_world = int(hardware.get("gpus_per_node") or 0) * int(hardware.get("nodes") or 0)
        for metric, ref in other.metrics.items():
            if measured.get(metric) and metric in METRICS:
                basis = _per_rank(metric, measured[metric], ref.value, world, their_world)
                if basis:
                    rows.append(_row("baseline", other.hardware_class, metric, *basis[:2], ref.unit,
                                     basis[2] + kernels, str(path)))
    return rows


def against_published(result: Result, figures: Sequence[PublishedFigure]) -> list[dict[str, Any]]:
    measured, world = result.measured, int(result.world_size)
    rows = []
    for figure in figures:
        if not figure.matches(result.case) or not measured.get(figure.metric):
            continue
        basis = _per_rank(figure.metric, measured[figure.metric], figure.value, world, figure.gpus)
        if basis:
            rows.append(_row("published", f"{figure.hardware} ({figure.id})", figure.metric, *basis[:2], figure.unit,
                             basis[2], f"{figure.source}, {figure.date}"))
    return rows


def comparisons(result: Result, baseline_dir: Path, figures: Sequence[PublishedFigure]) -> list[dict[str, Any]]:
    """Every comparison the case's measurement allows; none for a case that measured nothing."""
    if not result.measured:
        return []
    return against_baselines(result, baseline_dir) + against_published(result, figures)


def describe(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per comparison, for a case's skip or failure message."""
    return [f"  {row['ratio']:.2f}x {row['kind']} {row['against']}: {row['metric']} {row['this']:,.4g} vs "
            f"{row['theirs']:,.4g} {row['unit']} ({row['basis']})" for row in rows]
