"""A fused MLP layer: Y = GELU(X W^T + bias) (GELU's tanh form) for a batch of token blocks, in one kernel.

    python examples/fused_mlp.py [--batch N] [--tokens M] [--features K] [--hidden N]

Unfused, the layer is three kernels (matmul, bias add, GELU) that each write the hidden
activations to memory and read them back. Here one kernel keeps the weight W in shared
memory for all of its blocks' work (a persistent grid), streams the token blocks X[b]
through a double buffer with asynchronous copies, applies bias and GELU to the register
accumulator and stores each Y tile in whole rows through the buffer its X block left.
It checks a sample of blocks against a float64 reference and prints its speed against
PyTorch's unfused layer.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

import blasdx as bx
from blasdx.reference import assert_close, tolerance

# The kernel: MLP is the GEMM of one token block, (tokens x features) x (features x hidden).
SOURCE = r"""
// GELU in its tanh form (PyTorch's approximate="tanh"), with the one-instruction hardware tanh.
__device__ __forceinline__ float gelu(float x) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    return 0.5f * x * (1.0f + t);
}

constexpr int Y_LD = MLP::n + 8;  // __half per row of a finished Y tile in shared memory (16 bytes of padding)
constexpr int W_BYTES = (MLP::b_size * 2 + 15) / 16 * 16;
constexpr int X_BYTES = MLP::a_size * 2, Y_BYTES = MLP::m * Y_LD * 2;
constexpr int BUFFER_BYTES = ((X_BYTES > Y_BYTES ? X_BYTES : Y_BYTES) + 15) / 16 * 16;  // an X block, then its Y

