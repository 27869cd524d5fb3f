#!/usr/bin/env bash
# blasdx GEMMs inside kernels of other JITs: the fp8 wgmma cases of the Numba and LTO-IR GPU tests (checked
# against reference.fp8_wgmma_allowance), blasdx's first and warm Numba builds one at a time, then as many
# cases of the Numba benchmark against nvmath.device as the budget leaves (builds in parallel worker
# processes, GPU timing one task at a time). Runs from the repo root with $LOGS set; the carried wheels give
# numba-cuda a numpy it imports under and nvmath-python its libmathdx. Budget: $NUMBA_JOB_SECONDS (default 150).
. .ci/numba-site
. .ci/job-env numba
budget="${NUMBA_JOB_SECONDS:-150}"
left() { echo $(( budget - (SECONDS - start) - 2 )); }

# 1. the fp8 e4m3 -> f32 wgmma cases that once exceeded the earlier fp8 allowance (element-wise, seeded)
timeout "$(( $(left) * 35 / 100 ))" python3 -m pytest -m gpu -v -rf --tb=short -p no:cacheprovider -n 2 \
  "tests/test_gpu_ltoir.py::test_entry_points_match_the_float64_reference[float8_e4m3xfloat8_e4m3-float32-128x128x64-crr-sm90a]" \
  "tests/test_gpu_numba.py::test_gemms_in_numba_kernels_match_float64[float8_e4m3xfloat8_e4m3-float32-64x64x64-rcc-sm90a]" \
  > "$logs/test_gpu.log" 2>&1
echo "=== fp8 tests exit $? ($((SECONDS - start)) s)"
grep -cE "PASSED" "$logs/test_gpu.log" | sed 's/^/passed: /'
grep -E "^FAILED|^E  |ERROR" "$logs/test_gpu.log" | head -12 | cut -c1-240

# 1b. the f64 64^3 block-compute GEMM in blasdx's fragment orders (the DMMA atom's; the transposed one its
# compute-bound plans take; that one through two m16n8k4 per K step) against nvmath.device, each checked, then
# timed in turn in workers of their own, 7 rounds (~60-80 s); NUMBA_F64_ORDER_ROUNDS=0 skips it
rounds="${NUMBA_F64_ORDER_ROUNDS:-7}"
if [ "$rounds" -gt 0 ]; then
  timeout 150 python3 benchmarks/numba_f64_orders.py --cases "f64:64x64x64:compute" --rounds "$rounds" \
    > "$logs/numba_f64_orders.log" 2>&1
  echo "=== benchmarks/numba_f64_orders.py exit $? ($((SECONDS - start)) s)"; grep -E "^\|" "$logs/numba_f64_orders.log"
  tail -n 3 "$logs/numba_f64_orders.log" | grep -vE "^\|" | cut -c1-240
fi

# 2. blasdx's first and warm builds one at a time (one worker: a user's build does not share the machine with
# fifteen others), over every type blasdx serves in Numba
seq=("f16->f32:64x64x64:compute" "f64:64x64x64:compute" "f32:64x64x64:batched" "bf16->f32:128x128x128:batched"
     "tf32->f32:64x64x64:compute" "e4m3->f32:64x64x64:compute" "int8->int32:64x64x64:compute"
     "f16->f32:128x128x128:compute")
timeout "$(( $(left) * 30 / 100 ))" python3 benchmarks/numba_gemm.py --cases "${seq[@]}" --libraries blasdx \
  --workers 1 --json "$logs/numba_gemm_builds.json" > "$logs/numba_gemm_builds.log" 2>&1
echo "=== blasdx builds one at a time: exit $? ($((SECONDS - start)) s)"; grep -E "first / warm" "$logs/numba_gemm_builds.log" | cut -c1-200

# 3. the same Numba kernel with blasdx and with nvmath.device, in order of priority, until the budget. nvmath's
# tasks start first (benchmarks/numba_gemm.py schedules them so: each of its builds runs libmathdx and NVRTC
# over cuBLASDx), blasdx's fill the other workers. f64 at 128x128x64: A and B of 128^3 need 256 KB of shared
# memory, more than a block has (227 KB), for both libraries.
cases=("f16->f32:64x64x64:compute" "f16->f32:64x64x64:batched" "f16->f32:128x128x128:compute"
       "f16->f32:128x128x128:batched" "f32:64x64x64:compute" "f64:64x64x64:compute")
for t in "bf16->f32" "tf32->f32"; do for s in 64x64x64 128x128x128; do for k in compute batched; do
  cases+=("$t:$s:$k"); done; done; done
cases+=("f32:64x64x64:batched" "f32:128x128x128:compute" "f32:128x128x128:batched" "f64:64x64x64:batched"
        "f64:128x128x64:compute" "f64:128x128x64:batched")
python3 benchmarks/numba_gemm.py --cases "${cases[@]}" --workers 16 --budget "$(( $(left) - 8 ))" \
  --json "$logs/numba_gemm.json" > "$logs/numba_gemm.log" 2>&1
echo "=== benchmarks/numba_gemm.py exit $? ($((SECONDS - start)) s)"; cut -c1-200 "$logs/numba_gemm.log" | tail -n 30
