"""torch.compile's caches kept under perfgate's cache directory across launches, what a launch's records say of
them, and the warning when inductor could not cache a graph."""

import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
from fakes import make_plan, record
from replay_launcher import ReplayLauncher

from conftest import REPO
from perfgate.launch.caches import compile_cache_env
from perfgate.launch.plan import child_env
from perfgate.measure.measurer import CompileCacheBypassWarning, Measurer

COMPILE_VARIABLES = ("PERFGATE_CACHE_DIR", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in COMPILE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_the_ranks_compile_into_perfgates_cache_directory_unless_the_user_chose_one(clean_env, tmp_path):
    assert compile_cache_env() == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "home/.cache/perfgate/inductor"),
                                   "TRITON_CACHE_DIR": str(tmp_path / "home/.cache/perfgate/triton")}
    clean_env.setenv("XDG_CACHE_HOME", "/xdg")
    assert compile_cache_env()["TORCHINDUCTOR_CACHE_DIR"] == "/xdg/perfgate/inductor"
    clean_env.setenv("PERFGATE_CACHE_DIR", "/ci/cache")
    clean_env.setenv("TRITON_CACHE_DIR", "/mine/triton")
    assert compile_cache_env() == {"TORCHINDUCTOR_CACHE_DIR": "/ci/cache/inductor", "TRITON_CACHE_DIR": "/mine/triton"}
    env = child_env("gpu", REPO)
    assert (env["TORCHINDUCTOR_CACHE_DIR"], env["TRITON_CACHE_DIR"]) == ("/ci/cache/inductor", "/mine/triton")


@pytest.mark.parametrize("reasons, why", [
    ([], r"run with TORCH_LOGS=\+inductor to see why"),
    (["Bypassing FX Graph Cache because 'Can't pickle'"], r"Bypassing FX Graph Cache because 'Can't pickle'")])
