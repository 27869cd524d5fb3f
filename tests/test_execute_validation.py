"""execute(): every argument check, against fake device arrays, with no GPU.

Fake arrays carry ``__cuda_array_interface__`` over fake device pointers; the one driver
query CAI needs (the pointer's device) is replaced by a table. The plan / bind / launch
split lets ``check_arguments`` run without a GPU; ``execute`` itself is run with the
device plan and the launch replaced by recorders, to show that a failed check never
launches and a good call launches exactly the arguments of the kernel contract.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import blasdx as bx
from blasdx import arrays
from blasdx.launch import devices
from blasdx.run import execute as ex
from blasdx.base.errors import DescriptorError, DeviceError, ExecutionError

from .fake_driver import install

R, C = bx.row_major, bx.col_major
A_PTR, B_PTR, C_PTR = 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000
DEVICE_OF: dict[int, int] = {}  # pointer base -> device (default 0)


class Fake:
    """A device array: __cuda_array_interface__ over a fake pointer; strides in elements."""

    def __init__(self, shape, dtype, strides=None, ptr=A_PTR, readonly=False, stream=None):
        npd = np.dtype(dtype)
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": npd.str,
            "data": (ptr, readonly),
            "strides": None if strides is None else tuple(s * npd.itemsize for s in strides),
            "version": 3,
            "stream": stream,
        }


@pytest.fixture(autouse=True)
def _fake_pointers(monkeypatch):
    """Devices of fake pointers come from DEVICE_OF (by their top bits; device 0 when not listed)."""
    DEVICE_OF.clear()
    monkeypatch.setattr(devices, "pointer_device_id", lambda ptr, argument="array": DEVICE_OF.get(ptr >> 36 << 36, 0))


def gemm(m=64, n=32, k=16, precision=(bx.float16, bx.float16, bx.float32), *extra, sm=80, block=True):
    desc = bx.Size(m, n, k) + bx.Precision(*precision) + bx.Type.real + bx.Function.MM + bx.SM(sm)
    for op in extra:
        desc = desc + op
    return desc + bx.Block() if block else desc


def strides_for(rows, cols, row_major, ld):
    return (ld, 1) if row_major else (1, ld)


def operands(desc, batch=(None, None, None), dtypes=None, ptrs=(A_PTR, B_PTR, C_PTR)):
    """Arrays that fit ``desc`` exactly: its arrangement, leading dimensions and dtypes."""
    arr = desc.arrangement
    lda, ldb, ldc = desc.leading_dimension
    dims = ((desc.m, desc.k), (desc.k, desc.n), (desc.m, desc.n))
    layouts = (arr.a is R, arr.b is R, arr.c is R)
    lds = (lda, ldb, ldc)
    sizes = (desc.a_size, desc.b_size, desc.c_size)
    types_ = dtypes or tuple(
        np.dtype(v.numpy) if v.name != "tfloat32" else np.dtype(np.float32)
        for v in (desc.a_value_type, desc.b_value_type, desc.c_value_type)
    )
    out = []
    for (rows, cols), row_major, ld, size, nb, dtype, ptr in zip(dims, layouts, lds, sizes, batch, types_, ptrs):
        strides = strides_for(rows, cols, row_major, ld)
        if nb is None:
            out.append(Fake((rows, cols), dtype, strides, ptr))
        else:
            out.append(Fake((nb, rows, cols), dtype, (size, *strides), ptr))
    return out


F16 = gemm()  # row-major A (lda 16), col-major B (ldb 16), col-major C (ldc 64), f16 x f16 -> f32


# ---------------------------------------------------------------------------------------------
# a good call
# ---------------------------------------------------------------------------------------------


def test_good_call_gives_the_kernel_arguments():
    a, b, c = operands(F16)
    launch = ex.check_arguments(F16, a, b, c, alpha=2, beta=0.5)
    assert launch.batch == 1
    assert launch.args[:3] == (A_PTR, B_PTR, C_PTR)
    alpha, beta = launch.args[3:5]
    assert type(alpha) is np.float32 and alpha == 2 and type(beta) is np.float32 and beta == 0.5
    assert [type(s) for s in launch.args[5:]] == [np.int64] * 4
    assert launch.args[5:] == (0, 0, 0, 1)  # batch strides, then the problem count
    assert len(launch.args) == 9
    assert launch.stream == arrays.default_stream_handle() and launch.waits == () and launch.device_id == 0


def test_batched_with_broadcast():
    a, b, c = operands(F16, batch=(4, None, 4))
    launch = ex.check_arguments(F16, a, b, c)
    assert launch.batch == 4
    assert launch.args[5:] == (F16.a_size, 0, F16.c_size, 4)


def test_rank3_batch_of_one_broadcasts_with_stride_zero():
    a, b, c = operands(F16, batch=(1, 1, 3))
    assert ex.check_arguments(F16, a, b, c).args[5:] == (0, 0, F16.c_size, 3)


def test_padded_batch_stride_is_passed_through():
    a, b, c = operands(F16, batch=(None, None, 2))
    a = Fake((2, 64, 16), "float16", (F16.a_size + 64, 16, 1), A_PTR)
    assert ex.check_arguments(F16, a, b, c, beta=0).args[5] == F16.a_size + 64


def test_complex_gemm_has_four_scalars():
    desc = bx.Size(8, 8, 8) + bx.Precision(bx.float32) + bx.Type.complex + bx.Function.MM + bx.SM(80) + bx.Block()
    a, b, c = operands(desc)
    launch = ex.check_arguments(desc, a, b, c, alpha=complex(1, -2), beta=3)
    assert launch.args[3:7] == (1, -2, 3, 0)
    assert all(type(x) is np.float32 for x in launch.args[3:7])
    assert len(launch.args) == 11


def test_float64_and_int32_scalar_types():
    d64 = gemm(8, 8, 8, (bx.float64,))
    assert type(ex.check_arguments(d64, *operands(d64), alpha=0.1).args[3]) is np.float64
    di8 = gemm(16, 16, 16, (bx.int8, bx.int8, bx.int32))
    launch = ex.check_arguments(di8, *operands(di8), alpha=3, beta=-2.0)
    assert launch.args[3:5] == (3, -2) and type(launch.args[3]) is np.int32


def test_tfloat32_takes_float32_arrays():
    desc = gemm(16, 16, 16, (bx.tfloat32, bx.tfloat32, bx.float32))
    ex.check_arguments(desc, *operands(desc))


def test_size_one_extents_accept_any_stride():
    desc = gemm(1, 32, 16, (bx.float32,))  # M = 1: A's row stride and C's row stride are free
    a = Fake((1, 16), "float32", (999, 1), A_PTR)
    b = Fake((16, 32), "float32", (1, 16), B_PTR)
    c = Fake((1, 32), "float32", (7, 1), C_PTR)
    ex.check_arguments(desc, a, b, c)


def test_every_arrangement_accepted():
    for arr in [(R, R, R), (C, C, C), (C, R, R), (R, C, R)]:
        desc = gemm(32, 16, 8, (bx.float32,), bx.Arrangement(*arr))
        ex.check_arguments(desc, *operands(desc))


def test_explicit_leading_dimension():
    desc = gemm(32, 16, 8, (bx.float32,), bx.LeadingDimension(12, 12, 40))
    ex.check_arguments(desc, *operands(desc))


# ---------------------------------------------------------------------------------------------
# descriptor
# ---------------------------------------------------------------------------------------------


def test_incomplete_descriptor():
    desc = bx.Size(8, 8, 8) + bx.Precision(bx.float32) + bx.Block()
    with pytest.raises(DescriptorError, match="incomplete descriptor: missing Function, SM"):
        ex.check_arguments(desc, *operands(gemm(8, 8, 8, (bx.float32,))))


def test_descriptor_without_block():
    desc = gemm(block=False)
    with pytest.raises(DescriptorError, match=r"execute needs the Block execution operator.*add bx\.Block\(\)"):
        ex.check_arguments(desc, *operands(F16))


# ---------------------------------------------------------------------------------------------
# dtype and shape
# ---------------------------------------------------------------------------------------------


def test_wrong_dtype():
    a, b, c = operands(F16, dtypes=(np.float32, np.float16, np.float32))
    with pytest.raises(ExecutionError, match=r"a: dtype float32 does not match A's type float16 .*astype\('float16'\)"):
        ex.check_arguments(F16, a, b, c)


def test_wrong_c_dtype():
    a, b, c = operands(F16, dtypes=(np.float16, np.float16, np.float16))
    with pytest.raises(ExecutionError, match="c: dtype float16 does not match C's type float32"):
        ex.check_arguments(F16, a, b, c)


def test_complex_array_for_real_gemm():
    desc = gemm(8, 8, 8, (bx.float32,))
    a, b, c = operands(desc, dtypes=(np.complex64, np.float32, np.float32))
    with pytest.raises(ExecutionError, match="a: dtype complex64 .* add Type.complex"):
        ex.check_arguments(desc, a, b, c)


def test_real_array_for_complex_gemm():
    desc = bx.Size(8, 8, 8) + bx.Precision(bx.float32) + bx.Type.complex + bx.Function.MM + bx.SM(80) + bx.Block()
    a, b, c = operands(desc, dtypes=(np.complex64, np.float32, np.complex64))
    with pytest.raises(ExecutionError, match="b: dtype float32 does not match B's type complex64 .*real array"):
        ex.check_arguments(desc, a, b, c)


def test_wrong_shape():
    a, b, c = operands(F16)
    a = Fake((64, 15), "float16", (16, 1), A_PTR)
    with pytest.raises(ExecutionError, match=r"a: shape \(64, 15\) does not match A \(M, K\) = \(64, 16\) or \(batch, 64, 16\)"):
        ex.check_arguments(F16, a, b, c)


def test_transposed_shape_hint():
    a, b, c = operands(F16)
    b = Fake((32, 16), "float16", (16, 1), B_PTR)
    with pytest.raises(ExecutionError, match=r"b: shape \(32, 16\) .*looks transposed.*Arrangement"):
        ex.check_arguments(F16, a, b, c)


@pytest.mark.parametrize("shape", [(64 * 32,), (1, 1, 64, 32)])
def test_wrong_rank(shape):
    a, b, _ = operands(F16)
    c = Fake(shape, "float32", None, C_PTR)
    with pytest.raises(ExecutionError, match=f"c: shape .* has rank {len(shape)}; expected"):
        ex.check_arguments(F16, a, b, c)


# ---------------------------------------------------------------------------------------------
# batches
# ---------------------------------------------------------------------------------------------


def test_batch_mismatch():
    a, b, c = operands(F16, batch=(3, None, 4))
    with pytest.raises(ExecutionError, match=r"a: batch 3 .* does not match c's batch 4; A needs C's batch or 1"):
        ex.check_arguments(F16, a, b, c)


def test_batched_operand_against_single_c():
    a, b, c = operands(F16, batch=(None, 2, None))
    with pytest.raises(ExecutionError, match="b: batch 2 .* c's batch 1.*C's batch fixes the number of problems"):
        ex.check_arguments(F16, a, b, c)


def test_batch_stride_smaller_than_matrix_extent():
    a, b, c = operands(F16)
    c = Fake((2, 64, 32), "float32", (64 * 31, 1, 64), C_PTR)
    with pytest.raises(ExecutionError, match=r"c: batch stride 1984 .* ldc \* N = 64 \* 32 = 2048; the problems would overlap"):
        ex.check_arguments(F16, a, b, c)


def test_negative_batch_stride():
    a, b, c = operands(F16, batch=(None, None, 2))
    a = Fake((2, 64, 16), "float16", (-F16.a_size, 16, 1), A_PTR)
    with pytest.raises(ExecutionError, match="a: batch stride -1024"):
        ex.check_arguments(F16, a, b, c)


def test_batch_beyond_grid_limit():
    a, b, c = operands(F16, batch=(None, None, 2**31))
    with pytest.raises(ExecutionError, match=r"c: batch 2147483648 exceeds the 2147483647 problems"):
        ex.check_arguments(F16, a, b, c)


def test_empty_batch_is_valid():
    a, b, c = operands(F16, batch=(0, None, 0))
    assert ex.check_arguments(F16, a, b, c).batch == 0


# ---------------------------------------------------------------------------------------------
# strides against arrangement and leading dimension
# ---------------------------------------------------------------------------------------------


def test_column_major_a_for_row_major_descriptor_suggests_arrangement():
    a, b, c = operands(F16)
    a = Fake((64, 16), "float16", (1, 64), A_PTR)
    with pytest.raises(
        ExecutionError,
        match=r"a: element strides \(1, 64\) of shape \(64, 16\) do not match row_major A with lda=16, which needs "
        r"strides \(16, 1\); the array is col_major: build the descriptor with Arrangement\(col_major, col_major, "
        r"col_major\)",
    ):
        ex.check_arguments(F16, a, b, c)


def test_other_arrangement_with_padding_suggests_leading_dimension_too():
    a, b, c = operands(F16)
    b = Fake((16, 32), "float16", (40, 1), B_PTR)  # row-major B with ldb 40
    with pytest.raises(
        ExecutionError, match=r"b: .*Arrangement\(row_major, row_major, col_major\) \+ LeadingDimension\(16, 40, 64\)"
    ):
        ex.check_arguments(F16, a, b, c)


def test_padded_array_suggests_leading_dimension():
    a, b, c = operands(F16)
    c = Fake((64, 32), "float32", (1, 80), C_PTR)  # col-major with ldc 80
    with pytest.raises(ExecutionError, match=r"c: .*col_major with leading dimension 80: .*LeadingDimension\(16, 16, 80\)"):
        ex.check_arguments(F16, a, b, c)


def test_non_matrix_strides():
    a, b, c = operands(F16)
    a = Fake((64, 16), "float16", (32, 2), A_PTR)
    with pytest.raises(ExecutionError, match="a: .*neither row- nor column-major.*ascontiguousarray"):
        ex.check_arguments(F16, a, b, c)


# ---------------------------------------------------------------------------------------------
# alignment
# ---------------------------------------------------------------------------------------------


ALIGNED = gemm(64, 32, 16, (bx.float16, bx.float16, bx.float32), bx.Alignment(16, 16, 16))


def test_misaligned_pointer():
    a, b, c = operands(ALIGNED, ptrs=(A_PTR + 8, B_PTR, C_PTR))
    with pytest.raises(ExecutionError, match=r"a: address 0x7f1000000008 is not aligned to 16 bytes .* 8-byte aligned"):
        ex.check_arguments(ALIGNED, a, b, c)


def test_misaligned_batch_stride():
    a, b, c = operands(ALIGNED, batch=(None, None, 2))
    b = Fake((2, 16, 32), "float16", (ALIGNED.b_size + 4, 1, 16), B_PTR)
    with pytest.raises(ExecutionError, match=r"b: batch stride 516 elements \(1032 bytes\) is not a multiple of the 16-byte"):
        ex.check_arguments(ALIGNED, a, b, c)


def test_default_alignment_is_one_element():
    a, b, c = operands(F16, ptrs=(A_PTR + 2, B_PTR + 6, C_PTR + 4))
    ex.check_arguments(F16, a, b, c)
    a, b, c = operands(F16, ptrs=(A_PTR + 1, B_PTR, C_PTR))
    with pytest.raises(ExecutionError, match="a: address .* not aligned to 2 bytes"):
        ex.check_arguments(F16, a, b, c)


# ---------------------------------------------------------------------------------------------
# memory, devices, read-only, overlap
# ---------------------------------------------------------------------------------------------


def test_host_array():
    a, b, _ = operands(F16)
    with pytest.raises(ExecutionError, match=r"c: numpy\.ndarray of shape \(64, 32\) is in host memory; move it to the GPU \(bx\.to_device"):
        ex.check_arguments(F16, a, b, np.zeros((64, 32), np.float32, order="F"))


def test_arrays_on_different_devices():
    DEVICE_OF[B_PTR] = 1
    with pytest.raises(ExecutionError, match="b: the array is on device 1 but a is on device 0; a, b and c must be on one GPU"):
        ex.check_arguments(F16, *operands(F16))


def test_arrays_not_on_the_device_asked_for():
    for ptr in (A_PTR, B_PTR, C_PTR):
        DEVICE_OF[ptr] = 1
    with pytest.raises(ExecutionError, match=r"a: the array is on device 1 but the call was asked to run on device 0"):
        ex.check_arguments(F16, *operands(F16), device_id=0)
    assert ex.check_arguments(F16, *operands(F16), device_id=1).device_id == 1
    assert ex.check_arguments(F16, *operands(F16)).device_id == 1  # no device asked for: the arrays' one


def test_read_only_c():
    a, b, _ = operands(F16)
    c = Fake((64, 32), "float32", (1, 64), C_PTR, readonly=True)
    with pytest.raises(ExecutionError, match="c: the array is read-only"):
        ex.check_arguments(F16, a, b, c)


def test_read_only_inputs_are_fine():
    a, b, c = operands(F16)
    a.__cuda_array_interface__["data"] = (A_PTR, True)
    ex.check_arguments(F16, a, b, c)


def test_c_overlapping_a():
    a, b, _ = operands(F16)
    c = Fake((64, 32), "float32", (1, 64), A_PTR + 1024)
    with pytest.raises(ExecutionError, match=r"c: its memory \[0x7f1000000400, .*\) overlaps a's \[0x7f1000000000, .*Pass a separate output array"):
        ex.check_arguments(F16, a, b, c)


def test_c_overlapping_b_batch():
    desc = gemm(16, 16, 16, (bx.float32,))
    a, b, c = operands(desc, batch=(None, 4, 4))
    c.__cuda_array_interface__["data"] = (B_PTR + 3 * desc.b_size * 4, False)  # C starts in B's last problem
    with pytest.raises(ExecutionError, match="c: .* overlaps b's"):
        ex.check_arguments(desc, a, b, c)


def test_a_and_b_may_share_memory():
    desc = gemm(16, 16, 16, (bx.float32,), bx.Arrangement(C, C, C))
    a, b, c = operands(desc, ptrs=(A_PTR, A_PTR, C_PTR))
    ex.check_arguments(desc, a, b, c)


def test_c_just_after_a_is_not_overlap():
    a, b, _ = operands(F16)
    c = Fake((64, 32), "float32", (1, 64), A_PTR + F16.a_size * 2)
    ex.check_arguments(F16, a, b, c)


# ---------------------------------------------------------------------------------------------
# alpha and beta
# ---------------------------------------------------------------------------------------------


def test_complex_alpha_for_real_gemm():
    with pytest.raises(ExecutionError, match=r"alpha: \(1\+2j\) is complex but the GEMM is real"):
        ex.check_arguments(F16, *operands(F16), alpha=1 + 2j)


def test_complex_with_zero_imaginary_part_is_real():
    assert ex.check_arguments(F16, *operands(F16), alpha=complex(3, 0)).args[3] == 3


def test_non_integral_scalar_for_integer_gemm():
    desc = gemm(16, 16, 16, (bx.int8, bx.int8, bx.int32))
    with pytest.raises(ExecutionError, match=r"beta: 0\.5 is not an integer; an integer GEMM \(C is int32\) scales in int32"):
        ex.check_arguments(desc, *operands(desc), beta=0.5)


def test_int32_overflow():
    desc = gemm(16, 16, 16, (bx.int8, bx.int8, bx.int32))
    with pytest.raises(ExecutionError, match="alpha: 4294967296 does not fit in int32"):
        ex.check_arguments(desc, *operands(desc), alpha=2**32)


def test_float32_overflow():
    with pytest.raises(ExecutionError, match=r"alpha: 1e\+300 overflows float32"):
        ex.check_arguments(F16, *operands(F16), alpha=1e300)


@pytest.mark.parametrize("bad", ["1", None, True, [1.0], np.ones(2)])
def test_scalar_not_a_number(bad):
    with pytest.raises(ExecutionError, match="beta: .* is not a number; expected a Python or numpy scalar"):
        ex.check_arguments(F16, *operands(F16), beta=bad)


def test_numpy_scalars_and_zero_d_arrays():
    launch = ex.check_arguments(F16, *operands(F16), alpha=np.float64(0.25), beta=np.array(2))
    assert launch.args[3:5] == (0.25, 2)


def test_scalar_cache_keeps_types_apart():
    desc = gemm(16, 16, 16, (bx.int8, bx.int8, bx.int32))
    assert ex.check_arguments(desc, *operands(desc), alpha=2).args[3] == 2
    with pytest.raises(ExecutionError, match="alpha: 2.5"):
        ex.check_arguments(desc, *operands(desc), alpha=2.5)
    with pytest.raises(ExecutionError, match="alpha: True"):
        ex.check_arguments(desc, *operands(desc), alpha=True)


# ---------------------------------------------------------------------------------------------
# streams
# ---------------------------------------------------------------------------------------------


def test_stream_argument_forms():
    class Protocol:
        def __cuda_stream__(self):
            return (0, 0x1000)

    args = operands(F16)
    assert ex.check_arguments(F16, *args, stream=0x2000).stream == 0x2000
    assert ex.check_arguments(F16, *args, stream=Protocol()).stream == 0x1000
    assert ex.check_arguments(F16, *args, stream=types.SimpleNamespace(ptr=0x3000)).stream == 0x3000


def test_bad_stream():
    with pytest.raises(ExecutionError, match="stream: 'default' .* is not a stream"):
        ex.check_arguments(F16, *operands(F16), stream="default")


def test_producer_streams_are_collected():
    a, b, c = operands(F16)
    a.__cuda_array_interface__["stream"] = 0x4000
    c.__cuda_array_interface__["stream"] = 0x4000
    assert ex.check_arguments(F16, a, b, c, stream=0x5000).waits == (0x4000,)


# ---------------------------------------------------------------------------------------------
# device checks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sm, cc, match",
    [
        (bx.SM(90), (8, 0), r"targets sm_90, newer than the GPU: device 0 .*compute capability 8\.0; build the descriptor with SM\(80\)"),
        (bx.SM(90, arch_specific=True), (10, 0), r"sm_90a .* runs only on compute capability 9\.0 devices, but device 0 .* 10\.0"),
        (bx.SM(80), (9, 0), r"sm_80; its cubin runs on compute capability 8\.x devices only"),
    ],
)
def test_device_cannot_run_descriptor(sm, cc, match):
    desc = bx.Size(16, 16, 16) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + sm + bx.Block()
    with pytest.raises(DeviceError, match=match):
        ex.check_device(desc, cc, 0, "")


@pytest.mark.parametrize("sm, cc", [(80, (8, 0)), (80, (8, 6)), (86, (8, 9)), (90, (9, 0))])
def test_device_can_run_descriptor(sm, cc):
    ex.check_device(gemm(16, 16, 16, (bx.float32,), sm=sm), cc)


# ---------------------------------------------------------------------------------------------
# execute(): never launches after a failed check; launches the contract's arguments on the
# arrays' device (a fake two-GPU driver records every launch and the device that ran it)
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def gpu(monkeypatch):
    """Two fake GPUs, device 0 current; kernels load as fakes; producer waits are recorded."""
    return install(monkeypatch)


BAD_CALLS = {
    "dtype": lambda a, b, c: (Fake((64, 16), "float32", (16, 1), A_PTR), b, c, {}),
    "shape": lambda a, b, c: (a, Fake((16, 31), "float16", (1, 16), B_PTR), c, {}),
    "stride": lambda a, b, c: (Fake((64, 16), "float16", (1, 64), A_PTR), b, c, {}),
    "readonly": lambda a, b, c: (a, b, Fake((64, 32), "float32", (1, 64), C_PTR, readonly=True), {}),
    "overlap": lambda a, b, c: (a, b, Fake((64, 32), "float32", (1, 64), B_PTR), {}),
    "alpha": lambda a, b, c: (a, b, c, {"alpha": 1j}),
    "host": lambda a, b, c: (a, np.zeros((16, 32), np.float16), c, {}),
    "stream": lambda a, b, c: (a, b, c, {"stream": -5}),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_failed_check_never_launches(gpu, case):
    a, b, c, kwargs = BAD_CALLS[case](*operands(F16))
    with pytest.raises(ExecutionError):
        bx.Descriptor.execute(F16, a, b, c, **kwargs)
    assert gpu.launches == [] and gpu.waits == [] and gpu.current() == 0


def test_execute_launches_the_contract(gpu):
    a, b, c = operands(F16, batch=(3, None, 3))
    b.__cuda_array_interface__["stream"] = 0x9000  # producer stream to wait on
    gpu.stream(0x8000, 0)
    gpu.stream(0x9000, 0)
    out = F16.execute(a, b, c, alpha=-1.5, beta=2, stream=0x8000)
    assert out is c
    assert gpu.waits == [(0x9000, 0)]
    [launch] = gpu.launches
    assert F16.plan.stages == 2  # 64 x 32 f32 C outweighs A and B: two problems per block, so 2 blocks for 3
    assert launch.stream == 0x8000 and launch.device == 0 and launch.grid == (2, 1, 1)
    assert launch.block == F16.block_dim and launch.shared_memory == F16.kernel_shared_memory_size
    assert launch.slots[:3] == (A_PTR, B_PTR, C_PTR)
    assert (launch.float32(3), launch.float32(4)) == (-1.5, 2.0)
    assert [launch.int64(i) for i in (5, 6, 7, 8)] == [F16.a_size, 0, F16.c_size, 3]
    assert ex.check_arguments(F16, a, b, c, alpha=-1.5, beta=2, stream=0x8000).args == (
        A_PTR, B_PTR, C_PTR, np.float32(-1.5), np.float32(2), F16.a_size, 0, F16.c_size, 3
    )


def test_a_block_of_a_two_stage_plan_runs_two_problems(gpu):
    """KernelPlan.stages consecutive problems per block: grid x is the batch over that, rounded up."""
    desc = bx.Size(48, 80, 24) + bx.Precision(bx.float32) + bx.Function.MM + bx.SM(80) + bx.Block()
    assert desc.plan.stages == 2
    desc.execute(*operands(desc, batch=(5, 5, 5)))
    [launch] = gpu.launches
    assert launch.grid == (3, 1, 1) and launch.int64(8) == 5


def test_execute_of_complex_float64_packs_four_doubles(gpu):
    desc = bx.Size(16, 16, 16) + bx.Precision(bx.float64) + bx.Type.complex + bx.Function.MM + bx.SM(80) + bx.Block()
    desc.execute(*operands(desc), alpha=1 - 2j, beta=0.5j)
    [launch] = gpu.launches
    assert [launch.float64(i) for i in (3, 4, 5, 6)] == [1.0, -2.0, 0.0, 0.5]
    assert [launch.int64(i) for i in (7, 8, 9, 10)] == [0, 0, 0, 1]


def test_execute_empty_batch_launches_nothing(gpu):
    a, b, c = operands(F16, batch=(0, None, 0))
    assert F16.execute(a, b, c) is c
    assert gpu.launches == []


def test_execute_records_pending_stream_on_device_array(gpu):
    a, b, _ = operands(F16)
    c = arrays.DeviceArray(C_PTR, (64, 32), np.float32, strides=(4, 256), device_id=0)
    gpu.stream(0x8100, 0)
    F16.execute(a, b, c, stream=0x8100)
    assert c.stream == 0x8100 and c.__cuda_array_interface__["stream"] == 0x8100


# ---------------------------------------------------------------------------------------------
# several devices: a call runs on its arrays' device and leaves the current one as it was
# ---------------------------------------------------------------------------------------------


def on_device_1():
    for ptr in (A_PTR, B_PTR, C_PTR):
        DEVICE_OF[ptr] = 1


def test_arrays_on_another_device_run_there_and_the_current_device_stays(gpu):
    on_device_1()
    F16.execute(*operands(F16))  # the default stream: device 1's, since device 1 is made current for it
    [launch] = gpu.launches
    assert launch.device == 1 and launch.stream == arrays.default_stream_handle()
    assert gpu.current() == 0 and gpu.stack() == [gpu.primary[0]]
    assert gpu.calls[-3:] == ["cuCtxGetDevice", "push 1", "pop 1"]


def test_arrays_on_the_current_device_switch_nothing(gpu):
    F16.execute(*operands(F16))
    F16.execute(*operands(F16))
    assert [launch.device for launch in gpu.launches] == [0, 0]
    assert not any(call.startswith(("push", "pop")) for call in gpu.calls)


def test_no_current_context_runs_on_the_arrays_device_and_leaves_none(gpu):
    gpu.make_current(None)
    on_device_1()
    F16.execute(*operands(F16))
    assert gpu.launches[0].device == 1 and gpu.stack() == []


def test_a_stream_of_another_device_is_refused_before_anything_runs(gpu):
    on_device_1()
    gpu.stream(0x8000, 0)
    with pytest.raises(ExecutionError, match=r"stream: handle 0x8000 belongs to device 0 but the arrays are on device 1"):
        F16.execute(*operands(F16), stream=0x8000)
    assert gpu.launches == [] and gpu.current() == 0


def test_a_stream_of_the_arrays_device_is_used(gpu):
    on_device_1()
    gpu.stream(0x8000, 1)
    F16.execute(*operands(F16), stream=0x8000)
    assert gpu.launches[0].device == 1 and gpu.launches[0].stream == 0x8000


def test_library_streams_say_their_device_without_the_driver(gpu):
    on_device_1()
    torch_stream = types.SimpleNamespace(cuda_stream=0x8000, device_index=0)
    with pytest.raises(ExecutionError, match="belongs to device 0 but the arrays are on device 1"):
        F16.execute(*operands(F16), stream=torch_stream)
    cupy_stream = types.SimpleNamespace(ptr=gpu.stream(0x8200, 1), device_id=1)
    F16.execute(*operands(F16), stream=cupy_stream)
    assert gpu.launches[0].stream == 0x8200 and "cuStreamGetDevice" not in gpu.calls


def test_an_unknown_stream_handle_is_refused(gpu):
    with pytest.raises(ExecutionError, match=r"stream: the CUDA driver does not know stream handle 0x8300"):
        F16.execute(*operands(F16), stream=0x8300)


def test_mixed_devices_are_refused_before_anything_runs(gpu):
    DEVICE_OF[B_PTR] = 1
    with pytest.raises(ExecutionError, match="b: the array is on device 1 but a is on device 0; a, b and c must be"):
        F16.execute(*operands(F16))
    assert gpu.launches == []


def test_kernels_load_once_per_device(gpu):
    F16.execute(*operands(F16))
    on_device_1()
    F16.execute(*operands(F16))
    F16.execute(*operands(F16))
    plan = ex.plan_for(F16)
    assert sorted(plan._devices) == [0, 1]
    assert plan._devices[0].kernel is not plan._devices[1].kernel
    assert [launch.function for launch in gpu.launches] == [
        int(plan._devices[0].kernel.handle), int(plan._devices[1].kernel.handle), int(plan._devices[1].kernel.handle)
    ]


def test_one_thread_per_device_each_with_its_own_stream(gpu):
    """Two threads, one per fake device, each on a stream of its device: every launch lands where it belongs."""
    import threading

    gpu.stream(0xA000, 0)
    gpu.stream(0xA100, 1)
    desc = gemm(64, 32, 16)  # an equal descriptor: both threads share one plan
    base = {0: 0x7E00_0000_0000, 1: 0x7D00_0000_0000}
    for device, low in base.items():
        DEVICE_OF[low] = device
    errors = []

    def work(device):
        gpu.make_current(device ^ 1)  # the other device is current in this thread
        ptrs = (base[device], base[device] + (1 << 28), base[device] + (2 << 28))
        try:
            for _ in range(50):
                desc.execute(*operands(desc, ptrs=ptrs), stream=0xA000 + 0x100 * device)
            if gpu.current() != device ^ 1:
                errors.append(f"thread of device {device}: device {gpu.current()} is current after the calls")
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == []
    assert len(gpu.launches) == 100
    for launch in gpu.launches:
        device = 0 if launch.stream == 0xA000 else 1
        assert launch.device == device and launch.slots[0] >> 40 == base[device] >> 40


# ---------------------------------------------------------------------------------------------
# plans are cached per descriptor
# ---------------------------------------------------------------------------------------------


def test_plan_cache():
    desc = gemm(24, 24, 24, (bx.float32,))
    plan = ex.plan_for(desc)
    assert ex.plan_for(desc) is plan
    again = gemm(24, 24, 24, (bx.float32,))  # equal, built anew
    other = ex.plan_for(again)
    assert other.desc is again and other._devices is plan._devices


# ---------------------------------------------------------------------------------------------
# GPU: the launch path end to end with a stand-in kernel of the same signature
# ---------------------------------------------------------------------------------------------

_STAND_IN = r"""
extern "C" __global__ void stand_in(const float* a, const float* b, float* c, float alpha, float beta,
                                    long long sa, long long sb, long long sc) {
    // naive C = alpha A B + beta C; A row-major (lda = K), B and C column-major (ldb = K, ldc = M);
    // a block takes the plan's STAGES consecutive problems, as blasdx's kernel does
    const int M = %(m)d, N = %(n)d, K = %(k)d, STAGES = %(stages)d, BATCH = %(batch)d;
    for (int problem = blockIdx.x * STAGES; problem < (blockIdx.x + 1) * STAGES && problem < BATCH; ++problem) {
        const float* pa = a + problem * sa; const float* pb = b + problem * sb; float* pc = c + problem * sc;
        for (int idx = threadIdx.x; idx < M * N; idx += blockDim.x) {
            int i = idx %% M, j = idx / M;
            float acc = 0.f;
            for (int p = 0; p < K; ++p) acc += pa[i * K + p] * pb[p + j * K];
            pc[i + j * M] = alpha * acc + (beta != 0.f ? beta * pc[i + j * M] : 0.f);
        }
    }
}
"""


def _gpu_cc():
    try:
        from cuda.core import Device, system

        if system.get_num_devices() < 1:
            return None
        return tuple(Device(0).compute_capability)
    except Exception:
        return None


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_cc() is None, reason="needs an NVIDIA GPU")
def test_launch_path_with_stand_in_kernel(monkeypatch):
    """Everything but blasdx's own kernel: arguments, batch strides, broadcast, alpha/beta, streams."""
    cupy = pytest.importorskip("cupy")
    from cuda.core import Device, Program, ProgramOptions

    monkeypatch.undo()  # the real driver queries
    major, minor = _gpu_cc()
    m, n, k, batch = 24, 16, 8, 5
    desc = gemm(m, n, k, (bx.float32,), sm=major * 10 + minor)
    dev = Device(0)
    dev.set_current()
    source = _STAND_IN % {"m": m, "n": n, "k": k, "stages": desc.plan.stages, "batch": batch}
    code = Program(source, "c++", ProgramOptions(arch=f"sm_{major}{minor}")).compile("cubin")
    kernel = code.get_kernel("stand_in")
    monkeypatch.setattr(ex, "_load_kernel", lambda desc, smem, device: kernel)
    rng = np.random.default_rng(0)
    a_host = rng.standard_normal((batch, m, k)).astype(np.float32)
    b_host = rng.standard_normal((k, n)).astype(np.float32)
    c_host = rng.standard_normal((batch, m, n)).astype(np.float32)
    a = cupy.asarray(a_host)  # row-major (M, K) per problem
    b = cupy.asfortranarray(cupy.asarray(b_host))  # column-major (K, N), broadcast
    c = cupy.asfortranarray(cupy.asarray(c_host).transpose(1, 2, 0)).transpose(2, 0, 1)  # col-major per problem
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        desc.execute(a, b, c, alpha=0.5, beta=-2.0)
    s.synchronize()
    expected = 0.5 * a_host @ b_host - 2.0 * c_host
    np.testing.assert_allclose(cupy.asnumpy(c), expected, rtol=1e-5, atol=1e-5)
    # beta = 0 never reads C: NaN stays out
    c.fill(float("nan"))
    desc.execute(a, b, c, alpha=1, beta=0)
    np.testing.assert_allclose(cupy.asnumpy(c), a_host @ b_host, rtol=1e-5, atol=1e-5)
    # blasdx's own arrays
    da, db = bx.to_device(a_host), bx.to_device(np.asfortranarray(b_host))
    dc = bx.to_device(np.zeros((batch, n, m), np.float32).transpose(0, 2, 1))
    desc.execute(da, db, dc)
    np.testing.assert_allclose(bx.from_device(dc), a_host @ b_host, rtol=1e-5, atol=1e-5)


