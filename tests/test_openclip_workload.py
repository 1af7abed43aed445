"""The OpenCLIP workload's own pieces, in-process (its torchrun runs are in test_plugin_e2e.py)."""

import importlib.util
import sys

import pytest
import torch

from conftest import REPO


@pytest.fixture(scope="module")
def workload():
    sys.path.insert(0, str(REPO / "workloads"))
    try:
        spec = importlib.util.spec_from_file_location("openclip_train", REPO / "workloads" / "openclip_train.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(REPO / "workloads"))


def test_defaults_parse(workload):
    args = workload.parse_args(["--model", "perfgate-ViT-tiny"])
    assert (args.precision, args.batch_size, args.bucket_cap_mb, args.sync_buffers) == ("fp32", 32, 25.0, True)
    assert workload.parse_args(["--model", "perfgate-ViT-tiny", "--no-sync-buffers"]).sync_buffers is False


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["--steps", "-1"], "--steps must be >= 1, got -1"),
        (["--workers", "-2"], "--workers must be >= 0, got -2"),
        (["--bucket-cap-mb", "0"], "--bucket-cap-mb must be > 0"),
        (["--model", "ViT-Nope"], "--model 'ViT-Nope' is not an open_clip config (open_clip.list_models() has"),
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
        (["--timing", "bare", "--steps", "5", "--warmup", "5"], "--timing bare measures the steps after --warmup"),
        (["--timing", "bare", "--target-ci", "0.01"], "--timing bare runs a fixed number of steps"),
    ],
)
def test_invalid_settings_exit_2_with_a_clear_message(workload, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        workload.parse_args(["--model", "perfgate-ViT-tiny", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_synthetic_pairs_are_distinct_transformed_and_tokenized(workload):
    import open_clip

    workload.parse_args(["--model", "perfgate-ViT-tiny"])
    _, preprocess, _ = open_clip.create_model_and_transforms("perfgate-ViT-tiny")
    pairs = workload.SyntheticPairs(4, 64, preprocess, open_clip.get_tokenizer("perfgate-ViT-tiny"))
    (image0, text0), (image1, text1) = pairs[0], pairs[1]
    assert image0.shape == (3, 64, 64) and image0.dtype == torch.float32
    assert text0.shape == (32,) and text0.dtype == torch.long
    assert not torch.equal(image0, image1) and not torch.equal(text0, text1)


def test_adamw_groups_exclude_gains_biases_and_logit_scale_from_decay(workload):
    import open_clip

    workload.parse_args(["--model", "perfgate-ViT-tiny"])
    model = open_clip.create_model("perfgate-ViT-tiny")
    optimizer = workload.adamw_as_open_clip(model, lr=1e-3, wd=0.2)
    no_decay, decay = optimizer.param_groups
    assert (no_decay["weight_decay"], decay["weight_decay"]) == (0.0, 0.2)
    assert any(p is model.logit_scale for p in no_decay["params"])
    assert all(p.ndim >= 2 for p in decay["params"])
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-6


@pytest.mark.launches
def test_adaptive_length_stops_all_ranks_once_the_interval_is_tight(tmp_path, no_leftovers):
    from perfgate.launch.local import launch
    from perfgate.launch.spec import LaunchSpec
    from perfgate.records.steps import read_records

    args = ["--model", "perfgate-ViT-tiny", "--device", "cpu", "--batch-size", "8", "--workers", "0",
            "--steps", "60", "--target-ci", "0.5", "--min-steps", "12", "--warmup", "2",
            "--records", str(tmp_path / "steps.jsonl")]
    launch(LaunchSpec(entry=[str(REPO / "workloads" / "openclip_train.py"), *args], workdir=tmp_path / "run",
                      procs_per_node=2, timeout_s=180, env={"PYTHONPATH": str(REPO)}))
    records = read_records(tmp_path / "steps.jsonl")
    assert records.end["stopped_early"] is True
    assert records.end["steps_run"] == len(records.steps) == 15
    assert 0 <= records.end["median_step_ci_halfwidth"] <= 0.5
