"""perfgate: a pytest plugin that gates distributed PyTorch training performance against baselines.

What a suite imports is here::

    from perfgate import Case, Flavour, parametrize

The package is staged the way data flows through it: ``config`` (options, cases, matrices) -> ``launch``
(plans and launchers: local, slurm, ssh) -> ``records`` (the step records a run leaves) -> ``measure``
(metrics, GPU samples, the plant) -> ``judge`` (baselines, the gate, A/B) -> ``report`` (terminal, JSON,
markdown, plots). ``plugin`` wires the stages to pytest. ``records`` is the contract between a workload
and perfgate, so every stage may read it. A stage imports nothing from the stages after it.

The names below load on first use: a workload under torchrun imports ``perfgate.records.steps`` (and the
plant) without pulling in pytest or torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_PUBLIC = {
    "Case": "perfgate.config.cases",
    "Flavour": "perfgate.config.cases",
    "parametrize": "perfgate.config.cases",
    "CPU_TOLERANCE_FLOOR": "perfgate.config.cases",
    "GPU_TOLERANCE_FLOOR": "perfgate.config.cases",
    "Matrix": "perfgate.config.matrix",
    "Axis": "perfgate.config.matrix",
    "DDP_AXIS": "perfgate.config.matrix",
    "gpu_only": "perfgate.config.matrix",
    "needs_module": "perfgate.config.matrix",
    "JsonRecords": "perfgate.records.sources",
    "OpenClipLog": "perfgate.records.sources",
    "LogLines": "perfgate.records.sources",
    "OptimizerSteps": "perfgate.records.sources",
    "StepRecorder": "perfgate.records.steps",
    "CaseFailed": "perfgate.outcome",
    "CaseSkipped": "perfgate.outcome",
}
__all__ = ["CPU_TOLERANCE_FLOOR", "DDP_AXIS", "GPU_TOLERANCE_FLOOR", "Axis", "Case", "CaseFailed", "CaseSkipped",
           "Flavour", "JsonRecords", "LogLines", "Matrix", "OpenClipLog", "OptimizerSteps", "StepRecorder", "gpu_only", "needs_module", "parametrize"]

if TYPE_CHECKING:
    from perfgate.config.cases import CPU_TOLERANCE_FLOOR, GPU_TOLERANCE_FLOOR, Case, Flavour, parametrize
    from perfgate.config.matrix import DDP_AXIS, Axis, Matrix, gpu_only, needs_module
    from perfgate.outcome import CaseFailed, CaseSkipped
    from perfgate.records.sources import JsonRecords, LogLines, OpenClipLog, OptimizerSteps
    from perfgate.records.steps import StepRecorder


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'perfgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
