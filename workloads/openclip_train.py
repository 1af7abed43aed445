"""OpenCLIP contrastive training on synthetic image-text pairs: a plain torchrun entry point.

One step here is one ``open_clip_train`` step: open_clip's model factory, ``ClipLoss`` with
``local_loss``/``gather_with_grad``, AdamW with open_clip_train's parameter groups and its warm-up +
cosine schedule, its autocast and GradScaler handling, and DDP. What upstream adds around the step
(webdataset, checkpoints, evaluation) is left out so that the step is what gets measured.

Rank 0 appends one JSON record per step to ``--records`` (see ``perfgate.records``) and logs the
same step in open_clip's log format, so ``perfgate import-log open_clip`` reads both.

    # CPU, 2 ranks on this host (gloo)
    torchrun --nproc-per-node 2 workloads/openclip_train.py --model perfgate-ViT-tiny --steps 20
    # 2 nodes x 4 GPUs (nccl): run on every node
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HEAD:29500 --rdzv-id clip \\
        workloads/openclip_train.py --model ViT-L-14 --batch-size 512 --precision amp_bf16 --grad-checkpointing
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import open_clip
from open_clip.loss import ClipLoss
from open_clip_train.precision import get_autocast
from open_clip_train.scheduler import cosine_lr
from PIL import Image

from perfgate import stats
from perfgate.inject import SlowdownInjector
from perfgate.openclip_log import LOG_DATEFMT, LOG_FORMAT, format_step_line
from perfgate.records import StepRecorder

MODEL_CONFIGS = Path(__file__).resolve().parent / "model_configs"
PRECISIONS = ("fp32", "amp", "amp_bf16")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="ViT-B-32", help="open_clip model config name (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="local batch size per rank")
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps to run")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32", help="as open_clip_train's --precision")
    parser.add_argument("--grad-checkpointing", action="store_true", help="checkpoint activations in both towers")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per rank")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    parser.add_argument(
        "--sync-buffers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="DDP forward_sync_buffers (broadcast buffers from rank 0 every forward)",
    )
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--wd", type=float, default=0.2)
    parser.add_argument("--lr-warmup-steps", type=int, default=10, help="linear warm-up before the cosine decay")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--records", type=Path, help="rank 0 appends JSON step records here")
    parser.add_argument(
        "--target-ci", type=float, metavar="FRACTION",
        help="adaptive length: stop once the ~95%% interval of the median step time (after --warmup) is within "
        "this fraction of it; --steps is then the most steps",
    )
    parser.add_argument("--min-steps", type=int, default=20, help="adaptive length: the fewest steps (default 20)")
    parser.add_argument("--warmup", type=int, default=5, help="adaptive length: steps left out of the interval")
    parser.add_argument(
        "--inject-slowdown", type=float, default=0.0, metavar="FRACTION",
        help="stretch every step by this fraction of its duration (to test a perf gate); default 0",
    )
    args = parser.parse_args(argv)

    open_clip.add_model_config(MODEL_CONFIGS)
    problems = []
    if args.batch_size < 1:
        problems.append(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.steps < 1:
        problems.append(f"--steps must be >= 1, got {args.steps}")
    if args.workers < 0:
        problems.append(f"--workers must be >= 0, got {args.workers}")
    if args.bucket_cap_mb <= 0:
        problems.append(f"--bucket-cap-mb must be > 0, got {args.bucket_cap_mb}")
    if args.target_ci is not None and not 0 < args.target_ci < 1:
        problems.append(f"--target-ci must be a fraction in (0, 1), got {args.target_ci}")
    if args.target_ci is not None and not args.warmup < args.min_steps <= args.steps:
        problems.append(f"adaptive length needs --warmup < --min-steps <= --steps, got "
                        f"{args.warmup}, {args.min_steps}, {args.steps}")
    if not 0 <= args.inject_slowdown <= 10:
        problems.append(f"--inject-slowdown must be between 0 and 10, got {args.inject_slowdown}")
    if args.lr_warmup_steps < 0:
        problems.append(f"--lr-warmup-steps must be >= 0, got {args.lr_warmup_steps}")
    if args.model not in open_clip.list_models():
        problems.append(
            f"--model {args.model!r} is not an open_clip config (open_clip.list_models() has "
            f"{len(open_clip.list_models())}, e.g. perfgate-ViT-tiny, ViT-B-32, ViT-B-16, ViT-L-14)"
        )
    if args.device == "cuda" and not torch.cuda.is_available():
        problems.append("--device cuda was asked for but torch sees no CUDA device")
    if problems:
        parser.error("; ".join(problems))
    return args


class SyntheticPairs(Dataset):
    """Distinct random image-text pairs, decoded and transformed per sample as real data would be."""

    def __init__(self, num_samples: int, image_size: int, preprocess, tokenizer) -> None:
        self.num_samples = num_samples
        self.image_size = image_size
        self.preprocess = preprocess
        self.tokenizer = tokenizer

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        pixels = torch.randint(0, 256, (self.image_size, self.image_size, 3), dtype=torch.uint8, generator=generator)
        image = self.preprocess(Image.fromarray(pixels.numpy()))
        text = self.tokenizer([f"a synthetic photo number {index}"])[0]
        return image, text


def adamw_as_open_clip(model: torch.nn.Module, lr: float, wd: float) -> torch.optim.Optimizer:
    """open_clip_train's AdamW: no weight decay on gains, biases and the logit scale; ViT betas/eps."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    exclude = [p for n, p in named if p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n]
    excluded = {id(p) for p in exclude}
    include = [p for _, p in named if id(p) not in excluded]
    groups = [{"params": exclude, "weight_decay": 0.0}, {"params": include, "weight_decay": wd}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98), eps=1e-6)


