"""OpenCLIP training (workloads/openclip_train.py) across precision, input and DDP settings.

CPU flavour: the tiny `perfgate-ViT-tiny` config, 2 gloo ranks, local batch 32, one loader worker, 40 steps
(10 for bf16 autocast, which is ~7x slower on CPUs without native bf16).
GPU flavour: ViT-B-32 at local batch 256 (ViT-L-14 at 256 or 128), one nccl rank per GPU, 60 steps, fed by
synthetic pairs kept on the device: with 8 PIL loader workers an H100 ran ViT-B-32 only 57-62 % busy at
~1,790 pairs/s, which gated the host's CPUs rather than training. That host-loader configuration stays as
its own case (hostloader), whose benchy IO phase shows what the pipeline alone delivers.
ViT-L-14 amp_bf16 at batch 256 with torch.compile is the best configuration measured on one H100 (735
pairs/s, 39 % MFU); the checkpointed batch-128 case is the memory-bound one.
Full matrix only: fp16 amp, the host-loader and checkpointed cases, and the DDP-knob case (bucket100-nosync).
"""

import pytest
from matrix_axes import ONCE_PER_CASE

from perfgate import Case, Flavour, parametrize

ENTRY = ("workloads/openclip_train.py",)
TINY = {"model": "perfgate-ViT-tiny", "device": "cpu", "batch-size": 32, "workers": 1}
VIT_B = {"model": "ViT-B-32", "device": "cuda", "batch-size": 256, "loader": "synthetic", "workers": 0}
VIT_L = {**VIT_B, "model": "ViT-L-14"}
FULL_MATRIX = (pytest.mark.full_matrix,)


def clip(name, **kwargs):
    return Case("openclip", name, ENTRY, later_runs_args=ONCE_PER_CASE, **kwargs)


def cpu(steps=40, warmup=5, **args):
    return Flavour({**TINY, **args}, steps=steps, warmup=warmup, timeout_s=300)


def gpu(base=VIT_B, steps=60, warmup=10, benchy_steps=0, **args):
    return Flavour({**base, "lr-warmup-steps": warmup, **args}, steps=steps, warmup=warmup,
                   timeout_s=1800, benchy_steps=benchy_steps)


CASES = [
    clip("fp32", cpu=cpu(precision="fp32"), gpu=gpu(precision="fp32")),
    clip("amp_bf16", cpu=cpu(steps=10, warmup=2, precision="amp_bf16"), gpu=gpu(precision="amp_bf16")),
    clip("amp", gpu=gpu(precision="amp"), marks=FULL_MATRIX),
    clip("amp_bf16-hostloader",
         gpu=gpu(precision="amp_bf16", loader="torch", workers=8, benchy_steps=30), marks=FULL_MATRIX),
    clip("bucket100-nosync",
         cpu=cpu(precision="fp32", **{"bucket-cap-mb": 100, "sync-buffers": False}),
         gpu=gpu(precision="amp_bf16", **{"bucket-cap-mb": 100, "sync-buffers": False}), marks=FULL_MATRIX),
    clip("workers0", cpu=cpu(precision="fp32", workers=0)),
    clip("vit-l-14-amp_bf16-b256-compile",
         gpu=gpu(VIT_L, steps=40, precision="amp_bf16", compile=True)),
    clip("vit-l-14-amp_bf16-gc",
         gpu=gpu({**VIT_L, "batch-size": 128}, precision="amp_bf16", **{"grad-checkpointing": True}),
         marks=FULL_MATRIX),
]


@parametrize(CASES)
def test_openclip(perfgate, case):
    perfgate.check(case)
