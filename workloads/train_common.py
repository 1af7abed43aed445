"""What every perfgate workload shares: torchrun/DDP set-up, precision modes, optimizers, the timed
step loop and the benchy-style IO / SYNTHETIC phases (the shared command line is workload_args.py, and the faults
perfgate's own tests plant are injected_fault.py).

A workload builds its model, data and one training step; ``Trainer`` runs that step under the same
rules everywhere: rank 0 records each step with ``perfgate.records.steps.StepRecorder`` (CUDA events
resolved late on GPU, never a per-step synchronize), a planted slowdown is applied between the
step's work and its end marker (see perfgate.rank.plant), and the adaptive stop is agreed by all ranks.
After the measured FULL window, ``--benchy-steps N`` times the data loader alone (IO) and the step on one cached batch
(SYNTHETIC), as the SC21 tutorial's benchy does, so the report can say what bounds the throughput.

Workloads are plain torchrun entry points: nothing here imports pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NoReturn

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import machine_probe
import torch_compat
from compile_cache import CompileCache
from workload_args import OPTIMIZER_CLASSES
from perfgate.launch.hang_stacks import tell_stacks_on_request
from perfgate.measure import flops, stats
from perfgate.rank.plant import SlowdownInjector
from perfgate.records import startup
from perfgate.records.host_wait import SPINS, block_while_waiting
from perfgate.records.steps import StepRecorder

@dataclass(frozen=True)
class Distributed:
    device: torch.device
    rank: int
    local_rank: int
    world_size: int
    host_wait: str
    """How the host waits for the GPU (records.host_wait), for the start record."""

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def init_distributed(device_arg: str, host_wait: str = "auto") -> Distributed:
    """Joins the torchrun job: nccl with one GPU per rank, or gloo on the CPU; ``host_wait`` "block" makes the
    host sleep while it waits for its GPU, set before torch creates the GPU's context. From here on the rank
    writes its stacks to its log when the launcher finds the run hung (launch.hang_stacks)."""
    startup.mark("imports")
    tell_stacks_on_request()
    use_cuda = device_arg == "cuda" or (device_arg == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    waits = "not a GPU run"
    if use_cuda:
        waits = block_while_waiting(local_rank) if host_wait == "block" else SPINS
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if use_cuda else "gloo",
                            **torch_compat.process_group_device(device if use_cuda else None))
    startup.mark("process_group")
    return Distributed(device, dist.get_rank(), local_rank, dist.get_world_size(), waits)


def set_math_mode(precision: str, cudnn_benchmark: bool) -> None:
    """fp32 means fp32: TF32 tensor-core math only for ``tf32`` (torch enables it for cuDNN by default).
    cuDNN's autotuner as asked (``--cudnn-benchmark``): the published ResNet-50 and U-Net figures are with it on."""
    torch.backends.cudnn.benchmark = cudnn_benchmark
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def autocast_for(precision: str, device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    if precision in ("amp", "amp_bf16"):
        dtype = torch.float16 if precision == "amp" else torch.bfloat16
        return lambda: torch.autocast(device.type, dtype=dtype)
    return contextlib.nullcontext


def wrap_ddp(model: torch.nn.Module, env: Distributed, args: argparse.Namespace) -> DistributedDataParallel:
    return DistributedDataParallel(
        model,
        device_ids=[env.device.index] if env.cuda else None,
        bucket_cap_mb=args.bucket_cap_mb,
        **torch_compat.ddp_buffer_sync(args.sync_buffers),
    )


def compiled(module: torch.nn.Module, args: argparse.Namespace) -> torch.nn.Module:
    """torch.compile as asked: CUDA graphs come through the 'reduce-overhead' mode."""
    if args.cuda_graphs:
        return torch.compile(module, mode="reduce-overhead")
    if args.compile:
        return torch.compile(module)
    return module


def make_optimizer(kind: str, family: str, params: Iterable[Any], **hyper: Any) -> torch.optim.Optimizer:
    """``family`` adam/adamw/sgd in the implementation ``kind`` (see OPTIMIZERS)."""
    if kind == "apex":
        from apex import optimizers as apex_optimizers

        if family == "sgd":
            return apex_optimizers.FusedSGD(params, **hyper)
        return apex_optimizers.FusedAdam(params, adam_w_mode=family == "adamw", **hyper)
    cls = OPTIMIZER_CLASSES[family]
    if kind != "fused":
        return cls(params, **hyper)
    optimizer = cls(params, fused=True, **hyper)
    if family == "sgd":
        zero_momentum_buffers(optimizer)
    return optimizer


def zero_momentum_buffers(optimizer: torch.optim.Optimizer) -> None:
    """Gives fused SGD zeroed momentum buffers before its first step.

    torch's fused SGD allocates the buffers with ``empty_like`` and fills them in its first step; when the
    GradScaler skips that step (fp16 gradients overflowed, as they do at the first steps of a fresh
    loss scale), the kernel returns early and the buffers keep whatever memory they got. The next real
    step then adds that garbage to the update, and the loss can go NaN
    (docs/measurements.md#why-the-rules-are-what-they-are). With zeroed buffers and no dampening, the first real
    step gives ``buf = grad``, exactly the first-step rule.
    """
    for group in optimizer.param_groups:
        if not group["momentum"]:
            continue
        if group["dampening"]:
            raise ValueError("zeroed momentum buffers equal fused SGD's first step only without dampening")
        for param in group["params"]:
            optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 AMP's GradScaler; None for every other precision."""
    return torch.amp.GradScaler(device.type) if precision == "amp" else None


def backward_and_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                      scaler: torch.amp.GradScaler | None) -> None:
    """``loss.backward()`` and ``optimizer.step()``, through the GradScaler when fp16 AMP has one."""
    if scaler is None:
        loss.backward()
        optimizer.step()
        return
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def cudagraph_skips() -> int:
    """How many times inductor fell back from CUDA graphs to plain compiled code in this process (its
    ``cudagraph_skips`` counter; the reason goes to the rank's log: "skipping cudagraphs due to ...")."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def check_cuda_graphs(asked: bool, skips: int) -> None:
    """Ends a ``--cuda-graphs`` run whose graphs inductor skipped: it measured plain torch.compile, not CUDA graphs
    (DDP with BatchNorm buffers does it: "skipping cudagraphs due to mutated inputs", pytorch issue 139207)."""
    if asked and skips:
        sys.exit(f"{Path(sys.argv[0]).name}: error: --cuda-graphs: inductor skipped CUDA graphs {skips} time(s) and "
                 "ran those graphs as plain compiled code, so this run measured torch.compile, not CUDA graphs; the "
                 "reason is in this rank's log ('skipping cudagraphs due to ...'); drop --cuda-graphs for this "
                 "configuration, or fix what inductor names (e.g. --no-sync-buffers for mutated BatchNorm buffers)")


def peak_memory_bytes(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda max_memory_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "host max RSS"


def leave_without_teardown() -> NoReturn:
    """Ends a finished rank: destroys the process group, then exits without Python's interpreter teardown.

    At interpreter exit torch 2.5.1's DDP Reducer can free its gloo process group while holding the GIL, and the
    group's destructor joins a gloo worker thread that waits for that GIL: the rank can deadlock after its end record
    (docs/measurements.md#why-the-rules-are-what-they-are). NCCL's teardown is known to hang as well.
    Nothing is left to save by then: records and logs are flushed and closed first.
    """
    dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


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


StepFn = Callable[[int, Any], dict[str, torch.Tensor]]
"""One optimizer step on a device batch: (step index, batch) -> 0-d tensors to record (``loss`` first)."""


PLANT_RANGE = "perfgate.planted_slowdown"
"""The profiler's name for the planted slowdown, so that a planted FAIL's profile diff names it."""
DATA_RANGE = "perfgate.data_wait"
"""The profiler's name for the wait for the next batch."""


class StepProfile:
    """torch.profiler over ``--profile-steps`` steps after the ``--warmup`` ones, in a launch perfgate never judges:
    each rank writes its operators' calls and self time per step (``profile-rank<R>.json``, what perfgate diffs) and
    the trace, which Perfetto or chrome://tracing opens (``traces/trace-rank<R>.json``), into ``--profile-dir``. Each
    step is a ``ProfilerStep#N`` range in the trace, which Holistic Trace Analysis' TraceDiff takes for its
    iterations, and ``traces/`` holds nothing else, as TraceDiff reads every JSON file of a directory; the summary
    leaves those ranges out (their self time is what no operator of the step claimed)."""

    def __init__(self, args: argparse.Namespace, env: Distributed) -> None:
        self.first, self.count, self.out, self.env = args.warmup, args.profile_steps, args.profile_dir, env
        self.profiler: torch.profiler.profile | None = None
        self.step_range: torch.profiler.record_function | None = None
        self.profiled = 0

    def range(self, name: str) -> contextlib.AbstractContextManager:
        """A named range while profiling; otherwise an empty context, whose enter and exit cost well under a
        microsecond a step."""
        return torch.profiler.record_function(name) if self.profiler is not None else contextlib.nullcontext()

    def step_begins(self, step: int) -> None:
        if self.count and step == self.first:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.env.cuda:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.profiler = torch.profiler.profile(activities=activities)
            self.profiler.__enter__()
        if self.profiler is not None:
            self.step_range = torch.profiler.record_function(f"ProfilerStep#{step}")
            self.step_range.__enter__()

    def step_ended(self, step: int) -> None:
        if self.profiler is None:
            return
        self.step_range.__exit__(None, None, None)
        self.step_range = None
        self.profiled += 1
        if step == self.first + self.count - 1:
            self.close()

    def close(self) -> None:
        """Stops profiling (at the last profiled step, or where the run stopped sooner) and writes what it saw."""
        if self.profiler is None:
            return
        if self.step_range is not None:
            self.step_range.__exit__(None, None, None)
            self.step_range = None
        profiler, self.profiler = self.profiler, None
        profiler.__exit__(None, None, None)
        steps, ops = max(self.profiled, 1), {}
        for event in profiler.key_averages():
            if event.key.startswith("ProfilerStep"):  # key_averages names them all "ProfilerStep*"
                continue
            device_us = getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)
            ops[event.key] = {"calls": event.count / steps, "self_cpu_us": event.self_cpu_time_total / steps,
                              "self_device_us": device_us / steps}
        self.out.mkdir(parents=True, exist_ok=True)
        summary = {"steps": steps, "rank": self.env.rank, "device": self.env.device.type, "ops": ops}
        (self.out / f"profile-rank{self.env.rank}.json").write_text(json.dumps(summary))
        (self.out / "traces").mkdir(exist_ok=True)
        profiler.export_chrome_trace(str(self.out / "traces" / f"trace-rank{self.env.rank}.json"))


