"""ResNet-50 v1.5 (workloads/resnet50_train.py), the NGC DeepLearningExamples recipe, over its matrix.

CPU flavour: 64x64 crops, local batch 8, 2 gloo ranks of one thread, 16 steps.
GPU flavour: 224x224 crops, local batch 256, channels_last, one nccl rank per GPU, 120 steps; its
amp-synthetic case is the one NGC publishes (2470 images/s on one A100-80GB, 16621 on eight; 4454 measured
on one H100), a default case on GPU (its CPU flavour skips: fp16 AMP is a GPU mode).
"""

from matrix_axes import (BATCH, BUCKET, COMPILE, CUDA_GRAPHS, DDP, LOADER, ONCE_PER_CASE, OPTIMIZER, PRECISION, RULES,
                         SYNC_BUFFERS, WORKERS, Axis, no_workers_without_loader)

from perfgate import Flavour, Matrix, parametrize

CHANNELS_LAST = Axis("channels_last", (True, False), label={True: "", False: "nchw"})

MATRIX = Matrix(
    workload="resnet50",
    entry=("workloads/resnet50_train.py",),
    axes=(PRECISION, LOADER, WORKERS, BUCKET, SYNC_BUFFERS, DDP, OPTIMIZER, COMPILE, CUDA_GRAPHS, BATCH, CHANNELS_LAST),
    base={"precision": "fp32", "loader": "torch", "workers": 1, "bucket_cap_mb": 25, "sync_buffers": True,
          "ddp": None, "optimizer": "default", "compile": False, "cuda_graphs": False, "batch": 1,
          "channels_last": True},
    cpu=Flavour({"device": "cpu", "image-size": 64, "batch-size": 8}, steps=16, warmup=4,
                timeout_s=300, benchy_steps=6),
    gpu=Flavour({"device": "cuda", "image-size": 224, "batch-size": 256, "lr-warmup-steps": 20}, steps=120,
                warmup=20, timeout_s=1800, benchy_steps=30),
    default=({}, {"loader": "synthetic"}, {"precision": "amp", "loader": "synthetic"}),
    combos=({"precision": "amp", "loader": "dali", "workers": 8, "ddp": 1},
            {"precision": "amp", "loader": "synthetic", "ddp": 1}),
    rules=RULES,
    later_runs_args=ONCE_PER_CASE,
    normalize=no_workers_without_loader,
)


@parametrize(MATRIX.cases())
def test_resnet50(perfgate, case):
    perfgate.check(case)
