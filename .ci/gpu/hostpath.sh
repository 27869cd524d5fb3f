#!/usr/bin/env bash
# GPU checks of the host path: CUDA graphs first (the reported bug), then the per-call costs.
# Run from the repository root with PYTHONPATH=. and LOGS an existing folder; about 70 s.
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-/tmp/hostpath-logs}
mkdir -p "$LOGS"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$LOGS/gpu.txt" 2>&1

timeout 42 python3 -m pytest -m gpu -q -p no:cacheprovider -rA --durations=10 \
    tests/test_gpu_graphs.py > "$LOGS/graphs.log" 2>&1
echo "graphs: rc=$? ($(( $(date +%s) - start )) s)"
grep -E "passed|failed|error|CUDA warning" "$LOGS/graphs.log" | tail -8

left=$(( 66 - ($(date +%s) - start) ))
if [ "$left" -gt 8 ]; then
    timeout "$left" python3 benchmarks/launch_overhead.py --calls 100 --rounds 9 \
        --out "$LOGS/launch_overhead.json" > "$LOGS/launch_overhead.log" 2>&1
    echo "launch_overhead: rc=$? ($(( $(date +%s) - start )) s)"
    sed -n '1,60p' "$LOGS/launch_overhead.log"
fi
