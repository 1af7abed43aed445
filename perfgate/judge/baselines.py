"""Baselines: one reviewable JSON file per case per hardware class, compared and rewritten safely.

Layout: ``<baseline-dir>/<hardware-class>/<case>.json``. A file holds, per gated metric, the value
(the median of the runs it was measured from), the runs themselves and their spread, which direction
is better, and the tolerance; the workload version; the provenance of the measurement; and, where stored (``perfgate
store-sessions``), the medians of unchanged sessions of the case on this class, which tell a clone with no results
history how far the case moves between sessions and with the machine (judge/model.py). Files are
replaced atomically (write a temporary file beside it, fsync, rename), so a reader or an interrupted
update only ever sees the old or the new file. A file that cannot be read is an error, never
"no baseline".
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol

from perfgate.judge import profile_diff
from perfgate.launch.hardware import vector_tier, without_vector_tier
from perfgate.measure import stats

SCHEMA = 1
DIRECTIONS = ("higher", "lower")


class BaselineError(ValueError):
    """A baseline file that exists but cannot be trusted."""


@dataclass(frozen=True)
class MetricBaseline:
    value: float
    better: str
    tolerance: float
    unit: str = ""
    runs: tuple[float, ...] = ()
    """Per-run values the value is the median of; empty for a single published figure."""

    @property
    def samples(self) -> tuple[float, ...]:
        return self.runs or (self.value,)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"value": self.value, "better": self.better, "tolerance": self.tolerance, "unit": self.unit}
        if self.runs:
            data["runs"] = list(self.runs)
            data["relative_spread"] = round(stats.relative_spread(self.runs), 6)
        return data


@dataclass(frozen=True)
class StoredSession:
    """One unchanged session of the case on this class: its medians and machine-speed probe, when and at what commit
    it ran. Kept with the baseline, they are the spread between sessions that a clone with no history judges by."""

    recorded_at: str
    medians: Mapping[str, float]
    probe: float | None = None
    commit: str | None = None
    probes: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Every machine reading of the session (metrics.PROBES: the probe's speeds and the cores' turns in the window):
    ``probe`` is the wall-clock matmul alone, which beside two busy processes on 2 cores reads half what it does quiet,
    while the CPU-time ones do not."""

    def to_json(self) -> dict[str, Any]:
        data = {"recorded_at": self.recorded_at, "commit": self.commit, "probe": self.probe,
                "medians": dict(sorted(self.medians.items()))}
        if self.probes:
            data["probes"] = dict(sorted(self.probes.items()))
        return data


@dataclass(frozen=True)
class Baseline:
    case: str
    hardware_class: str
    metrics: Mapping[str, MetricBaseline]
    provenance: Mapping[str, Any]
    workload_version: str = "1"
    sessions: tuple[StoredSession, ...] = ()
    """Unchanged sessions of the case on this class, oldest first; none until ``perfgate store-sessions`` keeps them,
    and none again once --update-baselines re-measures the case (the code or the machine changed)."""

    def to_json(self) -> dict[str, Any]:
        data = {
            "schema": SCHEMA,
            "case": self.case,
            "hardware_class": self.hardware_class,
            "workload_version": self.workload_version,
            "metrics": {name: m.to_json() for name, m in sorted(self.metrics.items())},
            "provenance": dict(self.provenance),
        }
        if self.sessions:
            data["sessions"] = [session.to_json() for session in self.sessions]
        return data


def other_kernels(baseline: Baseline, cpu_generation: str) -> str:
    """Why a CPU baseline does not judge this host, "" where it may: it was measured with other vector extensions,
    where torch and oneDNN run other kernels (a class named by hand, --hardware-class, can hold it)."""
    theirs = (baseline.provenance.get("hardware") or {}).get("cpu_generation")
    if not theirs or vector_tier(theirs) == vector_tier(cpu_generation):
        return ""
    return (f"was measured on a CPU with {vector_tier(theirs) or 'unread'} kernels ({theirs}) and this one runs "
            f"{vector_tier(cpu_generation) or 'unread'} kernels ({cpu_generation or 'not read'}), which torch and "
            "oneDNN pick by the vector extensions, so its numbers do not judge this machine")


def named_before_the_tier(path: Path) -> Path | None:
    """The file a CPU baseline had before the hardware class named the vector extensions, where one is there."""
    older = path.parent.parent / without_vector_tier(path.parent.name) / path.name
    return older if older != path and older.is_file() else None


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise BaselineError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BaselineError(f"{where}: field {key!r} has the wrong type ({type(value).__name__})")
    return value


