"""float64 on int8 tensor cores (blasdx.engine.ozaki): the moduli rule, a host model of kernels/ozaki.cu's
arithmetic checked against an extended-precision reference within reference.ozaki_bound, the
kernels compiled for sm_90 (no local memory), and how array calls plan it."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from blasdx.calls import matmul as array_gemm

from blasdx.engine import emulation

from blasdx.engine import ozaki
from blasdx.base import dtypes as dt
from blasdx.compile.cache import cached_compile
from blasdx.reference import ozaki_bound

from .test_hopper import SMS, col, view

EXTENDED = np.finfo(np.longdouble).nmant >= 63  # x86 long double: 11 bits beyond float64


def test_moduli_are_pairwise_coprime_and_fit_int8_residues():
    moduli = ozaki.MODULI
    assert all(math.gcd(a, b) == 1 for i, a in enumerate(moduli) for b in moduli[i + 1:])
    assert max(moduli) == 256 and all(m > 128 for m in moduli)  # symmetric residues fit [-128, 127]


@pytest.mark.parametrize("bits", [1, 10, 30, 48, 52])
@pytest.mark.parametrize("k", [1, 64, 4096, 8192, ozaki.MAX_K])
def test_fewest_moduli_whose_product_holds_every_sum(bits, k):
    scheme = ozaki.residues_for(bits, k)
    t = scheme.norm
    # rows of 2-norm <= T after rounding gain at most sqrt(K) / 2: |x' y'| < M / 2, recovered exactly
    assert (2 * t + math.isqrt(k) + 1) ** 2 < 2 * scheme.product
    assert ozaki.NORM_MARGIN * t >= 2 * math.sqrt(k) * 2.0**bits  # the grid is <= 2^-bits of the largest
    if scheme.count > 1:  # one modulus less would not keep the bits
        fewer = ozaki._norm_for(math.prod(scheme.moduli[:-1]), k)
        assert ozaki.NORM_MARGIN * fewer < 2 * math.sqrt(k) * 2.0**bits


def test_the_scheme_grows_with_bits_and_depth():
    assert ozaki.residues_for(52, 8192).count == 16
    assert ozaki.residues_for(40, 8192).count < ozaki.residues_for(52, 8192).count
    assert ozaki.residues_for(52, 64).count <= ozaki.residues_for(52, ozaki.MAX_K).count
    with pytest.raises(ValueError, match="1 to 52"):
        ozaki.residues_for(53, 64)
    with pytest.raises(ValueError, match="exact for K up to"):
        ozaki.residues_for(52, ozaki.MAX_K + 1)


# ---------------------------------------------------------------------------------------------
# the kernels' arithmetic on the host
# ---------------------------------------------------------------------------------------------


def _scaled(a: np.ndarray, target: float) -> tuple[list[list[int]], np.ndarray]:
    """blasdx_ozaki_shifts + the rounding of blasdx_ozaki_slices: integer rows of 2-norm <= T, shifts."""
    shifts = []
    for row in a:
        norm = float(np.linalg.norm(row))
        s = 0
        if norm:
            s = math.floor(math.log2(target / norm))
            while math.ldexp(norm, s) > target:
                s -= 1
            while math.ldexp(norm, s + 1) <= target:
                s += 1
        shifts.append(s)
    shifts = np.array(shifts)
    ints = [[int(v) for v in np.rint(np.ldexp(row, s))] for row, s in zip(a, shifts)]
    return ints, shifts


def _symmetric(v: list[list[int]], m: int) -> np.ndarray:
    r = np.array([[e % m for e in row] for row in v], dtype=np.int64)
    return np.where(r > (m - 1) // 2, r - m, r)


def _model(x: np.ndarray, y: np.ndarray, scheme: ozaki.Residues) -> np.ndarray:
    """x @ y as kernels/ozaki.cu computes it, with the engine's int32 products (wrapping like int32)."""
    target = ozaki._below(scheme.norm)
    xs, ex = _scaled(x, target)
    ys, ey = _scaled(y.T, target)
    exact = np.array([[sum(a * b for a, b in zip(r, c)) for c in ys] for r in xs], dtype=object)
    assert np.all(2 * np.abs(exact) < scheme.product)  # Cauchy-Schwarz: recovered exactly
    total = scheme.product
    high = np.zeros((x.shape[0], y.shape[1]))
    low = np.zeros_like(high)
    for m in scheme.moduli:
        ra, rb = _symmetric(xs, m), _symmetric(ys, m)
        assert ra.min() >= -128 and ra.max() <= 127
        c = ra @ rb.T
        c = (c + 2**31) % 2**32 - 2**31  # int32 accumulation
        t = (c % m) * pow(total // m, -1, m) % m
        hi = round((1 << 44) / m) / (1 << 44)
        lo = float(1 / np.longdouble(m) - np.longdouble(hi))
        high = high + t * hi
        high = high - np.rint(high)
        low = low + t * lo
    fraction = high + low
    fraction = fraction - np.rint(fraction)
    return np.ldexp(fraction * float(total), -(ex[:, None] + ey[None, :]))


def _exact(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x.astype(np.longdouble) @ y.astype(np.longdouble)).astype(np.float64)


@pytest.mark.skipif(not EXTENDED, reason="needs an extended-precision long double for the reference")
@pytest.mark.parametrize(("m", "n", "k", "bits"), [(7, 5, 33, 52), (16, 16, 256, 52), (9, 12, 300, 30),
                                                   (5, 6, 1000, 8)])
def test_host_model_is_within_the_bound(m, n, k, bits):
    rng = np.random.default_rng(m * n * k + bits)
    x = rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 21, (m, k)))  # wide ranges inside rows
    y = rng.standard_normal((k, n))
    scheme = ozaki.residues_for(bits, k)
    got, ref = _model(x, y, scheme), _exact(x, y)
    bound = ozaki_bound(x, y, scheme.norm) + 2.0**-60 * (np.abs(x) @ np.abs(y))
    assert np.all(np.abs(got - ref) <= bound)
    if bits == 52:  # every element keeps float64-level accuracy relative to sum |x||y|
        assert np.max(np.abs(got - ref) / (np.abs(x) @ np.abs(y))) < 2.0**-50


