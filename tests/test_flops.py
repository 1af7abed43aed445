"""FLOP counting against hand counts, and MFU against datasheet peaks."""

import pytest
import torch
from torch import nn

from perfgate.measure import flops


def test_linear_layer_counts_forward_and_both_backward_matmuls():
    layer = nn.Linear(8, 4, bias=False)
    x = torch.randn(3, 8, requires_grad=True)
    forward = 2 * 3 * 8 * 4  # (3x8) @ (8x4): a multiply and an add per term
    backward = 2 * forward  # grad of the input (3x4 @ 4x8) and of the weight (4x3 @ 3x8)
    assert flops.training_flops(lambda: layer(x).sum()) == forward + backward == 576


def test_convolution_counts_two_flops_per_multiply_accumulate():
    conv = nn.Conv2d(2, 3, kernel_size=3, padding=1, bias=False)
    x = torch.randn(1, 2, 5, 5, requires_grad=True)
    forward = 2 * (1 * 3 * 5 * 5) * (2 * 3 * 3)  # output elements x (in channels x kernel area)
    assert flops.training_flops(lambda: conv(x).sum()) == 3 * forward == 8100


@pytest.mark.parametrize("name, family", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA A100 80GB PCIe", "A100"),
    ("Tesla V100-SXM2-32GB", None),
    ("cpu", None),
])
def test_gpu_names_map_to_datasheet_families(name, family):
    assert flops.gpu_family(name) == family


def test_mfu_uses_the_peak_of_the_precision_and_every_gpu():
    # 1 GFLOP per sample at 1000 samples/s on two H100 SXM in bf16: 1e12 / (2 x 989.4e12)
    assert flops.mfu(1e9, 1000.0, "NVIDIA H100 80GB HBM3", "amp_bf16", 2) == pytest.approx(1 / 1978.8)
    assert flops.mfu(1e9, 1000.0, "NVIDIA A100-SXM4-40GB", "tf32", 1) == pytest.approx(1e12 / 156e12)
    assert flops.mfu(1e9, 1000.0, "NVIDIA A100-SXM4-40GB", "fp32", 1) == pytest.approx(1e12 / 19.5e12)
    assert flops.mfu(1e9, 1000.0, "cpu", "fp32", 2) is None
