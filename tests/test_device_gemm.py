"""bx.DeviceGemm without a GPU: validation, traits, the C++ it puts in scope, a fused kernel that
compiles to wgmma + TMA loads and stores, tensor-map arguments, and the tensor maps it builds
(checked against the driver's rules by a stand-in).
"""

from __future__ import annotations

import re

import pytest

import blasdx as bx
from blasdx.launch import cuda_driver
from blasdx.engine import hopper
from blasdx.base import dtypes as dt
from blasdx.base.errors import DescriptorError, ExecutionError

from .tma_rules import FakeEncoder
from .array_views import views
from .hopper_support import scaled_kernel


view = views(dt.float16)[0]


def test_validation_names_the_argument():
    with pytest.raises(DescriptorError, match=r"a: the engine takes float16, bfloat16, tfloat32, float8_e4m3, "
                                              r"float8_e5m2, int8, uint8 inputs, not float64"):
        bx.DeviceGemm(bx.float64)
    with pytest.raises(DescriptorError, match=r"c: D of float16 inputs is stored as float16, bfloat16, float32, not int32"):
        bx.DeviceGemm(bx.float16, bx.int32)
    with pytest.raises(DescriptorError, match=r"c: D of int8 inputs is stored as int32, not float32"):
        bx.DeviceGemm(bx.int8, bx.float32, bx.row_major, bx.col_major)
    with pytest.raises(DescriptorError, match=r"b: int8 does not pair with a: float8_e4m3"):
        bx.DeviceGemm(bx.float8_e4m3, bx.float16, bx.row_major, bx.col_major, b=bx.int8)
    with pytest.raises(DescriptorError, match=r"fast_accumulation: True or False, and True for fp8 inputs only"):
        bx.DeviceGemm(bx.int8, bx.int32, bx.row_major, bx.col_major, fast_accumulation=True)
    with pytest.raises(DescriptorError, match=r"float8_e5m2 wgmma reads K-major operands only"):
        bx.DeviceGemm(bx.float8_e5m2, bx.float16)
    with pytest.raises(DescriptorError, match=r"config: promotion every 96 K elements"):
        bx.DeviceGemm(bx.float8_e5m2, bx.float16, bx.row_major, bx.col_major, hopper.replace(hopper.SQUARE,
                                                                                            promotion=96))
    with pytest.raises(DescriptorError, match=r"tfloat32 wgmma reads K-major operands only"):
        bx.DeviceGemm(bx.tfloat32, bx.float32, bx.row_major, bx.row_major)
    with pytest.raises(DescriptorError, match=r"a_layout: expected bx.row_major or bx.col_major"):
        bx.DeviceGemm(bx.float16, bx.float16, "row")


def test_traits_follow_the_engine_rule():
    dg = bx.DeviceGemm.for_problem("bfloat16", "bfloat16", 8192, 8192, 8192)
    assert dg.config.bm == 128 and dg.config.bn == 256 and dg.config.bk == 64 and dg.cluster == 2
    assert dg.block_dim == (384, 1, 1) and dg.arch == "sm_90a"
    assert dg.shared_memory == dg.config.shared_memory(2, staged_store=True) <= 232448
    assert bx.DeviceGemm.for_problem(bx.float16, bx.float32, 16, 8192, 8192).config.bm == 64
    # whole 64-row tiles: 64 x 32 on a column-major (K-major) B, 64 x 64 on a row-major one (whole 64-wide panels)
    assert bx.DeviceGemm.for_problem(bx.bfloat16, bx.float32, 64, 4096, 4096, b_layout=bx.col_major).config.bn == 32
    assert bx.DeviceGemm.for_problem(bx.bfloat16, bx.float32, 64, 4096, 4096).config.bn == 64
    assert bx.DeviceGemm(bx.tfloat32, bx.float32, bx.row_major, bx.col_major).config.bk == 32
    assert dg.grid(8192, 8192, multiprocessors=132) == 132 and dg.grid(128, 256, multiprocessors=132) == 2
    single = bx.DeviceGemm(bx.float16)
    assert single.grid(8192, 8192, multiprocessors=132) == 132 and single.grid(128, 256, multiprocessors=132) == 1


@pytest.mark.parametrize("c", [bx.float16, bx.bfloat16, bx.float32])
def test_fused_kernel_compiles_to_wgmma_and_tma(c):
    dg = bx.DeviceGemm(bx.bfloat16, c, bx.row_major, bx.col_major)
    kernel = scaled_kernel(dg)
    assert kernel.block == (384, 1, 1) and kernel.shared_memory == dg.shared_memory
    assert kernel.local_memory == 0
    sass = kernel.compiled.sass()
    for op in ("HGMMA.64x256x16.F32.BF16", "UTMALDG", "UTMASTG", "USETMAXREG"):
        assert op in sass
    assert [p.tensor_map for p in kernel.params] == [True, True, True, False, False, False, False, False]
    assert "struct LINEAR {" in bx.header({"LINEAR": dg}).text


