#!/usr/bin/env bash
# The Hopper engine on LLM layer shapes: GPU tests of the shared-memory transposition and of split K
# finished inside the GEMM, the quick suite (GPU time by CUDA-graph replay against torch on the
# same data), then the candidate configurations per shape class. Runs from the repo root with
# PYTHONPATH=. and $LOGS set; finishes within 150 s.
set -uo pipefail
logs="${LOGS:-gpu-logs}"; mkdir -p "$logs"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-engine}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$logs/gpu.txt" 2>&1
start=$SECONDS
timeout 62 python3 -m pytest -m gpu -q -n 14 --maxfail=30 -p no:cacheprovider tests/test_gpu_engine_transpose.py \
  tests/test_gpu_engine_splitk.py > "$logs/test_gpu_engine.log" 2>&1
echo "=== engine GPU tests exit $? ($((SECONDS - start)) s)"
grep -E "passed|failed|^FAILED|^ERROR" "$logs/test_gpu_engine.log" | cut -c1-300 | head -30
start=$SECONDS
timeout 50 python3 benchmarks/llm_shapes.py --quick --budget 40 --types tf32 e4m3 bf16 fp8-tensor fp8-block \
  fp8-row f32 f64 --json "$logs/llm_shapes_quick.json" > "$logs/llm_shapes_quick.log" 2>&1
echo "=== llm_shapes --quick exit $? ($((SECONDS - start)) s)"
grep -E "^\| (bf16|tf32|e4m3|fp8|f32|f64)|geomean|compiled|out of time" "$logs/llm_shapes_quick.log" | cut -c1-160
left=$((146 - SECONDS))
if (( left > 12 )); then
  start=$SECONDS
  timeout $left python3 benchmarks/llm_shapes.py --no-suite --sweep --budget $((left - 6)) \
    --json "$logs/llm_sweep.json" > "$logs/llm_sweep.log" 2>&1
  echo "=== llm_shapes --sweep exit $? ($((SECONDS - start)) s)"
  grep -E "^  best|Error" "$logs/llm_sweep.log" | head -30
fi
