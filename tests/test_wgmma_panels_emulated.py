"""The wgmma path's copies into shared memory run on the CPU (tests/host_emulation.py): what
WarpgroupGemm::load_a / load_b of a generated 8-bit sm_90a config leave in shared memory must be
exactly the layout the descriptor reports (``suggested_smem_layout_a/b``, whose ``index`` the
device API's ``a_index`` / ``b_index`` mirror).

8-bit wgmma reads both operands K-major, so column-major A and row-major B are transposed on
their way in (byte permutes in registers, ``copy_to_panels_transposed`` in wgmma.cuh); the cases
cover every arrangement, 64B and 128B panels (K = 64, 128), 32B panels (K = 32), copy widths of
16 down to 1 byte (Alignment), padded global leading dimensions and a block of one warpgroup
taking several pieces per thread. Shared memory starts as 0xff and the operands avoid 0xff, so
a byte not written, or written twice in the wrong place, shows.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import blasdx as bx
from blasdx.codegen.gemm import config_struct

from . import host_emulation as emu
from .gpu_support import stable_seed
from .test_wgmma import gemm

pytestmark = pytest.mark.skipif(emu.compiler() is None, reason="needs g++ (C++20) to run kernel code on the host")

R, C = bx.row_major, bx.col_major

KERNEL = r"""
#include "blasdx/warpgroup_gemm.cuh"

// A and B into their panels as the batched kernel loads them, then the A and B bytes of
// shared memory out.
void load_panels(const unsigned char* a, const unsigned char* b, unsigned char* out) {
    using Cfg = blasdx_config;
    using WG = blasdx::WarpgroupGemm<Cfg>;
    const int tid = threadIdx.x;
    WG::load_a<Cfg::lda, Cfg::copy_bytes_a>(reinterpret_cast<Cfg::a_type*>(blasdx::smem),
                                            reinterpret_cast<const Cfg::a_type*>(a), tid);
    WG::load_b<Cfg::ldb, Cfg::copy_bytes_b>(reinterpret_cast<Cfg::b_type*>(blasdx::smem + Cfg::smem_b_offset),
                                            reinterpret_cast<const Cfg::b_type*>(b), tid);
    blasdx::copy_wait_all();
    __syncthreads();
    for (int i = tid; i < OUT_BYTES; i += blockDim.x) out[i] = blasdx::smem[i];
}
"""


I8, U8, I32 = bx.int8, bx.uint8, bx.int32
CASES = [
    *[((128, 128, 64), (I8, I8, I32), (a, b, C), (bx.MaxAlignment,))
      for a, b in itertools.product((R, C), repeat=2)],  # 16-byte pieces, 64B panels
    ((128, 128, 128), (U8, I8, I32), (R, R, R), (bx.MaxAlignment,)),  # 128B panels
    ((64, 64, 32), (I8, U8, I32), (C, R, C), (bx.MaxAlignment,)),  # 32B panels
    ((64, 64, 64), (U8, U8, I32), (C, R, C), ()),  # default alignment: 1-byte pieces
    ((64, 48, 64), (I8, I8, I32), (C, R, C), (bx.Alignment(2, 2, 4),)),  # 2-byte pieces, 48 = 3 x 16
    ((64, 64, 64), (I8, I8, I32), (C, R, C), (bx.Alignment(8, 4, 4),)),  # 8- and 4-byte pieces
    ((64, 128, 64), (I8, I8, I32), (C, R, C), (bx.MaxAlignment, bx.LeadingDimension(80, 144, 64))),  # padded
    ((128, 128, 64), (I8, I8, I32), (R, R, C), (bx.MaxAlignment, bx.BlockDim(128))),  # 2 pieces a thread
]


def _bytes(rng, shape) -> np.ndarray:
    return rng.integers(0, 255, shape, dtype=np.uint8)  # never 0xff, the unwritten fill


@pytest.mark.parametrize("size, types, arr, extra", CASES,
                         ids=[f"{'x'.join(map(str, s))}-{t[0].name}x{t[1].name}-{''.join(x.name[0] for x in a)}-"
                              f"{'-'.join(type(op).__name__ for op in e) or 'default'}" for s, t, a, e in CASES])
def test_8bit_operands_land_in_the_reported_panels(size, types, arr, extra, build_dir, tmp_path):
    desc = gemm(size, *types, arr, *extra)
    assert desc.instruction.startswith("wgmma.") and desc.instruction.endswith("k32"), desc.instruction
    m, n, k = size
    a_row, b_row = arr[0] is R, arr[1] is R
    lda, ldb, _ = desc.leading_dimension
    rng = np.random.default_rng(stable_seed(size, arr, extra))
    a, b = _bytes(rng, (1, m, k)), _bytes(rng, (1, k, n))
    la, lb = desc.suggested_smem_layout_a, desc.suggested_smem_layout_b
    b_offset = desc.plan.smem_b_offset
    out_bytes = b_offset + lb.cosize
    source = "\n".join(['#include "blasdx/types.cuh"', '#include "blasdx/mma.cuh"', config_struct(desc),
                        f"constexpr int OUT_BYTES = {out_bytes};", KERNEL])
    exe = emu.build(source, "load_panels(a.data(), b.data(), out.data())", "blasdx::smem", build_dir)
    got = emu.run(exe, (1, 1), desc.max_threads_per_block, out_bytes, emu.storage(a, a_row, lda, fill=0xff),
                  emu.storage(b, b_row, ldb, fill=0xff), np.zeros(out_bytes, np.uint8), tmp_path)
    want = np.full(out_bytes, 0xff, np.uint8)
    rows, cols = np.meshgrid(np.arange(m), np.arange(k), indexing="ij")
    want[[la.index(r, c) for r, c in zip(rows.ravel(), cols.ravel())]] = a[0].ravel()
    rows, cols = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    want[[b_offset + lb.index(r, c) for r, c in zip(rows.ravel(), cols.ravel())]] = b[0].ravel()
    # every 8-bit operand sits K-major: A's rows and B's columns run along K
    assert la.strides[1] == 1 and lb.strides[0] == 1
    np.testing.assert_array_equal(got[:b_offset], want[:b_offset], err_msg="A panels")
    np.testing.assert_array_equal(got[b_offset:], want[b_offset:], err_msg="B panels")