def test_the_largest_sums_do_not_wrap():
    k = 4096
    scheme = ozaki.residues_for(52, k)
    x = np.full((3, k), 1 - 2.0**-40)  # equal elements: the sums reach ||x'|| ||y'||, the bound
    y = np.full((k, 2), -(1 - 2.0**-40))
    got = _model(x, y, scheme)
    assert np.allclose(got, x @ y, rtol=2.0**-50, atol=0)


def test_rows_of_zeros_give_zeros():
    x = np.zeros((2, 64))
    y = np.random.default_rng(1).standard_normal((64, 3))
    assert np.all(_model(x, y, ozaki.residues_for(52, 64)) == 0)


# ---------------------------------------------------------------------------------------------
# kernels and plans
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [52, 20])
@pytest.mark.parametrize("kernel", ["blasdx_ozaki_shifts", "blasdx_ozaki_slices", "blasdx_ozaki_combine"])
def test_kernels_compile_for_sm90_without_local_memory(kernel, bits):
    compiled = cached_compile(ozaki.ozaki_source(ozaki.residues_for(bits, 4096)), kernel, "sm_90")
    assert compiled.local_memory == 0, compiled
    sass = compiled.sass().split(f"Function : {kernel}")[1].split("Function : ")[0]  # this kernel's own code
    if kernel == "blasdx_ozaki_combine":
        assert "LDG.E" in sass and "STG.E.64" in sass
    if kernel == "blasdx_ozaki_slices":  # four residues per store; integer steps, no float64 division per modulus
        assert "STG.E " in sass and "IMAD.HI.U32" in sass
        assert len(re.findall(r"\bF2I\.S64\.F64\b", sass)) <= 8 and "FRND.F64" in sass  # the tile's rint only
    if kernel == "blasdx_ozaki_combine":  # integer steps: no conversion or rounding per modulus
        assert len(re.findall(r"\bI2F\.F64", sass)) <= 2 and len(re.findall(r"\bFRND\.F64\b", sass)) <= 1


def _plan(x, y, bits, sm=90, acc=None):
    scheme = array_gemm._resolve_scheme(x.dtype, bits)
    return array_gemm.plan_call(x, y, acc, dt.float64, array_gemm._DeviceInfo(sm, SMS), 0, scheme=scheme)


