"""The result record: what one case's session measured and decided, typed, versioned and described by a JSON Schema.

The stages fill one ``Result`` as a case runs (measure: its runs; judge: its rows and its verdict) and the sinks read
it. It leaves the process only as JSON: in ``result.json``, in ``--perf-results``, in the results database's
``record`` column and, under pytest-xdist, in a report's ``user_properties``. ``from_json`` reads every schema
version this perfgate wrote, and refuses the rest with the reason. The rows inside (one per gated metric, per run,
per comparison) are JSON objects whose keys each row's writer names; the schema lists the keys of the two a reader
needs most (``MetricRow``, ``RunRow``) and lets rows carry more.
"""

from __future__ import annotations

import dataclasses
import json
import warnings as python_warnings
from functools import cache
from pathlib import Path
from typing import Any, Literal, Optional, Union, get_args

import pydantic
from typing_extensions import TypedDict

SCHEMA_VERSION = 3
"""Version 1: the records written before the schema existed (no ``schema_version`` key, the same keys); version 2
also kept the rules' ``calibration`` and ``session_spread``, which the verdict's model replaced (a gated metric's
row says what its estimate rests on), and which ``from_json`` drops. Raise it when a key changes meaning or goes,
and teach ``from_json`` to read the older one."""

Verdict = Literal["pass", "FAIL", "stale", "unresolved", "no-baseline", "updated",
                  "error", "setup-error", "crashed", "out-of-memory", "timeout", "diverged"]
"""The gate's verdicts first, then the ways a case ends without one: ``error`` until a verdict is reached (a case
that stopped on a refused setting keeps it), then the launch's failure kinds and a loss that went NaN."""
VERDICTS: tuple[str, ...] = get_args(Verdict)
FAILURES = ("error", "setup-error", "crashed", "out-of-memory", "timeout", "diverged")

ROW = pydantic.ConfigDict(extra="allow", use_attribute_docstrings=True)
"""Rows may carry keys the schema does not list: a newer row read by an older reader keeps them."""


class MetricRow(TypedDict, total=False):
    """One gated metric: its verdict against the baseline (or reference), or, without one, what it measured."""

    __pydantic_config__ = ROW
    metric: str
    unit: str
    measured: Optional[float]
    baseline: Optional[float]
    change: Optional[float]
    """The measured median against the baseline's (or the reference's), as a relative change of the value."""
    effect: Optional[float]
    """Against a stored baseline, the verdict's model's estimate of the change, the sessions and the machine's speed
    weighed; ``ci`` is its interval."""
    tolerance: Optional[float]
    verdict: str
    against_baseline: str
    """Under A/B, the pairs' verdict before the in-turn rule weighed a neighbour; against a stored baseline, the
    model's verdict."""
    run_values: list[float]
    baseline_runs: list[float]


class RunRow(TypedDict, total=False):
    """One launch: its metrics, each measured step's time, and where its time went."""

    __pydantic_config__ = ROW
    run: int
    metrics: dict[str, Union[int, float, None]]
    windows: list[dict[str, float]]
    """The measured window's consecutive parts, each with the metrics a part has on its own (metrics.WINDOWED)."""
    step_times_s: list[float]
    data_times_s: list[Optional[float]]
    time_s: Optional[dict[str, Optional[float]]]


Row = dict[str, Any]


class ResultRecordError(ValueError):
    """A record this perfgate cannot read: the message says which, and why."""


