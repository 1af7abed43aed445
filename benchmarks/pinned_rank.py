"""Runs a training script with its rank pinned to one core: does pinning ranks steady either clock?

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python -m torch.distributed.run --standalone --nproc-per-node 2 \\
      benchmarks/pinned_rank.py workloads/openclip_train.py --model perfgate-ViT-tiny --device cpu ...

A torchrun entry point: local rank R is bound to the R-th core this process may use (modulo their count)
before the script is run as ``__main__``, so every thread and loader worker it starts stays there. Launches
with and without it, alternated, go to ``benchmarks/cpu_clock_noise.py`` (figures on the measurements page).
"""

import os
import runpy
import sys

if __name__ == "__main__":
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[int(os.environ["LOCAL_RANK"]) % len(cores)]})
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    runpy.run_path(sys.argv[0], run_name="__main__")
