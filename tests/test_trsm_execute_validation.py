"""TrsmDescriptor.execute and bx.solve_triangular: every argument check, against fake device arrays, no GPU.

Fake arrays carry ``__cuda_array_interface__`` over fake pointers; the device queries, the
kernel loading, the allocation and the launch are replaced by recorders, to show that a
failed check never launches (nor allocates) and that a good call launches exactly the
arguments of the kernel contract (kernels/batched_trsm.cu).
"""

from __future__ import annotations

import numpy as np
import pytest

import blasdx as bx
from blasdx.calls import matmul as array_gemm
from blasdx.calls import solve_triangular as array_trsm
from blasdx import arrays
from blasdx.launch import devices
from blasdx.run import trsm as trsm_execute
from blasdx.run import execute as ex
from blasdx.base.errors import DescriptorError, ExecutionError

from .test_execute_validation import Fake

R, C = bx.row_major, bx.col_major
A_PTR, B_PTR, OUT_PTR = 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000


def c_strides(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


@pytest.fixture(autouse=True)
def fake_gpu(monkeypatch):
    """Device 0 is an sm_90 with 132 SMs; kernels, allocation, streams and launches are recorded."""
    calls: dict[str, list] = {"launch": [], "wait": [], "device": [], "allocate": []}

    class FakeStream:
        def __init__(self, handle):
            self.handle = handle

        def wait(self, other):
            calls["wait"].append(other.handle)

    def on_device(self, device_id):
        calls["device"].append(device_id)
        return ("kernel", self.desc, self.out)

    def allocate(like, shape, dtype, device_id, stream):
        calls["allocate"].append((shape, dtype.name))
        return Fake(shape, dtype.host_dtype, c_strides(shape), OUT_PTR)

    monkeypatch.setattr(devices, "pointer_device_id", lambda ptr, argument="array": 0)
    monkeypatch.setattr(devices, "current_device_id", lambda: 0)
    monkeypatch.setattr(devices, "enter", lambda device_id: None)
    monkeypatch.setattr(devices, "check_stream_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(arrays, "as_core_stream", lambda stream, handle: FakeStream(handle))
    monkeypatch.setattr(trsm_execute, "as_core_stream", lambda stream, handle: FakeStream(handle))
    monkeypatch.setattr(arrays, "core_stream", lambda handle: FakeStream(handle))
    monkeypatch.setattr(trsm_execute.TrsmKernel, "on_device", on_device)
    monkeypatch.setattr(array_gemm, "_allocate", allocate)
    monkeypatch.setitem(array_gemm._DEVICES, 0, array_gemm._DeviceInfo(90, 132))
    monkeypatch.setattr(ex, "_launch", lambda stream, config, kernel, *args: calls["launch"].append(
        (stream.handle, config.grid, config.block, config.shmem_size, kernel, args)))
    array_trsm._CALLS.clear()
    return calls


def trsm(m=40, n=24, *ops, prec=bx.float32):
    desc = bx.Size(m, n) + bx.Precision(prec) + bx.Function.TRSM + bx.SM(90) + bx.Block()
    for op in ops:
        desc = desc + op
    return desc


DESC = trsm()  # left lower: A 40 x 40 row-major, B 40 x 24 column-major


def operands(desc=DESC, batch=(None, None)):
    """a and b that fit ``desc`` exactly."""
    arr = desc.arrangement
    lda, ldb = desc.leading_dimension
    dtype = np.dtype(desc.b_value_type.numpy)
    out = []
    for dims, row_major, ld, size, nb, ptr in zip((desc.a_dim, desc.b_dim), (arr.a is R, arr.b is R), (lda, ldb),
                                                  (desc.a_size, desc.b_size), batch, (A_PTR, B_PTR)):
        strides = (ld, 1) if row_major else (1, ld)
        out.append(Fake(dims, dtype, strides, ptr) if nb is None else Fake((nb, *dims), dtype, (size, *strides), ptr))
    return out


# ---------------------------------------------------------------------------------------------- execute


BAD_CALLS = [
    ("dtype", lambda a, b: (Fake((40, 40), "float64", (40, 1)), b, {}),
     "a: dtype float64 does not match A's type float32 in the descriptor"),
    ("shape-a", lambda a, b: (Fake((24, 24), "float32", (24, 1)), b, {}),
     "a: shape (24, 24) does not match A (M, M) = (40, 40) or (batch, 40, 40)"),
    ("shape-b", lambda a, b: (a, Fake((24, 40), "float32", (1, 24), B_PTR), {}),
     "b: shape (24, 40) does not match B (M, N) = (40, 24) or (batch, 40, 24) (it looks transposed"),
    ("order", lambda a, b: (a, Fake((40, 24), "float32", (24, 1), B_PTR), {}),
     "b: element strides (24, 1) of shape (40, 24) do not match col_major B with ldb=40, which needs strides "
     "(1, 40); the array is row_major with leading dimension 24: build the descriptor with "
     "Arrangement(row_major, row_major) + LeadingDimension(40, 24)"),
    ("leading-dimension", lambda a, b: (Fake((40, 40), "float32", (48, 1)), b, {}),
     "a: element strides (48, 1) of shape (40, 40) do not match row_major A with lda=40, which needs strides "
     "(40, 1); the array is row_major with leading dimension 48: build the descriptor with "
     "Arrangement(row_major, col_major) + LeadingDimension(48, 40)"),
    ("batch", lambda a, b: (Fake((2, 40, 40), "float32", (1600, 40, 1)), Fake((3, 40, 24), "float32", (960, 1, 40),
                                                                            B_PTR), {}),
     "a: batch 2 (shape (2, 40, 40)) does not match b's batch 3; A needs B's batch or 1"),
    ("batch-stride", lambda a, b: (a, Fake((3, 40, 24), "float32", (900, 1, 40), B_PTR), {}),
     "b: batch stride 900 (elements) is smaller than B's extent in memory"),
    ("readonly", lambda a, b: (a, Fake((40, 24), "float32", (1, 40), B_PTR, readonly=True), {}),
     "b: the array is read-only; the solution overwrites B. Pass a writable array"),
    ("overlap", lambda a, b: (a, Fake((40, 24), "float32", (1, 40), A_PTR + 64), {}),
     "overlaps a's"),
    ("alignment", lambda a, b: (a, Fake((40, 24), "float32", (1, 40), B_PTR + 4), {}),
     "b: address"),
    ("alpha-complex", lambda a, b: (a, b, {"alpha": 1j}), "alpha: 1j is complex but the GEMM is real"),
    ("alpha-type", lambda a, b: (a, b, {"alpha": "2"}), "alpha: '2' (str) is not a number"),
    ("host", lambda a, b: (a, np.zeros((40, 24), np.float32), {}), "b:"),
]


@pytest.mark.parametrize("name, build, words", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_failed_check_never_launches(fake_gpu, name, build, words):
    desc = DESC + bx.Alignment(16, 16, 16) if name == "alignment" else DESC
    a, b, kwargs = build(*operands(desc))
    with pytest.raises(ExecutionError, match=_escape(words)):
        desc.execute(a, b, **kwargs)
    assert fake_gpu["launch"] == [] and fake_gpu["wait"] == []


def _escape(words: str) -> str:
    import re

    return re.escape(words)


def test_execute_launches_the_contract(fake_gpu):
    desc = trsm(40, 24, bx.BatchesPerBlock(2), bx.BlockDim(128))
    a, b = operands(desc, batch=(1, 5))
    b.__cuda_array_interface__["stream"] = 0x9000  # a producer stream to wait on
    assert desc.execute(a, b, alpha=-1.5, stream=0x8000) is b
    assert set(fake_gpu["device"]) == {0} and [int(w) for w in fake_gpu["wait"]] == [0x9000]
    [(stream, grid, block, smem, kernel, args)] = fake_gpu["launch"]
    assert stream == 0x8000 and grid == (3, 1, 1) and block == (128, 1, 1)
    assert smem == desc.kernel_shared_memory_size and kernel[1] == desc
    b_size = desc.b_size
    assert args == (A_PTR, B_PTR, B_PTR, np.float32(-1.5), 0, b_size, b_size, 0, 0, 5)
    assert [type(v) for v in args[4:]] == [np.int64] * 5 + [np.int32]


def test_execute_complex_alpha(fake_gpu):
    desc = trsm(8, 8, bx.Type.complex, prec=bx.float64)
    a, b = operands(desc)
    desc.execute(a, b, alpha=2 - 1j)
    [(*_, args)] = fake_gpu["launch"]
    assert args[3:5] == (np.float64(2), np.float64(-1)) and args[-1] == 1


def test_execute_empty_batch_launches_nothing(fake_gpu):
    a, b = operands(batch=(0, 0))
    DESC.execute(a, b)
    assert fake_gpu["launch"] == []


def test_execute_needs_block():
    desc = bx.Size(8, 8) + bx.Function.TRSM + bx.SM(90)
    with pytest.raises(DescriptorError, match="execute needs the Block execution operator"):
        desc.execute(*operands(trsm(8, 8)))


# ---------------------------------------------------------------------------------------------- solve_triangular


def f32(shape, ptr=A_PTR, order="C", dtype="float32", **kw):
    """A C-contiguous array, or with order="F" a (batch of) column-major matrices."""
    strides = c_strides(shape)
    if order == "F":
        rows, cols = shape[-2:]
        strides = (*((rows * cols,) if len(shape) == 3 else ()), 1, rows)
    return Fake(shape, dtype, strides, ptr, **kw)


SOLVE_ERRORS = [
    ("neither", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR)),
     "lower, upper: neither given; name the triangle of a that holds the matrix with lower=True/False"),
    ("both", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), lower=True, upper=False),
     "lower, upper: both given"),
    ("lower-type", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), lower="yes"),
     "lower: expected True or False, got 'yes'"),
    ("left-type", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), lower=True, left=1),
     "left: expected True or False, got 1"),
    ("unit-both", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), upper=True, unit_diagonal=True,
                                              unitriangular=True),
     "unit_diagonal, unitriangular: both given"),
    ("unitriangular-type", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), upper=True, unitriangular=0),
     "unitriangular: expected True or False, got 0"),
    ("dtype", lambda: bx.solve_triangular(f32((4, 4), dtype="float16"), f32((4, 2), B_PTR, dtype="float16"),
                                          lower=True),
     'a: dtype float16 is not supported; (rule: "a and b have one element type: float32, float64, complex64 or '
     'complex128")'),
    ("mixed", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR, dtype="float64"), lower=True),
     "b: dtype float64 differs from a's float32"),
    ("rank", lambda: bx.solve_triangular(f32((4,)), f32((4, 2), B_PTR), lower=True),
     'a: shape (4,) has rank 1; (rule: "a and b are matrices (rank 2) or batches of matrices (rank 3)")'),
    ("square", lambda: bx.solve_triangular(f32((4, 5)), f32((4, 2), B_PTR), lower=True),
     "a: shape (4, 5) is not [..., K, K] with K = 4, the M (rows of b), left=True, for b of shape (4, 2)"),
    ("right", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), lower=True, left=False),
     "a: shape (4, 4) is not [..., K, K] with K = 2, the N (columns of b), left=False, for b of shape (4, 2)"),
    ("batch", lambda: bx.solve_triangular(f32((2, 4, 4)), f32((3, 4, 2), B_PTR), lower=True),
     "a: batch 2 and b: batch 3 do not broadcast"),
    ("out-shape", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), lower=True,
                                              out=f32((2, 4), OUT_PTR)),
     "out: shape (2, 4) and type float32 do not match the result's (4, 2) float32"),
    ("out-readonly", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), lower=True,
                                                 out=f32((4, 2), OUT_PTR, readonly=True)),
     "out: the array is read-only"),
    ("out-overlaps-a", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), lower=True,
                                                   out=f32((4, 2), A_PTR + 16)),
     "out: its memory overlaps a's"),
    ("out-part-of-b", lambda: bx.solve_triangular(f32((4, 4)), f32((4, 2), B_PTR), lower=True,
                                                  out=f32((4, 2), B_PTR + 8)),
     "out: its memory overlaps b's"),
]


