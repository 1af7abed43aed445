#!/usr/bin/env bash
# Gate the GPU cases on two nodes of a SLURM cluster: sbatch examples/sbatch-gpu-gate.sh
# pytest runs on the allocation's first node; every launch of a case is one job step (srun) across both nodes.
# The checkout and its .venv must be on a filesystem every node sees (the launcher runs the same paths there).
#SBATCH --job-name=perfgate
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --time=02:00:00
#SBATCH --output=perfgate-%j.out
set -euo pipefail
cd "${SLURM_SUBMIT_DIR}"
make venv
# --basetemp keeps every case's logs and result.json on the shared filesystem for the job's lifetime and after.
.venv/bin/python -m pytest tests_perf -m gpu --nodes 2 --launcher slurm \
  --junitxml "perfgate-${SLURM_JOB_ID}.xml" --basetemp "perfgate-runs-${SLURM_JOB_ID}" -rs \
  --perf-json "perfgate-${SLURM_JOB_ID}.json" --perf-report "perfgate-report-${SLURM_JOB_ID}"
