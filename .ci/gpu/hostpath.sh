#!/usr/bin/env bash
# GPU proof of the host path: CUDA graphs (the reported sequence, every array call, graphs dropped without
# collection) and the hot path's equivalence tests, then, in the time left, the per-call costs.
# Run from the repository root with PYTHONPATH=. and LOGS an existing folder; within 60 s.
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-/tmp/hostpath-logs}
mkdir -p "$LOGS"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }

timeout 44 python3 -m pytest -m gpu -x -n 6 -v -p no:cacheprovider -rA tests/test_gpu_graphs.py \
    tests/test_gpu_hot_path.py > "$LOGS/tests.log" 2>&1
echo "graphs + hot path: rc=$? ($(elapsed) s)"
grep -E "^(FAILED|ERROR)|passed|failed|CUDA warning" "$LOGS/tests.log" | head -10

left=$(( 58 - $(elapsed) ))
if [ "$left" -gt 6 ]; then
    timeout "$left" python3 -u benchmarks/launch_overhead.py --calls 100 --rounds 7 \
        --out "$LOGS/launch_overhead.json" > "$LOGS/launch_overhead.log" 2>&1
    echo "launch_overhead: rc=$? ($(elapsed) s)"
    sed -n '1,40p' "$LOGS/launch_overhead.log"
fi
