"""Compiling Numba kernels that call blasdx GEMMs without a GPU: Numba's LTO-IR plus the GEMMs', linked by nvJitLink."""

from __future__ import annotations

import re

import pytest

numba_cuda = pytest.importorskip("numba.cuda", reason="needs numba-cuda (pip install blasdx[numba])")
try:  # numba-cuda's array support, which blasdx.numba lowers through, loads only with a numpy it knows
    import numba.cuda.np.arrayobj  # noqa: F401
except AttributeError as exc:
    pytest.skip(f"numba-cuda cannot load its array support with this numpy: {exc}", allow_module_level=True)

import blasdx.numba  # noqa: F401 - registers the descriptor's Numba types
from blasdx.compile import cubin as _cubin

from .ltoir_support import require_nvjitlink

OPCODES = r"\b(HMMA|IMMA|QMMA|DMMA|HGMMA|QGMMA|IGMMA|FFMA|DFMA|LDSM|LDGSTS|STL|LDL|CALL\.\w+)\b"


def cc_of(sm: int) -> tuple:
    """The compute capability Numba compiles for on a device of ``sm`` (arch-specific from 9.0 on, as Numba does)."""
    major, minor = divmod(sm, 10)
    return (major, minor, "a") if sm >= 90 else (major, minor)


def compile_kernel(fn, sig, sm: int):
    """(cubin bytes, SASS text, kernel name) of ``fn`` compiled by Numba for ``sm`` and linked with nvJitLink."""
    require_nvjitlink()
    from cuda.core import Linker, LinkerOptions, ObjectCode

    cc = cc_of(sm)
    codes, _ = numba_cuda.compile_all(fn, sig, device=False, abi="numba", cc=cc, output="ltoir")
    objects = [ObjectCode.from_ltoir(code if isinstance(code, bytes) else bytes(code.data), name=f"part{i}")
               for i, code in enumerate(codes)]
    arch = "sm_" + "".join(str(part) for part in cc)
    cubin = bytes(Linker(*objects, options=LinkerOptions(arch=arch, link_time_optimization=True)).link("cubin").code)
    (name,) = _cubin.kernel_names(cubin)
    return cubin, _cubin.run_cuobjdump(cubin, "-sass"), name


def opcodes(sass: str) -> set[str]:
    return set(re.findall(OPCODES, sass))


def typing_error(fn, sig, sm: int = 80) -> str:
    """The text of the TypingError that compiling ``fn`` raises (fails the test when it compiles)."""
    with pytest.raises(typing_errors()) as info:
        numba_cuda.compile_all(fn, sig, device=False, abi="numba", cc=cc_of(sm), output="ltoir")
    return str(info.value)


def typing_errors() -> tuple[type, ...]:
    """Numba-CUDA's TypingError classes (its own, and Numba's where Numba-CUDA re-raises that one)."""
    from numba.cuda.core import errors

    found = [errors.TypingError]
    try:
        from numba.core import errors as core_errors

        found.append(core_errors.TypingError)
    except ImportError:  # numba-cuda without numba
        pass
    return tuple(found)
