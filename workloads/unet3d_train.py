"""The SC21 tutorial's 3D U-Net on a synthetic volume read from disk: a plain torchrun entry point.

The model has the tutorial's shape: 4 input channels -> 5 output channels on 64^3 crops, six
stride-2 down-convolutions and six transposed up-convolutions with skip connections, ~117 M
parameters at ``--base-channels 64``; Adam and an L1 loss. Each node's local rank 0 writes a synthetic
simulation volume (4 input fields and 5 target fields derived from them) as .npy files once, into
``$PERFGATE_DATA_DIR`` (perfgate's cache directory, which its local launcher names: made once per machine), else that
node's temp dir (a cluster's /tmp or per-job TMPDIR is its own), or into ``--data-dir``; every sample is a random
64^3 crop of it with a random rotation and reflection (a permutation of the spatial axes and random
flips), applied alike to input and target. The crops are read from the files and augmented in a
DataLoader (``--loader torch``), or by a DALI pipeline (``--loader dali``: CPU operators on CPU, GPU
augmentation on GPU), or skipped (``--loader synthetic``: one random batch on the device).

    torchrun --nproc-per-node 2 workloads/unet3d_train.py --device cpu --base-channels 8 --batch-size 2 --steps 10
    torchrun --nproc-per-node 4 workloads/unet3d_train.py --precision amp --batch-size 16 --loader dali --workers 4
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

import train_common as common
import workload_args

IN_CHANNELS, OUT_CHANNELS, LEVELS = 4, 5, 6
CROP = 2**LEVELS
"""The crop side: six stride-2 levels take 64^3 down to 1^3."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    workload_args.add_common_args(parser, batch_size=64)
    parser.add_argument("--precision", choices=workload_args.PRECISIONS, default="fp32")
    parser.add_argument("--loader", choices=workload_args.LOADERS, default="torch", help="input pipeline")
    parser.add_argument("--optimizer", choices=workload_args.OPTIMIZERS, default="default", help="Adam implementation")
    parser.set_defaults(optimizer_family="adam")
    parser.add_argument("--base-channels", type=int, default=64, help="width of the first level (64: ~117 M parameters)")
    parser.add_argument("--volume", type=int, default=128, help="side of the synthetic volume on disk (default: %(default)s)")
    parser.add_argument("--data-dir", type=Path,
                        help="where the volume's .npy files are kept: each node writes its own copy unless they are "
                        "already there (default: a perfgate-unet3d-* folder in $PERFGATE_DATA_DIR, else in each "
                        "node's temp dir)")
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args(argv)
    problems = workload_args.common_problems(args)
    if args.base_channels < 1:
        problems.append(f"--base-channels must be >= 1, got {args.base_channels}")
    if args.volume < CROP:
        problems.append(f"--volume must be >= the {CROP}^3 crop, got {args.volume}")
    if problems:
        parser.error("; ".join(problems))
    return args


