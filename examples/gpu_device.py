"""For the examples: the current GPU's SM (through cuda.core, PyTorch or Numba), a descriptor's compile report, and
the command lines that the batched, the attention and the sized examples share."""

from __future__ import annotations

import argparse
import time
from typing import Any


def device_sm() -> int | None:
    """Compute capability of the current GPU (e.g. 90), or None when there is none."""
    try:
        from cuda.core import Device, system

        if system.get_num_devices() < 1:
            return None
        major, minor = Device().compute_capability
        return 10 * major + minor
    except Exception:  # noqa: BLE001 - no driver or no device: compile only
        return None


def compile_and_report(desc: Any, *details: str) -> Any:
    """Print ``desc``, compile it and print the time and the kernel's resources (``details`` after its registers)."""
    print(desc)
    start = time.perf_counter()
    kernel = desc.compile()
    figures = [f"{kernel.registers} registers", *details,
               f"{desc.kernel_shared_memory_size} B shared memory", f"{kernel.local_memory} B local memory"]
    print(f"compiled for {desc.arch} in {time.perf_counter() - start:.2f} s: {', '.join(figures)}")
    return kernel


def torch_sm() -> int | None:
    """Compute capability of PyTorch's current GPU (e.g. 90), or None when PyTorch sees none."""
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def numba_sm() -> int | None:
    """Compute capability of Numba's current GPU (e.g. 90), or None when there is none."""
    try:
        from numba import cuda

        if not cuda.is_available():
            return None
        major, minor = cuda.get_current_device().compute_capability
        return 10 * major + minor
    except Exception:  # noqa: BLE001 - no driver or no device
        return None


def batch_parser(doc: str, what: str, batch: int, check: int, checked: str = "checked") -> argparse.ArgumentParser:
    """The command line of an example of ``batch`` independent ``what``, ``check`` of them checked against the float64
    reference (``checked``: how, e.g. "checked per GPU"); described by the first line of the example's ``doc``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--batch", type=int, default=batch, help=f"number of independent {what} (default {batch})")
    parser.add_argument("--check", type=int, default=check,
                        help=f"{what} {checked} against the float64 reference (default {check})")
    return parser


def attention_parser(doc: str, batch: int, heads: int, seq: list[int], head_dim: list[int],
                     seq_help: str = "sequence lengths") -> argparse.ArgumentParser:
    """The command line of an attention example: ``batch`` x ``heads`` heads at each of the sequence lengths ``seq``
    and head dimensions ``head_dim``; described by the first line of the example's ``doc``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--heads", type=int, default=heads)
    parser.add_argument("--seq", type=int, nargs="*", default=seq, help=seq_help)
    parser.add_argument("--head-dim", type=int, nargs="*", default=head_dim, help="head dimensions")
    return parser


def sized_parser(doc: str, flag: str | None = None, flag_help: str | None = None,
                 **sizes: int) -> argparse.ArgumentParser:
    """The command line of an example sized by integer options ``--name`` (defaults ``sizes``, in order), with an
    on / off ``--flag`` after them when given; described by the first line of the example's ``doc``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, default in sizes.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    if flag is not None:
        parser.add_argument(f"--{flag}", action="store_true", help=flag_help)
    return parser