class Trainer:
    """Runs a workload's step over its loader under perfgate's timing rules (see the module docstring)."""

    def __init__(self, args: argparse.Namespace, env: Distributed, *, global_batch: int,
                 on_step: Callable[..., None] | None = None) -> None:
        self.args, self.env, self.global_batch = args, env, global_batch
        self.recorder = StepRecorder(args.records if env.rank == 0 else None, device_type=env.device.type,
                                     on_step=on_step)
        self.injector = SlowdownInjector(args.inject_slowdown, env.device.type, self.recorder.step_times)
        self.adaptive = AdaptiveStop(args, self.recorder)
        self.profile = StepProfile(args, env)
        self.compile_cache = CompileCache(env.rank) if args.compile or args.cuda_graphs else None
        if self.compile_cache is not None:
            self.compile_cache.before_compiling()
        self.lr: Callable[[], float | None] = lambda: None
        self.last_batch: Any = None

    def start(self, **facts: Any) -> None:
        """Writes the start record: the run's facts, common settings included."""
        args, env = self.args, self.env
        startup.mark("model")
        self.recorder.write(
            "start", world_size=env.world_size, local_batch=args.batch_size, global_batch=self.global_batch,
            steps=args.steps, device=env.device.type,
            device_name=torch.cuda.get_device_name(env.device) if env.cuda else "cpu", torch=torch.__version__,
            injected_slowdown=args.inject_slowdown, cudnn_benchmark=torch.backends.cudnn.benchmark,
            instruction_clock=self.recorder.instruction_clock, host_wait=env.host_wait, **facts,
        )

    def count_flops(self, model: torch.nn.Module, step: Callable[[], torch.Tensor], samples: int) -> float | None:
        """Training FLOPs per sample (forward + backward of ``step``'s loss), written as a ``flops`` record;
        None under ``--no-count-flops``."""
        if not self.args.count_flops:
            return None
        per_sample = flops.training_flops(step) / samples
        model.zero_grad(set_to_none=True)
        self.recorder.write("flops", flops_per_sample=per_sample, counted_on_samples=samples)
        startup.mark("flops")
        return per_sample

    def run(self, model: torch.nn.Module, passes: Callable[[], Iterator[Any]], step_fn: StepFn,
            input_pipeline: bool = True) -> None:
        """The whole run: the measured FULL window between two machine-speed probes, then the benchy
        phases, then the end record.

        ``passes`` starts a fresh pass over the data; ``input_pipeline`` is False for synthetic data.
        """
        model.train()
        before = machine_probe.probe_all_ranks(self.env.device)
        startup.mark("probe")
        wall_start = time.perf_counter()
        steps_run = (self.fit_bare if self.args.timing == "bare" else self.fit)(passes(), step_fn)
        wall_s = time.perf_counter() - wall_start
        after = machine_probe.probe_all_ranks(self.env.device)
        self.recorder.write("probe", before=before, after=after)
        self.benchy(passes if input_pipeline else None, step_fn)
        self.close(steps_run, wall_s)
        check_cuda_graphs(self.args.cuda_graphs, cudagraph_skips())
        if self.args.inject_fault is not None:
            self.args.inject_fault.strike_at_end(self.env.rank)

    def fit(self, batches: Iterator[Any], step_fn: StepFn) -> int:
        """The measured FULL run: up to ``--steps`` steps; returns how many ran."""
        recorder, injector = self.recorder, self.injector
        done = 0
        recorder.begin()
        injector.begin()
        for step in range(self.args.steps):
            self.profile.step_begins(step)
            try:
                with self.profile.range(DATA_RANGE):
                    batch = next(batches)
            except StopIteration:
                break
            data_s = recorder.data_ready()
            if self.args.inject_fault is not None:
                batch = self.args.inject_fault.strike(self.env.rank, step, batch)
            scalars = step_fn(step, batch)
            with self.profile.range(PLANT_RANGE):
                planted = injector.pause()
            recorder.end_step(step, samples=self.global_batch, data_s=data_s, lr=self.lr(), scalars=scalars,
                              planted_s=planted if injector.fraction else None)
            self.profile.step_ended(step)
            done = step + 1
            if self.adaptive.should_stop(done):
                break
        self.profile.close()
        recorder.flush()
        self.last_batch = batch if done else None
        return done

    def fit_bare(self, batches: Iterator[Any], step_fn: StepFn) -> int:
        """The same steps with nothing recorded per step: one synchronize once the warm-up steps are done and
        one at the end, and the time between them as a ``bare`` phase. What perfgate's timing must agree with."""
        warmup, started, done = self.args.warmup, 0.0, 0
        for step, batch in zip(range(self.args.steps), batches):
            if step == warmup:
                self._sync()
                started = time.perf_counter()
            step_fn(step, batch)
            done = step + 1
        self._sync()
        if done > warmup:
            rate = (done - warmup) * self.global_batch / (time.perf_counter() - started)
            self.recorder.write("phase", phase="bare", steps=done - warmup, samples_per_second=rate)
        return done

    def benchy(self, fresh_batches: Callable[[], Iterator[Any]] | None, step_fn: StepFn) -> None:
        """IO and SYNTHETIC phases after the FULL window (synchronized: they are outside what is gated).

        ``fresh_batches`` starts a new pass of the input pipeline; None when there is none (synthetic data).
        """
        n = self.args.benchy_steps
        if n <= 0 or self.last_batch is None:
            return
        if fresh_batches is not None:
            self._time_loader(fresh_batches(), n)
        cached = self.last_batch
        step_fn(0, cached)
        self._sync()
        started = time.perf_counter()
        for step in range(n):
            step_fn(step, cached)
        self._sync()
        rate = n * self.global_batch / (time.perf_counter() - started)
        self.recorder.write("phase", phase="synthetic", steps=n, samples_per_second=rate)

    def _time_loader(self, batches: Iterator[Any], n: int) -> None:
        for _ in range(2):
            next(batches)
        self._sync()
        started = time.perf_counter()
        for _ in range(n):
            next(batches)
        self._sync()
        io_rate = torch.tensor([n * self.args.batch_size / (time.perf_counter() - started)], dtype=torch.float64,
                               device=self.env.device)
        dist.all_reduce(io_rate)
        self.recorder.write("phase", phase="io", steps=n, samples_per_second=float(io_rate.item()))

    def _sync(self) -> None:
        if self.env.cuda:
            torch.cuda.synchronize(self.env.device)
        barrier = torch.zeros(1, device=self.env.device)
        dist.all_reduce(barrier)

    def close(self, steps_run: int, wall_s: float) -> None:
        if self.compile_cache is not None:
            self.compile_cache.after_running()
        peak, kind = peak_memory_bytes(self.env.device)
        peak_all = torch.tensor([peak], dtype=torch.float64, device=self.env.device)
        dist.all_reduce(peak_all, op=dist.ReduceOp.MAX)
        self.recorder.close(
            peak_memory_bytes=int(peak_all.item()), peak_memory_kind=kind, wall_s=wall_s, steps_run=steps_run,
            stopped_early=steps_run < self.args.steps, median_step_ci_halfwidth=self.adaptive.halfwidth,
            cudagraph_skips=cudagraph_skips(),
            compile_cache=self.compile_cache.facts() if self.compile_cache is not None else None,
            startup=startup.marks(),
        )