class UNet3D(nn.Module):
    """Down: conv 4^3 stride 2 (+ batch norm after the first) + LeakyReLU(0.2); up: transposed conv 4^3
    stride 2 + batch norm + ReLU on the concatenation with the matching down level; linear output."""

    def __init__(self, base: int = 64) -> None:
        super().__init__()
        widths = [min(base * 2**i, base * 8) for i in range(LEVELS)]
        self.down = nn.ModuleList()
        channels = IN_CHANNELS
        for level, width in enumerate(widths):
            layers = [nn.Conv3d(channels, width, 4, stride=2, padding=1)]
            if 0 < level < LEVELS - 1:
                layers.append(nn.BatchNorm3d(width))
            layers.append(nn.LeakyReLU(0.2))
            self.down.append(nn.Sequential(*layers))
            channels = width
        self.up = nn.ModuleList()
        for level in reversed(range(1, LEVELS)):
            skip = widths[level - 1]
            in_channels = channels if level == LEVELS - 1 else 2 * channels
            self.up.append(nn.Sequential(nn.ConvTranspose3d(in_channels, skip, 4, stride=2, padding=1),
                                         nn.BatchNorm3d(skip), nn.ReLU()))
            channels = skip
        self.out = nn.ConvTranspose3d(2 * channels, OUT_CHANNELS, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
        skips.pop()
        for block in self.up:
            x = torch.cat([block(x), skips.pop()], dim=1)
        return self.out(x)


VOLUME_VERSION = 1
"""The version of what write_volume makes from a side and a seed: raise it when the data it writes changes, so that no
cache serves the old data under the new code."""
DATA_DIR_ENV = "PERFGATE_DATA_DIR"


def volume_dir(args: argparse.Namespace) -> Path:
    """Where the volume's files are: ``--data-dir``, else a folder named for all they depend on (the generator's
    version, the side, the seed) in ``$PERFGATE_DATA_DIR``, else in the temp dir."""
    if args.data_dir:
        return args.data_dir
    root = Path(os.environ.get(DATA_DIR_ENV) or tempfile.gettempdir())
    return root / f"perfgate-unet3d-v{VOLUME_VERSION}-{args.volume}-seed{args.seed}"


def write_volume(directory: Path, side: int, seed: int = 0) -> tuple[Path, Path]:
    """A smooth random 4-field volume and 5 target fields that depend on it, as C-order float32 .npy.

    Kept between runs (it is the same for a side and seed); each file appears whole or not at all, so nodes that
    share ``directory`` may write it at once.
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = directory / "input.npy", directory / "target.npy"
    if all(path.exists() for path in paths):
        return paths
    rng = np.random.default_rng(seed)
    coarse = rng.standard_normal((IN_CHANNELS, side // 8, side // 8, side // 8), dtype=np.float32)
    fields = coarse.repeat(8, 1).repeat(8, 2).repeat(8, 3)[:, :side, :side, :side]
    fields = fields + 0.1 * rng.standard_normal(fields.shape, dtype=np.float32)
    padded = np.zeros((IN_CHANNELS, side, side, side), dtype=np.float32)
    padded[:, :fields.shape[1], :fields.shape[2], :fields.shape[3]] = fields
    target = np.concatenate([np.tanh(padded), padded.sum(axis=0, keepdims=True) / IN_CHANNELS]).astype(np.float32)
    for path, array in zip(paths, (padded, target)):
        partial = path.with_suffix(f".{socket.gethostname()}-{os.getpid()}.partial.npy")
        np.save(partial, array)
        partial.replace(path)
    return paths


def prepare_volume(args: argparse.Namespace, env: common.Distributed) -> tuple[Path, Path]:
    """The volume's files as every rank of this node reads them: its local rank 0 writes them (volume_dir) unless
    they are there, while the others wait; a rank that still cannot read them ends the run, saying so.
    """
    data_dir = volume_dir(args)
    if env.local_rank == 0:
        write_volume(data_dir, args.volume, seed=args.seed)
    dist.barrier()
    paths = data_dir / "input.npy", data_dir / "target.npy"
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        sys.exit(f"{Path(__file__).name}: error: rank {env.rank} (local rank {env.local_rank}) on "
                 f"{socket.gethostname()} cannot read {', '.join(missing)}, which its node's local rank 0 wrote: the "
                 "node's ranks see different file systems there; give --data-dir a directory they all see")
    return paths


def augment(inp: np.ndarray, tar: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One random rotation/reflection of the cube (axis permutation + flips), the same for both arrays."""
    order = (0, *(1 + rng.permutation(3)))
    flips = tuple(1 + axis for axis in range(3) if rng.random() < 0.5)
    inp, tar = inp.transpose(order), tar.transpose(order)
    if flips:
        inp, tar = np.flip(inp, flips), np.flip(tar, flips)
    return np.ascontiguousarray(inp), np.ascontiguousarray(tar)


class RandomCrops(Dataset):
    """Random 64^3 crops of the memory-mapped volume, rotated and reflected at random."""

    def __init__(self, paths: tuple[Path, Path], num_samples: int, seed: int) -> None:
        self.paths, self.num_samples, self.seed = paths, num_samples, seed
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._arrays is None:
            self._arrays = tuple(np.load(path, mmap_mode="r") for path in self.paths)
        inp, tar = self._arrays
        rng = np.random.default_rng((self.seed, index))
        z, y, x = (int(rng.integers(0, inp.shape[axis] - CROP + 1)) for axis in (1, 2, 3))
        window = (slice(None), slice(z, z + CROP), slice(y, y + CROP), slice(x, x + CROP))
        inp, tar = augment(inp[window], tar[window], rng)
        return torch.from_numpy(inp), torch.from_numpy(tar)


def make_batches(args: argparse.Namespace, env: common.Distributed, paths: tuple[Path, Path], batches: int):
    """A function starting a fresh pass of the input pipeline, yielding (input, target) on the device."""

    def on_device(inp: torch.Tensor, tar: torch.Tensor):
        return inp.to(env.device, non_blocking=True), tar.to(env.device, non_blocking=True)

    if args.loader == "synthetic":
        cached = on_device(torch.randn(args.batch_size, IN_CHANNELS, CROP, CROP, CROP),
                           torch.randn(args.batch_size, OUT_CHANNELS, CROP, CROP, CROP))
        return lambda: iter([cached] * batches)
    if args.loader == "dali":
        import dali_loaders

        def dali_pass():
            return (on_device(inp, tar) for inp, tar in dali_loaders.volume_batches(
                paths, batch_size=args.batch_size, crop=CROP, threads=max(1, args.workers),
                seed=args.seed + env.rank, device_id=env.local_rank if env.cuda else None, batches=batches))

        return dali_pass
    dataset = RandomCrops(paths, batches * args.batch_size, seed=args.seed + 1000 * env.rank)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers, pin_memory=env.cuda,
                        persistent_workers=args.workers > 0, drop_last=True)
    return lambda: (on_device(inp, tar) for inp, tar in loader)


