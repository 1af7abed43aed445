"""torch's build read from its version.py, and a session that learns a GPU-less host has no GPU without importing
torch."""

import subprocess
import sys

import pytest

from perfgate.launch import torch_build

ANNOTATED = ("from typing import Optional\n__version__ = '2.14.1+cu130'\ndebug = False\n"
             "cuda: Optional[str] = '13.0'\ngit_version = 'abc'\nhip: Optional[str] = None\n")
PLAIN = "__version__ = '1.13.1+rocm5.2'\ncuda = None\nhip = '5.2.21151'\n"


@pytest.mark.parametrize("text, expected", [
    (ANNOTATED, {"__version__": "2.14.1+cu130", "cuda": "13.0", "hip": None}),
    (PLAIN, {"__version__": "1.13.1+rocm5.2", "cuda": None, "hip": "5.2.21151"}),
    ("__version__ = '2.5.1'\ncuda = compute()\nhip = None\n", {}),
    ("__version__ = '2.5.1'\n", {}),
    ("not python (", {}),
])
def test_the_build_is_read_from_version_py_and_anything_unexpected_reads_as_unknown(tmp_path, text, expected):
    (tmp_path / "version.py").write_text(text)
    assert torch_build.read_build(tmp_path / "version.py") == expected
    assert torch_build.read_build(tmp_path / "missing.py") == {}


def test_the_installed_torch_reads_as_torch_itself_says():
    torch = pytest.importorskip("torch")
    assert torch_build.facts() == {"__version__": torch.__version__, "cuda": torch.version.cuda,
                                   "hip": torch.version.hip}


def no_driver():
    raise OSError("libcuda.so.1: cannot open shared object file: No such file or directory")


@pytest.mark.parametrize("build, driver, expected", [
    ({"__version__": "2.13.0+cpu", "cuda": None, "hip": None}, True, True),
    ({"__version__": "2.14.1+cu130", "cuda": "13.0", "hip": None}, False, True),
    ({"__version__": "2.14.1+cu130", "cuda": "13.0", "hip": None}, True, False),
    ({"__version__": "2.5.1+rocm6.2", "cuda": None, "hip": "6.2"}, False, False),
    ({}, False, False),
], ids=["cpu-build", "cuda-build-no-driver", "cuda-build-driver", "rocm-build", "unknown-build"])
def test_only_a_build_that_cannot_see_a_gpu_here_answers_without_torch(monkeypatch, build, driver, expected):
    """A ROCm build's torch.cuda sees AMD GPUs without libcuda, and an unknown build is asked, as before."""
    monkeypatch.setattr(torch_build, "facts", lambda: build)
    monkeypatch.setattr(torch_build.ctypes, "CDLL", (lambda name: object()) if driver else (lambda name: no_driver()))
    torch_build.sees_no_cuda_gpu.cache_clear()
    try:
        assert torch_build.sees_no_cuda_gpu() is expected
    finally:
        torch_build.sees_no_cuda_gpu.cache_clear()


@pytest.mark.launches
def test_without_a_gpu_a_session_reads_hardware_versions_and_environment_without_importing_torch():
    if not torch_build.sees_no_cuda_gpu():
        pytest.skip("a CUDA driver loads here: the session asks torch for the GPUs, as it must")
    script = ("import sys\nfrom perfgate.launch import environment, hardware\n"
              "hw = hardware.detect(); versions = hardware.software_versions(); env = environment.describe()\n"
              "assert 'torch' not in sys.modules, 'torch was imported'\n"
              "print(hw.gpu_count, versions['torch'], versions['cuda'], versions['nccl'], env['cuda'], env['nccl'])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    build = torch_build.facts()
    assert done.stdout.split() == ["0", build["__version__"], str(build["cuda"]), "None", str(build["cuda"]), "None"]
