"""OpenCLIP contrastive training on synthetic image-text pairs: a plain torchrun entry point.

One step here is one ``open_clip_train`` step: open_clip's model factory, ``ClipLoss`` with
``local_loss``/``gather_with_grad``, AdamW with open_clip_train's parameter groups and its warm-up +
cosine schedule, its autocast and GradScaler handling, and DDP. What upstream adds around the step
(webdataset, checkpoints, evaluation) is left out so that the step is what gets measured.

Rank 0 appends one JSON record per step to ``--records`` (see ``perfgate.records.steps``) and logs the
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
import sys
from typing import NoReturn
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, default_collate

import open_clip
from open_clip.loss import ClipLoss
from open_clip_train.precision import get_autocast
from open_clip_train.scheduler import cosine_lr
from PIL import Image

import train_common as common
import workload_args
from perfgate.records.openclip_log import LOG_DATEFMT, LOG_FORMAT, format_step_line

MODEL_CONFIGS = Path(__file__).resolve().parent / "model_configs"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="ViT-B-32", help="open_clip model config name (default: %(default)s)")
    workload_args.add_common_args(parser, batch_size=32)
    parser.add_argument("--precision", choices=workload_args.PRECISIONS, default="fp32",
                        help="as open_clip_train's --precision, plus tf32")
    parser.add_argument("--grad-checkpointing", action="store_true", help="checkpoint activations in both towers")
    parser.add_argument(
        "--loader", choices=("torch", "synthetic"), default="torch",
        help="torch: a DataLoader whose --workers processes decode and transform distinct pairs per sample (the "
        "host's CPUs can bound a fast GPU's steps); synthetic: one batch of "
        "distinct pairs made once and kept on the device, so the step alone is measured",
    )
    parser.add_argument("--optimizer", choices=workload_args.OPTIMIZERS, default="default", help="AdamW implementation")
    parser.set_defaults(optimizer_family="adamw")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--wd", type=float, default=0.2)
    parser.add_argument("--lr-warmup-steps", type=int, default=10, help="linear warm-up before the cosine decay")
    args = parser.parse_args(argv)

    open_clip.add_model_config(MODEL_CONFIGS)
    problems = workload_args.common_problems(args)
    if args.lr_warmup_steps < 0:
        problems.append(f"--lr-warmup-steps must be >= 0, got {args.lr_warmup_steps}")
    if args.model not in open_clip.list_models():
        problems.append(
            f"--model {args.model!r} is not an open_clip config (open_clip.list_models() has "
            f"{len(open_clip.list_models())}, e.g. perfgate-ViT-tiny, ViT-B-32, ViT-B-16, ViT-L-14)"
        )
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


def adamw_as_open_clip(model: torch.nn.Module, lr: float, wd: float, kind: str = "default") -> torch.optim.Optimizer:
    """open_clip_train's AdamW: no weight decay on gains, biases and the logit scale; ViT betas/eps."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    exclude = [p for n, p in named if p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n]
    excluded = {id(p) for p in exclude}
    include = [p for _, p in named if id(p) not in excluded]
    groups = [{"params": exclude, "weight_decay": 0.0}, {"params": include, "weight_decay": wd}]
    return common.make_optimizer(kind, "adamw", groups, lr=lr, betas=(0.9, 0.98), eps=1e-6)


def on_device(batch, device: torch.device):
    images, texts = batch
    return images.to(device, non_blocking=True), texts.to(device, non_blocking=True)


def make_passes(args: argparse.Namespace, env: common.Distributed, dataset: SyntheticPairs, batches: int):
    """A function starting a fresh pass over the pairs, as (images, texts) on the device (see --loader)."""
    if args.loader == "synthetic":
        first = env.rank * args.batch_size
        cached = on_device(default_collate([dataset[i] for i in range(first, first + args.batch_size)]), env.device)
        return lambda: iter([cached] * batches)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=DistributedSampler(dataset, num_replicas=env.world_size, rank=env.rank, shuffle=False, drop_last=True),
        num_workers=args.workers,
        pin_memory=env.cuda,
        persistent_workers=args.workers > 0,
        drop_last=True,
    )
    return lambda: (on_device(batch, env.device) for batch in loader)


