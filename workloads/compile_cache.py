"""torch.compile paid once: what a rank does with torch's caches, and what it tells its end record of them.

Inductor's and Triton's cache directories are perfgate's (the launcher names them: perfgate/launch/caches.py), so a
later launch on the machine, or a CI job that restored the directory, loads what an earlier one compiled. Beside them,
torch's Mega-Cache (``torch.compiler.save_cache_artifacts``, torch 2.7 and newer) keeps one case's compiled artifacts
in one file, keyed by the case, the device and this torch and Triton: rank 0 saves it after a launch that compiled
something, and every rank loads it before compiling, so a job that has only that file starts from it too.

What the end record says (``compile_cache``): the graphs inductor's FX graph cache loaded (hits), compiled and stored
(misses) and could not cache (bypasses, each with inductor's or AOTAutograd's own reason), and the artifacts file: its
name, whether it was loaded and saved, or why Mega-Cache was not used.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from pathlib import Path
from typing import Any

import torch

ARTIFACTS_ENV = "PERFGATE_COMPILE_ARTIFACTS"
"""The case's artifacts file, less its torch and Triton versions, which the rank adds (perfgate names the case and the
device: launch/caches.compile_artifacts_env)."""
MOST_REASONS = 5


class BypassReasons(logging.Filter):
    """Why inductor's FX graph cache or AOTAutograd's cache passed a graph by: their own INFO lines ("Bypassing ..."),
    kept for the end record, while what reaches their loggers' handlers stays as it was."""

    LOGGERS = ("torch._inductor.codecache", "torch._functorch._aot_autograd.autograd_cache")

    def __init__(self) -> None:
        super().__init__()
        self.reasons: list[str] = []
        self._shown: dict[str, int] = {}

    def install(self) -> None:
        for name in self.LOGGERS:
            logger = logging.getLogger(name)
            self._shown[name] = logger.getEffectiveLevel()
            logger.setLevel(min(self._shown[name], logging.INFO))
            logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Bypassing") and message not in self.reasons and len(self.reasons) < MOST_REASONS:
            self.reasons.append(message)
        return record.levelno >= self._shown.get(record.name, logging.NOTSET)


class CompileCache:
    """One rank's use of torch.compile's caches; ``rank`` 0 saves the artifacts file."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.bypasses = BypassReasons()
        self.artifacts: dict[str, Any] = {}

    def before_compiling(self) -> None:
        """Listens for bypasses and loads the case's artifacts file where there is one."""
        self.bypasses.install()
        path, why_not = artifacts_file()
        if path is None:
            self.artifacts = {"why_not": why_not}
            return
        self.artifacts = {"file": str(path), "loaded": False, "saved": False}
        if not path.is_file():
            return
        try:
            info = torch.compiler.load_cache_artifacts(path.read_bytes())
        except Exception as exc:  # a torn or foreign file costs a compile, never the run
            self.artifacts["why_not"] = f"could not load it: {type(exc).__name__}: {exc}"
            return
        self.artifacts["loaded"] = info is not None

    def after_running(self) -> None:
        """Rank 0 saves what this launch compiled anew (atomically: a reader sees the old file or the new one)."""
        if self.rank != 0 or "file" not in self.artifacts or not counts()["misses"]:
            return
        saved = torch.compiler.save_cache_artifacts()
        if not saved:
            return
        path = Path(self.artifacts["file"])
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        partial.write_bytes(saved[0])
        partial.replace(path)
        self.artifacts["saved"] = True

    def facts(self) -> dict[str, Any]:
        return {**counts(), "bypass_reasons": list(self.bypasses.reasons), "artifacts": self.artifacts}


def artifacts_file() -> tuple[Path | None, str]:
    """This case's Mega-Cache file for this torch and Triton, or None and why not."""
    if not hasattr(torch.compiler, "save_cache_artifacts"):
        return None, f"torch {torch.__version__} has no Mega-Cache (torch.compiler.save_cache_artifacts, torch 2.7+)"
    stem = os.environ.get(ARTIFACTS_ENV)
    if not stem:
        return None, f"{ARTIFACTS_ENV} is not set (perfgate's launchers set it)"
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = "none"
    return Path(f"{stem}-torch{torch.__version__}-triton{triton}.bin"), ""


def counts() -> dict[str, Any]:
    """Inductor's FX graph cache in this process: how many graphs it loaded (hits), compiled and stored (misses) or
    could not cache (bypasses: those compile in every launch), and where it is; and the same of AOTAutograd's cache
    (``autograd_cache``), which a graph whose kernels inductor loads still passes through: where it bypasses
    (torch.compile of a DistributedDataParallel module, whose graph splitting fakifies the first call), the forward
    and backward are traced again in every launch, most of a warm start (docs/measurements.md)."""
    from torch._dynamo.utils import counters

    inductor, aot = counters["inductor"], counters["aot_autograd"]
    return {"hits": int(inductor["fxgraph_cache_hit"]), "misses": int(inductor["fxgraph_cache_miss"]),
            "bypasses": int(inductor["fxgraph_cache_bypass"]), "dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
            "autograd_cache": {"hits": int(aot["autograd_cache_hit"]), "misses": int(aot["autograd_cache_miss"]),
                               "bypasses": int(aot["autograd_cache_bypass"])}}
