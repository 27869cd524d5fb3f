#!/usr/bin/env bash
# The GPU tests that run through the shared test helpers (tests/gpu_support.py: sampled_cases,
# gemm_operands, tight_operands, run_example, family_types; tests/hopper_support.py: scaled_kernel, engine_plan,
# check_norm, stream_k_config, layout_operands, batched_mma, split_k_mma, repacked_mma; reference.assert_gemm_close;
# blasdx.numba.as_bits), one pass over each caller. Runs from
# the repository root with $LOGS set; the carried wheels (as numba.sh) give numba-cuda a numpy it
# imports under. Budget: $HELPERS_JOB_SECONDS (default 420); NVRTC dominates a cold run.
# budget: 430
. .ci/numba-site
. .ci/job-env helpers
budget="${HELPERS_JOB_SECONDS:-420}"
timeout "$(( budget - 4 ))" python3 -m pytest -m gpu -q -rfE --tb=short -n 8 -p no:cacheprovider \
  tests/test_gpu_ltoir.py tests/test_gpu_numba.py tests/test_gpu_engine_splitk.py tests/test_gpu_engine_transpose.py \
  tests/test_gpu_mantissa_bits.py tests/test_gpu_wgmma_fusion.py \
  "tests/test_gpu_hopper.py::test_device_gemm_in_a_fused_kernel" "tests/test_gpu_hopper_8bit.py::test_device_gemm_eight_bit" \
  "tests/test_gpu_gemm.py::test_beta_zero_never_reads_c" "tests/test_gpu_gemm.py::test_batch_broadcast" \
  "tests/test_gpu_gemm.py::test_explicit_leading_dimensions_and_alignment" tests/test_gpu_fusion.py \
  "tests/test_gpu_hopper.py::test_types_layouts_sizes[bfloat16-float32-RC-255]" \
  "tests/test_gpu_hopper.py::test_batched_and_broadcast" "tests/test_gpu_hopper.py::test_split_k_shapes[37x1000x9000]" \
  "tests/test_gpu_hopper.py::test_repacked_operands" "tests/test_gpu_hopper_wide.py::test_types_layouts_sizes[float64-RC-255]" \
  "tests/test_gpu_hopper_wide.py::test_batched_and_broadcast" "tests/test_gpu_hopper_wide.py::test_split_k_shapes[float32-shape1]" \
  "tests/test_gpu_hopper_wide.py::test_repacked_operands" \
  > "$logs/test_helpers.log" 2>&1
echo "=== helper GPU tests exit $? ($((SECONDS - start)) s)"
grep -E " passed| failed|^FAILED|^ERROR" "$logs/test_helpers.log" | cut -c1-300 | head -20
