"""The workloads whose launch on two nodes differs from the toy job's, as perf cases for the launcher tests
(tests/multinode.py passes this file to pytest; its name keeps it out of `make test`'s collection): the U-Net writes
its volume into each node's temp dir, and an unmodified script (train.py here) starts under OptimizerSteps' wrapper.

The smallest settings, as what the tests check is where each node's files go and that each case measures, not the
training (every workload trains on the local launcher in test_workloads and test_torch_range). The U-Net keeps two
ranks per node, so that a node's second rank reads the volume its first wrote; the script runs one."""

from pathlib import Path

from perfgate import Case, Flavour, OptimizerSteps, parametrize

HERE = Path(__file__).resolve().parent
UNET3D = HERE.parent.parent / "workloads" / "unet3d_train.py"

CASES = [
    Case("unet3d", "node-local", (str(UNET3D),),
         cpu=Flavour({"device": "cpu", "base-channels": 2, "batch-size": 1, "volume": 64, "loader": "torch",
                      "workers": 0}, steps=6, warmup=2, timeout_s=300)),
    Case("own", "mlp", ("train.py",), cwd=str(HERE), records=OptimizerSteps(samples_per_step=64),
         cpu=Flavour({}, steps=6, warmup=2, ranks_per_node=1, timeout_s=300)),
]


@parametrize(CASES)
def test_node_local(perfgate, case):
    perfgate.check(case)