def main(argv: list[str] | None = None) -> NoReturn:
    args = parse_args(argv)
    env = common.init_distributed(args.device, args.host_wait)
    torch.manual_seed(args.seed)
    common.set_math_mode(args.precision, args.cudnn_benchmark)

    paths = prepare_volume(args, env)

    model = UNet3D(args.base_channels).to(env.device)
    global_batch = args.batch_size * env.world_size
    optimizer = common.make_optimizer(args.optimizer, "adam", model.parameters(), lr=args.lr)
    autocast = common.autocast_for(args.precision, env.device)
    scaler = common.grad_scaler(args.precision, env.device)
    passes = make_batches(args, env, paths, args.steps + args.benchy_steps + 2)

    def loss_of(net: nn.Module, inp: torch.Tensor, tar: torch.Tensor) -> torch.Tensor:
        with autocast():
            return nn.functional.l1_loss(net(inp), tar)

    trainer = common.Trainer(args, env, global_batch=global_batch)
    trainer.lr = lambda: optimizer.param_groups[0]["lr"]
    trainer.start(workload="unet3d", model=f"unet3d-{args.base_channels}", precision=args.precision,
                  loader=args.loader, parameters=sum(p.numel() for p in model.parameters()))
    sample_inp = torch.randn(2, IN_CHANNELS, CROP, CROP, CROP, device=env.device)
    sample_tar = torch.randn(2, OUT_CHANNELS, CROP, CROP, CROP, device=env.device)
    trainer.count_flops(model, lambda: loss_of(model, sample_inp, sample_tar), samples=2)
    ddp_model = common.compiled(common.wrap_ddp(model, env, args), args)

    def train_step(step: int, batch) -> dict[str, torch.Tensor]:
        inp, tar = batch
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(ddp_model, inp, tar)
        common.backward_and_step(loss, optimizer, scaler)
        return {"loss": loss}

    trainer.run(ddp_model, passes, train_step, input_pipeline=args.loader != "synthetic")
    common.leave_without_teardown()


if __name__ == "__main__":
    main()
