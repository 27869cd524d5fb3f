"""blasdx.compile: NVRTC compilation, header discovery, compile errors, resource usage, SASS (CPU only)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import blasdx as bx
from blasdx import compile as cc
from blasdx.compile import cubin
from blasdx.compile.cache import compile_descriptor
from blasdx.base.errors import CompileError, DeviceError

SMALL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
extern "C" __global__ void small(float* x) {
    __shared__ float stage[256];
    stage[threadIdx.x] = x[threadIdx.x] + __half2float(__float2half(1.0f)) + __bfloat162float(__float2bfloat16(2.0f));
    __syncthreads();
    x[threadIdx.x] = stage[255 - threadIdx.x];
}
"""

# Kernels whose figures differ: a local array (stack), shared memory, a register cap (spills), a call chain.
RESOURCE_SOURCE = r"""
extern "C" __global__ void local_array(float* x, int n) {
    float a[256];
    __shared__ float s[300];
    for (int i = 0; i < 256; ++i) a[i] = x[i * n + threadIdx.x];
    s[threadIdx.x] = a[n & 255];
    __syncthreads();
    float acc = 0;
    for (int i = 0; i < 256; ++i) acc += a[(i * 7 + n) & 255] * s[i];
    x[threadIdx.x] = acc;
}
extern "C" __global__ void many_registers(float* x) {
    float v[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = x[i * blockDim.x + threadIdx.x];
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        #pragma unroll
        for (int i = 0; i < 64; ++i) v[i] = v[i] * v[(i + 1) & 63] + 1.0f;
    }
    float a = 0;
    #pragma unroll
    for (int i = 0; i < 64; ++i) a += v[i];
    x[threadIdx.x] = a;
}
__device__ __noinline__ float leaf(float* x, int n) {
    float a[64];
    for (int i = 0; i < 64; ++i) a[i] = x[i * n];
    return a[n & 63] + a[(n * 3) & 63];
}
extern "C" __global__ void __launch_bounds__(256) calls(float* x, int n) { x[threadIdx.x] = leaf(x, n); }
"""

F16_GEMM = bx.Size(64, 64, 64) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + bx.Block()


@pytest.fixture(autouse=True)
def isolated_cache(fresh_cache):
    """Every test gets its own cache folder and an empty in-process cache (conftest)."""
    return fresh_cache


@pytest.fixture
def kernels(tmp_path) -> Path:
    """A kernels folder of our own (a header with a deliberate error in it)."""
    root = tmp_path / "kernels"
    (root / "blasdx").mkdir(parents=True)
    (root / "blasdx" / "ok.cuh").write_text("#pragma once\n__device__ inline float twice(float v) { return 2 * v; }\n")
    (root / "blasdx" / "broken.cuh").write_text("#pragma once\n\n__device__ inline int broken() { return nope; }\n")
    return root


def _needs_cuobjdump() -> str:
    try:
        return cc.find_cuobjdump()
    except CompileError:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")


# -- compiling ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_89", "sm_90a"])
def test_compiles_small_source_for_each_arch(arch, kernels):
    compiled = cc.compile_source(SMALL, "small", arch, kernels=kernels)
    assert compiled.cubin[:4] == b"\x7fELF"
    assert compiled.arch == arch and compiled.kernel_name == "small" and compiled.source == SMALL
    assert cc.kernel_names(compiled.cubin) == ["small"]
    assert compiled.registers > 0
    assert compiled.shared_memory == 256 * 4
    assert compiled.local_memory == 0


def test_every_compile_is_counted(kernels):
    before = cc.stats.nvrtc_calls
    cc.compile_source(SMALL, "small", "sm_80", kernels=kernels)
    assert cc.stats.nvrtc_calls == before + 1


def test_descriptor_kernel_uses_tensor_cores_without_spills():
    compiled = compile_descriptor(F16_GEMM + bx.SM(80))
    assert compiled.kernel_name == "blasdx_batched_gemm"
    assert compiled.local_memory == 0
    _needs_cuobjdump()
    sass = compiled.sass()
    assert "Function : blasdx_batched_gemm" in sass
    assert "HMMA" in sass


def test_max_registers_option_caps_registers(kernels):
    free = cc.compile_source(RESOURCE_SOURCE, "many_registers", "sm_80", kernels=kernels)
    capped = cc.compile_source(
        RESOURCE_SOURCE, "many_registers", "sm_80", cc.CompileOptions(max_registers=32), kernels=kernels
    )
    assert free.registers > 32 >= capped.registers
    assert capped.local_memory > 0  # the cap forces spills


