"""float64 products on int8 tensor cores: scaled integer operands and their residues (Ozaki scheme II).

A float64 call that states ``mantissa_bits=b`` (b <= 52) may run as a handful of exact int8
GEMMs instead of DMMA (blasdx.engine.emulation picks it): each row i of x is scaled by the power of
two 2^s_i that brings its 2-norm to at most T and rounded to integers x', and each column of y
likewise. With pairwise coprime moduli m_1..m_L <= 256 whose product M exceeds
2 (T + sqrt(K) / 2)^2, every element of x' y' is at most ||x'_i|| ||y'_j|| < M / 2 in magnitude
(Cauchy-Schwarz), so the exact integer product is fixed by its residues modulo the m_l
(Chinese remainder theorem); each residue product is one int8 x int8 -> int32 GEMM of the
operands' residues on the Hopper engine, all L in one batched launch. kernels/ozaki.cu makes
the residues and puts the result back together.

The rounding to integers is the only error: half a unit of the row's grid 2^-s_i, which is
below ||x_i|| / T. L is the fewest moduli with T >= sqrt(K) 2^(b+1), so that grid is at most
2^-b times the row's largest element whatever the data (``b`` bits relative to the row's
largest, the guarantee); rows whose mass is spread over many elements get finer grids (about
2 bits more for normal values at K = 8192). :func:`blasdx.reference.ozaki_bound` bounds each
element's error.

What it does not do: batches (rank-3 operands) run as plain float64; K beyond :data:`MAX_K`
would overflow the int32 residue sums and runs as plain float64 too; a row of x or a column
of y that holds inf or NaN gives NaN in its whole row / column of the result.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any

from ..base import dtypes as _dt
from ..arrays.view import ArrayView
from ..compile.compiled import Forward
from ..launch import scratch as _scratch
from . import hopper as _hopper

__all__ = ["MODULI", "MAX_K", "Residues", "residues_for", "OzakiPlan", "ResidueGemmPlan", "ozaki_constants",
           "residue_constants", "ozaki_source"]

#: K up to which every residue product sums exactly in int32 (|r| <= 127 except m = 256's -128).
MAX_K = 1 << 17
#: The combine's fixed point (kernels/ozaki.cu): 1 / m as a multiple of 2^-44 plus the rest, which is kept as a
#: multiple of 2^-87 (each residue byte's two steps are integers; their sums stay within 64 bits).
_HI_BITS = 44
_LOW_BITS = 87
#: Largest 2-norm T a scaled row may keep: the residue kernel splits each scaled element as an int64.
_MAX_NORM = 2**63 - 2**12
#: The kernels aim each row's computed 2-norm at T (1 - 2^-30): room for its rounding errors.
NORM_MARGIN = 1 - 2.0**-30


def _coprime_moduli(count: int) -> tuple[int, ...]:
    """The largest pairwise coprime integers <= 256, greedily from 256 down."""
    chosen: list[int] = []
    m = 256
    while len(chosen) < count:
        if all(math.gcd(m, c) == 1 for c in chosen):
            chosen.append(m)
        m -= 1
    return tuple(chosen)


#: Moduli the scheme draws from, in order (their product grows by about 7.9 bits each).
MODULI = _coprime_moduli(24)


class Residues:
    """The scheme for one (mantissa bits, K): the moduli, and T, the 2-norm each scaled row / column keeps."""

    __slots__ = ("moduli", "norm", "bits", "k")

    def __init__(self, moduli: tuple[int, ...], norm: int, bits: int, k: int) -> None:
        self.moduli, self.norm, self.bits, self.k = moduli, norm, bits, k

    @property
    def count(self) -> int:
        """int8 products (one per modulus)."""
        return len(self.moduli)

    @property
    def product(self) -> int:
        return math.prod(self.moduli)

    def __repr__(self) -> str:
        return f"Residues({self.count} moduli, T = 2^{math.log2(self.norm):.1f}, K = {self.k})"


def _norm_for(product: int, k: int) -> int:
    """The largest T with 2 (T + sqrt(K) / 2)^2 < M (the rounding to integers adds up to sqrt(K) / 2)."""
    root_k = math.isqrt(k) + 1  # >= sqrt(K)
    t = (math.isqrt(2 * product) - root_k) // 2
    while t > 0 and (2 * t + root_k) ** 2 >= 2 * product:
        t -= 1
    return t


@lru_cache(maxsize=None)
def residues_for(bits: int, k: int) -> Residues:
    """The fewest moduli whose T keeps ``bits`` for K = ``k``: T >= sqrt(K) 2^(bits + 1).

    ``bits`` is the mantissa the caller asks each element to keep relative to its row's (column's)
    largest: a row's 2-norm is at most sqrt(K) times its largest element, so the grid
    2^-s < 2 ||x_i|| / T is then at most 2^-bits times the largest.
    """
    if not 1 <= bits <= 52:
        raise ValueError(f"bits: float64 emulation keeps 1 to 52 mantissa bits, not {bits}")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k: the int32 residue sums are exact for K up to {MAX_K}, not {k}")
    for count in range(1, len(MODULI) + 1):
        norm = min(_norm_for(math.prod(MODULI[:count]), k), _MAX_NORM)
        if norm > 0 and NORM_MARGIN * norm >= 2 * math.sqrt(k) * 2.0**bits:
            return Residues(MODULI[:count], norm, bits, k)
    raise ValueError(f"bits: {bits} bits at K = {k} need more moduli than {len(MODULI)}")


def ozaki_source(scheme: Residues) -> str:
    """kernels/ozaki.cu with the scheme's moduli, inverses and fractions as generated constants."""
    return "\n".join([ozaki_constants(scheme), '#include "ozaki.cu"', ""])


