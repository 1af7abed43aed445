"""How the host waits for the GPU, which decides what its CPU clock reads there.

CUDA's default scheduling (``CU_CTX_SCHED_AUTO``) spins while the process has fewer contexts than the machine
has cores, so the thread that waits for the device (a GradScaler's ``.item()``, a full launch queue) stays on a
core for the whole wait: the CPU clock then reads the device's time, and a Python-overhead regression hidden
behind the GPU stays hidden from it too (docs/measurements.md#why-the-rules-are-what-they-are). With blocking sync
(``CU_CTX_SCHED_BLOCKING_SYNC``) the waiting thread sleeps on an OS primitive, so its CPU time is the host's own work.

torch has no call for it, so it is set through the driver API on the device's primary context, the one torch
uses, before torch creates it (``cuDevicePrimaryCtxSetFlags_v2`` also accepts an active one).

No torch import: workloads call this before torch touches the GPU.
"""

from __future__ import annotations

import ctypes
from typing import Any

CU_CTX_SCHED_BLOCKING_SYNC = 4
BLOCKING = ("blocks (CU_CTX_SCHED_BLOCKING_SYNC): the host sleeps while it waits for the GPU, so its CPU time is "
            "its work")
SPINS = "spins (CUDA's default while cores are free): the host's CPU time per step includes its waits for the GPU"


def load_driver() -> Any:
    return ctypes.CDLL("libcuda.so.1")


def error_name(driver: Any, code: int) -> str:
    name = ctypes.c_char_p()
    if driver.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return f"CUresult {code}"


def block_while_waiting(ordinal: int, driver: Any = None) -> str:
    """Makes this process sleep, not spin, while it waits for GPU ``ordinal`` (as CUDA numbers the visible ones);
    returns a line for the run's facts: what was set, or why not, in which case CUDA's default holds."""
    try:
        cuda = driver if driver is not None else load_driver()
    except OSError as exc:
        return f"{SPINS}; blocking sync was asked for, but the CUDA driver library did not load: {exc}"
    set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
    device = ctypes.c_int()
    for name, call in (("cuInit", lambda: cuda.cuInit(0)),
                       ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(device), ordinal)),
                       ("cuDevicePrimaryCtxSetFlags", lambda: set_flags(device, CU_CTX_SCHED_BLOCKING_SYNC))):
        code = call()
        if code != 0:
            return f"{SPINS}; blocking sync was asked for, but {name} failed: {error_name(cuda, code)}"
    return BLOCKING
