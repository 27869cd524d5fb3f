"""Fixtures shared by the CPU tests."""

from __future__ import annotations

import pytest

from blasdx.calls import matmul as array_gemm

from blasdx.launch import cuda_driver

from .tma_rules import FakeEncoder


@pytest.fixture
def encoder(monkeypatch) -> FakeEncoder:
    """The driver's tensor-map encoder replaced by a FakeEncoder, with no call plan remembered from other tests."""
    fake = FakeEncoder()
    monkeypatch.setattr(cuda_driver, "encode_tiled", fake)
    array_gemm._CALLS.clear()
    return fake
