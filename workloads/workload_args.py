"""The command line every workload shares, and what is wrong with a given one: each problem a message naming the
option, all reported at once before any process group forms."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

import torch

import torch_compat
from injected_fault import Fault

PRECISIONS = ("fp32", "tf32", "amp", "amp_bf16")
"""fp32: full fp32 math (TF32 off); tf32: fp32 with TF32 tensor cores; amp: fp16 autocast + GradScaler;
amp_bf16: bf16 autocast."""
OPTIMIZERS = ("default", "fused", "apex")
"""default: what torch picks (multi-tensor foreach on GPU, a per-parameter loop on CPU), as upstream training
scripts get it; fused: torch's fused kernel; apex: apex.optimizers."""
LOADERS = ("torch", "dali", "synthetic")
"""torch: DataLoader with --workers processes; dali: a DALI pipeline with --workers threads;
synthetic: one random batch on the device, reused (no input pipeline at all)."""


def add_common_args(parser: argparse.ArgumentParser, *, batch_size: int, steps: int = 50) -> None:
    parser.add_argument("--batch-size", type=int, default=batch_size, help="local batch size per rank (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=steps, help="optimizer steps to run (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="loader worker processes (DALI: threads) per rank")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    parser.add_argument(
        "--sync-buffers", action=argparse.BooleanOptionalAction, default=True,
        help="DDP broadcasts buffers from rank 0 every forward (forward_sync_buffers; broadcast_buffers before "
        "torch had it)",
    )
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                        help="torch.compile the model")
    parser.add_argument(
        "--cuda-graphs", action=argparse.BooleanOptionalAction, default=False,
        help="capture the model in CUDA graphs (torch.compile mode 'reduce-overhead'; GPU only)",
    )
    parser.add_argument(
        "--cudnn-benchmark", action=argparse.BooleanOptionalAction, default=True,
        help="let cuDNN time the convolution algorithms for each new shape and keep the fastest "
        "(torch.backends.cudnn.benchmark), as the reference recipes do: NVIDIA's ConvNets main.py, the SC21 U-Net's "
        "train.py and open_clip_train's main set it",
    )
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument(
        "--host-wait", choices=("auto", "block"), default="auto",
        help="how the host waits for the GPU: auto, CUDA's default (spins while cores are free, so the host's CPU "
        "time per step is the step's); block: sleeps (CU_CTX_SCHED_BLOCKING_SYNC), so its CPU time is its own "
        "work, for gating host_cpu_per_step_s on GPU",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--records", type=Path, help="rank 0 appends JSON step records here")
    parser.add_argument(
        "--target-ci", type=float, metavar="FRACTION",
        help="adaptive length: stop once the ~95%% interval of the median step time (after --warmup) is within "
        "this fraction of it; --steps is then the most steps",
    )
    parser.add_argument("--min-steps", type=int, default=20, help="adaptive length: the fewest steps (default 20)")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the adaptive interval")
    parser.add_argument(
        "--benchy-steps", type=int, default=0, metavar="N",
        help="after training, time N batches of the loader alone (IO) and N steps on one cached batch "
        "(SYNTHETIC); 0 skips them",
    )
    parser.add_argument(
        "--count-flops", action=argparse.BooleanOptionalAction, default=True,
        help="count training FLOPs per sample once before training (a 'flops' record, for TFLOP/s and MFU); "
        "perfgate counts them in a case's first launch only",
    )
    parser.add_argument(
        "--timing", choices=("steps", "bare"), default="steps",
        help="steps: rank 0 records every step (what perfgate measures); bare: no per-step records, one "
        "synchronize after the --warmup steps and one at the end, written as a 'bare' phase record (the "
        "yardstick for perfgate's own overhead, benchmarks/harness_overhead.py)",
    )
    parser.add_argument(
        "--inject-slowdown", type=float, default=0.0, metavar="FRACTION",
        help="stretch every step by this fraction of its duration (to test a perf gate); default 0",
    )
    parser.add_argument(
        "--profile-steps", type=int, default=0, metavar="N",
        help="record torch.profiler over N steps after the --warmup ones, each rank's operators per step into "
        "--profile-dir (perfgate asks for it in a launch it does not judge); default 0: none",
    )
    parser.add_argument("--profile-dir", type=Path, help="where --profile-steps writes each rank's profile and trace")
    parser.add_argument(
        "--inject-fault", type=Fault.parse, metavar="KIND@RANK:STEP",
        help="make the run fail on purpose (to test the harness): crash@R:S exits rank R at step S, kill@R:S "
        "kills it with SIGKILL (as the kernel's OOM killer would), hang@R:S "
        "stops rank R there (its peers wait in the next collective), oom@R:S raises an out-of-memory error, "
        "nan@R:S feeds rank R NaN inputs from step S on (the loss diverges); STEP 'end' strikes after the end "
        "record, at teardown (crash@1:end: a finished run whose rank then fails to exit cleanly)",
    )


def installed(module: str) -> bool:
    """Whether ``module`` can be imported; a dotted name whose parent package is missing is simply absent."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def common_problems(args: argparse.Namespace) -> list[str]:
    """Everything wrong with the shared arguments, as messages naming the option."""
    problems = [why for why in [torch_compat.too_old()] if why]
    for name in ("batch_size", "steps"):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.workers < 0:
        problems.append(f"--workers must be >= 0, got {args.workers}")
    if args.bucket_cap_mb <= 0:
        problems.append(f"--bucket-cap-mb must be > 0, got {args.bucket_cap_mb}")
    if args.benchy_steps < 0:
        problems.append(f"--benchy-steps must be >= 0, got {args.benchy_steps}")
    if args.target_ci is not None and not 0 < args.target_ci < 1:
        problems.append(f"--target-ci must be a fraction in (0, 1), got {args.target_ci}")
    if args.target_ci is not None and not args.warmup < args.min_steps <= args.steps:
        problems.append(f"adaptive length needs --warmup < --min-steps <= --steps, got "
                        f"{args.warmup}, {args.min_steps}, {args.steps}")
    if args.profile_steps and (args.profile_dir is None or args.warmup + args.profile_steps > args.steps):
        problems.append(f"--profile-steps {args.profile_steps} needs --profile-dir and --warmup + --profile-steps <= "
                        f"--steps, got {args.profile_dir}, {args.warmup}, {args.steps}")
    if args.timing == "bare" and not 0 <= args.warmup < args.steps:
        problems.append(f"--timing bare measures the steps after --warmup: need 0 <= --warmup < --steps, got "
                        f"{args.warmup}, {args.steps}")
    if args.timing == "bare" and args.target_ci is not None:
        problems.append("--timing bare runs a fixed number of steps: drop --target-ci")
    if not 0 <= args.inject_slowdown <= 10:
        problems.append(f"--inject-slowdown must be between 0 and 10, got {args.inject_slowdown}")
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.device == "cuda" and not torch.cuda.is_available():
        problems.append("--device cuda was asked for but torch sees no CUDA device")
    if args.host_wait == "block" and not cuda:
        problems.append("--host-wait block sets how the host waits for a GPU: it needs a CUDA device")
    if args.cuda_graphs and not cuda:
        problems.append("--cuda-graphs needs a CUDA device")
    if getattr(args, "precision", None) == "amp" and not cuda:
        problems.append("--precision amp (fp16 autocast + GradScaler) needs a CUDA device; use amp_bf16 on CPU")
    family = getattr(args, "optimizer_family", None)
    if getattr(args, "optimizer", None) == "fused" and family is not None:
        # the rank's own GPU: a probe on cuda:0 would give every rank a CUDA context there
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
        why = torch_compat.fused_unsupported(OPTIMIZER_CLASSES[family], device)
        if why:
            problems.append(f"--optimizer fused: {why}; use --optimizer default")
    if getattr(args, "optimizer", None) == "apex" and not installed("apex.optimizers"):
        problems.append("--optimizer apex: NVIDIA apex is not installed (it is not on PyPI: build it from "
                        "https://github.com/NVIDIA/apex with nvcc), or use --optimizer fused")
    if getattr(args, "loader", None) == "dali" and not installed("nvidia.dali"):
        problems.append("--loader dali: NVIDIA DALI is not installed (pip install nvidia-dali-cuda120)")
    return problems


OPTIMIZER_CLASSES = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
"""The optimizer families the workloads train with (a workload's ``optimizer_family``)."""
