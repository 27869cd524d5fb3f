#!/usr/bin/env bash
# GPU checks of the host path: CUDA graphs first (the reported bug), then the per-call costs, then the
# hot path's equivalence tests. Run from the repository root with PYTHONPATH=. and LOGS an existing
# folder; about 70 s.
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-/tmp/hostpath-logs}
mkdir -p "$LOGS"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$LOGS/gpu.txt" 2>&1

timeout 30 python3 -m pytest -m gpu -v -p no:cacheprovider -rA --durations=10 \
    tests/test_gpu_graphs.py > "$LOGS/graphs.log" 2>&1
echo "graphs: rc=$? ($(elapsed) s)"
grep -E "^(PASSED|FAILED|ERROR)|passed|failed|CUDA warning|Error" "$LOGS/graphs.log" | head -12

timeout 24 python3 -u benchmarks/launch_overhead.py --calls 100 --rounds 9 \
    --out "$LOGS/launch_overhead.json" > "$LOGS/launch_overhead.log" 2>&1
echo "launch_overhead: rc=$? ($(elapsed) s)"
sed -n '1,40p' "$LOGS/launch_overhead.log"

left=$(( 67 - $(elapsed) ))
if [ "$left" -gt 5 ]; then
    timeout "$left" python3 -m pytest -m gpu -q -p no:cacheprovider -v -rA tests/test_gpu_hot_path.py \
        > "$LOGS/hot_path.log" 2>&1
    echo "hot path: rc=$? ($(elapsed) s)"
    grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$LOGS/hot_path.log" | head -12
fi