// Y[b] = GELU(X[b] W^T + bias) for b = blockIdx.x, blockIdx.x + gridDim.x, ...
// x: (batch, tokens, features) row-major; w: (hidden, features) row-major, i.e. W^T is a
// column-major (features x hidden) B; bias: (hidden); y: (batch, tokens, hidden) row-major.
extern "C" __global__ void __launch_bounds__(MLP::max_threads_per_block)
fused_mlp(const __half* x, const __half* w, const float* bias, __half* y, int batch) {
    extern __shared__ __align__(16) unsigned char smem[];
    // [ W^T | buffer 0 | buffer 1 | bias ]: W^T and the bias stay for every token block of this block
    __half* sW = reinterpret_cast<__half*>(smem);
    auto buffer = [&](int i) { return reinterpret_cast<__half*>(smem + W_BYTES + (i % 2) * BUFFER_BYTES); };
    float* s_bias = reinterpret_cast<float*>(smem + W_BYTES + 2 * BUFFER_BYTES);
    constexpr long long X_STRIDE = MLP::m * MLP::k, Y_STRIDE = MLP::m * MLP::n;

    int item = blockIdx.x;
    if (item >= batch) return;
    MLP::load_b<MLP::k>(w, sW);  // global rows of W are `features` long; shared ones padded
    MLP::load_a<MLP::k>(x + item * X_STRIDE, buffer(0));
    for (int col = threadIdx.x; col < MLP::n; col += blockDim.x) s_bias[col] = bias[col];
    MLP::copy_wait();
    for (int i = 0; item < batch; item += gridDim.x, ++i) {
        const int next = item + gridDim.x;
        if (next < batch) MLP::load_a<MLP::k>(x + next * X_STRIDE, buffer(i + 1));  // lands during the GEMM
        auto acc = MLP::execute(buffer(i), sW);
        acc.transform([&](int row, int col, float v) { return gelu(v + s_bias[col]); });
        __syncthreads();               // every warp is done with this X block:
        acc.store(buffer(i), Y_LD);    // its buffer takes the Y tile, rounded once to __half,
        __syncthreads();
        MLP::store_c<MLP::n, Y_LD>(buffer(i), y + item * Y_STRIDE);  // stored in whole rows
        MLP::copy_wait();  // the next X block has landed and this buffer is free again
    }
}
"""


def descriptor(sm: int, tokens: int, features: int, hidden: int) -> bx.Descriptor:
    """The GEMM of one token block: f16 inputs, f32 accumulation, padded shared-memory rows."""
    base = (
        bx.Size(tokens, hidden, features)
        + bx.Precision(bx.float16, bx.float16, bx.float32)
        + bx.Type.real
        + bx.Function.MM
        + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major)
        + bx.MaxAlignment
        + bx.SM(sm)
        + bx.Block()
    )
    lda, ldb, _ = base.suggested_leading_dimension  # one extra 16-byte chunk per row: no bank conflicts
    return base + bx.LeadingDimension(lda, ldb, hidden)


def _round16(nbytes: int) -> int:
    return -(-nbytes // 16) * 16


def shared_memory(desc: bx.Descriptor) -> int:
    """Bytes of W^T, two buffers (an X block, then its Y tile) and the bias, as the kernel lays them out."""
    buffer = _round16(max(desc.a_size * 2, desc.m * (desc.n + 8) * 2))
    return _round16(desc.b_size * 2) + 2 * buffer + desc.n * 4


def build(sm: int, tokens: int = 64, features: int = 128, hidden: int = 128) -> bx.FusedKernel:
    """Compile the fused layer for one shape (cached: a second call costs no NVRTC)."""
    desc = descriptor(sm, tokens, features, hidden)
    return bx.compile_kernel(SOURCE, "fused_mlp", {"MLP": desc}, shared_memory=shared_memory(desc))


def grid_size(kernel: bx.FusedKernel, batch: int) -> int:
    """A persistent grid: as many blocks as fit on the GPU at once, at most one per token block."""
    from cuda.core import Device

    resident = kernel.max_active_blocks_per_sm() * Device().properties.multiprocessor_count
    return max(1, min(batch, resident))


def run(kernel: bx.FusedKernel, x: Any, w: Any, bias: Any, y: Any, grid: int | None = None) -> None:
    """Y = GELU(X W^T + bias) for torch tensors x (B, M, K) f16, w (N, K) f16, bias (N,) f32, y (B, M, N) f16."""
    batch = x.shape[0]
    kernel.launch(grid or grid_size(kernel, batch), (x, w, bias, y, batch))


def reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """GELU(x w^T + bias) in float64, GELU in the tanh form the kernel uses."""
    h = np.matmul(x.astype(np.float64), w.astype(np.float64).T) + bias.astype(np.float64)
    return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))


def main() -> int:
    from gpu_device import batch_parser, torch_sm  # examples/ is on sys.path when run as a script
    from gpu_timing import print_speedups, time_ms

    parser = batch_parser(__doc__, "token blocks", batch=16384, check=32)
    parser.add_argument("--tokens", type=int, default=64, help="tokens per block (M)")
    parser.add_argument("--features", type=int, default=128, help="input features (K)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden units (N)")
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F

    sm = torch_sm()
    kernel = build(sm or 90, args.tokens, args.features, args.hidden)
    if sm is None:
        print(f"no GPU: compiled {kernel} ({kernel.registers} registers), skipped the run")
        return 0
    print(kernel.gemms["MLP"])
    print(f"kernel: {kernel.registers} registers, {kernel.local_memory} B local memory, "
          f"{kernel.shared_memory} B shared memory, block {kernel.block}")

    torch.manual_seed(0)
    b, m, k, n = args.batch, args.tokens, args.features, args.hidden
    x = torch.randn(b, m, k, device="cuda", dtype=torch.float16)
    w = (torch.randn(n, k, device="cuda") / math.sqrt(k)).to(torch.float16)
    bias = torch.randn(n, device="cuda")
    y = torch.empty(b, m, n, device="cuda", dtype=torch.float16)
    grid = grid_size(kernel, b)
    run(kernel, x, w, bias, y, grid)
    torch.cuda.synchronize()

    pick = torch.randperm(b)[: args.check].sort().values
    ref = reference(x[pick].cpu().numpy(), w.cpu().numpy(), bias.cpu().numpy())
    assert_close(y[pick].cpu().numpy(), ref, tolerance(bx.float16, bx.float16, k), what="Y")
    print(f"checked {len(pick)} token blocks against the float64 reference: OK")

    bias16 = bias.to(torch.float16)
    fused_ms, how = time_ms(lambda: run(kernel, x, w, bias, y, grid))
    unfused = time_ms(lambda: F.gelu(torch.matmul(x, w.t()) + bias16, approximate="tanh"))
    addmm = time_ms(lambda: F.gelu(torch.addmm(bias16, x.view(-1, k), w.t()), approximate="tanh"))
    moved = (x.numel() + y.numel()) * 2
    print(f"{b} blocks of {m} tokens, {k} -> {n} features, grid {grid} (GPU time per call, {how}):")
    print(f"  blasdx fused kernel            {fused_ms:8.3f} ms  {moved / fused_ms / 1e6:6.0f} GB/s (X in, Y out)")
    print_speedups(fused_ms, 31, {"PyTorch matmul + add + gelu": unfused, "PyTorch addmm + gelu": addmm})
    return 0


if __name__ == "__main__":
    sys.exit(main())
