"""Where launches keep what outlives them: torch.compile's caches (inductor's FX graphs and kernels, Triton's
kernels) under perfgate's cache directory, so that the next launch of a compiled case loads what an earlier one
compiled instead of compiling again.

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
