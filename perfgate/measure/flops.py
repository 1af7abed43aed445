"""FLOPs: counted per training sample with torch's flop counter, and the dense datasheet peaks that
model FLOPs utilization (MFU) is measured against.

MFU = achieved model FLOP/s / (GPUs x peak FLOP/s for the precision used). The count is of one
forward + backward pass as torch's ``FlopCounterMode`` sees it (matmuls and convolutions; the
optimizer and elementwise work are not counted, as is usual for MFU). Workloads count on the model
without activation checkpointing, so recomputation never inflates the figure.
"""

from __future__ import annotations

from typing import Any, Callable

PEAK_TFLOPS: dict[str, dict[str, float]] = {
    # NVIDIA datasheets, dense (no structured sparsity), per GPU.
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    "H100 SXM": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
    "H200 SXM": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
}
MATH_OF_PRECISION = {"fp32": "fp32", "tf32": "tf32", "amp": "fp16", "amp_bf16": "bf16"}
"""The tensor-core math a workload's --precision runs its matmuls and convolutions in."""


def gpu_family(device_name: str) -> str | None:
    """``NVIDIA H100 80GB HBM3`` -> ``H100 SXM``; None for GPUs without a known peak (and for CPUs)."""
    name = device_name.upper()
    if "A100" in name:
        return "A100"
    for chip in ("H100", "H200"):
        if chip in name:
            if "NVL" in name:
                return f"{chip} NVL"
            return f"{chip} PCIe" if "PCIE" in name else f"{chip} SXM"
    return None


def peak_tflops(device_name: str, precision: str) -> float | None:
    family = gpu_family(device_name)
    math = MATH_OF_PRECISION.get(precision)
    if family is None or math is None:
        return None
    return PEAK_TFLOPS[family][math]


def mfu(flops_per_sample: float, samples_per_second: float, device_name: str, precision: str,
        gpus: int) -> float | None:
    """Achieved / peak model FLOP/s over all GPUs; None where the peak is unknown (CPUs, other GPUs)."""
    peak = peak_tflops(device_name, precision)
    if peak is None or gpus < 1:
        return None
    return flops_per_sample * samples_per_second / (peak * 1e12 * gpus)


def training_flops(loss_of_batch: Callable[[], Any]) -> int:
    """FLOPs of one forward (``loss_of_batch()``) and its backward, counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        loss_of_batch().backward()
    return counter.get_total_flops()
