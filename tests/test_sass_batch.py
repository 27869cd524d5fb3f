"""SASS of many cubins per cuobjdump run (blasdx.compile.cubin.sass_of_cubins, prefetch_sass): the
same text, byte for byte, as one ``cuobjdump -sass`` per cubin, so the SASS checks of the compile
tests pass and fail on the same kernels either way (CPU, no GPU)."""

from __future__ import annotations

import re

import pytest

from blasdx.compile import cubin as cubins
from blasdx.compile import nvrtc

#: Small kernels of different shapes: the same name in several cubins, several functions in one,
#: instructions of different widths (the padding before the encodings), one that spills.
SOURCES = {
    "scale": 'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }',
    "scale_wide": 'extern "C" __global__ void scale(double* x, const double* __restrict__ y, int n) {\n'
                  '  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = fma(x[i], y[i], y[n - 1 - i]); }',
    "two": '__device__ __noinline__ float twice(float v) { return 2.0f * v; }\n'
           'extern "C" __global__ void first(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\n'
           'extern "C" __global__ void second(int* x) { atomicAdd(x, (int)twice((float)threadIdx.x)); }',
    "spills": 'extern "C" __global__ void spills(float* x, int n) {\n'
              '  float t[64];\n'
              '  for (int i = 0; i < 64; ++i) t[i] = x[(i * n) & 1023];\n'
              '  for (int i = 0; i < n; ++i) t[(i * 7) & 63] += t[(i * 5) & 63];\n'
              '  for (int i = 0; i < 64; ++i) x[i] = t[i]; }',
}
ARCHS = ("sm_75", "sm_80", "sm_90", "sm_90a")
#: Over 64 KB of code, its widest line last: addresses past 0xffff take five digits, which widen the padding.
LONG = ('extern "C" __global__ void long_one(float* x, float c) {\n  float v = x[threadIdx.x];\n'
        '#pragma unroll\n  for (int i = 0; i < 4200; ++i) v = v * c + 1.0f;\n'
        '  x[blockDim.x + threadIdx.x] = atomicAdd_system(x + threadIdx.x, v); }')


def _needs_cuobjdump() -> None:
    try:
        cubins.find_cuobjdump()
    except Exception:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")


@pytest.fixture(scope="module")
def compiled() -> list[bytes]:
    """Every source for every architecture, in an order that mixes the architectures."""
    _needs_cuobjdump()
    made = []
    for arch in ARCHS:
        for name, source in SOURCES.items():
            kernel = re.search(r'void (\w+)\(', source.split("extern")[-1]).group(1)
            made.append(nvrtc.compile_source(source, kernel, arch).cubin)
    made.append(nvrtc.compile_source(LONG, "long_one", "sm_80").cubin)
    return made[1::2] + made[0::2]


def test_batched_sass_is_the_single_runs_text(compiled):
    """One run per architecture (some 0.3-0.6 CPU-s each) gives each cubin what its own run gives."""
    one_by_one = [cubins.run_cuobjdump(c, "-sass") for c in compiled]
    assert cubins.sass_of_cubins(compiled) == one_by_one
    assert cubins.sass_of_cubins(compiled, batch=3) == one_by_one
    assert any(len(cubins.kernel_names(c)) > 1 for c in compiled)
    assert any(re.search(r"/\*[0-9a-f]{5}\*/", text) for text in one_by_one)


def test_a_failing_sass_check_still_fails(compiled):
    """The spilling kernel's batched SASS shows its local-memory traffic (what the compile tests
    reject), and a kernel without tensor cores shows no MMA."""
    texts = dict(zip(compiled, cubins.sass_of_cubins(compiled)))
    spilling = [t for c, t in texts.items() if "spills" in cubins.kernel_names(c)]
    assert spilling and all(re.search(r"\b(LDL|STL)\b", t) for t in spilling)
    assert not any(re.search(r"\b(HMMA|IMMA|DMMA|HGMMA)\b", t) for t in texts.values())


def test_prefetched_sass_is_handed_out_once(compiled, monkeypatch):
    """run_cuobjdump(cubin, "-sass") of a prefetched cubin returns the prefetched text without a
    cuobjdump run, once; then it runs cuobjdump again."""
    cubins.prefetch_sass(compiled[:3])
    runs = []
    real = cubins._cuobjdump_file
    monkeypatch.setattr(cubins, "_cuobjdump_file", lambda image, flags: runs.append(flags) or real(image, flags))
    first = [cubins.run_cuobjdump(c, "-sass") for c in compiled[:3]]
    assert runs == []
    assert cubins.run_cuobjdump(compiled[0], "-sass") == first[0] and runs == [("-sass",)]


def test_split_rejects_output_that_does_not_match_the_cubins():
    """A joined output with another number or name of functions than expected is an error, not a guess."""
    text = "\n\tcode for sm_80\n\t.target\tsm_80\n\n\t\tFunction : a\n\t.headerflags\t@\"x\"\n\t\t..........\n\n\n"
    with pytest.raises(Exception, match="1 functions, expected 2"):
        cubins._split_sass(text, [["a"], ["b"]])
    with pytest.raises(Exception, match="function 'a' where 'b' was expected"):
        cubins._split_sass(text, [["b"]])
