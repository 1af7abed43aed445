"""Gate an unmodified training script: its optimizer steps are the step records.

``python -m perfgate.rank.instrument --records PATH --steps N --samples-per-step S -- SCRIPT ARGS...``
is what a rank runs under torchrun for a case with ``records=OptimizerSteps(...)``. Before the script runs it
registers torch's global optimizer step hook (``torch.optim.optimizer.register_optimizer_step_post_hook``), then
runs the script as ``__main__`` with exactly its own argv. Each step of the primary optimizer ends a step, timed
by the same StepRecorder the workloads use (CUDA events resolved late on a GPU, the host clock on CPU) and
lengthened by the same plant. After N optimizer steps (the case's steps, warm-up included, as for every
workload) every rank meets at a barrier and leaves with exit code 0, so no collective is left pending and the
records are complete.

What counts as a step, and the traps in how torch, Lightning and accelerate implement ``step``:

- One optimizer step is one step, whatever it took: with gradient accumulation, its samples are micro-batches
  x micro-batch size (the case's ``samples_per_step``, per rank).
- Only the primary optimizer counts: the case names its class, or it is the first optimizer that steps. Other
  optimizers' steps (a second model, one optimizer per parameter group) are counted apart, never as steps.
- An update the GradScaler skipped (inf/NaN gradients under fp16) is not a step: non-fused optimizers are then not
  called at all, which the scaler's ``update`` reveals; fused ones are called with ``found_inf`` set, which is read
  when the step resolves (no synchronize). The skipped interval is left out of the timing and counted.
- DeepSpeed's engine calls its optimizer on every micro-batch's ``engine.step()`` but steps the torch optimizer
  only at the gradient-accumulation boundary: that inner step is the one counted. Its ZeRO and FP16 optimizers skip
  an update with non-finite gradients (or an invalid gradient norm) without calling the torch optimizer, after
  telling their loss scaler ``update_scale(True)``: that call marks the skip, as the GradScaler's ``update`` does.
- Lightning runs forward and backward inside ``optimizer.step(closure)``; only the post hook is used, so the
  step-to-step interval is the whole iteration either way.
- A script that ends (returning, ``sys.exit(0)`` or ``os._exit(0)``), or runs ``--no-step-timeout`` seconds, without
  the steps asked for (a wrong entry, an optimizer that is not a ``torch.optim.Optimizer``) stops with an error
  naming the hook and what it saw; a failing exit keeps its own code and message.
"""

from __future__ import annotations

import argparse
import os
import resource
import runpy
import sys
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook

from perfgate.launch.hang_stacks import tell_stacks_on_request
from perfgate.rank.plant import SlowdownInjector
from perfgate.records.steps import StepRecorder

PROG = "perfgate.rank.instrument"
_exit = os._exit
"""The real ``os._exit``: the script's own calls go through ``ended_early`` while it runs."""


def fail(message: str) -> NoReturn:
    """A setup error, worded as a usage error so the launch names it as one; leaves at once (the script's threads
    and collectives are not waited for)."""
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    _exit(2)


