#!/usr/bin/env bash
# The measurement behind "green on every healthy CPU": the default conformance run under
# other thread counts, SIMD levels, MKL code paths, shuffled orders and a busy machine.
# Prints one summary line per configuration; exits non-zero if any run is not green.
# Usage: scripts/trust-proof.sh [extra pytest args]   (needs pytest-randomly for shuffles)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
out=$(mktemp -d /tmp/trust-proof-XXXX)
status=0
run() {  # run NAME ENV... -- PYTEST-ARGS...
    local name=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
    local log="$out/$name.log"
    env "${envs[@]}" "$PY" -m pytest -m npu -q -p no:cacheprovider --baseline off \
        --results-dir "$out/results-$name" "$@" >"$log" 2>&1
    local rc=$?
    printf '%-34s rc=%s  %s\n' "$name" "$rc" "$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$log" | tail -1 | tr -d '=')"
    [ "$rc" -eq 0 ] || { status=1; grep -E '^FAILED' "$log" | head -20; }
}
"$PY" -c "import torch; print('torch', torch.__version__, torch.backends.cpu.get_cpu_capability(), 'threads', torch.get_num_threads())"
grep -m1 'model name' /proc/cpuinfo
have_randomly=$("$PY" -c "import pytest_randomly" 2>/dev/null && echo 1 || echo 0)
run omp-threads-1 OMP_NUM_THREADS=1 -- "$@"
run capability-default ATEN_CPU_CAPABILITY=default -- "$@"
run capability-avx2-mkl-compatible ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE -- "$@"
if [ "$have_randomly" = 1 ]; then
    run shuffled-seed-1-mkl-avx2 MKL_CBWR=AVX2 -- --randomly-seed=1 "$@"
fi
# busy machine: two CPU-bound processes beside the run
( timeout 1800 sh -c 'while :; do :; done' & timeout 1800 sh -c 'while :; do :; done' & wait ) &
hogs=$!
if [ "$have_randomly" = 1 ]; then
    run busy-shuffled-seed-2 OMP_NUM_THREADS=2 -- --randomly-seed=2 "$@"
else
    run busy OMP_NUM_THREADS=2 -- "$@"
fi
pkill -P "$hogs" 2>/dev/null; kill "$hogs" 2>/dev/null
echo "logs: $out"
exit "$status"