def ozaki_constants(scheme: Residues) -> str:
    """The scheme's moduli and the combine's integer steps as the constexpr functions ozaki.cu reads: with
    1 / m = h 2^-44 + e, step G = inverse h mod 2^44 and P = inverse e 2^87 rounded (inverse = (M / m)^-1 mod m),
    so that a residue byte c adds c G 2^-44 + c P 2^-87 to the product's fraction of M."""
    moduli = scheme.moduli
    total = scheme.product
    inverses = [pow(total // m, -1, m) for m in moduli]
    highs = [round(Fraction(1 << _HI_BITS, m)) for m in moduli]
    high_steps = [inverse * h % (1 << _HI_BITS) for inverse, h in zip(inverses, highs)]
    low_steps = [round(inverse * (Fraction(1, m) - Fraction(h, 1 << _HI_BITS)) * (1 << _LOW_BITS))
                 for m, inverse, h in zip(moduli, inverses, highs)]

    def table(name: str, kind: str, values: list[Any]) -> str:
        cases = " : ".join(f"l == {i} ? {v}" for i, v in enumerate(values[:-1]))
        return f"__host__ __device__ constexpr {kind} {name}(int l) {{ return {cases} : {values[-1]}; }}"

    return "\n".join([
        f"constexpr int ozaki_moduli = {len(moduli)};",
        table("ozaki_modulus", "int", list(moduli)),
        table("ozaki_high_step", "unsigned long long", [f"{g}ull" for g in high_steps]),
        table("ozaki_low_step", "long long", [f"{v}ll" for v in low_steps]),
        f"__host__ __device__ constexpr double ozaki_product() {{ return {float.hex(float(total))}; }}",
        f"__host__ __device__ constexpr double ozaki_norm() {{ return {float.hex(_below(scheme.norm))}; }}",
    ])


def residue_constants(scheme: Residues) -> str:
    """The residue GEMM's tables in constant memory (kernels/hopper_residue_gemm.cu): each modulus m, floor(2^32 / m)
    and 2^31 mod m, indexed by the problem."""
    moduli = scheme.moduli

    def table(name: str, kind: str, values: list[int]) -> str:
        return f"__constant__ {kind} {name}[{len(values)}] = {{{', '.join(map(str, values))}}};"

    return "\n".join([
        table("ozaki_residue_m", "unsigned", list(moduli)),
        table("ozaki_residue_magic", "unsigned", [(1 << 32) // m for m in moduli]),
        table("ozaki_residue_offset", "int", [(1 << 31) % m for m in moduli]),
    ])


def _below(norm: int) -> float:
    """T times NORM_MARGIN as a double no larger than that (the kernels' target)."""
    value = float(Fraction(norm) * Fraction(NORM_MARGIN))
    return value if Fraction(value) <= Fraction(norm) * Fraction(NORM_MARGIN) else math.nextafter(value, 0.0)


#: The residue GEMM's entry point (kernels/hopper_residue_gemm.cu): the engine's GEMM with byte results.
RESIDUE_KERNEL_NAME = "blasdx_hopper_residue_gemm"


class ResidueGemmPlan(_hopper.EnginePlan):
    """The engine's plan of the batched residue products, problem l's int32 sums stored as bytes modulo m_l
    (kernels/hopper_residue_gemm.cu): a quarter of the int32 products' traffic, written and read back. Same
    parameters as the engine's own kernel, launched on pointers; C, alpha and beta are not read."""

    def __init__(self, scheme: Residues, *args: Any, **kwargs: Any) -> None:
        self.scheme = scheme  # before the engine's constructor builds the kernel
        super().__init__(*args, **kwargs)

    def _gemm_kernel(self, staged: bool) -> Any:
        gemm = _hopper.gemm_source(self.a, self.c, self.config, self.route_a.k_major, self.route_b.k_major, staged,
                                   self.b, kernel_file="hopper_residue_gemm.cu")
        return _hopper._Kernel("\n".join([residue_constants(self.scheme), gemm]),
                               RESIDUE_KERNEL_NAME, _hopper.ARCH,
                               _hopper._scalar_kinds(_hopper._GEMM_PARAMS, self.c),
                               self.config.shared_memory(self.a.size, staged))


_SHIFT_PARAMS = ("u64", "i32", "i32", "i64", "i64", "u64")
_SLICE_PARAMS = ("u64", "i32", "i32", "i64", "i64", "u64", "u64", "i32", "i64")
_COMBINE_PARAMS = ("u64", "i32", "i32", "u64", "u64", "u64", "i64", "i64", "u64", "i64", "i64", "f64", "f64")


def _view(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: _dt.DType, device_id: int) -> ArrayView:
    return ArrayView(ptr, shape, strides, dtype, device_id, False, None)


class OzakiPlan:
    """What every float64 call of one kind (shapes, strides, bits, device) runs as residue products."""

    def __init__(self, m: int, n: int, k: int, bits: int, multiprocessors: int) -> None:
        self.m, self.n, self.k = m, n, k
        self.scheme = residues_for(bits, k)
        self.multiprocessors = multiprocessors
        self.ld = -(-k // 16) * 16  # residue rows start on 16 bytes (TMA)
        count = self.scheme.count
        source = ozaki_source(self.scheme)
        self._shifts = _hopper._Kernel(source, "blasdx_ozaki_shifts", "sm_90", _SHIFT_PARAMS)
        self._slices = _hopper._Kernel(source, "blasdx_ozaki_slices", "sm_90", _SLICE_PARAMS)
        self._combine = _hopper._Kernel(source, "blasdx_ozaki_combine", "sm_90", _COMBINE_PARAMS)
        route_a = _hopper.route("x", _dt.int8, _hopper._SCRATCH_ALIGNMENT, True, self.ld, m, m * self.ld, True)
        route_b = _hopper.route("y", _dt.int8, _hopper._SCRATCH_ALIGNMENT, True, self.ld, n, n * self.ld, True)
        self.gemm = ResidueGemmPlan(self.scheme, _dt.int8, _dt.uint8, m, n, k, count, route_a, route_b, self.ld,
                                    self.ld, count, count, m * self.ld, n * self.ld, _hopper._SCRATCH_ALIGNMENT,
                                    _hopper._SCRATCH_ALIGNMENT, multiprocessors)

    def __repr__(self) -> str:
        return f"OzakiPlan({self.describe()})"

    def describe(self) -> str:
        s = self.scheme
        return (f"float64 as {s.count} int8 residue products (moduli {s.moduli[0]}..{s.moduli[-1]}, rows of x and "
                f"columns of y scaled to integers of 2-norm <= 2^{math.log2(s.norm):.1f}); {self.gemm.describe()}")

    compiled = Forward[Any]("gemm", "The int8 GEMM's CompiledKernel.")

    def run(self, device_id: int, stream_core: Any, stream: int, x: ArrayView, y: ArrayView, c: ArrayView | None,
            d: ArrayView, alpha: float, beta: float) -> None:
        """D = alpha * x y + beta * C (C None: beta is 0) on ``stream``; x is [M, K], y [K, N], all float64."""
        with _scratch.call_scratch(device_id, stream) as scratch:  # safe in a CUDA graph capture
            shift_a, shift_b, res_a, res_b, products = self.buffers(scratch)
            self.residues(device_id, stream, x, False, shift_a, res_a)
            self.residues(device_id, stream, y, True, shift_b, res_b)
            self.products(device_id, stream_core, stream, res_a, res_b, products)
            self.combine(device_id, stream, products, shift_a, shift_b, c, d, alpha, beta)

    # -- the stages of a call, on scratch addresses (benchmarks/emulated_f64.py times each) ------

    def buffers(self, scratch: Any) -> tuple[int, int, int, int, int]:
        """A call's scratch addresses (blasdx.launch.scratch): x's and y's shifts, x's and y's residues, and the
        residue products (a byte each)."""
        m, n, count, ld = self.m, self.n, self.scheme.count, self.ld
        return (scratch.get("ozaki shifts x", 4 * m), scratch.get("ozaki shifts y", 4 * n),
                scratch.get("ozaki residues x", count * m * ld), scratch.get("ozaki residues y", count * n * ld),
                scratch.get("ozaki products", count * m * n))

    def residues(self, device_id: int, stream: int, operand: ArrayView, is_y: bool, shifts: int,
                 residues: int) -> None:
        """x's rows (y's columns when ``is_y``): their scale shifts (4 bytes a row) and their int8 residues,
        [modulus][row][ld] (count * rows * ld bytes)."""
        rows, k, ld = (self.n if is_y else self.m), self.k, self.ld
        row_stride, k_stride = (operand.strides[-1], operand.strides[-2]) if is_y else operand.strides[-2:]
        with self._shifts.params.lock:
            self._shifts.fill((operand.ptr, rows, k, row_stride, k_stride, shifts))
            self._shifts.launch(device_id, (-(-rows // 32), 1, 1), (32, 32, 1), stream)
        with self._slices.params.lock:
            self._slices.fill((operand.ptr, rows, k, row_stride, k_stride, shifts, residues, ld, rows * ld))
            self._slices.launch(device_id, (-(-ld // 128), -(-rows // 32), 1), (256, 1, 1), stream)

    def products(self, device_id: int, stream_core: Any, stream: int, res_a: int, res_b: int, products: int) -> None:
        """The batched int8 GEMM of the residues, each product stored modulo its modulus as a byte
        (count * m * n bytes)."""
        m, n, k, ld, count = self.m, self.n, self.k, self.ld, self.scheme.count
        self.gemm.run(device_id, stream_core, stream,
                      _view(res_a, (count, m, ld), (m * ld, ld, 1), _dt.int8, device_id),
                      _view(res_b, (count, k, n), (n * ld, 1, ld), _dt.int8, device_id), None,
                      _view(products, (count, m, n), (m * n, n, 1), _dt.uint8, device_id), 1, 0)

    def combine(self, device_id: int, stream: int, products: int, shift_a: int, shift_b: int, c: ArrayView | None,
                d: ArrayView, alpha: float, beta: float) -> None:
        """D = alpha * (the product put back together from its residues and scaled back) + beta * C."""
        m, n = self.m, self.n
        acc_row, acc_col = (0, 0) if c is None else c.strides[-2:]
        d_row, d_col = d.strides[-2:]
        blocks = 16 * self.multiprocessors  # rows over grid y, a row's columns over grid x
        across = max(1, min(-(-n // 256), blocks))
        grid = (across, max(1, min(m, blocks // across, 65535)), 1)
        with self._combine.params.lock:
            self._combine.fill((products, m, n, shift_a, shift_b, 0 if c is None else c.ptr, acc_row, acc_col,
                                d.ptr, d_row, d_col, float(alpha), 0.0 if c is None else float(beta)))
            self._combine.launch(device_id, grid, (256, 1, 1), stream)
