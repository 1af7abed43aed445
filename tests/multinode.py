"""A small real DDP job (gloo, one rank per node, seconds per launch) and a suite of three cases for the
multi-node launchers' tests: one that runs, one whose second node crashes, one that hangs."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO

TOY_DDP = """
import argparse, os, pathlib, time
import torch
import torch.distributed as dist
from perfgate import StepRecorder
from perfgate.launch.hang_stacks import tell_stacks_on_request

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
parser.add_argument("--records", type=pathlib.Path)
parser.add_argument("--crash-node", type=int, default=-1)
parser.add_argument("--hang", action="store_true")
args = parser.parse_args()
tell_stacks_on_request()
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
recorder = StepRecorder(args.records if rank == 0 else None, device_type="cpu")
recorder.write("start", world_size=dist.get_world_size(), global_batch=32 * dist.get_world_size(), device="cpu")
recorder.begin()
for step in range(args.steps):
    recorder.data_ready()
    if step == 2 and int(os.environ["PERFGATE_NODE"]) == args.crash_node:
        raise RuntimeError(f"planted crash on node {args.crash_node}")
    while args.hang and step == 2:
        time.sleep(1)
    loss = model(torch.randn(32, 64)).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(0.05)
    recorder.end_step(step, samples=32 * dist.get_world_size(), data_s=0.0, lr=None, scalars={"loss": loss.detach()})
recorder.close(peak_memory_bytes=0)
dist.destroy_process_group()
os._exit(0)  # no interpreter teardown: gloo's exit race can abort it (perfgate.launch.diagnose.EXIT_ABORT)
"""
SUITE = """
from perfgate import Case, Flavour, parametrize

TOY = {toy!r}
# Gated on the wall clock only: the toy's steps are mostly a sleep, and the little CPU time they take doubled beside
# other work in one CI-like run (gloo and the intra-op threads spin while they wait), failing the CPU clock at +100 %.
CASES = [
    Case("toy", "ddp", (TOY,), cpu=Flavour({{}}, steps=10, warmup=2, tolerance=0.5, ranks_per_node=1, timeout_s=120,
                                           gated=("fastest_step_samples_per_second",))),
    Case("toy", "crash", (TOY,), cpu=Flavour({{"crash-node": 1}}, steps=10, warmup=2, ranks_per_node=1, timeout_s=120)),
    Case("toy", "hang", (TOY,), cpu=Flavour({{"hang": True}}, steps=10, warmup=2, ranks_per_node=1, timeout_s=120)),
]

@parametrize(CASES)
def test_toy(perfgate, case):
    perfgate.check(case)
"""


def check_each_rank_wrote_its_stack(root: Path, test_dir: str) -> None:
    """The hang case's two nodes, one rank each: each rank's log ends with its stack, in the toy's loop."""
    logs = sorted(root.glob(f"**/{test_dir}/run0/node*/*/attempt_*/0/stderr.log"))
    assert len(logs) == 2, logs
    for log in logs:
        text = log.read_text()
        assert "most recent call first" in text and "<module>" in text, text[-2000:]


def write_suite(pytester):
    pytester.makepyfile(toy_ddp=TOY_DDP)
    pytester.makepyfile(test_suite=SUITE.format(toy=str(pytester.path / "toy_ddp.py")))


