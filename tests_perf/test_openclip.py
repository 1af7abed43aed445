"""OpenCLIP training (workloads/openclip_train.py) across precision and DDP settings.

CPU flavour: the tiny `perfgate-ViT-tiny` config, 2 gloo ranks, local batch 32, 40 steps (10 for
bf16 autocast, which is ~7x slower on CPUs without native bf16).
GPU flavour: ViT-B-32 (or ViT-L-14) at local batch 256 (128), one nccl rank per GPU, 120 steps.
The DDP-knob case (bucket100-nosync) runs with --full-matrix, to keep the default CPU job short.
"""

import pytest

from perfgate.cases import CPU_TOLERANCE_FLOOR, Case, Flavour, parametrize

ENTRY = ("workloads/openclip_train.py",)
TINY = {"model": "perfgate-ViT-tiny", "device": "cpu", "batch-size": 32, "workers": 1}
VIT_B = {"model": "ViT-B-32", "device": "cuda", "batch-size": 256, "workers": 8}


def cpu(steps=40, warmup=5, **args):
    return Flavour({**TINY, **args}, steps=steps, warmup=warmup, tolerance_floor=CPU_TOLERANCE_FLOOR, timeout_s=300)


def gpu(base=VIT_B, **args):
    return Flavour({**base, "lr-warmup-steps": 20, **args}, steps=120, warmup=20, tolerance_floor=0.02,
                   timeout_s=1800)


CASES = [
    Case("openclip", "fp32", ENTRY, cpu=cpu(precision="fp32"), gpu=gpu(precision="fp32")),
    Case("openclip", "amp_bf16", ENTRY, cpu=cpu(steps=10, warmup=2, precision="amp_bf16"), gpu=gpu(precision="amp_bf16")),
    Case("openclip", "amp", ENTRY, gpu=gpu(precision="amp")),
    Case("openclip", "bucket100-nosync", ENTRY,
         cpu=cpu(precision="fp32", **{"bucket-cap-mb": 100, "sync-buffers": False}),
         gpu=gpu(precision="amp_bf16", **{"bucket-cap-mb": 100, "sync-buffers": False}),
         marks=(pytest.mark.full_matrix,)),
    Case("openclip", "workers0", ENTRY, cpu=cpu(precision="fp32", workers=0)),
    Case("openclip", "vit-l-14-amp_bf16-gc", ENTRY,
         gpu=gpu({**VIT_B, "model": "ViT-L-14", "batch-size": 128}, precision="amp_bf16", **{"grad-checkpointing": True})),
]


@parametrize(CASES)
def test_openclip(perfgate, case):
    perfgate.check(case)
