#!/bin/bash
# Runs a command on this machine held to a share of its CPUs, as on a slower VM of the same core count: a cgroup's CPU
# quota (v1 cpu.cfs_quota_us or v2 cpu.max, with a 10 ms period so that every process is throttled in short slices).
# Finds bounds that hold only at this machine's speed, and tells how long a job takes on a slower machine.
#   sudo benchmarks/slow_machine.sh 0.55 make test
# needs root and a writable cgroup hierarchy; the cgroup is removed afterwards.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 SHARE COMMAND... (SHARE: the fraction of this machine's CPUs to allow, e.g. 0.55)" >&2
  exit 2
fi
share=$1
shift
period=10000
quota=$(python3 -c "import os, sys; print(round(float(sys.argv[1]) * os.cpu_count() * $period))" "$share")
name="perfgate-slow-$$"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  group=/sys/fs/cgroup/$name
  mkdir "$group"
  echo "$quota $period" > "$group/cpu.max"
else
  group=/sys/fs/cgroup/cpu/$name
  mkdir "$group"
  echo "$period" > "$group/cpu.cfs_period_us"
  echo "$quota" > "$group/cpu.cfs_quota_us"
fi
echo "slow_machine: $share of $(nproc) CPUs ($quota us per $period us) for: $*" >&2
set +e
bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' slow "$group" "$@"
status=$?
set -e
# The command's processes have all exited (or been moved back) before the group can be removed.
rmdir "$group" 2>/dev/null || echo "slow_machine: $group still holds processes; remove it once they end" >&2
exit $status
