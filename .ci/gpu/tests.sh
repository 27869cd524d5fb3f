#!/usr/bin/env bash
# GPU job of the test-strength work. Two things at once (one GPU, 16 cores), most informative first:
#  1. the mutation check (tests/mutations/run.py): deliberate bugs in a copy of the tree, each run
#     against a few GPU tests with -x, after an unmodified baseline; the table mutant -> tests that
#     caught it goes to $LOGS/mutations.md;
#  2. the rewritten GPU tests themselves (element-wise bounds, guarded padding, poisoned allocations,
#     busy non-blocking streams, plans of the call itself), largest sizes left out, with the margin
#     each element-wise check kept (how close it came to its bound) in $LOGS/margins_sorted.json.
# Run from the repository root with PYTHONPATH=. and $LOGS an existing folder.
set -u
LOGS=${LOGS:-/tmp/blasdx-logs}
mkdir -p "$LOGS"
export BLASDX_MARGINS_JSON="$LOGS/margins.json"
BUDGET=${BUDGET:-146}
start=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$LOGS/gpu.txt" 2>&1

# 1. mutation check, in the background
timeout $(( BUDGET - 20 )) python3 tests/mutations/run.py --logs "$LOGS" --budget $(( BUDGET - 24 )) --jobs 10 \
  > "$LOGS/mutations.txt" 2>&1 &
mutations=$!

# 2. the rewritten tests, one line per test as it finishes (-v), so a cut-off run still tells
TESTS=(
  "tests/test_gpu_hopper.py::test_d_padding_is_never_written"
  "tests/test_gpu_hopper.py::test_streams_and_repeat_calls"
  "tests/test_gpu_gemm.py::test_torch_stream_orders_work"
  "tests/test_gpu_gemm.py::test_default_stream_uses_torch_current_stream"
  "tests/test_gpu_trsm.py::test_torch_stream_orders_work"
  "tests/test_gpu_gemm.py::test_every_combination"
  "tests/test_gpu_hopper.py"
  "tests/test_gpu_hopper_8bit.py"
  "tests/test_gpu_hopper_wide.py"
  "tests/test_gpu_ozaki.py"
  "tests/test_gpu_emulation.py"
  "tests/test_gpu_gemm.py"
  "tests/test_gpu_array_gemm.py"
  "tests/test_gpu_mantissa_bits.py"
)
timeout $(( $(left) - 6 )) python3 -m pytest -m gpu -v -p no:cacheprovider -o addopts="" -n 6 --dist load -rfE \
  -k "not 4097 and not 2049 and not error_over_k and not large_square and not 65536 and not fused_linear_example \
      and (float16xfloat16-float16 or not test_every_combination) and not test_compute_bound_workload \
      and not test_block_dim_override and not test_k_in_chunks and not test_operands_in_panels \
      and not test_several_problems and not test_k_chunk_plans and not test_multi_block_sizes \
      and not test_matmul_random and not test_every_arrangement" \
  "${TESTS[@]}" > "$LOGS/tests.txt" 2>&1
echo "tests rc=$? ($(( $(date +%s) - start )) s): $(grep -c ' PASSED' "$LOGS/tests.txt") passed, \
$(grep -c ' FAILED' "$LOGS/tests.txt") failed, $(grep -c ' SKIPPED' "$LOGS/tests.txt") skipped"
grep -E "^(FAILED|ERROR)|\] FAILED|\] ERROR" "$LOGS/tests.txt" | sort -u | head -25

wait $mutations
echo "mutations rc=$?"
cat "$LOGS/mutations.md" 2>/dev/null || tail -20 "$LOGS/mutations.txt"

python3 - "$LOGS" <<'EOF'
import glob, json, sys
rows = []
for path in glob.glob(sys.argv[1] + "/margins.json*"):
    rows += json.load(open(path))
rows.sort(key=lambda r: -r[1])
json.dump(rows, open(sys.argv[1] + "/margins_sorted.json", "w"), indent=0)
print(f"{len(rows)} element-wise checks; closest to their bounds:")
for what, ratio in rows[:6]:
    print(f"  {ratio:.3g}  {what[:110]}")
EOF
echo "done in $(( $(date +%s) - start )) s"