def test_compile_options_make_program_options():
    options = cc.CompileOptions(
        lineinfo=True, fast_math=True, max_registers=64, defines={"B": 2, "A": "x"}, ptxas_options=["-O3"]
    )
    assert options.defines == (("A", "x"), ("B", "2"))
    made = options.program_options(arch="sm_80", name="k.cu", include_dirs=["/inc"])
    assert made.arch == "sm_80" and made.std == "c++17" and made.name == "k.cu"
    assert made.lineinfo and made.use_fast_math and made.max_register_count == 64
    assert list(made.include_path) == ["/inc"]
    assert options.cache_token() != cc.CompileOptions().cache_token()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"std": "c++14"}, r"std='c\+\+14'; expected 'c\+\+17' or 'c\+\+20'"),
        ({"max_registers": 8}, r"max_registers=8; expected an int in 16..255"),
        ({"defines": [3]}, r"defines entry 3 must be 'NAME' or \('NAME', value\)"),
    ],
)
def test_compile_options_reject_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cc.CompileOptions(**kwargs)


@pytest.mark.parametrize(
    "arch, name, match",
    [
        ("sm80", "k", r"arch='sm80': expected an NVRTC real target such as 'sm_80' or 'sm_90a'"),
        ("compute_80", "k", r"arch='compute_80'"),
        ("sm_80", "not a name", r"kernel_name='not a name': expected the C identifier"),
    ],
)
def test_rejects_bad_arch_and_kernel_name(arch, name, match):
    with pytest.raises(ValueError, match=match):
        cc.compile_source(SMALL, name, arch)


def test_kernel_missing_from_cubin_is_explained(kernels):
    source = SMALL.replace('extern "C" ', "")  # C++ mangling hides the name
    with pytest.raises(CompileError, match=r"kernel_name='small' is not in the cubin .*extern \"C\" __global__"):
        cc.compile_source(source, "small", "sm_80", kernels=kernels)


def test_kernels_dir_holds_the_templates():
    root = cc.kernels_dir()
    assert (root / "blasdx").is_dir()
    assert any(root.glob("blasdx/*.cuh"))


# -- compile errors ---------------------------------------------------------------------------------------------


def test_compile_error_carries_log_source_and_saved_file(tmp_path, kernels):
    source = SMALL + "\n__device__ int bad() { return undefined_thing; }\n"
    line = source.splitlines().index("__device__ int bad() { return undefined_thing; }") + 1
    with pytest.raises(CompileError) as caught:
        cc.compile_source(source, "small", "sm_80", kernels=kernels, failed_dir=tmp_path / "failed")
    error = caught.value
    assert error.source == source
    assert 'identifier "undefined_thing" is undefined' in error.log
    assert f"small.cu({line}): error" in error.log
    message = str(error)
    assert message.startswith("NVRTC could not compile small for sm_80")
    assert f"small.cu:{line}: identifier \"undefined_thing\" is undefined" in message
    assert f"{line:5d} | __device__ int bad() {{ return undefined_thing; }}" in message
    assert error.saved_to is not None and error.saved_to.parent == tmp_path / "failed"
    assert str(error.saved_to) in message
    saved = error.saved_to.read_text()
    assert saved.startswith(source)  # line numbers of the saved file match the log
    assert "undefined_thing" in saved.split("/* NVRTC failed for sm_80", 1)[1]


def test_compile_error_in_a_header_points_at_the_header(kernels):
    source = '#include "blasdx/broken.cuh"\nextern "C" __global__ void k(int* x) { x[0] = broken(); }\n'
    with pytest.raises(CompileError) as caught:
        cc.compile_source(source, "k", "sm_80", kernels=kernels)
    message = str(caught.value)
    assert re.search(r"broken\.cuh:3: identifier \"nope\" is undefined", message)
    assert "    3 | __device__ inline int broken() { return nope; }" in message


def test_compile_error_without_failed_dir_saves_to_temp(kernels):
    with pytest.raises(CompileError) as caught:
        cc.compile_source("extern \"C\" __global__ void k() { int x = ; }", "k", "sm_80", kernels=kernels)
    assert caught.value.saved_to is not None and caught.value.saved_to.is_file()
    assert caught.value.saved_to.parent.name == "blasdx-failed"


