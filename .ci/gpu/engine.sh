#!/usr/bin/env bash
# The Hopper engine on LLM layer shapes: GPU tests of B transposed in shared memory, split K finished
# inside the GEMM and bx.tune, then the core suite (GPU time by CUDA-graph replay against torch on the
# same data). Runs from the repo root with PYTHONPATH=. and $LOGS set; finishes within 150 s.
# NVRTC dominates a cold run (about one engine kernel per second on 16 cores): the tests and the
# suite are sized by the kernels they compile.
set -uo pipefail
logs="${LOGS:-gpu-logs}"; mkdir -p "$logs"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-engine}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$logs/gpu.txt" 2>&1
start=$SECONDS
timeout 58 python3 -m pytest -m gpu -v --tb=short -rf -n 16 -p no:cacheprovider tests/test_gpu_engine_transpose.py \
  tests/test_gpu_engine_splitk.py tests/test_gpu_engine_tune.py > "$logs/test_gpu_engine.log" 2>&1
echo "=== engine GPU tests exit $? ($((SECONDS - start)) s)"
grep -E " passed| failed|^FAILED|^ERROR|Error:|error " "$logs/test_gpu_engine.log" | grep -v Warning | cut -c1-400 | head -40
start=$SECONDS
left=$((124 - SECONDS))
timeout $left python3 benchmarks/llm_shapes.py --core --budget $((left - 8)) --workers 16 \
  --types bf16 tf32 e4m3 fp8-tensor --json "$logs/llm_shapes_core.json" > "$logs/llm_shapes_core.log" 2>&1
echo "=== llm_shapes --core exit $? ($((SECONDS - start)) s)"
grep -E "^\| (bf16|tf32|e4m3|fp8)|geomean|compiled|out of time|compiling" "$logs/llm_shapes_core.log" | cut -c1-170
# compute-sanitizer on one transposed and one split-K case (kernels cached by the tests above)
left=$((147 - SECONDS))
if (( left > 20 )); then
  timeout $left compute-sanitizer --tool memcheck --error-exitcode 1 python3 -m pytest -m gpu -q -x -p no:cacheprovider \
    tests/test_gpu_engine_transpose.py tests/test_gpu_engine_splitk.py -k "int8-int32-17 or bfloat16-float32-narrow-3" \
    > "$logs/memcheck_engine.log" 2>&1
  echo "=== memcheck (transposed int8, split bf16) exit $?"; tail -n 3 "$logs/memcheck_engine.log"
fi
