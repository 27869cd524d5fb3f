#!/usr/bin/env bash
# GPU proof of the host path: CUDA graphs (the reported sequence, every array call, graphs dropped without
# collection), the hot path's equivalence tests, the engine's launch on pointers (tensor
# maps re-pointed from kept encodings, split-K scratch, cluster plans on two streams), then, in the time left,
# the per-call costs: execute() against a bare launch, bx.matmul and bx.mma(out=) against torch.matmul,
# bx.scaled_mm, bx.solve_triangular, and the pieces of a call (result allocation variants, launches through
# cuda.bindings and ctypes, whole calls next to their no-launch twins). Run from the repository root with
# PYTHONPATH=. and LOGS an existing folder; within 60 s.
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-/tmp/hostpath-logs}
mkdir -p "$LOGS"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }

timeout 40 python3 -m pytest -m gpu -x -n 6 -v -p no:cacheprovider -rA tests/test_gpu_graphs.py \
    tests/test_gpu_hot_path.py > "$LOGS/tests.log" 2>&1
echo "graphs + hot path: rc=$? ($(elapsed) s)"
grep -E "^(FAILED|ERROR)|passed|failed|CUDA warning" "$LOGS/tests.log" | head -10

left=$(( 58 - $(elapsed) ))
if [ "$left" -gt 6 ]; then
    # rows, matmul (with bx.mma(out=)), scaled_mm and solve_triangular first; the pieces last
    timeout "$left" python3 -u benchmarks/launch_overhead.py --calls 100 --rounds 7 \
        --out "$LOGS/launch_overhead.json" > "$LOGS/launch_overhead.log" 2>&1
    echo "launch_overhead: rc=$? ($(elapsed) s)"
    sed -n '1,80p' "$LOGS/launch_overhead.log"
fi