# -- header discovery -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, family",
    [
        ("cuda_fp16.h", "cudart"), ("cuda_fp8.hpp", "cudart"), ("mma.h", "cudart"), ("vector_types.h", "cudart"),
        ("crt/mma.h", "crt"), ("cuda/std/cstdint", "cccl"), ("nv/target", "cccl"),
        ("blasdx/types.cuh", None), ("cuda_helpers.cuh", None), ("cstdint", None),
    ],
)
def test_header_family(name, family):
    assert cc.header_family(name) == family


def test_empty_search_path_names_packages_and_directories(kernels):
    with pytest.raises(CompileError) as caught:
        cc.compile_source("#include <mma.h>\n" + SMALL, "small", "sm_80", kernels=kernels, header_search=())
    message = str(caught.value)
    assert message.startswith("CUDA headers not found, so NVRTC cannot compile this source:")
    cudart = 'cuda-toolkit[cudart] (nvidia-cuda-runtime): pip install "cuda-toolkit[cudart]"'
    assert f"cuda_fp16.h: install {cudart}" in message
    assert 'crt/mma.h: install nvidia-cuda-crt: pip install "cuda-toolkit[crt]"' in message
    assert "(no directories: cuda.pathfinder found none, CUDA_HOME is unset)" in message


@pytest.fixture
def headers_without_crt(tmp_path) -> cc.HeaderDir:
    """A copy (by links) of the wheel's include folder minus crt/: what some pip installs look like."""
    real = next(d.path for d in cc.default_header_search() if (d.path / "cuda_fp16.h").is_file())
    bare = tmp_path / "include-without-crt"
    bare.mkdir()
    for entry in real.iterdir():
        if entry.name != "crt":
            (bare / entry.name).symlink_to(entry)
    return cc.HeaderDir(bare, "test: wheel without crt")


def test_missing_crt_lists_every_directory_searched(headers_without_crt, tmp_path):
    empty = cc.HeaderDir(tmp_path / "nowhere", "test: empty")
    with pytest.raises(CompileError) as caught:
        cc.include_dirs_for(["#include <mma.h>"], [headers_without_crt, empty])
    message = str(caught.value)
    assert "crt/mma.h: install nvidia-cuda-crt" in message
    assert "cuda_fp16.h" not in message and "  mma.h:" not in message
    assert f"  {headers_without_crt.path} (test: wheel without crt)\n  {tmp_path / 'nowhere'} (test: empty)" in message


def test_headers_are_gathered_from_several_directories(headers_without_crt, kernels):
    toolkit = next(d for d in cc.default_header_search() if (d.path / "crt" / "mma.h").is_file())
    search = [headers_without_crt, toolkit]
    assert cc.include_dirs_for(["#include <mma.h>"], search) == [headers_without_crt.path, toolkit.path]
    # cuda_fp16.h alone needs nothing from the toolkit (nv/target is optional: NVRTC has its own)
    assert cc.include_dirs_for(["#include <cuda_fp16.h>"], [headers_without_crt]) == [headers_without_crt.path]
    wmma = "#include <mma.h>\n" + SMALL.replace("small", "wmma_small")
    compiled = cc.compile_source(wmma, "wmma_small", "sm_80", kernels=kernels, header_search=search)
    assert compiled.registers > 0


def test_default_search_finds_the_wheels():
    search = cc.default_header_search()
    assert search[0].origin.startswith("cuda.pathfinder")
    assert cc.include_dirs_for(["#include <cuda_fp16.h>"], search)


# -- resource usage from the cubin --------------------------------------------------------------------------------


def _res_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """`cuobjdump -res-usage` parsed to {kernel: {REG: .., STACK: .., SHARED: .., CONSTANT[0]: ..}}."""
    text = cc.run_cuobjdump(cubin, "-res-usage")
    found = re.findall(r"Function (\w+):\s*\n\s*(.+)", text)
    return {name: {k: int(v) for k, v in re.findall(r"([A-Z]+(?:\[0\])?):(\d+)", line)} for name, line in found}