def test_float64_with_bits_runs_as_int8_residue_products(encoder):
    plan = _plan(view((4096, 4096), dt.float64), col((4096, 4096), dt.float64), 52)
    assert plan.kind == "hopper" and isinstance(plan.kernel, ozaki.OzakiPlan)
    assert plan.scheme == emulation.Scheme("ozaki", 16, 52)
    text = plan.describe()
    assert "float64 as 16 int8 residue products" in text and "ozaki (16 products, 52 bits)" in text
    assert plan.kernel.gemm.batch == 16 and plan.kernel.gemm.a == dt.int8 and "2-norm <= 2^" in text
    assert "repacked" not in plan.kernel.gemm.describe()  # residues are written K-major


def test_a_calls_scratch_holds_every_stage(encoder):
    """OzakiPlan.buffers, which a call and benchmarks/emulated_f64.py's stage timings share: shifts of 4 bytes a row,
    count * rows * ld residue bytes per operand (ld a multiple of 16), count * M * N product bytes."""
    kernel = _plan(view((300, 1000), dt.float64), col((1000, 200), dt.float64), 52).kernel
    asked = []

    class Scratch:
        def get(self, name, nbytes):
            asked.append((name, nbytes))
            return 256 * len(asked)

    assert kernel.buffers(Scratch()) == (256, 512, 768, 1024, 1280)
    count, ld = kernel.scheme.count, kernel.ld
    assert ld % 16 == 0 and ld >= 1000
    assert asked == [("ozaki shifts x", 4 * 300), ("ozaki shifts y", 4 * 200), ("ozaki residues x", count * 300 * ld),
                     ("ozaki residues y", count * 200 * ld), ("ozaki products", count * 300 * 200)]


def test_fewer_bits_cost_fewer_products(encoder):
    assert _plan(view((512, 512), dt.float64), view((512, 512), dt.float64), 20).kernel.scheme.count < 10


@pytest.mark.parametrize(("shapes", "sm", "why"), [
    (((4096, 4096), (4096, 4096)), 80, "the int8 engine needs sm_90"),
    (((2, 256, 256), (256, 256)), 90, "batches run as plain float64"),
    (((16, ozaki.MAX_K + 1), (ozaki.MAX_K + 1, 16)), 90, "int32 residue sums are exact"),
])
def test_elsewhere_float64_products_keep_the_bits(encoder, shapes, sm, why):
    plan = _plan(view(shapes[0], dt.float64), view(shapes[1], dt.float64), 52, sm=sm)
    assert plan.scheme.name == "native" and not isinstance(plan.kernel, ozaki.OzakiPlan)
    assert why in plan.describe()


def test_without_bits_float64_stays_on_dmma(encoder):
    plan = _plan(view((4096, 4096), dt.float64), view((4096, 4096), dt.float64), None)
    assert plan.scheme.name == "native" and not isinstance(plan.kernel, ozaki.OzakiPlan)


# ---------------------------------------------------------------------------------------------
# the residue products stored as bytes (kernels/hopper_residue_gemm.cu)
# ---------------------------------------------------------------------------------------------


