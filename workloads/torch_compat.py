"""The torch range the workloads support, with every API newer than its floor looked up, not assumed.

Supported: torch 2.5 (the floor, what NGC containers and cluster modules commonly ship; tested in CI)
up to the newest (2.14.1 is pinned and tested; newer releases run through the same detection). A GPU
runner trains with its image's torch, not the suite's venv, and an image's older torch can lack a keyword the newest
has (``DistributedDataParallel(forward_sync_buffers=...)``: docs/measurements.md#why-the-rules-are-what-they-are).
So each keyword or class newer than 2.5 is used only once this module has found it.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

FLOOR = (2, 5)
"""The oldest torch (major, minor) the workloads support."""


def version_of(text: str) -> tuple[int, int]:
    """``"2.11.0+cu130"`` -> (2, 11); NGC's ``"2.6.0a0+ecf3bae40a.nv25.01"`` -> (2, 6)."""
    major, minor = text.split("+")[0].split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def too_old(text: str = torch.__version__) -> str | None:
    """Why this torch is below the supported range, or None."""
    if version_of(text) >= FLOOR:
        return None
    return (f"torch {text} is older than the oldest supported torch {FLOOR[0]}.{FLOOR[1]}; use a newer image or "
            f"pip install 'torch>={FLOOR[0]}.{FLOOR[1]}'")


def accepts(fn: Callable[..., Any], keyword: str) -> bool:
    try:
        return keyword in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def ddp_buffer_sync(sync: bool) -> dict[str, bool]:
    """DDP's switch for broadcasting buffers from rank 0 each forward: ``forward_sync_buffers`` where torch has
    it (``broadcast_buffers`` is deprecated there), ``broadcast_buffers`` before."""
    if accepts(DistributedDataParallel.__init__, "forward_sync_buffers"):
        return {"forward_sync_buffers": sync}
    return {"broadcast_buffers": sync}


def process_group_device(device: torch.device | None) -> dict[str, torch.device]:
    """``init_process_group(device_id=)`` binds a NCCL rank to its GPU at once; left out where torch lacks it
    (the group then binds lazily at the first collective, as before)."""
    if device is None or not accepts(dist.init_process_group, "device_id"):
        return {}
    return {"device_id": device}


OutOfMemoryError: type[Exception] = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
"""``torch.OutOfMemoryError`` (any device) where it exists, else the CUDA one it generalised."""


def fused_unsupported(family: type[torch.optim.Optimizer], device: torch.device) -> str | None:
    """Why torch's fused ``family`` optimizer cannot run on ``device`` here (None if it can): the fused
    kernels arrived per optimizer and per device across releases, so the optimizer is built once on a
    scalar to find out."""
    name = f"torch.optim.{family.__name__}(fused=True)"
    if not accepts(family.__init__, "fused"):
        return f"{name} does not exist in torch {torch.__version__}"
    try:
        family([torch.nn.Parameter(torch.zeros(1, device=device))], lr=0.1, fused=True)
    except (RuntimeError, ValueError, TypeError) as exc:
        return f"{name} is not supported on {device.type} by torch {torch.__version__}: {exc}"
    return None

