#!/usr/bin/env bash
# GPU job of the test-strength work: the rewritten checks (element-wise bounds, guarded padding,
# poisoned allocations, busy-stream ordering, plans of the call itself) on their first GPU run, the
# margins each element-wise check kept (how close it came to its bound), then the mutation check
# where time allows. Run from the repository root with PYTHONPATH=. and $LOGS an existing folder.
set -u
LOGS=${LOGS:-/tmp/blasdx-logs}
mkdir -p "$LOGS"
export BLASDX_MARGINS_JSON="$LOGS/margins.json"
start=$(date +%s)
left() { echo $(( ${BUDGET:-58} - ($(date +%s) - start) )); }

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$LOGS/gpu.txt" 2>&1

# 1. the tests this work rewrote, a few cases of each, in parallel (most informative first)
SMOKE=(
  "tests/test_gpu_hopper.py::test_streams_and_repeat_calls"
  "tests/test_gpu_gemm.py::test_torch_stream_orders_work"
  "tests/test_gpu_gemm.py::test_default_stream_uses_torch_current_stream"
  "tests/test_gpu_gemm.py::test_cupy_arrays_and_cupy_stream"
  "tests/test_gpu_trsm.py::test_torch_stream_orders_work"
  "tests/test_gpu_gemm.py::test_bad_input_raises_before_launch_and_leaves_c_unchanged"
  "tests/test_gpu_gemm.py::test_beta_zero_never_reads_c"
  "tests/test_gpu_gemm.py::test_batch_broadcast"
  "tests/test_gpu_gemm.py::test_explicit_leading_dimensions_and_alignment"
  "tests/test_gpu_hopper.py::test_matmul_result_and_plan"
  "tests/test_gpu_hopper.py::test_alpha_beta_and_strided_c_d"
  "tests/test_gpu_hopper.py::test_split_k_shapes"
  "tests/test_gpu_hopper.py::test_repacked_operands"
  "tests/test_gpu_hopper_wide.py::test_matmul_takes_the_wide_path"
  "tests/test_gpu_hopper_wide.py::test_alpha_beta_and_strided_c_d"
  "tests/test_gpu_hopper_8bit.py::test_int8_matmul_and_mma_take_the_engine"
  "tests/test_gpu_hopper_8bit.py::test_scaled_mm_every_scaling[row-column-float16]"
  "tests/test_gpu_hopper_8bit.py::test_scaled_mm_every_scaling[block-block-bfloat16]"
  "tests/test_gpu_hopper_8bit.py::test_fp8_matmul_promotes_unless_fast"
  "tests/test_gpu_ozaki.py::test_fewer_bits_keep_what_they_state"
  "tests/test_gpu_emulation.py::test_split_k_shapes"
  "tests/test_gpu_mantissa_bits.py::test_small_batched_matmul_and_mma_take_the_block_kernel"
  "tests/test_gpu_array_gemm.py::test_fast_accumulation_fp8"
)
timeout $(( $(left) - 8 )) python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 --dist load "${SMOKE[@]}" \
  -o addopts="" -rfE > "$LOGS/smoke.txt" 2>&1
echo "smoke rc=$? ($(( $(date +%s) - start )) s): $(tail -1 "$LOGS/smoke.txt")"
grep -E "^(FAILED|ERROR)" "$LOGS/smoke.txt" | head -20

# 2. margins: the worst (error / bound) per check, largest first
python3 - "$LOGS" <<'EOF'
import glob, json, sys
rows = []
for path in glob.glob(sys.argv[1] + "/margins.json*"):
    rows += json.load(open(path))
rows.sort(key=lambda r: -r[1])
json.dump(rows, open(sys.argv[1] + "/margins_sorted.json", "w"), indent=0)
print(f"{len(rows)} element-wise checks; closest to their bounds:")
for what, ratio in rows[:8]:
    print(f"  {ratio:.3g}  {what[:110]}")
EOF

# 3. the mutation check, with what time is left
if [ -f tests/mutations/run.py ] && [ "$(left)" -gt 20 ]; then
  timeout $(( $(left) - 2 )) python3 tests/mutations/run.py --logs "$LOGS" --budget $(( $(left) - 4 )) \
    > "$LOGS/mutations.txt" 2>&1
  echo "mutations rc=$?"; tail -15 "$LOGS/mutations.txt"
fi
echo "done in $(( $(date +%s) - start )) s"