def _residue_of(v: np.ndarray, m: int) -> np.ndarray:
    """kernels/hopper_residue_gemm.cu's residue_of in 32-bit unsigned arithmetic: u = v + 2^31 less Barrett's
    quotient hi32(u * floor(2^32 / m)) times m, one correction, then 2^31 mod m taken back."""
    u = (v.astype(np.int64) + 2**31).astype(np.uint64)  # v ^ 0x80000000 as unsigned
    quotient = (u * np.uint64(2**32 // m)) >> np.uint64(32)  # __umulhi: u and the magic are below 2^32
    r = (u - quotient * np.uint64(m)).astype(np.int64)
    assert np.all((r >= 0) & (r < 2 * m))
    r = np.where(r >= m, r - m, r)
    s = r - 2**31 % m
    return np.where(s < 0, s + m, s)


def test_the_epilogue_reduction_is_exact_for_every_int32_sum():
    """Barrett's quotient falls short by at most one, which one correction fixes, and taking 2^31 mod m back
    gives v mod m: every modulus, around every multiple of it and at the ends of int32."""
    rng = np.random.default_rng(7)
    for m in ozaki.MODULI:
        q = np.arange(-(2**31) // m - 1, 2**31 // m + 2, max(1, 2**31 // m // 4000), dtype=np.int64)
        edges = (q[:, None] * m + np.arange(-2, 3)[None, :]).ravel()
        v = np.concatenate([edges, rng.integers(-(2**31), 2**31, 20000), [-(2**31), 2**31 - 1, 0, -1, 1]])
        v = v[(v >= -(2**31)) & (v < 2**31)]
        assert np.array_equal(_residue_of(v, m), v % m), m


def _slice_residue(v: list[int], m: int) -> np.ndarray:
    """kernels/ozaki.cu's residue<M>(parts_of(v)) in its own steps: v as a 2^42 + b 2^21 + c, s = a (2^42 mod m) +
    b (2^21 mod m) + c + lift in 32-bit unsigned arithmetic, Barrett's quotient, min(r, r - m), m / 2 taken back."""
    a = np.array([x >> 42 for x in v], dtype=np.int64)
    b = np.array([(x >> 21) & 0x1FFFFF for x in v], dtype=np.int64)
    c = np.array([x & 0x1FFFFF for x in v], dtype=np.int64)
    lift = m * ((1 << 29) // m + 1) + m // 2
    s = a * (2**42 % m) + b * (2**21 % m) + c + lift
    assert np.all((s >= 0) & (s < 2**31))  # the unsigned sum never wraps
    s = s.astype(np.uint64)
    r = s - ((s * np.uint64(2**32 // m)) >> np.uint64(32)) * np.uint64(m)
    assert np.all(r < 2 * m)
    r = np.where(r >= m, r - np.uint64(m), r)  # min(r, r - m) in uint32
    return r.astype(np.int64) - m // 2


def test_the_slices_residues_are_exact_for_every_int64_element():
    """The residue kernel's integer steps give the symmetric residue of every scaled element |v| < 2^63, for every
    modulus: around multiples of it, at the ends of the range and at random (the scheme keeps T below 2^63)."""
    rng = np.random.default_rng(8)
    assert max(ozaki.residues_for(52, ozaki.MAX_K).norm, ozaki.residues_for(52, 64).norm) < 2**63 - 2**11
    ends = [-(2**63) + 1, 2**63 - 1, 0, 1, -1, 2**42, -(2**42), 2**42 - 1, 2**21, -(2**21) - 1]
    for m in ozaki.MODULI:
        around = [q * m + d for q in rng.integers(-(2**63) // m, 2**63 // m, 300).tolist() for d in (-1, 0, 1)]
        v = [x for x in ends + around + rng.integers(-(2**63) + 1, 2**63, 3000).tolist() if abs(x) < 2**63]
        assert np.array_equal(_slice_residue(v, m), _symmetric([v], m)[0]), m


@pytest.mark.parametrize("k_contiguous", [True, False], ids=["row-major", "column-major"])
def test_the_slices_kernel_writes_every_residue(k_contiguous, build_dir, tmp_path):
    """kernels/ozaki.cu's slices, run on the CPU (tests/host_emulation.py) over two row tiles and three K tiles, both
    partial: every element's symmetric residue for every modulus, zeros past K up to ld and in a row flagged
    non-finite (fails when a residue, a store or the tile walk is wrong)."""
    from . import host_emulation as emu

    if emu.compiler() is None:
        pytest.skip("needs g++ (C++20) to run kernel code on the host")
    rows, k, ld = 37, 300, 304
    scheme = ozaki.residues_for(52, k)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((rows, k)) * np.exp2(rng.integers(-30, 31, (rows, 1)))
    xs, shifts = _scaled(x, ozaki._below(scheme.norm))
    shifts = shifts.astype(np.int32)
    shifts[5] = 0x7FFFFFFF  # kNonFinite: the row's residues are zeros
    stored, strides = (x, (k, 1)) if k_contiguous else (np.ascontiguousarray(x.T), (1, rows))
    tile = 32 * 137 * 8  # the kernel's tile, then its 32 shifts, in the emulated shared memory
    call = (f"blasdx::ozaki::slices<{str(k_contiguous).lower()}>(reinterpret_cast<const double*>(a.data()), {rows}, "
            f"{k}, {strides[0]}, {strides[1]}, reinterpret_cast<const int*>(b.data()), "
            f"reinterpret_cast<signed char*>(out.data()), {ld}, {rows * ld}, reinterpret_cast<double*>(::smem), "
            f"reinterpret_cast<int*>(::smem + {tile}))")
    exe = emu.build(ozaki.ozaki_source(scheme), call, "::smem", build_dir)
    count = scheme.count
    got = emu.run(exe, (math.ceil(ld / 128), math.ceil(rows / 32)), 256, tile + 128, stored.reshape(-1), shifts,
                  np.full(count * rows * ld, 0x55, dtype=np.int8), tmp_path).reshape(count, rows, ld)
    for plane, m in zip(got, scheme.moduli):
        want = np.zeros((rows, ld), dtype=np.int64)
        want[:, :k] = _symmetric(xs, m)
        want[5] = 0
        assert np.array_equal(plane.astype(np.int64), want), m


@pytest.mark.parametrize(("m", "n", "k", "store"), [(4096, 4096, 4096, "UTMASTG"), (100, 36, 300, "STG.E.U8")],
                         ids=["tma-store", "direct"])
def test_residue_products_are_stored_as_bytes(encoder, m, n, k, store):
    """The batched int8 GEMM of an emulated float64 call writes each problem's sums reduced modulo its modulus
    as bytes (a quarter of the int32 traffic), through TMA or directly, without local memory."""
    plan = _plan(view((m, k), dt.float64), view((k, n), dt.float64), 52).kernel
    gemm = plan.gemm
    assert isinstance(gemm, ozaki.ResidueGemmPlan) and gemm.c == dt.uint8
    compiled = gemm.compiled
    assert compiled.local_memory == 0, compiled
    sass = compiled.sass()
    assert "IGMMA" in sass and store in sass and "IMAD.HI.U32" in sass  # Barrett's quotient


def _residue_products(x: np.ndarray, y: np.ndarray,
                      scheme: ozaki.Residues) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the residue GEMM leaves for the combine: [modulus][m][n] bytes, each exact product of the operands'
    symmetric residues reduced modulo its modulus; and the rows' and columns' shifts."""
    target = ozaki._below(scheme.norm)
    xs, ex = _scaled(x, target)
    ys, ey = _scaled(y.T, target)
    planes = []
    for m in scheme.moduli:
        c = _symmetric(xs, m) @ _symmetric(ys, m).T  # int64: exact, as the GEMM's int32 sums
        planes.append(_residue_of(c, m).astype(np.uint8))
    return np.stack(planes), ex.astype(np.int32), ey.astype(np.int32)


@pytest.mark.skipif(not EXTENDED, reason="needs an extended-precision long double for the reference")
@pytest.mark.parametrize(("m", "n", "k", "bits", "alpha"), [(7, 5, 33, 52, 1.0), (19, 23, 300, 44, -0.75)])
def test_the_combine_kernel_puts_byte_residues_back_together(m, n, k, bits, alpha, build_dir, tmp_path):
    """kernels/ozaki.cu's combine, run on the CPU (tests/host_emulation.py) on the byte residues the GEMM
    stores: the host model's result up to rounding, within the scheme's bound of the exact product."""
    from . import host_emulation as emu

    if emu.compiler() is None:
        pytest.skip("needs g++ (C++20) to run kernel code on the host")
    rng = np.random.default_rng(m * n + k)
    x = rng.standard_normal((m, k)) * np.exp2(rng.integers(-8, 9, (m, 1)))
    y = rng.standard_normal((k, n))
    scheme = ozaki.residues_for(bits, k)
    products, ex, ey = _residue_products(x, y, scheme)
    shifts = "reinterpret_cast<const int*>(b.data())"  # x's m row shifts, then y's n column shifts
    call = (f"blasdx_ozaki_combine(a.data(), {m}, {n}, {shifts}, {shifts} + {m}, nullptr, 0, 0, "
            f"reinterpret_cast<double*>(out.data()), {n}, 1, emulated_scalar(0), 0.0)")
    exe = emu.build(ozaki.ozaki_source(scheme), call, "::smem", build_dir)
    got = emu.run(exe, (2, 1), 64, 0, products, np.concatenate([ex, ey]), np.full(m * n, np.nan), tmp_path,
                  (alpha,)).reshape(m, n)
    scale = abs(alpha) * (np.abs(x) @ np.abs(y))
    assert np.max(np.abs(got - alpha * _model(x, y, scheme)) / scale) < 2.0**-48  # the model's sums, to rounding
    ref = alpha * _exact(x, y)
    bound = abs(alpha) * (ozaki_bound(x, y, scheme.norm) + 2.0**-60 * (np.abs(x) @ np.abs(y)))
    assert np.all(np.abs(got - ref) <= bound)
