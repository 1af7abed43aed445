#!/usr/bin/env bash
# Live sessions of `make perf` on this machine, for the verdict's proof (issue 71): unchanged sessions and planted
# slowdowns, quiet and beside two busy processes, in turn, for MINUTES. Each session's output and its records, as
# the results history kept them, go to results/live/. The history (results/history.db) keeps every session, so each
# judges the next; planted ones never count among the unchanged sessions (perfgate/trend/sessions.py).
#
#   benchmarks/live_sessions.sh 90 --baseline-dir benchmarks/sessions
#   python benchmarks/live_summary.py results/live
#
# Run it in a checkout whose baselines judge this machine (`make baselines` first on a new class).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:?usage: benchmarks/live_sessions.sh MINUTES [pytest options]}
shift
out=results/live
mkdir -p "$out"
make venv  # a fresh clone's .venv, which the summary below needs before the first session makes it
# (plant, load) in turn: unchanged and planted, quiet and loaded, plants of 20 % and 50 %.
plan=("0 quiet" "0.2 loaded" "0 loaded" "0.5 quiet" "0 quiet" "0.5 loaded" "0 loaded" "0.2 quiet")
busy=()
stop_load() {
  for pid in ${busy[@]+"${busy[@]}"}; do kill "$pid" 2>/dev/null || true; done
  busy=()
}
trap stop_load EXIT
deadline=$(( $(date +%s) + minutes * 60 ))
session=$(find "$out" -name '*.json' | wc -l)
while [ "$(date +%s)" -lt "$deadline" ]; do
  read -r plant load <<< "${plan[$(( session % ${#plan[@]} ))]}"
  if [ "$load" = loaded ]; then
    for _ in 1 2; do
      python3 -c 'while True: pass' &
      busy+=($!)
    done
  fi
  name=$(printf '%03d-%s-plant%s' "$session" "$load" "$plant")
  args=(-q -p no:randomly "$@")
  if [ "$plant" != 0 ]; then
    args+=(--perf-inject-slowdown "$plant")
  fi
  started=$(date -u +%FT%TZ)
  before=$(.venv/bin/python benchmarks/live_summary.py --newest-record results/history.db)
  make perf PYTEST_ARGS="${args[*]}" > "$out/$name.log" 2>&1 || true
  stop_load
  .venv/bin/python benchmarks/live_summary.py --keep "$out/$name.json" --after "$before" --started "$started" \
    --plant "$plant" --load "$load" results/history.db
  session=$(( session + 1 ))
done
