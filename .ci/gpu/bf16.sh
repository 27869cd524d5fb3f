#!/usr/bin/env bash
# bf16 results (bfloat16 -> bfloat16, f32 sums rounded once): the GPU tests of every path that writes them
# (the block GEMM's rows on mma.sync and one-block wgmma, the multi-block kernel and the engine through mma's acc
# types, the engine's types x layouts x sizes, matmul's out_dtype cold and bound), compute-sanitizer memcheck on one
# engine call, then the LLM suite's bf16 cases, each writing bf16 as torch.matmul does, and its f16 cases (nk
# weights, M = 16 to 2048).
# Runs from the repository root with PYTHONPATH set; logs and JSON go to "$LOGS".
# budget: 500
set -uo pipefail
LOGS=${LOGS:-/tmp/bf16-logs}
mkdir -p "$LOGS"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-bf16}"
timeout 130 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider -n 8 tests/test_gpu_gemm.py tests/test_gpu_array_gemm.py \
  tests/test_gpu_hopper.py tests/test_gpu_hot_path.py tests/test_gpu_wgmma.py \
  -k "bfloat16xbfloat16-bfloat16 or bfloat16-bfloat16 or mma_random or seed or matmul_result_and_plan or hot_path" \
  >"$LOGS/tests.log" 2>&1
echo "tests: rc=$?"; tail -2 "$LOGS/tests.log"
grep -h "^FAILED\|^E  " "$LOGS/tests.log" | cut -c1-200 | head -12
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider \
  tests/test_gpu_hopper.py -k "bfloat16-bfloat16 and 4097 and RC" >"$LOGS/memcheck.log" 2>&1
echo "memcheck: rc=$?"; grep -h "ERROR SUMMARY\|passed\|failed" "$LOGS/memcheck.log" | head -3
timeout 170 python3 -u benchmarks/llm_shapes.py --types bf16 --layouts nk --ms 16 64 128 512 2048 --budget 150 \
  --workers 16 --json "$LOGS/llm_shapes_bf16_nk.json" >"$LOGS/suite.log" 2>&1
echo "suite: rc=$?"; grep -E "^\| bf16|geomean|out of time" "$LOGS/suite.log" | cut -c1-170 | tail -75
timeout 140 python3 -u benchmarks/llm_shapes.py --types f16 --layouts nk --ms 16 128 2048 --budget 125 \
  --workers 16 --json "$LOGS/llm_shapes_f16_nk.json" >"$LOGS/suite_f16.log" 2>&1
echo "suite f16: rc=$?"; grep -E "^\| f16|geomean|out of time" "$LOGS/suite_f16.log" | cut -c1-170 | tail -45
