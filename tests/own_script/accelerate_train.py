"""A training script written for Hugging Face accelerate, for perfgate's OptimizerSteps tests: no perfgate import,
gradient accumulation through ``accelerator.accumulate`` (the wrapped optimizer's ``step`` is called on every
micro-batch and updates only on the last), DDP over gloo when started by torchrun."""
import sys
import time

import torch
import torch.nn as nn
from accelerate import Accelerator


def main():
    opts = dict(arg.lstrip("-").split("=", 1) for arg in sys.argv[1:])
    accum, iters = int(opts.get("accum", "4")), int(opts.get("max-iters", "100000"))
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accum)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    last = time.perf_counter()
    for it in range(iters):
        for _ in range(accum):
            with accelerator.accumulate(model):
                x = torch.randn(16, 128)
                loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        now = time.perf_counter()
        if accelerator.is_main_process:
            print(f"iter {it} step_time {now - last:.4f}s", flush=True)
        last = now


if __name__ == "__main__":
    main()
