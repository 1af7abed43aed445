"""Baselines: one reviewable JSON file per case per hardware class, compared and rewritten safely.

Layout: ``<baseline-dir>/<hardware-class>/<case>.json``. A file holds, per gated metric, the value,
which direction is better, and the tolerance; and the provenance of the measurement. Files are
replaced atomically (write a temporary file beside it, fsync, rename), so a reader or an interrupted
update only ever sees the old or the new file. A file that cannot be read is an error, never
"no baseline".
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

SCHEMA = 1
DIRECTIONS = ("higher", "lower")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


class BaselineError(ValueError):
    """A baseline file that exists but cannot be trusted."""


@dataclass(frozen=True)
class MetricBaseline:
    value: float
    better: str
    tolerance: float
    unit: str = ""


@dataclass(frozen=True)
class Baseline:
    case: str
    hardware_class: str
    metrics: Mapping[str, MetricBaseline]
    provenance: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "case": self.case,
            "hardware_class": self.hardware_class,
            "metrics": {
                name: {"value": m.value, "better": m.better, "tolerance": m.tolerance, "unit": m.unit}
                for name, m in sorted(self.metrics.items())
            },
            "provenance": dict(self.provenance),
        }


@dataclass(frozen=True)
class MetricVerdict:
    """One metric judged against its baseline. ``change`` is relative: +0.05 means 5 % above."""

    metric: str
    better: str
    unit: str
    baseline: float
    measured: float
    tolerance: float

    @property
    def change(self) -> float:
        return (self.measured - self.baseline) / self.baseline

    @property
    def regressed(self) -> bool:
        worse = -self.change if self.better == "higher" else self.change
        return worse > self.tolerance

    def describe(self) -> str:
        return (
            f"{self.metric} ({self.better} is better): measured {self.measured:.6g} {self.unit} "
            f"vs baseline {self.baseline:.6g} {self.unit}: {self.change:+.1%} (tolerance {self.tolerance:.1%})"
        )


def check_name(kind: str, name: str) -> str:
    if not _SAFE_NAME.match(name):
        raise BaselineError(f"{kind} {name!r} cannot name a baseline file: use letters, digits and . _ + -")
    return name


def baseline_path(root: Path, hardware_class: str, case: str) -> Path:
    return Path(root) / check_name("hardware class", hardware_class) / f"{check_name('case', case)}.json"


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise BaselineError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BaselineError(f"{where}: field {key!r} has the wrong type ({type(value).__name__})")
    return value


def parse(obj: Any, where: str) -> Baseline:
    if not isinstance(obj, dict):
        raise BaselineError(f"{where}: a baseline must be a JSON object")
    schema = _field(obj, "schema", int, where)
    if schema != SCHEMA:
        raise BaselineError(f"{where}: schema {schema} is not the supported schema {SCHEMA}")
    metrics = {}
    for name, raw in _field(obj, "metrics", dict, where).items():
        here = f"{where}: metric {name!r}"
        if not isinstance(raw, dict):
            raise BaselineError(f"{here} must be an object")
        value = float(_field(raw, "value", (int, float), here))
        better = _field(raw, "better", str, here)
        tolerance = float(_field(raw, "tolerance", (int, float), here))
        if better not in DIRECTIONS:
            raise BaselineError(f"{here}: 'better' must be one of {DIRECTIONS}, got {better!r}")
        if not math.isfinite(value) or value <= 0:
            raise BaselineError(f"{here}: value must be a positive number, got {value}")
        if not 0 <= tolerance < 1:
            raise BaselineError(f"{here}: tolerance must be a fraction in [0, 1), got {tolerance}")
        metrics[name] = MetricBaseline(value, better, tolerance, str(raw.get("unit", "")))
    if not metrics:
        raise BaselineError(f"{where}: no metrics")
    return Baseline(
        case=_field(obj, "case", str, where),
        hardware_class=_field(obj, "hardware_class", str, where),
        metrics=metrics,
        provenance=obj.get("provenance", {}),
    )


def load(path: Path) -> Baseline | None:
    """The baseline at ``path``; None only when there is no file. Anything unreadable raises."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror}") from None
    fix = "fix or delete it, or rewrite it with --update-baselines (the file was not changed)"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{path}: corrupt baseline, not valid JSON ({exc.msg} at line {exc.lineno}); {fix}") from None
    try:
        baseline = parse(obj, str(path))
    except BaselineError as exc:
        raise BaselineError(f"{exc}; {fix}") from None
    expected_class = path.parent.name
    if baseline.hardware_class != expected_class:
        raise BaselineError(
            f"{path}: holds a baseline for hardware class {baseline.hardware_class!r} but sits in the "
            f"directory of {expected_class!r}; move it to the right directory ({fix})"
        )
    return baseline


def write(path: Path, baseline: Baseline) -> None:
    """Atomically replace ``path``: readers see the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(baseline.to_json(), indent=2, sort_keys=False) + "\n"
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def compare(baseline: Baseline, measured: Mapping[str, float | None]) -> list[MetricVerdict]:
    """Judges every baseline metric that was measured; a metric not measured is an error."""
    verdicts = []
    for name, ref in baseline.metrics.items():
        value = measured.get(name)
        if value is None:
            raise BaselineError(f"baseline of {baseline.case} gates {name!r}, which this run did not measure")
        verdicts.append(MetricVerdict(name, ref.better, ref.unit, ref.value, float(value), ref.tolerance))
    return verdicts