def interrupt_mid_run(pytester, args, sig):
    """Runs the hang case in a pytest session, sends ``sig`` once the last node's rank has started, and returns
    (the session's exit code, its output, its --basetemp)."""
    basetemp = pytester.path / f"interrupted-{sig.name}"
    session = subprocess.Popen([sys.executable, "-m", "pytest", *args, "-k", "hang", "--basetemp", str(basetemp)],
                               cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not list(basetemp.glob("*/run0/node1/*/attempt_0/0")):
            assert time.monotonic() < deadline and session.poll() is None, "the second node's rank never started"
            time.sleep(0.5)
        session.send_signal(sig)
        output, _ = session.communicate(timeout=60)
    finally:
        session.kill()
    return session.returncode, output, basetemp


NODE_LOCAL_SUITE = "tests/own_script/node_local_cases.py"
"""The U-Net, which writes its volume into each node's temp dir, and an unmodified script started under
OptimizerSteps' wrapper: the workloads whose launch on two nodes differs from the toy job's. ResNet-50, OpenCLIP and
the U-Net's DALI loader (which reads the same volume) launch as the toy job does."""
NODE_LOCAL_COUNT = 2
"""The cases of NODE_LOCAL_SUITE."""
NODE_LOCAL_VOLUME = "perfgate-unet3d-v1-64-seed0"
"""The folder of NODE_LOCAL_SUITE's U-Net volume (its --volume 64) in each node's temp dir."""


def run_node_local_workloads(launcher_args, into, env=None):
    """Measures each case of NODE_LOCAL_SUITE once as a fresh baseline (so each passes when its launch measured),
    through the given launcher; returns the finished pytest session."""
    command = [sys.executable, "-m", "pytest", NODE_LOCAL_SUITE, *launcher_args, "--update-baselines",
               "--perf-baseline-repeats", "1", "--baseline-dir",
               str(into / "b"), "--hardware-class", "two-nodes", "--basetemp", str(into / "runs"),
               "-p", "no:cacheprovider", "-q", "-rs"]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


FAKE_PYNVML = """
'''A stand-in for nvidia-ml-py on a machine without NVIDIA's driver: one GPU that is 80 % busy.'''
from types import SimpleNamespace
class NVMLError(Exception):
    pass
NVML_CLOCK_SM = 1
nvmlClocksEventReasonSwPowerCap = 4
def nvmlInit(): pass
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(index): return index
def nvmlDeviceGetUtilizationRates(handle): return SimpleNamespace(gpu=80)
def nvmlDeviceGetMemoryInfo(handle): return SimpleNamespace(used=2**30, total=2**34)
def nvmlDeviceGetPowerUsage(handle): return 300000
def nvmlDeviceGetClockInfo(handle, clock): return 1500
def nvmlDeviceGetCurrentClocksEventReasons(handle): return 0
"""


def launch_sampling_node_gpus(launcher, into, nodes=2):
    """One launch of a 2-second sleeper with LaunchSpec.node_gpu_samples, each node's NVML the fake one; returns the
    run's directory."""
    fake = into / "fake-nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML)
    sleeper = into / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(2)\n")
    from perfgate.launch.plan import import_env
    from perfgate.launch.spec import LaunchSpec

    env = import_env(REPO)
    env["PYTHONPATH"] = f"{fake}:{env['PYTHONPATH']}"
    spec = LaunchSpec(entry=(str(sleeper),), workdir=into / "run", nodes=nodes, timeout_s=120, env=env,
                      node_gpu_samples=True)
    launcher.launch(spec)
    return spec.workdir


OTHER = REPO / ".venv-other" / "bin" / "python"
"""The reference environment of the --perf-against-python tests: .venv with open_clip 3.2.0 in front (`make test`)."""
needs_other = pytest.mark.skipif(not OTHER.exists(), reason=f"{OTHER} is not there: `make test` creates it")


def check_reference_side_under_other(pytester, result, node_command):
    """--perf-against-python on two nodes: the case passed, the reference side ran ``OTHER <node_command>`` (the
    candidate did not), and each reference run's records come from both nodes' ranks."""
    result.assert_outcomes(passed=1)
    stored = json.loads(max(pytester.path.glob("**/test_toy_ddp_cpu_0/result.json"),
                            key=lambda p: p.stat().st_mtime).read_text())
    assert (stored["environment"]["open_clip"], stored["reference"]["environment"]["open_clip"]) == ("3.3.0", "3.2.0")
    assert f"{OTHER} {node_command}" in stored["reference"]["command"]
    assert f"{OTHER} {node_command}" not in stored["command"]
    for run_dir in Path(stored["workdir"]).glob("reference/run*"):
        assert json.loads((run_dir / "steps.jsonl").open().readline())["world_size"] == 2
