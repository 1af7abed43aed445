"""The supported torch range: every API newer than the floor is looked up, and each workload trains with DDP's
knobs on under torchrun (2 gloo ranks). `make test-floor` runs these on the oldest supported torch too."""

import importlib
import math
import sys

import pytest
import torch

from conftest import WORKLOADS, train

pytestmark = pytest.mark.floor


@pytest.fixture(scope="module")
def common():
    sys.path.insert(0, str(WORKLOADS))
    try:
        yield importlib.import_module("train_common")
    finally:
        sys.path.remove(str(WORKLOADS))


def test_this_torch_is_in_the_supported_range(common):
    compat = common.torch_compat
    assert compat.too_old() is None
    assert compat.version_of("2.6.0a0+ecf3bae40a.nv25.01") == (2, 6)
    assert "older than the oldest supported torch 2.5" in compat.too_old("2.4.1+cu121")


def test_newer_apis_are_used_only_where_this_torch_has_them(common):
    compat = common.torch_compat
    from torch.nn.parallel import DistributedDataParallel

    (keyword,) = compat.ddp_buffer_sync(False)
    assert compat.accepts(DistributedDataParallel.__init__, keyword)
    assert compat.ddp_buffer_sync(False)[keyword] is False
    assert compat.process_group_device(None) == {}
    assert issubclass(compat.OutOfMemoryError, RuntimeError)
    assert isinstance(common.grad_scaler("amp", torch.device("cpu")), torch.amp.GradScaler)
    assert common.grad_scaler("amp_bf16", torch.device("cpu")) is None


def test_an_older_ddp_gets_broadcast_buffers(common, monkeypatch):
    """torch 2.11 (as a GPU image may ship it) has no forward_sync_buffers: building DDP with it would crash every
    workload (docs/measurements.md#why-the-rules-are-what-they-are)."""
    compat = common.torch_compat
    monkeypatch.setattr(compat, "accepts", lambda fn, keyword: keyword != "forward_sync_buffers")
    assert compat.ddp_buffer_sync(True) == {"broadcast_buffers": True}


def test_a_fused_optimizer_this_torch_lacks_is_a_usage_error_naming_it(common, monkeypatch):
    compat = common.torch_compat
    assert compat.fused_unsupported(torch.optim.SGD, torch.device("cpu")) is None
    monkeypatch.setattr(compat, "accepts", lambda fn, keyword: False)
    assert compat.fused_unsupported(torch.optim.SGD, torch.device("cpu")) == (
        f"torch.optim.SGD(fused=True) does not exist in torch {torch.__version__}")


def test_fused_sgd_survives_a_first_step_the_grad_scaler_skips(common, monkeypatch):
    """Fused SGD under fp16 AMP, whose GradScaler skips the first steps (overflow): torch's fused SGD allocates its
    momentum buffers with empty_like and fills them only in a step it takes, so a skipped first step leaves them
    holding stale memory, and the loss can go NaN (docs/measurements.md#why-the-rules-are-what-they-are). empty_like
    promises nothing about that memory; here it hands back NaN, as a GPU's caching allocator can."""
    param = torch.nn.Parameter(torch.ones(64))
    optimizer = common.make_optimizer("fused", "sgd", [param], lr=0.1, momentum=0.875)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    with monkeypatch.context() as patched:
        patched.setattr(torch, "empty_like", lambda like, **kw: torch.full_like(like, float("nan")))
        common.backward_and_step((param * float("inf")).sum(), optimizer, scaler)
    assert torch.equal(param.detach(), torch.ones(64)), "the overflowing step was not skipped"
    for _ in range(3):
        optimizer.zero_grad()
        common.backward_and_step(param.sum(), optimizer, scaler)
    assert torch.isfinite(param).all() and torch.isfinite(optimizer.state[param]["momentum_buffer"]).all()


def test_zeroed_momentum_buffers_train_exactly_like_torchs_own_first_step(common):
    torch.manual_seed(0)
    grads = [torch.randn(64) for _ in range(4)]
    params = []
    for kind in ("default", "fused"):
        param = torch.nn.Parameter(torch.ones(64))
        optimizer = common.make_optimizer(kind, "sgd", [param], lr=0.1, momentum=0.875, weight_decay=1e-3)
        for grad in grads:
            param.grad = grad.clone()
            optimizer.step()
        params.append(param.detach())
    torch.testing.assert_close(params[0], params[1])


SMOKE = {
    "resnet50": ("resnet50_train.py", "--image-size", "32", "--batch-size", "4", "--loader", "synthetic",
                 "--workers", "0", "--precision", "fp32", "--optimizer", "fused", "--bucket-cap-mb", "1",
                 "--no-sync-buffers"),
    "unet3d": ("unet3d_train.py", "--base-channels", "4", "--batch-size", "1", "--volume", "64", "--workers", "0",
               "--bucket-cap-mb", "1", "--sync-buffers", "--optimizer", "fused"),
    "openclip": ("openclip_train.py", "--model", "perfgate-ViT-tiny", "--batch-size", "8", "--workers", "0",
                 "--loader", "synthetic", "--bucket-cap-mb", "1", "--no-sync-buffers"),
}


@pytest.mark.parametrize("workload", SMOKE)
@pytest.mark.launches
def test_every_workload_trains_with_ddp_knobs_on(tmp_path, no_leftovers, workload):
    script, *args = SMOKE[workload]
    if workload == "unet3d":
        args += ["--data-dir", str(tmp_path / "volume")]
    records = train(tmp_path, script, *args, "--steps", "3", "--warmup", "1")
    assert [s.step for s in records.steps] == [0, 1, 2]
    assert all(math.isfinite(s.loss) for s in records.steps)
    assert records.start["world_size"] == 2 and records.start["torch"] == torch.__version__
    assert all(s.t is not None for s in records.steps) and records.end["t"] >= records.steps[-1].t
