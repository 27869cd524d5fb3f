#!/usr/bin/env bash
# The Hopper engine's final check: the GPU tests that prove B transposed in shared memory, split K
# finished inside the GEMM (one case per type and path) and stream-K (all of its tests), compute-sanitizer
# memcheck on one stream-K launch, the stream-K shapes of the LLM suite, then the suite's core shapes
# (GPU time by CUDA-graph replay against torch on the same data). Runs from the repo root with PYTHONPATH=.
# and $LOGS set, within 150 s; NVRTC dominates a cold run, so every step is sized by the kernels it compiles.
set -uo pipefail
logs="${LOGS:-gpu-logs}"; mkdir -p "$logs"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-engine}" PYTHONUNBUFFERED=1
start=$SECONDS
timeout 75 python3 -m pytest -m gpu -v --tb=short -rf -x -n 8 -p no:cacheprovider tests/test_gpu_engine_transpose.py \
  tests/test_gpu_engine_splitk.py tests/test_gpu_engine_streamk.py -k "bfloat16-float32-narrow-3 or int8-int32-narrow-16 or \
graph_replays or rows_past_m_skip_the_exchange and 17 or float8_e4m3-float16-1000 or int8-int32-17 or \
tfloat32-float32-narrow-4 or scaled_mm_with_row_major_y and block or tfloat32-float32-255 or test_gpu_engine_streamk or \
batches_and_broadcast and stream_k" \
  > "$logs/test_gpu_engine.log" 2>&1
echo "=== engine GPU tests exit $? ($((SECONDS - start)) s)"
grep -E " passed| failed|^FAILED|^ERROR|Error:" "$logs/test_gpu_engine.log" | grep -v Warning | cut -c1-400 | head -20
start=$SECONDS  # the kernel is in the cache from the tests above
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider \
  tests/test_gpu_engine_streamk.py -k sanitized_case > "$logs/memcheck_streamk.log" 2>&1
echo "=== compute-sanitizer memcheck, one stream-K launch: exit $? ($((SECONDS - start)) s)"
grep -E "ERROR SUMMARY|passed|failed|Invalid" "$logs/memcheck_streamk.log" | head -5
start=$SECONDS
timeout 28 python3 benchmarks/llm_shapes.py --shapes 512x2112x7168 2048x2112x7168 512x6144x4096 128x2112x7168 \
  --types bf16 --budget 20 --workers 16 --json "$logs/llm_shapes_streamk.json" > "$logs/llm_shapes_streamk.log" 2>&1
echo "=== llm_shapes wave-quantised shapes exit $? ($((SECONDS - start)) s)"
grep -E "^\| bf16|geomean|compiled|out of time" "$logs/llm_shapes_streamk.log" | cut -c1-170
start=$SECONDS
left=$((148 - SECONDS))
if [ "$left" -gt 20 ]; then
  timeout $left python3 benchmarks/llm_shapes.py --core --kn 4096x4096 4096x28672 --budget $((left - 8)) --workers 16 \
    --types bf16 tf32 e4m3 --json "$logs/llm_shapes_core.json" > "$logs/llm_shapes_core.log" 2>&1
  echo "=== llm_shapes --core exit $? ($((SECONDS - start)) s)"
  grep -E "^\| (bf16|tf32|e4m3|fp8)|geomean|compiled|out of time|compiling" "$logs/llm_shapes_core.log" | cut -c1-170
else
  echo "=== llm_shapes --core skipped: $left s left of 148"
fi
