"""How the host waits for the GPU: blocking sync set through a fake CUDA driver that answers as the real one does
(CUresult codes, cuGetErrorName), the real driver's absence on a machine without one, and on a GPU the flag torch's
context then has."""

import ctypes
import os
import subprocess
import sys

from pathlib import Path

import pytest

from perfgate.records import host_wait
from perfgate.records.host_wait import BLOCKING, SPINS, block_while_waiting

CUDA_ERROR_NO_DEVICE, CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE = 100, 708
REPO = Path(__file__).resolve().parent.parent
NAMES = {CUDA_ERROR_NO_DEVICE: b"CUDA_ERROR_NO_DEVICE",
         CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE: b"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"}


class FakeDriver:
    """libcuda's calls that block_while_waiting makes; ``fails`` maps a call to the CUresult it returns."""

    def __init__(self, fails=None, v2=True):
        self.fails = fails or {}
        self.calls = []
        if v2:
            self.cuDevicePrimaryCtxSetFlags_v2 = lambda device, flags: self._set("cuDevicePrimaryCtxSetFlags_v2",
                                                                                device, flags)

    def _answer(self, name, *args):
        self.calls.append((name, *args))
        return self.fails.get(name, 0)

    def cuInit(self, flags):
        return self._answer("cuInit", flags)

    def cuDeviceGet(self, device_ref, ordinal):
        device_ref._obj.value = 10 + ordinal
        return self._answer("cuDeviceGet", ordinal)

    def cuDevicePrimaryCtxSetFlags(self, device, flags):
        return self._set("cuDevicePrimaryCtxSetFlags", device, flags)

    def _set(self, name, device, flags):
        return self._answer(name, device.value, flags)

    def cuGetErrorName(self, code, name_ref):
        if code not in NAMES:
            return 1
        name_ref._obj.value = NAMES[code]
        return 0


def test_blocking_sync_is_set_on_the_ranks_own_gpu():
    driver = FakeDriver()
    assert block_while_waiting(3, driver) == BLOCKING
    assert driver.calls == [("cuInit", 0), ("cuDeviceGet", 3), ("cuDevicePrimaryCtxSetFlags_v2", 13, 4)]


def test_an_older_driver_without_the_v2_call_is_asked_with_the_first_one():
    driver = FakeDriver(v2=False)
    assert block_while_waiting(0, driver) == BLOCKING
    assert driver.calls[-1] == ("cuDevicePrimaryCtxSetFlags", 10, 4)


@pytest.mark.parametrize("call, code, says", [
    ("cuInit", CUDA_ERROR_NO_DEVICE, "cuInit failed: CUDA_ERROR_NO_DEVICE"),
    ("cuDevicePrimaryCtxSetFlags", CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
     "cuDevicePrimaryCtxSetFlags failed: CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"),
    ("cuDeviceGet", 999, "cuDeviceGet failed: CUresult 999"),
])
def test_a_driver_that_refuses_leaves_cudas_default_and_says_which_call_and_why(call, code, says):
    driver = FakeDriver({call: code}, v2=False)
    line = block_while_waiting(0, driver)
    assert line.startswith(SPINS) and says in line
    assert [c[0] for c in driver.calls][-1] == call, "it went on after a refusal"


def test_without_a_cuda_driver_the_line_says_it_did_not_load(monkeypatch):
    def missing():
        raise OSError("libcuda.so.1: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(host_wait, "load_driver", missing)
    line = block_while_waiting(0)
    assert line.startswith(SPINS) and "did not load: libcuda.so.1: cannot open" in line


def driver_loads():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(not driver_loads(), reason="no CUDA driver (libcuda.so.1) on this machine: the real call is "
                                                "checked on a GPU runner")
def test_torchs_context_on_a_real_gpu_has_the_blocking_flag():
    check = ("import ctypes, torch; from perfgate.records.host_wait import block_while_waiting as b\n"
             "line = b(0); torch.ones(1, device='cuda').sum().item()\n"
             "cuda = ctypes.CDLL('libcuda.so.1')\n"
             "dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()\n"
             "cuda.cuDeviceGet(ctypes.byref(dev), 0)\n"
             "cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active))\n"
             "print(line); print(flags.value & 7, active.value)")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if "no CUDA GPUs are available" in done.stderr or "CUDA_ERROR_NO_DEVICE" in done.stdout:
        pytest.skip("a CUDA driver but no GPU")
    assert done.returncode == 0, done.stderr
    line, state = done.stdout.splitlines()[-2:]
    assert line == BLOCKING and state == "4 1"
