"""A stand-in for cuTensorMapEncodeTiled on machines without a driver: the same rules, checked.

The rules are the driver's documented ones for tiled maps without interleave: a 16-byte
aligned address, extents in [1, 2^32], byte strides that are multiples of 16 below 2^40,
box extents in [1, 256] whose innermost row is a multiple of 16 bytes and at most the
swizzle span. Every call is recorded so tests can read the geometry a plan asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from blasdx.launch import cuda_driver
from blasdx.base.errors import ExecutionError

_SIZES = {"float16": 2, "bfloat16": 2, "tfloat32": 4, "float32": 4, "float64": 8, "float8_e4m3": 1,
          "float8_e5m2": 1, "int8": 1, "uint8": 1, "int32": 4}


@dataclass
class Encoded:
    type_name: str
    pointer: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int


class FakeEncoder:
    """Callable like cuda_driver.encode_tiled; keeps what it was asked in ``calls``."""

    def __init__(self) -> None:
        self.calls: list[Encoded] = []

    def __call__(self, type_name, pointer, dims, strides, box, swizzle=128):
        size = _SIZES[type_name]
        problems = []
        if pointer % 16:
            problems.append("address not 16-byte aligned")
        if any(not 1 <= d <= 2**32 for d in dims):
            problems.append(f"extent out of range in {dims}")
        if any(s % 16 or s >= 2**40 for s in strides):
            problems.append(f"stride not a multiple of 16 in {strides}")
        if any(not 1 <= b <= 256 for b in box):
            problems.append(f"box extent out of range in {box}")
        if (box[0] * size) % 16 or (swizzle and box[0] * size > swizzle):
            problems.append(f"inner box of {box[0] * size} bytes")
        if problems:
            raise ExecutionError("cuTensorMapEncodeTiled refused: " + "; ".join(problems))
        self.calls.append(Encoded(type_name, pointer, tuple(dims), tuple(strides), tuple(box), swizzle))
        return cuda_driver.TensorMap()