def main(argv: list[str] | None = None) -> NoReturn:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=LOG_DATEFMT, stream=sys.stderr)
    env = common.init_distributed(args.device, args.host_wait)
    device = env.device
    torch.manual_seed(args.seed + env.rank)
    common.set_math_mode(args.precision, args.cudnn_benchmark)

    model_precision = "fp32" if args.precision == "tf32" else args.precision
    model, preprocess_train, _ = open_clip.create_model_and_transforms(
        args.model, precision=model_precision, device=device, output_dict=True
    )
    loss_fn = ClipLoss(local_loss=True, gather_with_grad=True, cache_labels=True, rank=env.rank,
                       world_size=env.world_size)
    optimizer = adamw_as_open_clip(model, args.lr, args.wd, args.optimizer)
    scheduler = cosine_lr(optimizer, args.lr, args.lr_warmup_steps, args.steps)
    scaler = common.grad_scaler(args.precision, device)
    autocast = get_autocast(model_precision, device_type=device.type)

    global_batch = args.batch_size * env.world_size
    image_size = model.visual.image_size
    image_size = image_size[0] if isinstance(image_size, (tuple, list)) else image_size
    batches = args.steps + (args.benchy_steps + 2 if args.benchy_steps else 0)
    dataset = SyntheticPairs(batches * global_batch, image_size, preprocess_train, open_clip.get_tokenizer(args.model))
    passes = make_passes(args, env, dataset, batches)

    loss_mean = [0.0, 0]

    def log_step(record, scalars) -> None:
        loss_mean[0] += record.loss
        loss_mean[1] += 1
        mean = loss_mean[0] / loss_mean[1]
        logging.info(
            format_step_line(
                epoch=0,
                samples_done=(record.step + 1) * global_batch,
                samples_total=args.steps * global_batch,
                percent=100.0 * (record.step + 1) / args.steps,
                data_s=record.data_s,
                batch_s=record.step_s,
                global_batch=global_batch,
                world_size=env.world_size,
                lr=record.lr,
                logit_scale=scalars["logit_scale"],
                losses={"contrastive_loss": (record.loss, mean), "loss": (record.loss, mean)},
            )
        )

    def clip_loss(forward, images, texts):
        with autocast():
            out = forward(images, texts)
            return loss_fn(out["image_features"], out["text_features"], out["logit_scale"])

    def train_step(step: int, batch) -> dict[str, torch.Tensor]:
        scheduler(step)
        images, texts = batch
        optimizer.zero_grad(set_to_none=True)
        loss = clip_loss(ddp_model, images, texts)
        common.backward_and_step(loss, optimizer, scaler)
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        return {"loss": loss, "logit_scale": model.logit_scale.exp()}

    trainer = common.Trainer(args, env, global_batch=global_batch, on_step=log_step)
    trainer.lr = lambda: optimizer.param_groups[0]["lr"]
    trainer.start(workload="openclip", model=args.model, precision=args.precision, loader=args.loader,
                  parameters=sum(p.numel() for p in model.parameters()))
    images, texts = on_device(default_collate([dataset[0], dataset[1]]), device)
    trainer.count_flops(model, lambda: clip_loss(model, images, texts), samples=2)
    if args.grad_checkpointing:
        model.set_grad_checkpointing(True)
    ddp_model = common.compiled(common.wrap_ddp(model, env, args), args)
    if env.rank == 0:
        logging.info(
            "openclip_train: model %s, %s, %d ranks x local batch %d, %d steps, %s",
            args.model, args.precision, env.world_size, args.batch_size, args.steps, device.type,
        )

    trainer.run(ddp_model, passes, train_step, input_pipeline=args.loader != "synthetic")
    common.leave_without_teardown()


if __name__ == "__main__":
    main()
