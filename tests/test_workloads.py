"""The ResNet-50 and 3D U-Net workloads: real training under torchrun (2 gloo ranks), their input
pipelines (PyTorch and DALI) and the model shapes the seeds describe."""

import importlib.util
import math
import sys
import tempfile

import numpy as np
import pytest
import torch

from conftest import WORKLOADS, train
from perfgate.records import startup

needs_dali = pytest.mark.skipif(importlib.util.find_spec("nvidia.dali") is None, reason="DALI is not installed")


@pytest.fixture(scope="module")
def unet3d():
    sys.path.insert(0, str(WORKLOADS))
    try:
        spec = importlib.util.spec_from_file_location("unet3d_train", WORKLOADS / "unet3d_train.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(WORKLOADS))


def assert_trained(records, steps):
    losses = [s.loss for s in records.steps]
    assert len(losses) == steps and all(math.isfinite(loss) for loss in losses)
    assert len(set(losses)) > 1, "the loss never changed: nothing was trained"
    assert records.flops["flops_per_sample"] > 0
    assert records.phases["io"]["samples_per_second"] > 0 and records.phases["synthetic"]["samples_per_second"] > 0
    assert records.start["world_size"] == 2 and records.end["steps_run"] == steps
    assert records.start["cudnn_benchmark"] is True and records.end["cudagraph_skips"] == 0
    counted = all(s.instructions and s.instructions > 0 for s in records.steps)
    assert counted == records.start["instruction_clock"].startswith("user-space"), records.start["instruction_clock"]
    assert records.start["host_wait"] == "not a GPU run"
    marks = records.end["startup"]
    assert list(marks) == list(startup.POINTS), marks
    assert sorted(marks.values()) == list(marks.values()), f"start-up points out of order: {marks}"
    assert marks["probe"] <= records.steps[-1].t - sum(s.step_s for s in records.steps)  # before the first step


@pytest.mark.launches
def test_resnet50_trains_on_two_gloo_ranks(tmp_path, no_leftovers):
    records = train(tmp_path, "resnet50_train.py", "--image-size", "32", "--batch-size", "4", "--steps", "4",
                    "--workers", "1", "--precision", "fp32", "--benchy-steps", "2")
    assert_trained(records, 4)
    assert records.start["model"] == "resnet50-v1.5" and records.start["parameters"] == 25_557_032


@pytest.mark.launches
def test_bare_timing_records_no_steps_only_the_window_after_warmup(tmp_path, no_leftovers):
    """--timing bare is benchmarks/harness_overhead.py's yardstick: nothing per step, one figure."""
    records = train(tmp_path, "resnet50_train.py", "--image-size", "32", "--batch-size", "4", "--steps", "6",
                    "--warmup", "2", "--loader", "synthetic", "--workers", "0", "--precision", "fp32",
                    "--timing", "bare")
    assert records.steps == ()
    assert records.phases["bare"]["steps"] == 4 and records.phases["bare"]["samples_per_second"] > 0
    assert records.end["steps_run"] == 6


@pytest.mark.parametrize("loader", ["torch", pytest.param("dali", marks=needs_dali)])
@pytest.mark.launches
def test_unet3d_trains_on_two_gloo_ranks(tmp_path, no_leftovers, loader):
    records = train(tmp_path, "unet3d_train.py", "--base-channels", "4", "--batch-size", "1", "--volume", "64",
                    "--steps", "4", "--workers", "1", "--loader", loader, "--benchy-steps", "2",
                    "--data-dir", str(tmp_path / "volume"))
    assert_trained(records, 4)
    assert (tmp_path / "volume" / "input.npy").exists()


def test_dali_or_apex_asked_for_but_missing_is_a_one_line_usage_error(unet3d, monkeypatch, capsys):
    monkeypatch.setattr(unet3d.workload_args, "installed", lambda module: False)
    for option, says in ((["--loader", "dali"], "--loader dali: NVIDIA DALI is not installed"),
                         (["--optimizer", "apex"], "--optimizer apex: NVIDIA apex is not installed")):
        with pytest.raises(SystemExit) as exc:
            unet3d.parse_args(option)
        assert exc.value.code == 2 and says in capsys.readouterr().err


def test_blocking_sync_asked_for_without_a_gpu_is_a_usage_error(unet3d, capsys):
    with pytest.raises(SystemExit) as exc:
        unet3d.parse_args(["--device", "cpu", "--host-wait", "block"])
    assert exc.value.code == 2 and "--host-wait block sets how the host waits for a GPU" in capsys.readouterr().err


@pytest.mark.parametrize("text, fault", [("crash@1:3", ("crash", 1, 3)), ("hang@0:end", ("hang", 0, None))])
def test_an_injected_fault_strikes_at_a_step_or_at_teardown(unet3d, text, fault):
    parsed = unet3d.workload_args.Fault.parse(text)
    assert (parsed.kind, parsed.rank, parsed.step) == fault


@pytest.mark.parametrize("text", ["nan@1:end", "crash@1", "melt@0:1", "crash@x:1"])
def test_a_malformed_fault_is_a_usage_error(unet3d, capsys, text):
    with pytest.raises(SystemExit) as exc:
        unet3d.parse_args(["--inject-fault", text])
    assert exc.value.code == 2 and "expected KIND@RANK:STEP" in capsys.readouterr().err


def test_unet3d_has_the_tutorials_shape(unet3d):
    with torch.device("meta"):
        model = unet3d.UNet3D(64)
        out = model(torch.empty(1, 4, 64, 64, 64))
    assert 116e6 < sum(p.numel() for p in model.parameters()) < 118e6
    assert out.shape == (1, 5, 64, 64, 64)


def orientation(crop: np.ndarray) -> tuple[int, int]:
    """Which spatial axis channel 0 (a ramp along z in the stored volume) now runs along, and its sign."""
    slopes = [float(np.diff(crop[0], axis=axis).mean()) for axis in range(3)]
    axis = int(np.argmax(np.abs(slopes)))
    return axis, int(np.sign(slopes[axis]))


@pytest.fixture
def ramp_volume(tmp_path):
    """Input channel c is a ramp along spatial axis c % 3; the target is tanh(input) plus their mean."""
    side = 96
    ramp = np.arange(side, dtype=np.float32) / side
    inp = np.stack([np.broadcast_to(ramp.reshape([-1 if a == c % 3 else 1 for a in range(3)]), (side,) * 3)
                    for c in range(4)]).astype(np.float32)
    tar = np.concatenate([np.tanh(inp), inp.mean(axis=0, keepdims=True)]).astype(np.float32)
    paths = tmp_path / "input.npy", tmp_path / "target.npy"
    np.save(paths[0], inp)
    np.save(paths[1], tar)
    return paths


def check_crops(pairs):
    orientations = set()
    for inp, tar in pairs:
        assert inp.shape == (4, 64, 64, 64) and tar.shape == (5, 64, 64, 64)
        assert inp.dtype == tar.dtype == np.float32
        np.testing.assert_allclose(tar[:4], np.tanh(inp), atol=1e-6)  # same crop, same rotation and flips
        orientations.add(orientation(inp))
    assert len(orientations) >= 4, f"augmentation hardly varies the samples: {orientations}"


def test_the_volume_is_written_whole_once_and_then_reused(unet3d, tmp_path):
    """Nodes that share a directory may write it at once: each file appears by a rename, and a second call keeps it."""
    inputs, targets = unet3d.write_volume(tmp_path / "vol", side=16, seed=0)
    volume, target = np.load(inputs), np.load(targets)
    assert volume.shape == (4, 16, 16, 16) and target.shape == (5, 16, 16, 16)
    assert np.allclose(target[:4], np.tanh(volume)) and not list((tmp_path / "vol").glob("*.partial.npy"))
    written = inputs.stat().st_mtime_ns
    assert unet3d.write_volume(tmp_path / "vol", side=16, seed=0) == (inputs, targets)
    assert inputs.stat().st_mtime_ns == written


def test_torch_loader_crops_rotate_and_flip_input_and_target_alike(unet3d, ramp_volume):
    dataset = unet3d.RandomCrops(ramp_volume, num_samples=24, seed=0)
    check_crops((inp.numpy(), tar.numpy()) for inp, tar in (dataset[i] for i in range(24)))


@needs_dali
def test_dali_cpu_pipeline_crops_rotates_and_flips_input_and_target_alike(unet3d, ramp_volume):
    import dali_loaders

    batches = list(dali_loaders.volume_batches(ramp_volume, batch_size=8, crop=64, threads=1, seed=3,
                                               device_id=None, batches=3))
    assert len(batches) == 3
    assert batches[0][0].device.type == "cpu" and batches[0][0].shape == (8, 4, 64, 64, 64)
    check_crops((inp.numpy(), tar.numpy()) for batch in batches for inp, tar in zip(*batch))


@needs_dali
def test_dali_cpu_image_pipeline_gives_normalized_random_crops(unet3d):
    import dali_loaders

    mean, std = (127.5,) * 3, (73.9,) * 3  # uniform random bytes: normalized to mean 0, std 1
    (images, labels), (more, _) = dali_loaders.image_batches(
        batch_size=4, image_size=32, source_side=40, threads=1, seed=0, device_id=None, batches=2, mean=mean, std=std)
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32
    assert labels.shape == (4,) and labels.dtype == torch.int64 and ((0 <= labels) & (labels < 1000)).all()
    assert abs(float(images.mean())) < 0.2 and 0.4 < float(images.std()) < 1.2  # resizing smooths a little
    assert not torch.equal(images, more)


def test_a_cuda_graphs_run_whose_graphs_inductor_skipped_fails_saying_why(monkeypatch):
    """A stub for inductor's counter (CUDA graphs need a GPU): DDP with BatchNorm can make inductor skip its graphs
    silently (pytorch issue 139207), and the run would measure plain torch.compile."""
    sys.path.insert(0, str(WORKLOADS))
    try:
        import train_common
        from torch._dynamo.utils import counters

        from perfgate.launch.diagnose import failure_kind

        monkeypatch.setitem(counters["inductor"], "cudagraph_skips", 2)
        assert train_common.cudagraph_skips() == 2
        train_common.check_cuda_graphs(False, 2)
        with pytest.raises(SystemExit) as stopped:
            train_common.check_cuda_graphs(True, train_common.cudagraph_skips())
    finally:
        sys.path.remove(str(WORKLOADS))
    message = str(stopped.value.code)
    assert "--cuda-graphs: inductor skipped CUDA graphs 2 time(s)" in message and "measured torch.compile" in message
    assert failure_kind(message) == "setup-error"


def test_the_volume_is_kept_in_a_folder_named_for_all_it_depends_on(unet3d, monkeypatch, tmp_path):
    """--data-dir wins; else perfgate's data cache (the local launcher names it), else the temp dir; the folder names
    the generator's version, the side and the seed, so a change to any of them makes a volume of its own."""
    args = unet3d.parse_args(["--volume", "64", "--seed", "3"])
    monkeypatch.setenv("PERFGATE_DATA_DIR", str(tmp_path / "cache"))
    assert unet3d.volume_dir(args) == tmp_path / "cache" / f"perfgate-unet3d-v{unet3d.VOLUME_VERSION}-64-seed3"
    monkeypatch.delenv("PERFGATE_DATA_DIR")
    (tmp_path / "node-local").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node-local"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert unet3d.volume_dir(args).parent == tmp_path / "node-local"
    assert unet3d.volume_dir(unet3d.parse_args(["--data-dir", str(tmp_path / "mine")])) == tmp_path / "mine"