class OptimizerStepCounter:
    """Turns the primary optimizer's steps into step records and stops the script after ``steps`` of them."""

    def __init__(self, args: argparse.Namespace, rank: int, world_size: int) -> None:
        self.target = args.steps
        self.samples = args.samples_per_step * world_size
        self.primary_name = args.optimizer
        self.primary: weakref.ref | None = None
        self.device_type = args.device
        self.recorder = StepRecorder(args.records if rank == 0 else None, device_type=self.device_type)
        self.injector = SlowdownInjector(args.inject_slowdown, self.device_type, self.recorder.step_times)
        self.steps = 0
        """Updates that happened: the primary optimizer's steps less the fused ones found skipped."""
        self.calls = 0
        """The primary optimizer's steps, skipped or not: the records' step numbers."""
        self.found_infs: list[torch.Tensor] = []
        """Fused optimizers' ``found_inf`` of each step since the last count: read together, once, at the end."""
        self.other_steps: dict[str, int] = {}
        self.skipped_updates = 0
        self.stepped_since_update = False
        self.deepspeed_watched = False
        self.start_facts = {"source": "optimizer_steps", "program": args.program, "world_size": world_size,
                            "samples_per_step": args.samples_per_step, "unit": args.unit, "optimizer": args.optimizer,
                            "precision": args.precision}
        self.flops_per_sample = args.flops_per_sample

    def install(self) -> None:
        register_optimizer_step_post_hook(self.after_step)
        scaler_update = torch.amp.GradScaler.update
        counter = self

        def update(scaler: Any, *args: Any, **kwargs: Any) -> None:
            counter.scaler_updated()
            return scaler_update(scaler, *args, **kwargs)

        torch.amp.GradScaler.update = update
        self.recorder.begin()
        self.injector.begin()

    def is_primary(self, optimizer: torch.optim.Optimizer) -> bool:
        if self.primary_name is not None:
            return type(optimizer).__name__ == self.primary_name
        if self.primary is None or self.primary() is None:
            self.primary = weakref.ref(optimizer)
        return self.primary() is optimizer

    def after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self.is_primary(optimizer):
            name = type(optimizer).__name__
            self.other_steps[name] = self.other_steps.get(name, 0) + 1
            return
        self.stepped_since_update = True
        if self.calls == 0:
            self.write_start()
            self.watch_deepspeed()
        found_inf = getattr(optimizer, "found_inf", None)
        scalars = {}
        if found_inf is not None:
            scalars["update_skipped"] = found_inf
            self.found_infs.append(found_inf)
        planted = self.injector.pause()
        self.recorder.end_step(self.calls, samples=self.samples, data_s=0.0, lr=optimizer.param_groups[0].get("lr"),
                               scalars=scalars, planted_s=planted if self.injector.fraction else None)
        self.calls += 1
        self.steps += 1
        if self.steps >= self.target and self.count_fused_skips() == 0:
            self.finish()

    def count_fused_skips(self) -> int:
        """Updates a fused optimizer was called for but skipped (``found_inf``): not steps, so the run goes on for as
        many more. Every rank reads the same flags (the gradients are all-reduced), so all agree where to stop; one
        device read, at the end."""
        if not self.found_infs:
            return 0
        skipped = int(torch.stack([t.reshape(()).float() for t in self.found_infs]).gt(0).sum().item())
        self.found_infs.clear()
        self.steps -= skipped
        self.skipped_updates += skipped
        return skipped

    def write_start(self) -> None:
        """The run's facts, at its first step: by then the script has chosen its device, whose name MFU needs."""
        device_name = torch.cuda.get_device_name() if self.device_type == "cuda" else "cpu"
        self.recorder.write("start", **self.start_facts, device_name=device_name,
                            instruction_clock=self.recorder.instruction_clock)
        if self.flops_per_sample:
            self.recorder.write("flops", flops_per_sample=self.flops_per_sample, declared=True)

    def scaler_updated(self) -> None:
        """GradScaler.update ends every iteration; one in which the primary optimizer never stepped was skipped."""
        if not self.stepped_since_update:
            self.update_skipped()
        self.stepped_since_update = False

    def update_skipped(self) -> None:
        """An iteration without an update ends here: neither timed as a step nor counted in the next one's plant."""
        self.skipped_updates += 1
        self.recorder.end_gap()
        self.injector.begin()

    def watch_deepspeed(self) -> None:
        """Wraps DeepSpeed's loss scalers' ``update_scale`` where the script uses DeepSpeed (by its first optimizer
        step it has built its engine): ``update_scale(True)`` is a skipped update. Skips before the first step fall
        in the first step, which is never measured."""
        module = sys.modules.get("deepspeed.runtime.fp16.loss_scaler")
        if module is None or self.deepspeed_watched:
            return
        self.deepspeed_watched = True
        counter = self
        for scaler in [value for value in vars(module).values() if isinstance(value, type)]:
            original = vars(scaler).get("update_scale")
            if original is None:
                continue

            def update_scale(loss_scaler: Any, overflow: Any, *args: Any, _original: Any = original,
                             **kwargs: Any) -> Any:
                if overflow:
                    counter.update_skipped()
                return _original(loss_scaler, overflow, *args, **kwargs)

            scaler.update_scale = update_scale

    def finish(self) -> NoReturn:
        """Every rank reached the last step: the records end, the ranks meet once, and leave with exit code 0."""
        peak, kind = peak_memory(self.device_type)
        self.recorder.close(steps_run=self.steps, skipped_updates=self.skipped_updates,
                            other_optimizer_steps=self.other_steps, peak_memory_bytes=peak, peak_memory_kind=kind)
        if dist.is_available() and dist.is_initialized():
            dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        _exit(0)

    def seen(self) -> str:
        others = ", ".join(f"{n} x{c}" for n, c in self.other_steps.items()) or "none"
        return (f"{self.steps} step(s) of the primary optimizer ({self.primary_name or 'the first to step'}), "
                f"other optimizers' steps: {others}, skipped updates: {self.skipped_updates}")


