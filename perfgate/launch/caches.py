"""Where launches keep what outlives them: torch.compile's caches (inductor's FX graphs and kernels, Triton's
kernels) under perfgate's cache directory, so that the next launch of a compiled case loads what an earlier one
compiled instead of compiling again; and the data a workload generates (``data/``, on this host's launches), made once
per machine.

Inductor's default, ``/tmp/torchinductor_$USER``, is wiped with a CI job's temp dir. The directory is
``$PERFGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/perfgate``, else ``~/.cache/perfgate``; a cache directory the user
set (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``) wins. A CI job keeps it between jobs as it keeps pip's.
"""

from __future__ import annotations

import os
from pathlib import Path

COMPILE_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
"""The variables torch.compile reads its cache directories from -> their folder in perfgate's cache."""


def cache_root() -> Path:
    if os.environ.get("PERFGATE_CACHE_DIR"):
        return Path(os.environ["PERFGATE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "perfgate"


def compile_cache_env() -> dict[str, str]:
    """The compile caches' variables for a launch's ranks: the user's where set, else perfgate's folders."""
    root = cache_root()
    return {name: os.environ.get(name) or str(root / folder) for name, folder in COMPILE_CACHES.items()}


DATA_DIR_ENV = "PERFGATE_DATA_DIR"
"""Where a workload keeps the data it generates, in folders named for all the data depends on
(workloads/unet3d_train.py's volume)."""


def data_cache_env() -> dict[str, str]:
    """The data cache's variable for ranks on this host: the user's where set, else perfgate's ``data/``. Only the
    local launcher passes it on: a cluster's nodes keep their data in their own temp dirs, not in a home directory
    that may be a network file system their loaders would then read through."""
    return {DATA_DIR_ENV: os.environ.get(DATA_DIR_ENV) or str(cache_root() / "data")}


ARTIFACTS_ENV = "PERFGATE_COMPILE_ARTIFACTS"
"""A case's torch Mega-Cache file, less the torch and Triton versions its ranks add (workloads/compile_cache.py)."""


def compile_artifacts_env(device_class: str, case: str) -> dict[str, str]:
    """Where a compiled case's ranks keep its Mega-Cache artifacts: one file per device (the GPU model, or the CPU
    class) and case, which kernels compiled for another device never match."""
    return {ARTIFACTS_ENV: str(cache_root() / "compile-artifacts" / device_class / case)}
