"""Split K finished inside the GEMM (kernels/blasdx/hopper/splitk.cuh) on the GPU.

The last split of each tile adds the others' partial sums and stores D: checked against the
float64 product (exact for int8) with NaN-poisoned results, for every type the engine runs,
every configuration, edge tiles, alpha / beta with C, batches with a broadcast operand (stream-K's too),
and repeated calls and CUDA-graph replays (the counters must be back at zero after every launch).
"""

from __future__ import annotations

import pytest

from blasdx.base import dtypes as dt
from blasdx.engine import hopper

from .gpu_support import torch_dtype, type_id
from .hopper_support import check_norm, engine_plan, hopper_torch, run_again, stream_k_config

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    return hopper_torch()


def _operand(torch, shape, a: dt.DType, gen, order="R"):
    if order == "C":
        shape = shape[:-2] + (shape[-1], shape[-2])
    if a.integral:
        t = torch.randint(-128, 128, shape, device="cuda", generator=gen, dtype=torch.int32).to(torch_dtype(a))
    else:
        t = torch.randn(shape, device="cuda", generator=gen).to(torch_dtype(a))
    return t if order == "R" else t.transpose(-1, -2)


def _poisoned(torch, shape, c: dt.DType):
    return torch.full(shape, -7 if c == dt.int32 else float("nan"), device="cuda", dtype=torch_dtype(c))


#: (input, result, base configuration, splits): every type and configuration the fixup serves
CASES = [(dt.bfloat16, dt.float32, "narrow", 3), (dt.float16, dt.float16, "pingpong", 4),
         (dt.float16, dt.float32, "wide clusters", 2), (dt.tfloat32, dt.float32, "square", 2),
         (dt.float8_e4m3, dt.float16, "wide", 5), (dt.int8, dt.int32, "narrow", 14),  # 41 K steps: 14 chunks of 3
         (dt.int8, dt.int32, "pingpong", 2)]


@pytest.mark.parametrize(("a", "c", "name", "splits"), CASES, ids=type_id)
def test_splits_every_type_and_configuration(torch, a, c, name, splits):
    gen = torch.Generator(device="cuda").manual_seed(splits * 17 + len(name))
    m, n, k = 200, 272, 128 * 40 // a.size + 48  # edge tiles in M, N and a partial last K step
    x, y = _operand(torch, (m, k), a, gen), _operand(torch, (k, n), a, gen, "C")
    out = _poisoned(torch, (m, n), c)
    config = hopper.replace(hopper.CONFIGS[name], bk=128 // a.size, promotion=hopper.promotion_of(a))
    engine = engine_plan(x, y, out, c, a, config, splits)
    assert engine.splits == splits and engine.store_d is None, engine.describe()
    acc = _operand(torch, (m, n), c, gen)
    alpha, beta = (3.0, -2.0) if c != dt.int32 else (3, -2)
    run_again(engine, x, y, acc, out, alpha, beta, a)
    check_norm(torch, out, x, y, a, c, acc, alpha, beta, f"{name} x{splits}: {engine.describe()}")
    out.fill_(-7 if c == dt.int32 else float("nan"))
    run_again(engine, x, y, None, out, 1.0, 0.0, a)  # again: the first launch left every counter at zero
    check_norm(torch, out, x, y, a, c, what=f"{name} x{splits} second call")


@pytest.mark.parametrize("m", [1, 17, 65, 130])
def test_rows_past_m_skip_the_exchange(torch, m):
    gen = torch.Generator(device="cuda").manual_seed(m)
    a, c = dt.bfloat16, dt.float32
    x, y = _operand(torch, (m, 4096), a, gen), _operand(torch, (4096, 1000), a, gen, "C")
    out = _poisoned(torch, (m, 1000), c)
    engine = engine_plan(x, y, out, c, a, splits=3)  # asked: the rule keeps these medium tiles whole (64 K steps)
    assert engine.splits == 3, engine.describe()
    run_again(engine, x, y, None, out, 1.0, 0.0, a)
    check_norm(torch, out, x, y, a, c, what=f"M = {m}: {engine.describe()}")


#: (seed, batch, m, n, k, waves): split K as the rule takes it (waves None), or stream-K of the ping-pong
#: configuration over ``waves`` (as the stream-K tests take it: hopper.STREAM_K_BY_RULE on)
BATCHED = [(2, 4, 40, 136, 3000, None), (3, 3, 300, 700, 2000, 2)]


@pytest.mark.parametrize(("seed", "batch", "m", "n", "k", "waves"), BATCHED, ids=["split_k", "stream_k"])
def test_batches_and_broadcast(torch, monkeypatch, seed, batch, m, n, k, waves):
    """Batches of x against a batch of y, then y broadcast (batch 1), finished in the GEMM."""
    if waves is not None:
        monkeypatch.setattr(hopper, "STREAM_K_BY_RULE", True)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, c = dt.float16, dt.float32
    config = None if waves is None else stream_k_config("pingpong", a)
    for batch_y in (batch, 1):
        x = _operand(torch, (batch, m, k), a, gen)
        y = _operand(torch, (batch_y, k, n), a, gen)
        out = _poisoned(torch, (batch, m, n), c)
        engine = engine_plan(x, y, out, c, a, config, waves)
        assert engine.splits > 1, engine.describe()
        run_again(engine, x, y, None, out, 1.0, 0.0, a)
        check_norm(torch, out, x, y.expand(batch, k, n), a, c, what=f"batch, y batch {batch_y}: {engine.describe()}")


def test_graph_replays_reuse_the_counters(torch):
    gen = torch.Generator(device="cuda").manual_seed(4)
    a, c = dt.bfloat16, dt.float32
    x, y = _operand(torch, (16, 8192), a, gen), _operand(torch, (8192, 2048), a, gen, "C")
    out = _poisoned(torch, (16, 2048), c)
    engine = engine_plan(x, y, out, c, a)
    assert engine.splits > 1, engine.describe()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run_again(engine, x, y, None, out, 1.0, 0.0, a)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(3):
            run_again(engine, x, y, None, out, 1.0, 0.0, a)
    for _ in range(4):
        out.fill_(float("nan"))
        x.copy_(_operand(torch, (16, 8192), a, gen))  # fresh data each replay
        graph.replay()
        torch.cuda.synchronize()
        check_norm(torch, out, x, y, a, c, what="graph replay")


@pytest.mark.parametrize(("a", "c"), [(dt.bfloat16, dt.float32), (dt.float16, dt.float16)], ids=type_id)
def test_split_totals_are_the_same_every_run(torch, a, c):
    """The last split adds the parts in split order, not in order of arrival: every run gives the same bits."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    x, y = _operand(torch, (300, 8192), a, gen), _operand(torch, (8192, 700), a, gen, "C")
    out = _poisoned(torch, (300, 700), c)
    engine = engine_plan(x, y, out, c, a, splits=7)
    assert engine.splits == 7, engine.describe()
    run_again(engine, x, y, None, out, 1.0, 0.0, a)
    first = out.clone()
    check_norm(torch, first, x, y, a, c, what=engine.describe())
    for _ in range(5):
        out.fill_(float("nan"))
        run_again(engine, x, y, None, out, 1.0, 0.0, a)
        assert torch.equal(out, first), "a split total changed between runs"