def peak_memory(device_type: str) -> tuple[int, str]:
    if device_type == "cuda":
        return torch.cuda.max_memory_allocated(), "cuda max_memory_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "host max RSS"


def watch_for_steps(counter: OptimizerStepCounter, timeout_s: float) -> None:
    """Ends a script that runs ``timeout_s`` without the steps asked for, saying what the hook saw."""
    def check() -> None:
        fail(f"no end after {timeout_s:g} s: {counter.seen()} of the {counter.target} asked for "
             "(torch.optim.optimizer.register_optimizer_step_post_hook sees only torch.optim.Optimizer subclasses: "
             "is the entry the training script, and does it step a torch optimizer?)")

    timer = threading.Timer(timeout_s, check)
    timer.daemon = True
    timer.start()


def run_program(program: Sequence[str]) -> None:
    """Runs the script (or ``-m module``) as ``__main__`` with exactly its own argv, as python would."""
    if program[0] == "-m":
        sys.argv = [program[1], *program[2:]]
        runpy.run_module(program[1], run_name="__main__", alter_sys=True)
        return
    script = Path(program[0]).resolve()
    if not script.is_file():
        fail(f"the entry script {program[0]} does not exist (in {os.getcwd()}): a Case's entry is relative to the "
             "rootdir, or to its cwd= where it has one")
    sys.argv = list(program)
    sys.path[0] = str(script.parent)
    runpy.run_path(program[0], run_name="__main__")


def run_to_its_end(program: Sequence[str], ended_early: Callable[[], NoReturn]) -> NoReturn:
    """Runs the script; its successful end, however it ends (returning, ``sys.exit(0)``, or ``os._exit(0)``, which
    scripts use to skip gloo's racy teardown), comes before the steps asked for, since the last one leaves from the
    hook: that is ``ended_early``. A failing exit keeps its code, as a crash. Forked children (loader workers) exit
    as they would."""
    script_pid = os.getpid()

    def script_exit(code: int) -> NoReturn:
        if code == 0 and os.getpid() == script_pid:
            ended_early()
        _exit(code)

    os._exit = script_exit
    try:
        run_program(program)
    except SystemExit as leaving:
        if leaving.code not in (0, None):
            raise
    ended_early()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, required=True, help="where rank 0 writes the step records")
    parser.add_argument("--steps", type=int, required=True, help="optimizer steps to run, warm-up included")
    parser.add_argument("--samples-per-step", type=int, required=True, help="samples per rank per optimizer step")
    parser.add_argument("--unit", default="samples", help="what a sample is (samples, tokens, images)")
    parser.add_argument("--optimizer", help="the primary optimizer's class name (default: the first that steps)")
    parser.add_argument("--flops-per-sample", type=float, help="training FLOPs per sample, for TFLOP/s and MFU")
    parser.add_argument("--precision", choices=("fp32", "tf32", "amp", "amp_bf16"),
                        help="the math the script trains in, for MFU's peak (amp: fp16, amp_bf16: bf16)")
    parser.add_argument("--inject-slowdown", type=float, default=0.0, help="plant this fraction of each step")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the steps run (their clock)")
    parser.add_argument("--cwd", type=Path, help="the directory the script starts in")
    parser.add_argument("--no-step-timeout", type=float, default=3600.0,
                        help="seconds without the steps asked for before the script is stopped with an error")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS... or -- -m MODULE ARGS...")
    args = parser.parse_args(argv)
    args.program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not args.program:
        parser.error("no program to run: give it after --")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.cwd is not None:
        os.chdir(args.cwd)
    counter = OptimizerStepCounter(args, int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
    counter.install()
    watch_for_steps(counter, args.no_step_timeout)
    tell_stacks_on_request()
    run_to_its_end(args.program, lambda: fail(
        f"the script ended after {counter.seen()}, before the {counter.target} optimizer steps asked for: give it "
        "more iterations, or the case fewer steps"))


if __name__ == "__main__":
    main()
