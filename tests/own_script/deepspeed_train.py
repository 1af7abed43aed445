"""A training script written for DeepSpeed, for perfgate's OptimizerSteps tests: no perfgate import, ZeRO stage 1
over gloo ranks started by torchrun, gradient accumulation inside the engine (``engine.step()`` on every
micro-batch), gradient clipping, and ``--overflow-at=3,6``: iterations that first sleep ``--overflow-sleep`` seconds
and whose loss is infinite, whose update ZeRO skips (the gradient norm is not finite) without calling the torch
optimizer. Rank 0 appends each sleep's start and end (``time.time()``) to ``--sleeps-log``, where one is given."""
import sys
import time

import deepspeed
import torch
import torch.nn as nn


def main():
    opts = dict(arg.lstrip("-").split("=", 1) for arg in sys.argv[1:])
    accum, iters = int(opts.get("accum", "4")), int(opts.get("max-iters", "100000"))
    overflow_at = {int(it) for it in opts.get("overflow-at", "").split(",") if it}
    overflow_sleep_s = float(opts.get("overflow-sleep", "0.3"))
    sleeps_log = opts.get("sleeps-log")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 1))
    config = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": accum, "gradient_clipping": 1.0,
              "zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": True,
              "steps_per_print": 10**9}
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
                                      config=config)
    last = time.perf_counter()
    for it in range(iters):
        if it in overflow_at:
            began = time.time()
            time.sleep(overflow_sleep_s)
            if sleeps_log and engine.global_rank == 0:
                with open(sleeps_log, "a") as log:
                    log.write(f"{began} {time.time()}\n")
        for _ in range(accum):
            x = torch.randn(16, 128)
            loss = nn.functional.mse_loss(engine(x), x.sum(dim=1, keepdim=True))
            if it in overflow_at:
                loss = loss * float("inf")
            engine.backward(loss)
            engine.step()
        now = time.perf_counter()
        if engine.global_rank == 0:
            print(f"iter {it} step_time {now - last:.4f}s", flush=True)
        last = now


if __name__ == "__main__":
    main()