def test_tensor_map_arguments_are_checked():
    dg = bx.DeviceGemm(bx.float16, bx.float16, bx.row_major, bx.col_major)
    kernel = scaled_kernel(dg)
    with pytest.raises(ExecutionError, match=r"args\[0\] \(map_a\): parameter `const __grid_constant__ "
                                             r"blasdx::hopper::TensorMap map_a` takes a tensor map"):
        kernel.arguments((view((64, 64), dt.float16), None, None, 1.0, 1, 1, 1, 1))


def test_tensor_maps_of_arrays(monkeypatch):
    fake = FakeEncoder()
    monkeypatch.setattr(cuda_driver, "encode_tiled", fake)
    dg = bx.DeviceGemm(bx.bfloat16, bx.float32, bx.row_major, bx.row_major)
    dg.tensor_map_a(view((1000, 512), dt.bfloat16))
    dg.tensor_map_b(view((512, 768), dt.bfloat16))
    dg.tensor_map_d(view((1000, 768), dt.float32))
    a, b, d = fake.calls
    assert (a.dims, a.strides, a.box) == ((512, 1000, 1), (1024, 1024 * 1000), (64, 128, 1))
    assert (b.dims, b.strides, b.box) == ((768, 512, 1), (1536, 1536 * 512), (64, 64, 1))  # N-major panels
    assert (d.dims, d.box, d.type_name) == ((768, 1000, 1), (32, 64, 1), "float32")
    with pytest.raises(ExecutionError, match=r"a: TMA needs row strides of whole 16 bytes"):
        dg.tensor_map_a(view((1000, 511), dt.bfloat16))
    with pytest.raises(ExecutionError, match=r"b: expected bfloat16 elements, got float16"):
        dg.tensor_map_b(view((512, 768), dt.float16))
    with pytest.raises(ExecutionError, match=r"a: expected a row_major array"):
        dg.tensor_map_a(view((1000, 512), dt.bfloat16, strides=(1, 1000)))
    with pytest.raises(ExecutionError, match=r"d: TMA stores need a 16-byte aligned address"):
        dg.tensor_map_d(view((1000, 767), dt.float32, strides=(767, 1)))
    with pytest.raises(ExecutionError, match=r"d: .* N elements of whole 16 bytes .* N = 767 x 4 bytes"):
        dg.tensor_map_d(view((1000, 767), dt.float32, strides=(768, 1)))  # padded rows, N past 16 bytes


def test_clustered_kernels_launch_in_whole_clusters():
    dg = bx.DeviceGemm(bx.float16, bx.float16, bx.row_major, bx.col_major, hopper.WIDE_CLUSTERS)
    kernel = scaled_kernel(dg)
    with pytest.raises(ExecutionError, match=r"grid: \(3, 1, 1\) does not group into clusters of 2 blocks"):
        kernel._setup(3, None, None)


def test_prelude_matches_the_engine_source():
    """The struct DeviceGemm generates instantiates the same configuration as bx.matmul's kernels."""
    dg = bx.DeviceGemm(bx.float16, bx.float16, bx.col_major, bx.row_major, hopper.SQUARE)
    text = dg.prelude("G")
    assert "static constexpr int bm = 128, bn = 128, bk = 64;" in text
    assert "static constexpr bool a_k_major = false, b_k_major = false;" in text
    engine = hopper.gemm_source(dt.float16, dt.float16, dg.config, False, False)
    for line in re.findall(r"static constexpr [^\n]+", engine):
        if "store_by_tma" not in line:
            assert line in text


@pytest.mark.parametrize(("a", "b", "c", "fast"), [
    (dt.float8_e4m3, dt.float8_e5m2, dt.bfloat16, False), (dt.float8_e5m2, None, dt.float16, True),
    (dt.int8, dt.uint8, dt.int32, False),
])
def test_eight_bit_fused_kernels(a, b, c, fast):
    """fp8 (promoted unless fast) and int8 device GEMMs in a user's kernel: QGMMA / IGMMA, TMA, no spills."""
    dg = bx.DeviceGemm(a, c, bx.row_major, bx.col_major, b=b, fast_accumulation=fast)
    assert dg.config.bk == 128 and dg.config.promotion == (0 if fast or a.integral else 128)
    assert dg.b_value_type == (b or a) and dg.scalar_type == (dt.int32 if a.integral else dt.float32)
    kernel = scaled_kernel(dg, a.integral)
    sass = kernel.compiled.sass()
    names = {"float8_e4m3": "E4M3", "float8_e5m2": "E5M2", "int8": "S8", "uint8": "U8"}
    opcode = "IGMMA" if a.integral else "QGMMA"
    assert re.search(rf"{opcode}\.64x\d+x32\.\w*\.?{names[a.name]}\.{names[(b or a).name]}", sass), sass[:0]
    assert "UTMALDG" in sass and "UTMASTG" in sass and not re.search(r"\b(LDL|STL)\b", sass)
    for_problem = bx.DeviceGemm.for_problem(a, c, 4096, 4096, 4096, a_layout=bx.row_major, b_layout=bx.col_major,
                                            b=b, fast_accumulation=fast)
    assert for_problem.config.promotion == dg.config.promotion