def test_torch_current_stream_is_asked_once_per_call(gpu, monkeypatch):
    """The producer stream of three tensors on one device cannot change during a call: one query, not four."""
    import sys

    from .test_arrays import _fake_torch

    torch = _fake_torch(current_stream=0x5000)
    asked = []
    torch._C._cuda_getCurrentRawStream = lambda device: asked.append(device) or 0x5000
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(sys.modules["blasdx.arrays.torch_adapter"], "_TORCH_STREAM", [])  # forget the raw query bound before
    gpu.stream(0x5000, 0)
    a = torch.Tensor((64, 16), (16, 1), name="float16", itemsize=2, ptr=A_PTR)
    b = torch.Tensor((16, 32), (1, 16), name="float16", itemsize=2, ptr=B_PTR)
    c = torch.Tensor((64, 32), (1, 64), name="float32", itemsize=4, ptr=C_PTR)
    F16.execute(a, b, c)
    assert asked == [0] and gpu.launches[-1].stream == 0x5000 and gpu.waits == []
    asked.clear()
    gpu.stream(0x6000, 0)
    F16.execute(a, b, c, stream=0x6000)  # another stream: it waits for torch's current one, asked once
    assert asked == [0] and gpu.waits == [(0x5000, 0)] and gpu.launches[-1].stream == 0x6000
