"""What a compiled case's warm-up (where torch.compile runs) costs cold, on a second launch, and in a new job that
restored perfgate's cache directory, or only the case's Mega-Cache artifacts file.

    python benchmarks/compile_warm_start.py
    python benchmarks/compile_warm_start.py --case 'test_unet3d[fp32-torch-w1-bucket25-compile-cpu]'

Each job is a pytest session of the case (no baseline: two launches) with a cache directory of its own:
  cold      an empty one: the first launch compiles, the second loads what it compiled;
  restored  a copy of the cold job's whole directory, as a CI job restores it (actions/cache);
  artifacts an empty one but for the cold job's compile-artifacts/ folder (torch's Mega-Cache file alone).
It prints each launch's warm-up seconds and the FX graph cache's hits and misses. perfgate's goal: a second launch,
and a restored job's first, spend at most 25 % of the cold launch's warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def job(case: str, cache: Path, out: Path) -> list[dict]:
    """One session of ``case`` with ``cache`` as perfgate's cache directory; each launch's warm-up and cache counts."""
    runs = out / f"{cache.name}-runs"
    command = [sys.executable, "-m", "pytest", f"tests_perf/{case.split('[')[0]}.py",
               "--full-matrix", "-k", case.split("[")[1].rstrip("]"), "--hardware-class", "compile-warm-start",
               "--perf-repeats", "2", "--basetemp", str(runs), "-p", "no:cacheprovider", "-q"]
    done = subprocess.run(command, cwd=REPO, env={**os.environ, "PERFGATE_CACHE_DIR": str(cache)}, capture_output=True,
                          text=True, timeout=3600)
    found = list(runs.rglob("result.json"))
    if len(found) != 1:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    record = json.loads(found[0].read_text())
    return [{"warmup_s": run["time_s"]["warmup_s"], "startup_s": run["time_s"]["startup_s"],
             **{key: run["facts"]["end"]["compile_cache"].get(key) for key in ("hits", "misses", "bypasses")},
             "artifacts": run["facts"]["end"]["compile_cache"].get("artifacts")} for run in record["per_run"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="test_resnet50[fp32-torch-w1-bucket25-compile-cpu]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfgate-compile-") as tmp:
        root = Path(tmp)
        runs = {"cold": job(args.case, root / "cold", root)}
        shutil.copytree(root / "cold", root / "restored")
        runs["restored"] = job(args.case, root / "restored", root)
        shutil.copytree(root / "cold" / "compile-artifacts", root / "artifacts" / "compile-artifacts")
        runs["artifacts"] = job(args.case, root / "artifacts", root)
    cold = runs["cold"][0]["warmup_s"]
    print(f"{args.case}: warm-up (compile) per launch, against the cold first launch's {cold:.1f} s")
    for name, launches in runs.items():
        for index, launch in enumerate(launches):
            share = launch["warmup_s"] / cold
            print(f"  {name:9} launch {index + 1}: warm-up {launch['warmup_s']:6.1f} s ({share:4.0%}), "
                  f"start-up {launch['startup_s']:5.1f} s, FX graph cache {launch['hits']} hit(s) "
                  f"{launch['misses']} miss(es) {launch['bypasses']} bypass(es), artifacts {launch['artifacts']}")


if __name__ == "__main__":
    main()
