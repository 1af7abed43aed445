"""The configuration axes the workload matrices share, and the rules for combinations that cannot run."""

import dataclasses
import shutil

from perfgate import DDP_AXIS, Axis, gpu_only, needs_module

ONCE_PER_CASE = ("--no-count-flops",)
"""What perfgate's workloads skip after a case's first launch: the FLOP count (the first launch's serves them all)."""
PRECISION = Axis("precision", ("fp32", "tf32", "amp", "amp_bf16"))
LOADER = Axis("loader", ("torch", "dali", "synthetic"))
WORKERS = Axis("workers", (0, 1, 2, 4, 8), label="w{}")
BUCKET = Axis("bucket_cap_mb", (25, 100), label="bucket{}")
SYNC_BUFFERS = Axis("sync_buffers", (True, False), label={True: "", False: "nosync"})
DDP = DDP_AXIS
OPTIMIZER = Axis("optimizer", ("default", "fused", "apex"), label={"default": "", "fused": "fused", "apex": "apex"})
COMPILE = Axis("compile", (False, True), label={False: "", True: "compile"})
CUDA_GRAPHS = Axis("cuda_graphs", (False, True), label={False: "", True: "graphs"})
BATCH = Axis(
    "batch", (1, 2), label={1: "", 2: "batch2x"},
    apply=lambda flavour, scale: dataclasses.replace(
        flavour, args={**flavour.args, "batch-size": flavour.args["batch-size"] * scale}),
)
"""Local batch size as a multiple of the flavour's own (CPU and GPU batches differ)."""

def compile_needs_a_compiler(point, kind):
    """torch.compile's CPU backend (inductor) builds C++ kernels."""
    if kind == "cpu" and point.get("compile") and not (shutil.which("c++") or shutil.which("g++")):
        return "torch.compile on CPU needs a C++ compiler (c++/g++), and none is on PATH"
    return None


RULES = (
    compile_needs_a_compiler,
    gpu_only("precision", ("tf32", "amp"), "TF32 and fp16 autocast + GradScaler are GPU modes; "
             "the CPU flavour runs fp32 and amp_bf16"),
    gpu_only("cuda_graphs", (True,), "CUDA graphs need a GPU"),
    gpu_only("ddp", (4, 8), "the CPU flavour runs at most 2 ranks (CI machines have 2 cores)"),
    gpu_only("workers", (4, 8), "4-8 loader workers on a 2-core CI machine measure CPU contention, not the loader"),
    needs_module("nvidia.dali", "loader", "dali", "DALI is not installed (pip install nvidia-dali-cuda120)"),
    needs_module("apex.optimizers", "optimizer", "apex",
                 "NVIDIA apex is not installed (not on PyPI: build it from source with nvcc); "
                 "the fused case measures torch's fused optimizer"),
)


def no_workers_without_loader(point):
    """Synthetic data has no input pipeline, so no loader workers."""
    return {**point, "workers": 0} if point["loader"] == "synthetic" else point
