#!/usr/bin/env bash
# GPU checks of the host path: CUDA graphs (the reported bug), the hot path's equivalence tests and the
# mma tests its plan choice touches, run side by side; then the per-call costs on a quiet GPU.
# Run from the repository root with PYTHONPATH=. and LOGS an existing folder; about 70 s.
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-/tmp/hostpath-logs}
mkdir -p "$LOGS"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$LOGS/gpu.txt" 2>&1

timeout 38 python3 -m pytest -m gpu -v -p no:cacheprovider -rA tests/test_gpu_graphs.py > "$LOGS/graphs.log" 2>&1 &
graphs=$!
timeout 38 python3 -m pytest -m gpu -v -p no:cacheprovider -rA tests/test_gpu_hot_path.py > "$LOGS/hot_path.log" 2>&1 &
hot=$!
timeout 38 python3 -m pytest -m gpu -v -p no:cacheprovider -rA tests/test_gpu_array_gemm.py -k "mma" \
    > "$LOGS/array_gemm_mma.log" 2>&1 &
mma=$!
wait $graphs; echo "graphs: rc=$? ($(elapsed) s)"
grep -E "^(PASSED|FAILED|ERROR)|passed|failed|CUDA warning" "$LOGS/graphs.log" | head -8
wait $hot; echo "hot path: rc=$? ($(elapsed) s)"
grep -E "^(FAILED|ERROR)|passed|failed" "$LOGS/hot_path.log" | head -8
wait $mma; echo "array_gemm -k mma: rc=$? ($(elapsed) s)"
grep -E "^(FAILED|ERROR)|passed|failed" "$LOGS/array_gemm_mma.log" | head -8

left=$(( 68 - $(elapsed) ))
timeout "$left" python3 -u benchmarks/launch_overhead.py --calls 100 --rounds 9 \
    --out "$LOGS/launch_overhead.json" > "$LOGS/launch_overhead.log" 2>&1
echo "launch_overhead: rc=$? ($(elapsed) s)"
sed -n '1,60p' "$LOGS/launch_overhead.log"
