"""torch's build read from its version.py and its metadata's NCCL pin, and a session that learns a GPU-less host has
no GPU without importing torch."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from perfgate.launch import torch_build

TORCH_2_14 = ("from typing import Optional\n\n"
              "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']\n"
              "__version__ = '2.14.1+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n"
              "git_version = '5c4886908584029761b579af026dcfb627c84070'\nhip: Optional[str] = None\n"
              "rocm: Optional[str] = None\nxpu: Optional[str] = None\n")
"""torch 2.14.1+cu130's version.py, verbatim."""
PLAIN = "__version__ = '1.13.1+rocm5.2'\ncuda = None\nhip = '5.2.21151'\n"


@pytest.mark.parametrize("text, expected", [
    (TORCH_2_14, {"__version__": "2.14.1+cu130", "cuda": "13.0", "hip": None}),
    (PLAIN, {"__version__": "1.13.1+rocm5.2", "cuda": None, "hip": "5.2.21151"}),
    ("__version__ = '2.5.1'\ncuda = compute()\nhip = None\n", {}),
    ("__version__ = '2.5.1'\n", {}),
    ("not python (", {}),
], ids=["torch-2.14", "plain-rocm", "computed", "partial", "unparsable"])
def test_the_build_is_read_from_version_py_and_anything_unexpected_reads_as_unknown(tmp_path, text, expected):
    (tmp_path / "version.py").write_text(text)
    assert torch_build.read_build(tmp_path / "version.py") == expected
    assert torch_build.read_build(tmp_path / "missing.py") == {}


def test_the_installed_torch_reads_as_torch_itself_says():
    torch = pytest.importorskip("torch")
    assert torch_build.facts() == {"__version__": torch.__version__, "cuda": torch.version.cuda,
                                   "hip": torch.version.hip}
    if torch.cuda.is_available():
        assert not torch_build.sees_no_cuda_gpu(), "a host with a GPU must be asked"


def test_the_pinned_nccl_is_the_nccl_the_installed_torch_reports():
    torch = pytest.importorskip("torch")
    if not torch.version.cuda or torch_build.pinned_nccl() is None:
        pytest.skip("no pip-installed CUDA torch that pins its NCCL here")
    assert torch_build.pinned_nccl() == ".".join(str(part) for part in torch.cuda.nccl.version())


@pytest.mark.parametrize("requirements, expected", [
    (['nvidia-nccl-cu13==2.30.7; platform_system == "Linux"', "filelock"], "2.30.7"),
    (["filelock", "nvidia-cublas-cu12==12.4.5.8"], None),
    (["nvidia-nccl-cu12>=2.20"], None),
    (None, None),
], ids=["pinned", "no-nccl", "not-pinned", "no-requirements"])
def test_only_the_nccl_torch_pins_names_its_nccl(monkeypatch, requirements, expected):
    """Another package's nvidia-nccl-cu12 wheel (xgboost's, jax's) beside a torch that pins none says nothing."""
    monkeypatch.setattr(torch_build.metadata, "requires", lambda name: requirements)
    assert torch_build.pinned_nccl() == expected


def test_a_cuda_torch_without_a_pinned_nccl_is_asked_for_it(monkeypatch):
    """A container's own build on a host without a driver: its NCCL comes from torch, as it did before."""
    from perfgate.launch import environment

    fake_torch = SimpleNamespace(version=SimpleNamespace(cuda="12.4"),
                                 cuda=SimpleNamespace(nccl=SimpleNamespace(version=lambda: (2, 21, 5))))
    monkeypatch.setattr(torch_build, "sees_no_cuda_gpu", lambda: True)
    monkeypatch.setattr(torch_build, "facts", lambda: {"__version__": "2.5.0a0", "cuda": "12.4", "hip": None})
    monkeypatch.setattr(torch_build, "pinned_nccl", lambda: None)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    info = environment.describe()
    assert (info["cuda"], info["nccl"], "torch_error" in info) == ("12.4", "2.21.5", False)


def no_driver(name):
    raise OSError(f"{name}: cannot open shared object file: No such file or directory")


@pytest.mark.parametrize("build, driver, platform, expected", [
    ({"__version__": "2.13.0+cpu", "cuda": None, "hip": None}, True, "linux", True),
    ({"__version__": "2.14.1+cu130", "cuda": "13.0", "hip": None}, False, "linux", True),
    ({"__version__": "2.14.1+cu130", "cuda": "13.0", "hip": None}, True, "linux", False),
    ({"__version__": "2.14.1+cu130", "cuda": "13.0", "hip": None}, False, "win32", False),
    ({"__version__": "2.5.1+rocm6.2", "cuda": None, "hip": "6.2"}, False, "linux", False),
    ({}, False, "linux", False),
], ids=["cpu-build", "cuda-build-no-driver", "cuda-build-driver", "windows", "rocm-build", "unknown-build"])
def test_only_a_build_that_cannot_see_a_gpu_here_answers_without_torch(monkeypatch, build, driver, platform, expected):
    """A ROCm build's torch.cuda sees AMD GPUs without libcuda, Windows' driver is another library, and an unknown
    build is asked, as before."""
    monkeypatch.setattr(torch_build, "facts", lambda: build)
    monkeypatch.setattr(torch_build.ctypes, "CDLL", (lambda name: object()) if driver else no_driver)
    monkeypatch.setattr(torch_build.sys, "platform", platform)
    torch_build.sees_no_cuda_gpu.cache_clear()
    try:
        assert torch_build.sees_no_cuda_gpu() is expected
    finally:
        torch_build.sees_no_cuda_gpu.cache_clear()


@pytest.mark.launches
def test_without_a_gpu_a_session_reads_hardware_versions_and_environment_without_importing_torch():
    if not torch_build.sees_no_cuda_gpu() or (torch_build.facts()["cuda"] and torch_build.pinned_nccl() is None):
        pytest.skip("torch must be asked here: a CUDA driver loads, or it pins no NCCL")
    script = ("import sys\nfrom perfgate.launch import environment, hardware\n"
              "hw = hardware.detect(); versions = hardware.software_versions(); env = environment.describe()\n"
              "assert 'torch' not in sys.modules, 'torch was imported'\n"
              "print(hw.gpu_count, versions['torch'], versions['cuda'], versions['nccl'], env['cuda'], env['nccl'])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    build = torch_build.facts()
    nccl = torch_build.pinned_nccl() if build["cuda"] else None
    assert done.stdout.split() == ["0", build["__version__"], str(build["cuda"]), "None", str(build["cuda"]), str(nccl)]
