"""A training script written the way a team writes its own, for perfgate's OptimizerSteps tests: no perfgate import,
its own --key=value options and config file (read relative to the working directory), gradient accumulation,
AdamW, its own per-step log line, DDP over gloo when started by torchrun."""
import logging
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

log = logging.getLogger("own_train")


def read_options(argv):
    opts = {}
    for arg in argv:
        key, _, value = arg.lstrip("-").partition("=")
        opts[key.replace("-", "_")] = value
    return opts


def read_config(path):
    config = {}
    with open(path) as fh:
        for line in fh:
            line = line.split("#")[0].strip()
            if line:
                key, value = (part.strip() for part in line.split("=", 1))
                config[key] = value
    return config


class Net(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    opts = read_options(sys.argv[1:])
    config = read_config(opts.get("config", "configs/small.cfg"))
    width, depth = int(config["width"]), int(config["depth"])
    micro_batch, accum = int(config["micro_batch"]), int(opts.get("accum", config["accum"]))
    max_iters, lr = int(opts.get("max_iters", config["max_iters"])), float(opts.get("lr", "1e-3"))
    crash_at = int(opts.get("crash_at", "-1"))
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format="%(asctime)s own_train %(message)s")
    torch.manual_seed(0)
    model = Net(width, depth)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(rank)
    last = time.perf_counter()
    for it in range(max_iters):
        if it == crash_at:
            raise RuntimeError(f"own_train: planned crash at iteration {it}")
        for micro in range(accum):
            x = torch.randn(micro_batch, width, generator=generator)
            y = x.sum(dim=1, keepdim=True)
            loss = nn.functional.mse_loss(model(x), y) / accum
            if distributed and micro < accum - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        now = time.perf_counter()
        log.info("iter %d loss %.4f step_time %.4fs", it, loss.item() * accum, now - last)
        last = now
    if distributed:
        dist.barrier()  # every rank done before the gloo pairs close
        dist.destroy_process_group()
    logging.shutdown()
    # Skip the interpreter's teardown: a gloo worker thread can release the last collective's work (which holds a
    # Python object) after Python has begun to exit, and that thread's exit aborts the rank with "terminate called
    # without an active exception" (5 of 165 runs beside two busy processes, 0 of 90 so; pytorch PR 179291).
    os._exit(0)


if __name__ == "__main__":
    main()