def test_a_launch_whose_graphs_inductor_could_not_cache_is_named_in_a_warning(tmp_path, reasons, why):
    """With inductor's own reasons where the rank kept them (workloads/compile_cache.py), else how to see them."""
    source = tmp_path / "recorded"
    source.mkdir()
    records = [{"kind": "start", "t": 1.0, "world_size": 1, "global_batch": 8},
               *({"kind": "step", "t": 2.0 + i, "step": i, "samples": 8, "step_s": 1.0, "data_s": 0.0}
                 for i in range(4)),
               {"kind": "end", "t": 6.0, "peak_memory_bytes": 1,
                "compile_cache": {"hits": 0, "misses": 1, "bypasses": 2, "dir": "/c/inductor",
                                  "bypass_reasons": reasons}}]
    (source / "steps.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    measurer = Measurer(make_plan(tmp_path), record("w-c-cpu"), launcher=ReplayLauncher(source, 1.0), root=tmp_path)
    with pytest.warns(CompileCacheBypassWarning, match=r"w-c-cpu run 1: torch.compile could not cache 2 graph\(s\) "
                                                       rf"in /c/inductor .* again in every launch: {why}$"):
        measurer.launch_once(1)
    assert measurer.measurement.runs[0]["facts"]["end"]["compile_cache"]["bypasses"] == 2


COMPILE_AND_KEEP = """
import json, sys
import torch
sys.path.insert(0, {workloads!r})
from compile_cache import CompileCache
cache = CompileCache(rank=0)
cache.before_compiling()
double = torch.compile(lambda x: x * 2 + 1)
double(torch.ones(8))
cache.after_running()
print(json.dumps(cache.facts()))
"""


@pytest.mark.launches
def test_a_later_process_loads_what_the_first_compiled_from_the_directory_or_the_artifacts_file(clean_env, tmp_path):
    """torch.compile on CPU (inductor's C++ backend). The first process compiles into perfgate's cache directory and
    saves the case's Mega-Cache artifacts; a second with the same directory (a later launch, or a job that restored
    it) loads its graphs from there; a third whose directory is empty but for the artifacts file (another job) loads
    them from the file. Neither compiles nor traces a graph anew."""
    if not any(shutil.which(name) for name in ("c++", "g++")):
        pytest.skip("torch.compile on CPU needs a C++ compiler (c++ or g++) on PATH")
    clean_env.setenv("PERFGATE_CACHE_DIR", str(tmp_path / "cache"))
    stem = tmp_path / "cache" / "compile-artifacts" / "cpu-class" / "case"
    script = COMPILE_AND_KEEP.format(workloads=str(REPO / "workloads"))
    facts = []
    for cache in ("cache", "cache", "another-job"):
        env = {**os.environ, **compile_cache_env(), "PERFGATE_COMPILE_ARTIFACTS": str(stem),
               "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / cache / "inductor"),
               "TRITON_CACHE_DIR": str(tmp_path / cache / "triton")}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        facts.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, warm, other_job = facts
    assert first["misses"] >= 1 and first["hits"] == 0 and first["bypasses"] == 0 and first["bypass_reasons"] == []
    assert first["dir"] == warm["dir"] == str(tmp_path / "cache" / "inductor")
    assert first["artifacts"] == {"file": first["artifacts"]["file"], "loaded": False, "saved": True}
    assert first["artifacts"]["file"].startswith(f"{stem}-torch") and first["artifacts"]["file"].endswith(".bin")
    for later in (warm, other_job):
        assert later["hits"] == first["misses"] and later["misses"] == 0
        assert later["artifacts"] == {**first["artifacts"], "loaded": True, "saved": False}
        assert later["autograd_cache"] == {"hits": first["autograd_cache"]["misses"], "misses": 0, "bypasses": 0}, (
            "AOTAutograd's entries come back too, or every launch traces the graphs again")
    assert first["autograd_cache"]["misses"] >= 1


def test_a_torch_without_mega_cache_says_so_and_compiles_as_before(monkeypatch):
    sys.path.insert(0, str(REPO / "workloads"))
    try:
        import compile_cache
    finally:
        sys.path.remove(str(REPO / "workloads"))
    import torch

    if not hasattr(torch.compiler, "save_cache_artifacts"):
        pytest.skip(f"torch {torch.__version__} has no Mega-Cache to take away")
    monkeypatch.setenv("PERFGATE_COMPILE_ARTIFACTS", "/c/case")
    assert compile_cache.artifacts_file()[0].name.startswith(f"case-torch{torch.__version__}-triton")
    monkeypatch.delattr(torch.compiler, "save_cache_artifacts")
    path, why_not = compile_cache.artifacts_file()
    assert path is None and why_not == (f"torch {torch.__version__} has no Mega-Cache "
                                        "(torch.compiler.save_cache_artifacts, torch 2.7+)")
    monkeypatch.undo()
    monkeypatch.delenv("PERFGATE_COMPILE_ARTIFACTS", raising=False)
    assert compile_cache.artifacts_file() == (None, "PERFGATE_COMPILE_ARTIFACTS is not set (perfgate's launchers set it)")


class Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_each_bypass_is_kept_with_its_reason_and_what_reaches_the_handlers_is_unchanged():
    """Inductor logs why it bypassed its cache at INFO, below what its logger shows by default: the reason is kept,
    and a handler still sees only what it saw before (the warning)."""
    sys.path.insert(0, str(REPO / "workloads"))
    try:
        from compile_cache import BypassReasons
    finally:
        sys.path.remove(str(REPO / "workloads"))
    logger, handler = logging.getLogger("torch._inductor.codecache"), Kept()
    logger.setLevel(logging.WARNING)
    logger.addHandler(handler)
    reasons = BypassReasons()
    reasons.install()
    try:
        logger.info("Bypassing FX Graph Cache because '%s'", "Can't pickle a lambda")
        logger.info("Bypassing FX Graph Cache because '%s'", "Can't pickle a lambda")
        logger.warning("a warning still shows")
        assert reasons.reasons == ["Bypassing FX Graph Cache because 'Can't pickle a lambda'"]
        assert handler.messages == ["a warning still shows"]
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(reasons)
        logger.setLevel(logging.NOTSET)