@pytest.mark.parametrize("arch, max_registers", [("sm_75", None), ("sm_80", 32), ("sm_90a", None), ("sm_90a", 32)])
def test_resource_usage_matches_cuobjdump(arch, max_registers, kernels):
    _needs_cuobjdump()
    options = cc.CompileOptions(max_registers=max_registers)
    cubin = cc.compile_source(RESOURCE_SOURCE, "calls", arch, options, kernels=kernels).cubin
    reference = _res_usage(cubin)
    assert set(reference) == {"local_array", "many_registers", "calls"} == set(cc.kernel_names(cubin))
    for name, expected in reference.items():
        usage = cc.resource_usage(cubin, name)
        shared = usage.shared_memory + usage.reserved_shared_memory
        assert (usage.registers, usage.local_memory, shared, usage.constant_memory) == (
            expected["REG"], expected["STACK"], expected["SHARED"], expected["CONSTANT[0]"]
        ), name
    assert cc.resource_usage(cubin, "local_array").shared_memory == 300 * 4
    assert cc.resource_usage(cubin, "local_array").local_memory >= 1024  # float a[256] lives on the stack
    assert cc.resource_usage(cubin, "calls").max_threads == 256
    assert cc.resource_usage(cubin, "many_registers").max_threads is None


def test_resource_usage_of_descriptor_kernel_matches_cuobjdump():
    _needs_cuobjdump()
    compiled = compile_descriptor(F16_GEMM + bx.SM(90, arch_specific=True))
    expected = _res_usage(compiled.cubin)["blasdx_batched_gemm"]
    assert compiled.resources.reserved_shared_memory == 1024  # sm_90: the reserved window is in the section
    assert (compiled.registers, compiled.local_memory, compiled.shared_memory + 1024) == (
        expected["REG"], expected["STACK"], expected["SHARED"]
    )


def test_resource_usage_rejects_non_elf_and_unknown_kernel(kernels):
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF"):
        cc.resource_usage(b"//\n.version 8.0\n", "k")
    cubin = cc.compile_source(SMALL, "small", "sm_80", kernels=kernels).cubin
    with pytest.raises(ValueError, match=r"kernel_name='other' is not in the cubin \(kernels in it: small\)"):
        cc.resource_usage(cubin, "other")


def test_resource_usage_round_trips_through_dict():
    usage = cc.ResourceUsage(registers=40, shared_memory=1024, local_memory=8, frame_size=8, max_threads=128)
    assert cc.ResourceUsage.from_dict(usage.as_dict()) == usage


# -- tools: cuobjdump and dumps --------------------------------------------------------------------------------


def test_missing_cuobjdump_names_the_pip_package(monkeypatch, tmp_path):
    import cuda.pathfinder

    monkeypatch.setattr(cuda.pathfinder, "find_nvidia_binary_utility", lambda name: None, raising=False)
    monkeypatch.setattr(cubin, "_wheel_bin_dirs", lambda: [])
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CompileError, match=r"cuobjdump not found .*pip install nvidia-cuda-cuobjdump"):
        cc.find_cuobjdump()


def test_cuobjdump_found_in_the_wheel_without_pathfinder(monkeypatch):
    import cuda.pathfinder

    real = _needs_cuobjdump()
    monkeypatch.delattr(cuda.pathfinder, "find_nvidia_binary_utility", raising=False)
    monkeypatch.setenv("PATH", "")
    assert Path(cc.find_cuobjdump()).name == Path(real).name


def test_sass_runs_cuobjdump(kernels):
    tool = _needs_cuobjdump()
    compiled = cc.compile_source(SMALL, "small", "sm_80", kernels=kernels)
    sass = compiled.sass()
    assert "Function : small" in sass and ".target\tsm_80" in sass
    assert compiled.sass() is sass  # computed once
    assert shutil.which(tool) or Path(tool).is_file()


def test_dump_switch_writes_numbered_source_ptx_and_sass(monkeypatch, tmp_path, kernels, capsys):
    _needs_cuobjdump()
    monkeypatch.setenv("BLASDX_DUMP", str(tmp_path / "dump"))
    before = cc.stats.nvrtc_calls
    cc.compile_source(SMALL, "small", "sm_89", kernels=kernels)
    files = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert [Path(f).suffix for f in files] == [".cu", ".ptx", ".sass"]
    assert re.match(r"\d+-\d{4}-small-sm_89\.cu$", files[0])
    assert ".target sm_89" in (tmp_path / "dump" / files[1]).read_text()
    assert cc.stats.nvrtc_calls == before + 2  # the cubin and the PTX
    assert "blasdx: dumped small (sm_89)" in capsys.readouterr().err


# -- loading needs a GPU ----------------------------------------------------------------------------------------


def _has_gpu() -> bool:
    try:
        from cuda.core import Device

        Device()
        return True
    except Exception:
        return False