def _positive(value: Any) -> bool:
    """A finite number above zero, not a bool (JSON's true would pass as 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def parse_sessions(raw: Any, where: str) -> tuple[StoredSession, ...]:
    """The ``sessions`` field, a list of {recorded_at, medians, probe, probes, commit}, oldest first (the gate reads
    the newest)."""
    if not isinstance(raw, list):
        raise BaselineError(f"{where}: 'sessions' must be a list")
    sessions, times = [], []
    for index, one in enumerate(raw):
        here = f"{where}: session {index + 1}"
        if not isinstance(one, dict):
            raise BaselineError(f"{here} must be an object")
        medians = _field(one, "medians", dict, here)
        probes = one.get("probes", {})
        for name, values in (("medians", medians), ("probes", probes)):
            if not isinstance(values, dict) or not all(_positive(value) for value in values.values()):
                raise BaselineError(f"{here}: '{name}' must map metrics to positive numbers")
        probe, commit = one.get("probe"), one.get("commit")
        if probe is not None and not _positive(probe):
            raise BaselineError(f"{here}: 'probe' must be a positive number or null")
        if commit is not None and not isinstance(commit, str):
            raise BaselineError(f"{here}: 'commit' must be a string or null")
        recorded_at = _field(one, "recorded_at", str, here)
        try:
            when = datetime.datetime.fromisoformat(recorded_at)
        except ValueError:
            raise BaselineError(f"{here}: 'recorded_at' must be an ISO 8601 time, got {recorded_at!r}") from None
        times.append(when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc))
        sessions.append(StoredSession(recorded_at,
                                      {name: float(value) for name, value in medians.items()},
                                      None if probe is None else float(probe), commit,
                                      {name: float(value) for name, value in probes.items()}))
    return tuple(session for _, session in sorted(zip(times, sessions), key=lambda pair: pair[0]))


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
        runs = raw.get("runs", [])
        if not isinstance(runs, list) or not all(_positive(v) for v in runs):
            raise BaselineError(f"{here}: 'runs' must be a list of positive numbers")
        metrics[name] = MetricBaseline(value, better, tolerance, str(raw.get("unit", "")), tuple(map(float, runs)))
    if not metrics:
        raise BaselineError(f"{where}: no metrics")
    return Baseline(
        case=_field(obj, "case", str, where),
        hardware_class=_field(obj, "hardware_class", str, where),
        metrics=metrics,
        provenance=obj.get("provenance", {}),
        workload_version=str(obj.get("workload_version", "1")),
        sessions=parse_sessions(obj.get("sessions", []), where),
    )


def load(path: Path) -> Baseline | None:
    """The baseline at ``path``; None only when there is no file. Anything unreadable raises."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror}; make it a readable file (its "
                            "permissions, or what stands at that path), or move it away for --update-baselines to "
                            "write a new one (nothing was changed)") from None
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
    write_json(path, baseline.to_json())


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    """Atomically replace ``path`` with ``document``, indented for review."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=2, sort_keys=False) + "\n"
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


class Reference(Protocol):
    """What a case is judged against."""

    where: Path | str
    """Where the reference lives, for messages."""
    against: str
    """What the runs are set against, as a message names it ("the baseline")."""
    remedy: str
    """What gates a metric the reference lacks (one from before the metric)."""
    when_faster: tuple[str, str]
    """What a case faster than the reference beyond the tolerance is, and what to do about it."""
    no_profile: str
    """Why the reference has no profile to set a FAIL's against, where it has none."""

    def load(self) -> Baseline | None:
        """The reference; None when there is none yet; BaselineError when it cannot be trusted."""

    def profile(self) -> profile_diff.Summary | None:
        """The reference's operators per step, for a FAIL's "what got slower"; None where it has none."""


class StoredBaseline:
    """A reviewed baseline file under --baseline-dir, which --update-baselines (re)writes."""

    against = "the baseline"
    remedy = "re-measure the baseline with --update-baselines to gate it"
    when_faster = ("stale baseline", "re-measure with --update-baselines and review")

    def __init__(self, path: Path) -> None:
        self.where = path
        self.no_profile = (f"none beside {path}: --update-baselines records one in "
                           f"{profile_diff.beside(path).name}")

    def load(self) -> Baseline | None:
        return load(self.where)

    def profile(self) -> profile_diff.Summary | None:
        path = profile_diff.beside(self.where)
        return profile_diff.read(path) if path.exists() else None
