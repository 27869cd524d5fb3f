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


def pytest_sessionfinish(session, exitstatus) -> None:
    """With $BLASDX_MARGINS_JSON set, write how close each passed element-wise check came to its bound
    (reference.MARGINS: what, worst error / bound) there, one file per pytest-xdist worker."""
    import json
    import os

    from blasdx.reference import MARGINS

    path = os.environ.get("BLASDX_MARGINS_JSON")
    if path and MARGINS:
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        with open(f"{path}.{worker}" if worker else path, "w") as f:
            json.dump(MARGINS, f)
