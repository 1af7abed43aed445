"""ResNet-50 v1.5 image classification on synthetic ImageNet-shaped data: a plain torchrun entry point.

The NGC DeepLearningExamples recipe: torchvision's resnet50 (v1.5: stride 2 in the 3x3 convolution),
SGD with momentum 0.875, learning rate 0.256 per 256 images with linear warm-up and cosine decay,
weight decay 1/32768 except on batch-norm parameters, label smoothing 0.1, channels_last. Images are
random uint8 pictures that go through the training augmentation (random resized crop, flip,
normalisation) in a DataLoader (``--loader torch``), in a DALI pipeline (``--loader dali``), or not
at all (``--loader synthetic``: one random batch on the device, NGC's synthetic backend).

    torchrun --nproc-per-node 2 workloads/resnet50_train.py --device cpu --image-size 64 --batch-size 8 --steps 20
    torchrun --nproc-per-node 8 workloads/resnet50_train.py --precision amp --batch-size 256 --channels-last
"""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

import torch
import torchvision
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

import train_common as common
import workload_args

MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CLASSES = 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    workload_args.add_common_args(parser, batch_size=256)
    parser.add_argument("--precision", choices=workload_args.PRECISIONS, default="amp")
    parser.add_argument("--loader", choices=workload_args.LOADERS, default="torch", help="input pipeline")
    parser.add_argument("--optimizer", choices=workload_args.OPTIMIZERS, default="default", help="SGD implementation")
    parser.set_defaults(optimizer_family="sgd")
    parser.add_argument("--image-size", type=int, default=224, help="training crop side (default: %(default)s)")
    parser.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True,
                        help="NHWC memory format for the model and its inputs")
    parser.add_argument("--lr", type=float, default=0.256, help="learning rate per 256 images")
    parser.add_argument("--lr-warmup-steps", type=int, default=10)
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    args = parser.parse_args(argv)
    problems = workload_args.common_problems(args)
    if args.image_size < 32:
        problems.append(f"--image-size must be >= 32 (ResNet-50 downsamples 32x), got {args.image_size}")
    if problems:
        parser.error("; ".join(problems))
    return args


def source_size(image_size: int) -> int:
    """The side of the stored pictures: ImageNet's 256 for 224 crops, in proportion otherwise."""
    return math.ceil(image_size * 256 / 224)


class SyntheticImages(Dataset):
    """Random uint8 pictures with random labels, augmented per sample as ImageNet training data is."""

    def __init__(self, num_samples: int, image_size: int) -> None:
        self.num_samples = num_samples
        self.side = source_size(image_size)
        self.transform = v2.Compose([
            v2.RandomResizedCrop(image_size, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32),
            v2.Normalize(MEAN, STD),
        ])

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        picture = torch.randint(0, 256, (3, self.side, self.side), dtype=torch.uint8, generator=generator)
        label = int(torch.randint(0, CLASSES, (1,), generator=generator))
        return self.transform(picture), label


def sgd_as_ngc(model: torch.nn.Module, lr: float, kind: str) -> torch.optim.Optimizer:
    """SGD, momentum 0.875, weight decay 1/32768 on everything but batch-norm parameters."""
    bn = [p for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d) for p in m.parameters()]
    bn_ids = {id(p) for p in bn}
    rest = [p for p in model.parameters() if id(p) not in bn_ids]
    groups = [{"params": bn, "weight_decay": 0.0}, {"params": rest, "weight_decay": 1.0 / 32768}]
    return common.make_optimizer(kind, "sgd", groups, lr=lr, momentum=0.875)


def warmup_cosine(step: int, base_lr: float, warmup: int, total: int) -> float:
    if step < warmup:
        return base_lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base_lr * (1 + math.cos(math.pi * progress))


def make_batches(args: argparse.Namespace, env: common.Distributed, batches: int):
    """A function starting a fresh pass of the input pipeline, yielding (images, labels) on the device."""
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format

    def on_device(images: torch.Tensor, labels: torch.Tensor):
        images = images.to(env.device, non_blocking=True).contiguous(memory_format=memory_format)
        return images, labels.to(env.device, non_blocking=True)

    if args.loader == "synthetic":
        images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
        labels = torch.randint(0, CLASSES, (args.batch_size,))
        cached = on_device(images, labels)
        return lambda: iter([cached] * batches)
    if args.loader == "dali":
        import dali_loaders

        def dali_pass():
            return (on_device(images, labels.long()) for images, labels in dali_loaders.image_batches(
                batch_size=args.batch_size, image_size=args.image_size, source_side=source_size(args.image_size),
                threads=max(1, args.workers), seed=args.seed + env.rank, device_id=env.local_rank if env.cuda else None,
                batches=batches, mean=MEAN, std=STD))

        return dali_pass
    dataset = SyntheticImages(batches * args.batch_size * env.world_size, args.image_size)
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=env.world_size, rank=env.rank,
                                                  shuffle=False, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        pin_memory=env.cuda, persistent_workers=args.workers > 0, drop_last=True)
    return lambda: (on_device(images, labels) for images, labels in loader)


def main(argv: list[str] | None = None) -> NoReturn:
    args = parse_args(argv)
    env = common.init_distributed(args.device, args.host_wait)
    torch.manual_seed(args.seed + env.rank)
    common.set_math_mode(args.precision, args.cudnn_benchmark)

    model = torchvision.models.resnet50(weights=None, num_classes=CLASSES).to(env.device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    global_batch = args.batch_size * env.world_size
    base_lr = args.lr * global_batch / 256
    optimizer = sgd_as_ngc(model, base_lr, args.optimizer)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    autocast = common.autocast_for(args.precision, env.device)
    scaler = common.grad_scaler(args.precision, env.device)
    passes = make_batches(args, env, args.steps + args.benchy_steps + 2)

    def loss_of(net: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with autocast():
            return criterion(net(images), labels)

    trainer = common.Trainer(args, env, global_batch=global_batch)
    trainer.lr = lambda: optimizer.param_groups[0]["lr"]
    trainer.start(workload="resnet50", model="resnet50-v1.5", precision=args.precision, loader=args.loader,
                  image_size=args.image_size, parameters=sum(p.numel() for p in model.parameters()))
    sample_images = torch.randn(2, 3, args.image_size, args.image_size, device=env.device)
    sample_labels = torch.randint(0, CLASSES, (2,), device=env.device)
    trainer.count_flops(model, lambda: loss_of(model, sample_images, sample_labels), samples=2)
    ddp_model = common.compiled(common.wrap_ddp(model, env, args), args)

    def train_step(step: int, batch) -> dict[str, torch.Tensor]:
        for group in optimizer.param_groups:
            group["lr"] = warmup_cosine(step, base_lr, args.lr_warmup_steps, args.steps)
        images, labels = batch
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(ddp_model, images, labels)
        common.backward_and_step(loss, optimizer, scaler)
        return {"loss": loss}

    trainer.run(ddp_model, passes, train_step, input_pipeline=args.loader != "synthetic")
    common.leave_without_teardown()


if __name__ == "__main__":
    main()