@dataclasses.dataclass
class Result:
    """One case's result: what its runs measured and the verdict on them (which ``conclude`` alone sets)."""

    __pydantic_config__ = pydantic.ConfigDict(use_attribute_docstrings=True)

    case: str
    """The case flavour's id, e.g. openclip-vit-b-32-amp-bf16-gpu."""
    test: str
    """The pytest node id that ran it."""
    hardware_class: str
    """The hardware class its baseline is kept under."""
    world_size: int
    """Ranks, all nodes."""
    workload_version: Optional[str] = None
    """The case's workload version, which a baseline must match (none in records from before versions)."""
    family: Optional[str] = None
    workdir: Optional[str] = None
    baseline_file: Optional[str] = None
    injected_slowdown: float = 0.0
    """The planted slowdown (--perf-inject-slowdown), 0 for none."""
    schema_version: int = SCHEMA_VERSION
    """The version of this schema the record was written in; records without one are version 1."""
    verdict: Verdict = "error"
    """pass, FAIL, stale, unresolved, no-baseline or updated; else how the case ended without a verdict."""
    message: Optional[str] = None
    """Why a case failed or was refused (its pytest failure)."""
    metrics: list[MetricRow] = dataclasses.field(default_factory=list)
    """One row per gated metric."""
    per_run: list[RunRow] = dataclasses.field(default_factory=list)
    """One row per launch."""
    runs: int = 0
    measured: dict[str, Union[int, float, None]] = dataclasses.field(default_factory=dict)
    """Each metric's median over the runs."""
    gpu: Optional[Row] = None
    """The GPUs' utilisation and memory over the measured windows (gpu_monitor.summarize)."""
    gpu_monitor: Optional[str] = None
    """Why the GPUs were not (all) sampled."""
    teardown_failures: list[Row] = dataclasses.field(default_factory=list)
    disturbed_runs: Optional[int] = None
    """Runs left out of a new baseline as disturbed."""
    ungated: list[Row] = dataclasses.field(default_factory=list)
    machine_drop: list[Row] = dataclasses.field(default_factory=list)
    """A/B's FAILs left unresolved because its pairs ran in turn beside a neighbour (rule "in turn")."""
    plant: list[Row] = dataclasses.field(default_factory=list)
    unresolved: list[Row] = dataclasses.field(default_factory=list)
    duet: bool = False
    time_to_verdict_s: Optional[float] = None
    ab_budget_stop: Optional[str] = None
    budget_stop: Optional[str] = None
    """What --perf-budget stopped: a launch the verdict wanted that would not have ended inside the session's time
    limit. Such a case is unresolved, with this as its reason."""
    profile: Optional[Row] = None
    """A FAIL's "what got slower": the profiled launch's slowest rank, its self time per step against the
    reference's, and the operators that grew most (judge/profile_diff.py)."""
    reference: Optional[Row] = None
    """An A/B case's reference side: revision, commit, command, its runs (and interpreter and environment)."""
    candidate_commit: Optional[str] = None
    environment: Optional[Row] = None
    known: list[Row] = dataclasses.field(default_factory=list)
    history: list[Row] = dataclasses.field(default_factory=list)
    """Where each gated metric stands in the results database (--perf-history), set once the session is kept."""
    command: Optional[str] = None
    """The exact launch command (its run directory as $WORKDIR), once the case has launched."""
    warnings: list[Row] = dataclasses.field(default_factory=list)
    """What the case warned of, as perfgate gave it: each a ``category`` (the warning's class) and its ``message``. A
    pass, stale or unresolved verdict says why here (a slowdown its machine could hide, a plant that did not take),
    so that a reader of the record alone, a CI step summary or the dashboard, sees what the terminal did."""

    def conclude(self, verdict: Verdict, message: str | None = None) -> None:
        """Sets the verdict (and the failure's message), refusing a word that is not one."""
        if verdict not in VERDICTS:
            raise ValueError(f"{verdict!r} is not a verdict (one of {', '.join(VERDICTS)})")
        self.verdict = verdict
        if message is not None:
            self.message = message

    def warn(self, warning: Warning) -> None:
        """Warns, as pytest shows it, and keeps the warning in the record."""
        self.warnings.append({"category": type(warning).__name__, "message": str(warning)})
        python_warnings.warn(warning, stacklevel=2)

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON types."""
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))

    @classmethod
    def from_json(cls, data: Any, where: str = "the record") -> Result:
        """A record read back, of this schema version or an older one."""
        if not isinstance(data, dict):
            raise ResultRecordError(f"{where} is not a perfgate result (a JSON object was expected, got "
                                    f"{type(data).__name__})")
        version = data.get("schema_version", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ResultRecordError(f"{where} has result schema version {version!r}; this perfgate reads versions 1 "
                                    f"to {SCHEMA_VERSION}: upgrade perfgate to read it")
        known = {field.name for field in dataclasses.fields(cls)}
        fields = {key: value for key, value in data.items() if key in known}
        fields["schema_version"] = SCHEMA_VERSION
        try:
            return _adapter().validate_python(fields)
        except pydantic.ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(part) for part in error['loc']) or 'record'}: {error['msg']}"
                                 for error in exc.errors()[:5])
            raise ResultRecordError(f"{where} is not a perfgate result of schema version {version}: {problems}"
                                    ) from None

    @classmethod
    def read(cls, path: Path) -> Result:
        """A ``result.json`` file."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ResultRecordError(f"{path} could not be read as JSON: {exc}") from None
        return cls.from_json(data, str(path))


@cache
def _adapter() -> Any:
    """pydantic's validator of Result (built once: it takes a moment)."""
    return pydantic.TypeAdapter(Result)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``Result.to_json()``, as docs/result-record.md publishes it."""
    schema = _adapter().json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "perfgate result"
    return schema
