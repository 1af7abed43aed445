"""A small MLP trained by perfgate's Trainer under torchrun, as it is or with one of the code changes a profile diff
must name (issue 72): ``--change matmul`` (an extra matmul in the forward), ``contiguous`` (a copy of an activation),
``fp32`` (where bf16 autocast was), ``sleepy-loader`` (a loader that sleeps before each batch)."""

from __future__ import annotations

import argparse
import time

import torch

import train_common as common
import workload_args

CHANGES = ("none", "matmul", "contiguous", "fp32", "sleepy-loader")
WIDTH = 1024


class Net(torch.nn.Module):
    def __init__(self, change: str) -> None:
        super().__init__()
        self.change = change
        self.first, self.second = torch.nn.Linear(WIDTH, WIDTH), torch.nn.Linear(WIDTH, 10)
        self.register_buffer("extra", torch.eye(WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.first(x))
        if self.change == "matmul":
            for _ in range(4):
                hidden = hidden @ self.extra
        if self.change == "contiguous":
            for _ in range(40):
                hidden = hidden.t().contiguous().t().contiguous()
        return self.second(hidden)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    workload_args.add_common_args(parser, batch_size=128, steps=12)
    parser.add_argument("--change", choices=CHANGES, default="none")
    parser.add_argument("--precision", default="amp_bf16")
    args = parser.parse_args()
    problems = workload_args.common_problems(args)
    if problems:
        parser.error("; ".join(problems))
    precision = "fp32" if args.change == "fp32" else args.precision
    env = common.init_distributed(args.device)
    torch.manual_seed(args.seed)
    model = Net(args.change)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    autocast = common.autocast_for(precision, env.device)
    ddp_model = common.wrap_ddp(model, env, args)
    batch = (torch.randn(args.batch_size, WIDTH), torch.randint(0, 10, (args.batch_size,)))

    def batches():
        for _ in range(args.steps):
            if args.change == "sleepy-loader":
                time.sleep(0.03)
            yield batch

    def step(index: int, data) -> dict[str, torch.Tensor]:
        inputs, labels = data
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = torch.nn.functional.cross_entropy(ddp_model(inputs), labels)
        loss.backward()
        optimizer.step()
        return {"loss": loss}

    trainer = common.Trainer(args, env, global_batch=args.batch_size * env.world_size)
    trainer.start(workload="changed", change=args.change)
    trainer.run(ddp_model, batches, step, input_pipeline=False)
    common.leave_without_teardown()


if __name__ == "__main__":
    main()
