"""A fused linear layer on Hopper: Y = GELU(X W + bias) in bf16, one kernel (the engine's pipeline).

    python examples/fused_linear.py [--m 4096] [--n 4096] [--k 4096] [--llm]

The GEMM is blasdx's device-level Hopper engine (TMA loads into a stage ring, warp-
specialised wgmma consumers, a persistent grid) used as a type in your own kernel through
``bx.DeviceGemm`` and ``bx.compile_kernel``; the epilogue is yours: here bias and GELU
applied to the f32 accumulator before the tile goes through shared memory to a TMA store
of bf16 Y. Unfused, PyTorch runs ``addmm`` and then ``gelu``, which reads Y back and
writes it again. The result is checked against a float64 reference; the speed is compared
with PyTorch's two kernels on the same data (CUDA-graph replays, examples/gpu_timing.py).
Without an sm_90 GPU it compiles the kernel and prints what it uses. ``--llm`` runs the MLP
up-projections of Llama-3-8B (K = 4096, N = 28672: gate and up fused) and Llama-3-70B
(K = 8192, N = 57344) at M = 2048 and 8192 instead of one shape.
"""

from __future__ import annotations

import sys

import blasdx as bx

SOURCE = r"""
// GELU in its exact (erf) form, PyTorch's default.
__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f)); }

// The epilogue: bias and GELU on each pair of accumulator elements (row, col), (row, col + 1).
struct BiasGelu {
    const __nv_bfloat16* bias;
    int n;
    __device__ __forceinline__ void value(const blasdx::hopper::Work&, int, int col, float& v0, float& v1) const {
        if (col < n) v0 = gelu(v0 + __bfloat162float(bias[col]));
        if (col + 1 < n) v1 = gelu(v1 + __bfloat162float(bias[col + 1]));
    }
};

// Y = GELU(X W + bias): x (m x k), w (k x n) and y (m x n) reached through their tensor maps.
extern "C" __global__ void __launch_bounds__(LINEAR::threads, 1)
fused_linear(const __grid_constant__ blasdx::hopper::TensorMap map_x,
             const __grid_constant__ blasdx::hopper::TensorMap map_w,
             const __grid_constant__ blasdx::hopper::TensorMap map_y, const __nv_bfloat16* bias, int m, int n, int k) {
    extern __shared__ __align__(16) unsigned char smem[];
    using G = LINEAR::gemm;
    const G::Sched sched(m, n, k, /*batch=*/1, /*splits=*/1);
    const blasdx::hopper::StageThroughShared<LINEAR::c_type, BiasGelu> epilogue{&map_y, BiasGelu{bias, n}};
    G::run(smem, &map_x, &map_w, sched, /*batched_a=*/false, /*batched_b=*/false, epilogue);
}
"""


def has_hopper() -> bool:
    try:
        from cuda.core import Device, system

        return system.get_num_devices() > 0 and tuple(Device(0).compute_capability) == (9, 0)
    except Exception:
        return False


#: (M, N, K) of the MLP up-projections of Llama-3-8B and Llama-3-70B (gate and up fused) at two batch sizes.
LLM_SHAPES = [(m, n, k) for n, k in ((28672, 4096), (57344, 8192)) for m in (2048, 8192)]


def main() -> int:
    from gpu_device import sized_parser  # examples/ is on sys.path when run as a script

    parser = sized_parser(__doc__, "llm", "the Llama-3 MLP shapes at M = 2048 and 8192", m=4096, n=4096, k=4096)
    args = parser.parse_args()
    shapes = LLM_SHAPES if args.llm else [(args.m, args.n, args.k)]
    status = 0
    for m, n, k in shapes:
        status |= run(m, n, k)
    return status


def run(m: int, n: int, k: int) -> int:
    """Build, check and time Y = GELU(X W + bias) for one shape; 1 if the result is off."""
    print(f"\nM x N x K = {m} x {n} x {k}")
    linear = bx.DeviceGemm.for_problem(bx.bfloat16, bx.bfloat16, m, n, k, a_layout=bx.row_major,
                                       b_layout=bx.row_major)
    kernel = bx.compile_kernel(SOURCE, "fused_linear", {"LINEAR": linear})
    print(f"{linear}\n  kernel: {kernel.registers} registers, {kernel.local_memory} bytes of local memory, "
          f"{kernel.shared_memory} bytes of shared memory, {kernel.block[0]} threads")
    if not has_hopper():
        print("no sm_90 GPU here: compiled only")
        return 0

    import torch

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from gpu_timing import time_ms

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.randn(k, n, device="cuda", generator=gen) / k**0.5).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)

    maps = (linear.tensor_map_a(x), linear.tensor_map_b(w), linear.tensor_map_d(y))
    grid = linear.grid(m, n)

    def fused() -> None:
        kernel.launch(grid, (*maps, bias, m, n, k))

    def unfused() -> torch.Tensor:
        return torch.nn.functional.gelu(torch.addmm(bias, x, w))

    fused()
    torch.cuda.synchronize()
    ref = torch.nn.functional.gelu(x.double() @ w.double() + bias.double())
    err = ((y.double() - ref).norm() / ref.norm()).item()
    tol = 4 * 2.0**-8  # bf16 output: 8 significant bits
    theirs = ((unfused().double() - ref).norm() / ref.norm()).item()
    print(f"relative error {err:.2e} (torch's unfused: {theirs:.2e}, bound {tol:.1e})")
    if not err <= tol:
        print("FAILED: the fused result is off")
        return 1

    ms_fused, how = time_ms(fused)
    ms_torch, _ = time_ms(unfused)
    flops = 2.0 * m * n * k
    print(f"fused (blasdx)       {ms_fused * 1e3:8.1f} us  {flops / ms_fused / 1e9:6.1f} TFLOP/s")
    print(f"torch addmm + gelu   {ms_torch * 1e3:8.1f} us  {flops / ms_torch / 1e9:6.1f} TFLOP/s")
    print(f"speed-up {ms_torch / ms_fused:.2f}x ({how}, {torch.cuda.get_device_name()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
