"""The SC21 tutorial's 3D U-Net (workloads/unet3d_train.py) over its matrix.

CPU flavour: base width 8 (1.8 M parameters), 64^3 crops of a 128^3 volume, local batch 2, 2 gloo
ranks of one thread. GPU flavour: base width 64 (~117 M parameters), local batch 64 on a 256^3 volume,
as the tutorial's single-A100 runs (84-87 samples/s with 2 workers ... 496-542 with DALI + AMP + JIT).
"""

from matrix_axes import (BATCH, BUCKET, COMPILE, CUDA_GRAPHS, DDP, LOADER, ONCE_PER_CASE, OPTIMIZER, PRECISION, RULES,
                         SYNC_BUFFERS, WORKERS, no_workers_without_loader)

from perfgate import Flavour, Matrix, parametrize

MATRIX = Matrix(
    workload="unet3d",
    entry=("workloads/unet3d_train.py",),
    axes=(PRECISION, LOADER, WORKERS, BUCKET, SYNC_BUFFERS, DDP, OPTIMIZER, COMPILE, CUDA_GRAPHS, BATCH),
    base={"precision": "fp32", "loader": "torch", "workers": 1, "bucket_cap_mb": 25, "sync_buffers": True,
          "ddp": None, "optimizer": "default", "compile": False, "cuda_graphs": False, "batch": 1},
    cpu=Flavour({"device": "cpu", "base-channels": 8, "batch-size": 2, "volume": 128}, steps=16, warmup=4,
                timeout_s=300, benchy_steps=6),
    gpu=Flavour({"device": "cuda", "base-channels": 64, "batch-size": 64, "volume": 256}, steps=30, warmup=5,
                timeout_s=1800, benchy_steps=10),
    default=({}, {"loader": "dali"}),
    combos=(
        {"loader": "dali", "workers": 4, "ddp": 1},
        {"precision": "amp", "loader": "dali", "workers": 4, "ddp": 1},
        {"precision": "amp", "loader": "dali", "workers": 4, "ddp": 1, "optimizer": "fused"},
        {"precision": "amp", "loader": "dali", "workers": 4, "ddp": 1, "optimizer": "fused", "compile": True},
        {"loader": "dali", "workers": 4, "sync_buffers": False, "bucket_cap_mb": 100, "ddp": 4},
    ),
    rules=RULES,
    later_runs_args=ONCE_PER_CASE,
    normalize=no_workers_without_loader,
)


@parametrize(MATRIX.cases())
def test_unet3d(perfgate, case):
    perfgate.check(case)