class AdaptiveStop:
    """Ends training once rank 0's median step time is known precisely enough (``--target-ci``).

    Rank 0 judges from the step times its recorder has already resolved (no device synchronize); every
    CHECK_EVERY steps its decision is broadcast over a CPU-only gloo group, so all ranks stop together.
    """

    CHECK_EVERY = 5

    def __init__(self, args: argparse.Namespace, recorder: StepRecorder) -> None:
        self.target = args.target_ci
        self.min_steps, self.warmup = args.min_steps, args.warmup
        self.recorder = recorder
        self.group = dist.new_group(backend="gloo") if self.target is not None else None
        self.halfwidth: float | None = None

    def should_stop(self, steps_done: int) -> bool:
        if self.target is None or steps_done < self.min_steps or steps_done % self.CHECK_EVERY:
            return False
        flag = torch.zeros(1)
        if self.recorder.active:
            self.halfwidth = stats.median_ci_halfwidth(self.recorder.step_times[self.warmup:])
            flag[0] = float(self.halfwidth is not None and self.halfwidth <= self.target)
        dist.broadcast(flag, src=0, group=self.group)
        return bool(flag.item())


def peak_memory_bytes(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda max_memory_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "host max RSS"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=LOG_DATEFMT, stream=sys.stderr)

    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if use_cuda else "gloo", device_id=device if use_cuda else None)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed + rank)

    model, preprocess_train, _ = open_clip.create_model_and_transforms(
        args.model, precision=args.precision, device=device, output_dict=True
    )
    if args.grad_checkpointing:
        model.set_grad_checkpointing(True)
    ddp_model = DistributedDataParallel(
        model,
        device_ids=[device.index] if use_cuda else None,
        bucket_cap_mb=args.bucket_cap_mb,
        forward_sync_buffers=args.sync_buffers,
    )
    loss_fn = ClipLoss(local_loss=True, gather_with_grad=True, cache_labels=True, rank=rank, world_size=world_size)
    optimizer = adamw_as_open_clip(model, args.lr, args.wd)
    scheduler = cosine_lr(optimizer, args.lr, args.lr_warmup_steps, args.steps)
    scaler = torch.amp.GradScaler(device.type) if args.precision == "amp" else None
    autocast = get_autocast(args.precision, device_type=device.type)

    global_batch = args.batch_size * world_size
    image_size = model.visual.image_size
    image_size = image_size[0] if isinstance(image_size, (tuple, list)) else image_size
    dataset = SyntheticPairs(args.steps * global_batch, image_size, preprocess_train, open_clip.get_tokenizer(args.model))
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False, drop_last=True),
        num_workers=args.workers,
        pin_memory=use_cuda,
        persistent_workers=args.workers > 0,
        drop_last=True,
    )

    loss_mean = [0.0, 0]

    def log_step(record, scalars) -> None:
        loss_mean[0] += record.loss
        loss_mean[1] += 1
        mean = loss_mean[0] / loss_mean[1]
        logging.info(
            format_step_line(
                epoch=0,
                samples_done=(record.step + 1) * global_batch,
                samples_total=len(dataset),
                percent=100.0 * (record.step + 1) / args.steps,
                data_s=record.data_s,
                batch_s=record.step_s,
                global_batch=global_batch,
                world_size=world_size,
                lr=record.lr,
                logit_scale=scalars["logit_scale"],
                losses={"contrastive_loss": (record.loss, mean), "loss": (record.loss, mean)},
            )
        )

    recorder = StepRecorder(args.records if rank == 0 else None, device_type=device.type, on_step=log_step)
    injector = SlowdownInjector(args.inject_slowdown, device.type, lambda: recorder.last_step_s)
    adaptive = AdaptiveStop(args, recorder)
    recorder.write(
        "start",
        workload="openclip",
        model=args.model,
        precision=args.precision,
        world_size=world_size,
        local_batch=args.batch_size,
        global_batch=global_batch,
        steps=args.steps,
        device=str(device.type),
        device_name=torch.cuda.get_device_name(device) if use_cuda else "cpu",
        parameters=sum(p.numel() for p in model.parameters()),
        injected_slowdown=args.inject_slowdown,
    )
    if rank == 0:
        logging.info(
            "openclip_train: model %s, %s, %d ranks x local batch %d, %d steps, %s",
            args.model, args.precision, world_size, args.batch_size, args.steps, device.type,
        )

    ddp_model.train()
    wall_start = time.perf_counter()
    recorder.begin()
    injector.step_started()
    for step, (images, texts) in enumerate(loader):
        data_s = recorder.data_ready()
        scheduler(step)
        images = images.to(device, non_blocking=True)
        texts = texts.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            out = ddp_model(images, texts)
            loss = loss_fn(out["image_features"], out["text_features"], out["logit_scale"])
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        injector.pause()
        recorder.end_step(
            step,
            samples=global_batch,
            data_s=data_s,
            lr=optimizer.param_groups[0]["lr"],
            scalars={"loss": loss, "logit_scale": model.logit_scale.exp()},
        )
        injector.step_started()
        if adaptive.should_stop(step + 1):
            break

    peak, peak_kind = peak_memory_bytes(device)
    peak_all = torch.tensor([peak], dtype=torch.float64, device=device)
    dist.all_reduce(peak_all, op=dist.ReduceOp.MAX)
    recorder.close(
        peak_memory_bytes=int(peak_all.item()),
        peak_memory_kind=peak_kind,
        wall_s=time.perf_counter() - wall_start,
        steps_run=step + 1,
        stopped_early=step + 1 < args.steps,
        median_step_ci_halfwidth=adaptive.halfwidth,
    )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