@pytest.mark.parametrize("name, call, words", SOLVE_ERRORS, ids=[c[0] for c in SOLVE_ERRORS])
def test_solve_triangular_refuses(fake_gpu, name, call, words):
    with pytest.raises(ExecutionError, match=_escape(words)):
        call()
    assert fake_gpu["launch"] == [] and fake_gpu["allocate"] == []


def test_solve_triangular_launches_the_contract(fake_gpu):
    a = f32((1, 40, 40), A_PTR)  # one A for every problem
    b = f32((5, 40, 24), B_PTR, order="F")
    x = bx.solve_triangular(a, b, upper=True, unitriangular=True)
    assert fake_gpu["allocate"] == [((5, 40, 24), "float32")]
    assert x.__cuda_array_interface__["shape"] == (5, 40, 24)
    [(stream, grid, block, smem, (_, desc, out), args)] = fake_gpu["launch"]
    assert (desc.side, desc.fill_mode, desc.diag) == (bx.Side.left, bx.FillMode.upper, bx.Diag.unit)
    assert desc.size == (40, 24) and desc.arrangement.a is R and desc.arrangement.b is C
    assert out == (True, 24, 16)  # a new C-contiguous result
    assert args[:3] == (A_PTR, B_PTR, OUT_PTR) and args[3] == np.float32(1)
    assert args[4:] == (0, 960, 960, 0, 0, 5)
    assert grid == (-(-5 // desc.batches_per_block), 1, 1)


def test_solve_triangular_in_place_and_broadcast_b(fake_gpu):
    a, b = f32((3, 16, 16), A_PTR), f32((3, 16, 4), B_PTR)
    assert bx.solve_triangular(a, b, lower=False, left=True, out=b) is b
    [(*_, (_, desc, out), args)] = fake_gpu["launch"]
    assert fake_gpu["allocate"] == [] and args[:3] == (A_PTR, B_PTR, B_PTR)
    assert out == (True, 4, 16) and desc.fill_mode is bx.FillMode.upper
    fake_gpu["launch"].clear()
    bx.solve_triangular(a, f32((4, 16), B_PTR), lower=True, left=False)  # X a = b: b (4, 16) shared, a batch of 3
    [(*_, (_, desc, out), args)] = fake_gpu["launch"]
    assert desc.side is bx.Side.right and desc.size == (4, 16)
    assert args[4:] == (256, 0, 64, 0, 0, 3)


def test_solve_triangular_splits_wide_right_hand_sides(fake_gpu):
    """A 128 x 128 f64 A and B do not fit one block together: two blocks take 64 columns each."""
    a = f32((128, 128), A_PTR, dtype="float64")
    b = f32((7, 128, 128), B_PTR, dtype="float64")
    bx.solve_triangular(a, b, lower=True)
    [(stream, grid, block, smem, (_, desc, out), args)] = fake_gpu["launch"]
    assert desc.size == (128, 64) and grid == (7, 2, 1)
    assert args[-3:] == (64, 64, 7) and smem <= 227 * 1024
    assert array_trsm.solve_plan(a, b, lower=True).chunks == (2, 64, 64)
    fake_gpu["launch"].clear()
    bx.solve_triangular(a, f32((128, 1000), B_PTR, dtype="float64"), lower=True)
    [(stream, grid, block, smem, (_, desc, out), args)] = fake_gpu["launch"]
    assert grid[1] * desc.n == 1000 and desc.n < 128 and desc.is_supported


def test_solve_triangular_empty_and_cached(fake_gpu):
    x = bx.solve_triangular(f32((0, 0)), f32((0, 3), B_PTR), lower=True)
    assert x.__cuda_array_interface__["shape"] == (0, 3) and fake_gpu["launch"] == []
    a, b = f32((8, 8)), f32((8, 8), B_PTR)
    bx.solve_triangular(a, b, lower=True)
    bx.solve_triangular(a, b, lower=True)
    assert len(array_trsm._CALLS) == 2 and len(fake_gpu["launch"]) == 2
