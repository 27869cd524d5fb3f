#!/usr/bin/env bash
# budget: 90
# The block-level GEMM, fusion and TRSM: a sample of the GPU suite that every change must keep green
# (the array calls and the engine have jobs of their own). Logs in $LOGS.
set -uo pipefail
: "${LOGS:=gpu-logs/core}"; mkdir -p "$LOGS"
python3 -m pytest -m gpu -q -x -n 8 -p no:cacheprovider \
  tests/test_gpu_gemm.py tests/test_gpu_fusion.py tests/test_gpu_trsm.py tests/test_gpu_wgmma.py \
  -k "(every_combination and (17x33x9 or 64x64x64)) or block_dim_override or explicit_leading or beta_zero \
      or bad_input or torch_stream or every_type or fused_mlp or fused_attention or (every_wgmma_combination and 64) \
      or solve_triangular_matches_torch or padded_leading" > "$LOGS/core.log" 2>&1
rc=$?
tail -n 3 "$LOGS/core.log"; echo "core: rc=$rc"
exit $rc
