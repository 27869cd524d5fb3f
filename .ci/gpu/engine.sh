#!/usr/bin/env bash
# The Hopper engine on LLM layer shapes: the quick suite (GPU time by CUDA-graph replay against
# torch on the same data), then the candidate configurations per shape class. Runs from the repo
# root with PYTHONPATH=. and $LOGS set; finishes within 150 s.
set -uo pipefail
logs="${LOGS:-gpu-logs}"; mkdir -p "$logs"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-engine}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$logs/gpu.txt" 2>&1
start=$SECONDS
timeout 72 python3 benchmarks/llm_shapes.py --quick --budget 58 --json "$logs/llm_shapes_quick.json" \
  > "$logs/llm_shapes_quick.log" 2>&1
echo "=== llm_shapes --quick exit $? ($((SECONDS - start)) s)"
grep -E "^\| (bf16|tf32|e4m3|fp8|f32|f64)|geomean|compiled|out of time" "$logs/llm_shapes_quick.log" | cut -c1-150
start=$SECONDS
timeout 68 python3 benchmarks/llm_shapes.py --no-suite --sweep --budget 58 --json "$logs/llm_sweep.json" \
  > "$logs/llm_sweep.log" 2>&1
echo "=== llm_shapes --sweep exit $? ($((SECONDS - start)) s)"
grep -E "^  best|Error|error" "$logs/llm_sweep.log" | head -30