def test_kernel_without_gpu_raises_device_error(kernels):
    if _has_gpu():
        pytest.skip("a GPU is present")
    compiled = cc.compile_source(SMALL, "small", "sm_80", kernels=kernels)
    with pytest.raises(DeviceError, match="loading a kernel needs a CUDA GPU and driver"):
        compiled.kernel()


def _max_dynamic_shared_memory(kernel, device_id: int) -> int:
    """The opt-in the driver holds for ``kernel`` (cuKernel or cuFunction handle)."""
    from cuda.bindings import driver

    handle = kernel.handle
    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if isinstance(handle, driver.CUkernel):
        err, value = driver.cuKernelGetAttribute(attribute, handle, driver.CUdevice(device_id))
    else:
        err, value = driver.cuFuncGetAttribute(attribute, handle)
    assert int(err) == 0
    return value


@pytest.fixture
def gpu_arch() -> tuple[int, str]:
    """(device id, sm_XY) of the current GPU; skips without one."""
    if not _has_gpu():
        pytest.skip("no GPU")
    from cuda.core import Device

    device = Device()
    device.set_current()
    major, minor = device.compute_capability
    return device.device_id, f"sm_{major}{minor}"


@pytest.mark.gpu
def test_kernel_loads_and_opts_in_to_large_dynamic_shared_memory(kernels, gpu_arch):
    device_id, arch = gpu_arch
    source = (
        'extern "C" __global__ void dyn(float* x) { extern __shared__ float s[]; s[threadIdx.x] = 1; x[0] = s[0]; }'
    )
    compiled = cc.compile_source(source, "dyn", arch, kernels=kernels)
    kernel = compiled.kernel()
    assert compiled.kernel() is kernel
    assert kernel.attributes.num_regs == compiled.registers
    assert compiled.kernel(dynamic_shared_memory=64 * 1024) is kernel
    assert _max_dynamic_shared_memory(kernel, device_id) == 64 * 1024
    compiled.kernel(dynamic_shared_memory=50 * 1024)  # less than granted: unchanged
    assert _max_dynamic_shared_memory(kernel, device_id) == 64 * 1024
    with pytest.raises(DeviceError, match="exceeds the .* B per block that device"):
        compiled.kernel(dynamic_shared_memory=10 * 1024 * 1024)


@pytest.mark.gpu
@pytest.mark.parametrize("max_registers", [None, 32])
def test_resource_usage_matches_the_driver(kernels, gpu_arch, max_registers):
    from cuda.core import ObjectCode

    _, arch = gpu_arch
    options = cc.CompileOptions(max_registers=max_registers)
    no_barrier = (
        'extern "C" __global__ void no_barrier(float* x) '
        "{ __shared__ float s[512]; s[threadIdx.x] = x[0]; x[1] = s[threadIdx.x]; }"
    )
    cubin = cc.compile_source(SMALL + RESOURCE_SOURCE + no_barrier, "small", arch, options, kernels=kernels).cubin
    code = ObjectCode.from_cubin(cubin)
    for name in cc.kernel_names(cubin):
        usage = cc.resource_usage(cubin, name)
        attributes = code.get_kernel(name).attributes
        driver = (attributes.num_regs, attributes.shared_size_bytes, attributes.local_size_bytes)
        assert (usage.registers, usage.shared_memory, usage.local_memory) == driver, name


@pytest.mark.gpu
def test_descriptor_kernel_loads_with_its_shared_memory(gpu_arch):
    device_id, arch = gpu_arch
    sm = int(arch[3:])
    desc = bx.Size(64, 64, 64) + bx.Precision(bx.float64) + bx.Function.MM + bx.SM(sm) + bx.Block()
    compiled = compile_descriptor(desc)
    need = desc.kernel_shared_memory_size
    assert need > cc.DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT
    kernel = compiled.kernel(dynamic_shared_memory=need)
    assert _max_dynamic_shared_memory(kernel, device_id) == need
    attributes = kernel.attributes
    assert attributes.num_regs == compiled.registers
    assert attributes.shared_size_bytes == compiled.shared_memory
    assert attributes.local_size_bytes == compiled.local_memory == 0


def test_cubin_from_cli_tool_matches(kernels):
    """The cubin is a plain ELF that external tools accept (cuobjdump -elf lists our section)."""
    _needs_cuobjdump()
    compiled = cc.compile_source(SMALL, "small", "sm_80", kernels=kernels)
    elf = cc.run_cuobjdump(compiled.cubin, "-elf")
    assert ".nv.info.small" in elf
    assert subprocess.run([cc.find_cuobjdump(), "--version"], capture_output=True).returncode == 0
