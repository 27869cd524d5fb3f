#!/usr/bin/env bash
# Final GPU check of the numerics work (60 s): a small selection of tests proving blocked
# triangular solves (inverse leaves), complex products (four and three real products) and the
# 3xtf32 rule, then timings of large solves and complex products. Runs from the repository root
# with PYTHONPATH set; logs and JSON go to "$LOGS".
set -uo pipefail
LOGS=${LOGS:-/tmp/numerics-logs}
mkdir -p "$LOGS"
start=$(date +%s)
left() { echo $(( 57 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
B=tests/test_gpu_blocked_trsm.py; C=tests/test_gpu_complex_matmul.py; E=tests/test_gpu_emulation.py
timeout 34 python3 -m pytest -m gpu -q -x -p no:cacheprovider -n 8 \
  "$B::test_every_variant[left-lower-non_unit-float32]" "$B::test_every_variant[right-upper-unit-float64]" \
  "$B::test_every_variant[left-upper-unit-float32]" "$B::test_every_variant[right-lower-non_unit-float64]" \
  "$B::test_layouts_out_and_broadcast[float64]" "$B::test_large[f64-1024]" \
  "$C::test_matmul[complex64-CF-77]" "$C::test_matmul[complex128-FC-512]" \
  "$C::test_gauss_three_products[matrix-complex64]" "$C::test_blocked_complex_solve[left-complex128]" \
  "$C::test_batches_broadcast_and_mma[complex64]" \
  "$E::test_matmul_keeps_float32_accuracy[RR-1000]" "$E::test_matmul_keeps_float32_accuracy[RC-17]" \
  >"$LOGS/tests.log" 2>&1
echo "tests: rc=$?"; tail -2 "$LOGS/tests.log"
grep -h "^FAILED\|^E  " "$LOGS/tests.log" | cut -c1-200 | head -12
t=$(left); if [ "$t" -gt 5 ]; then
  timeout $(( t * 7 / 10 )) python3 benchmarks/trsm.py --large --types f32 f64 --sizes 4096 8192 \
    --json "$LOGS/trsm_large.json" >"$LOGS/trsm_large.log" 2>&1
  echo "trsm large: rc=$?"; grep -h "batch\|FAILED" "$LOGS/trsm_large.log" | cut -c1-250 | head -6
fi
t=$(left); if [ "$t" -gt 4 ]; then
  timeout "$t" python3 benchmarks/complex_matmul.py --sizes 8192 --types c64 \
    --json "$LOGS/complex_matmul.json" >"$LOGS/complex_matmul_bench.log" 2>&1
  echo "complex matmul bench: rc=$?"; grep -h "^| c" "$LOGS/complex_matmul_bench.log" | cut -c1-200
fi
