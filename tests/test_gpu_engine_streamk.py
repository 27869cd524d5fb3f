"""Stream-K on the GPU (kernels/blasdx/hopper/scheduler.cuh's StreamKScheduler, finished by splitk.cuh).

The last tiles' K steps are shared by every block; the blocks that cover part of a tile add their
partial sums in the workspace and the last to arrive stores D. Checked against the float64 product
(exact for int8) with poisoned results, for the types the ping-pong and medium classes serve, both
weight layouts, odd sizes, M from 1 to 4097, alpha / beta with C, batches with a broadcast operand
(test_gpu_engine_splitk.py's test_batches_and_broadcast[stream_k]), the rule's own stream-K shapes of
the LLM suite, back-to-back calls and CUDA-graph replays with new data captured on a side stream (the
counters must be back at zero after every launch). Float results are added in arrival order, so their
last bits may differ from run to run (as split K's); int8 is exact.
"""

from __future__ import annotations

import pytest

from blasdx.base import dtypes as dt
from blasdx.engine import hopper, streamk

from .hopper_support import check_norm, engine_plan, hopper_torch, run_again, stream_k_config
from .test_gpu_engine_splitk import _operand, _poisoned

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def rule_takes_stream_k(monkeypatch):
    """The rule's own stream-K choices are tested as it would take them (hopper.STREAM_K_BY_RULE, off by default)."""
    monkeypatch.setattr(hopper, "STREAM_K_BY_RULE", True)


@pytest.fixture(scope="module")
def torch():
    return hopper_torch()


def _plan(torch, x, y, out, a: dt.DType, c: dt.DType, config=None, waves=None):
    """The engine's plan for out = x @ y (``config`` in stream-K over ``waves``, else the rule's) and a
    function that runs it once more: run(acc=None, alpha=1.0, beta=0.0)."""
    engine = engine_plan(x, y, out, c, a, config, waves)

    def run(acc=None, alpha=1.0, beta=0.0):
        run_again(engine, x, y, acc, out, alpha, beta, a)

    return engine, run


def _poison(out, c: dt.DType) -> None:
    out.fill_(-7 if c == dt.int32 else float("nan"))


#: (input, result, class, extra changes, y layout): the types each class serves, both weight layouts
#: ("C": the [N, K] weight read transposed; "R": a row-major [K, N] weight)
TYPES = [
    (dt.bfloat16, dt.float32, "pingpong", {}, "C"), (dt.bfloat16, dt.float32, "pingpong", {}, "R"),
    (dt.float16, dt.float16, "pingpong", {}, "R"), (dt.bfloat16, dt.float32, "medium", {}, "C"),
    (dt.float16, dt.float16, "medium", {}, "R"), (dt.tfloat32, dt.float32, "pingpong", {}, "C"),
    (dt.tfloat32, dt.float32, "pingpong", {"transpose_b": True}, "R"),  # B transposed in shared memory
    (dt.float8_e4m3, dt.float16, "medium", {}, "C"), (dt.int8, dt.int32, "pingpong", {}, "C"),
    (dt.int8, dt.int32, "medium", {}, "C"),
]


@pytest.mark.parametrize(("a", "c", "name", "changes", "layout"), TYPES,
                         ids=lambda v: v.name if isinstance(v, dt.DType) else str(v) if v else "")
def test_every_type_class_and_layout(torch, a, c, name, changes, layout):
    gen = torch.Generator(device="cuda").manual_seed(len(name) * 7 + a.size)
    m, n, k = 300, 1000, 128 * 37 // a.size + 40  # edge tiles in M and N, a partial last K step
    x, y = _operand(torch, (m, k), a, gen), _operand(torch, (k, n), a, gen, layout)
    out = _poisoned(torch, (m, n), c)
    config = stream_k_config(name, a, **changes)
    engine, run = _plan(torch, x, y, out, a, c, config, 2)
    assert engine.config.stream_k and engine.grid[0] == engine.multiprocessors, engine.describe()
    acc = _operand(torch, (m, n), c, gen)
    alpha, beta = (3.0, -2.0) if c != dt.int32 else (3, -2)
    run(acc, alpha, beta)
    check_norm(torch, out, x, y, a, c, acc, alpha, beta, f"{engine.describe()}")
    for _ in range(3):  # again: every launch leaves the counters and sums at zero
        _poison(out, c)
        run()
        check_norm(torch, out, x, y, a, c, what=f"again: {engine.describe()}")


@pytest.mark.parametrize(("m", "n", "k"), [(1, 2112, 7168), (17, 1000, 3000), (255, 4097, 1000), (1000, 17, 2000),
                                           (4097, 1000, 776), (2048, 2112, 7168), (129, 2112, 7168),
                                           (100, 100, 65536)])  # one tile shared by every block
@pytest.mark.parametrize("waves", [2, 3])
def test_odd_sizes_and_waves(torch, m, n, k, waves):
    gen = torch.Generator(device="cuda").manual_seed(m + n + waves)
    a, c = dt.bfloat16, dt.float32
    x, y = _operand(torch, (m, k), a, gen), _operand(torch, (k, n), a, gen, "C")
    out = _poisoned(torch, (m, n), c)
    engine, run = _plan(torch, x, y, out, a, c, stream_k_config("pingpong", a), waves)
    tiles = -(-m // 128) * -(-n // 128)
    d = streamk.decomposition(tiles, -(-k // 64), engine.multiprocessors, waves)
    assert engine.units == d.units, engine.describe()
    run()
    check_norm(torch, out, x, y, a, c, what=f"{m}x{n}x{k}, {waves} waves: {engine.describe()}")


@pytest.mark.parametrize(("m", "n", "k"), [(128, 2112, 16384), (129, 2112, 7168), (2048, 2112, 7168),
                                           (2100, 2112, 520), (128, 24576, 1536)])
@pytest.mark.parametrize("layout", ["C", "R"])
def test_the_rules_stream_k_shapes(torch, m, n, k, layout):
    gen = torch.Generator(device="cuda").manual_seed(m + k)
    a, c = dt.bfloat16, dt.float32
    x, y = _operand(torch, (m, k), a, gen), _operand(torch, (k, n), a, gen, layout)
    out = _poisoned(torch, (m, n), c)
    engine, run = _plan(torch, x, y, out, a, c)
    assert engine.config.stream_k and engine.splits == hopper.STREAM_K_WAVES, engine.describe()
    run()
    check_norm(torch, out, x, y, a, c, what=engine.describe())


def test_graph_replays_with_new_data_captured_on_a_side_stream(torch):
    gen = torch.Generator(device="cuda").manual_seed(5)
    a, c = dt.bfloat16, dt.float32
    m, n, k = 128, 24576, 1536
    x, y = _operand(torch, (m, k), a, gen), _operand(torch, (k, n), a, gen, "C")
    out = _poisoned(torch, (m, n), c)
    engine, run = _plan(torch, x, y, out, a, c)
    assert engine.config.stream_k, engine.describe()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(4):
            run()
    for i in range(25):
        out.fill_(float("nan"))
        x.copy_(_operand(torch, (m, k), a, gen))  # fresh data each replay
        graph.replay()
        torch.cuda.synchronize()
        if i % 6 == 0 or i == 24:
            check_norm(torch, out, x, y, a, c, what=f"graph replay {i}")
    y.copy_(_operand(torch, (k, n), a, gen, "C"))
    graph.replay()
    torch.cuda.synchronize()
    check_norm(torch, out, x, y, a, c, what="graph replay with new weights")


def test_int8_is_exact_and_repeatable(torch):
    gen = torch.Generator(device="cuda").manual_seed(8)
    a, c = dt.int8, dt.int32
    x, y = _operand(torch, (2048, 7168), a, gen), _operand(torch, (7168, 2112), a, gen, "C")
    out = _poisoned(torch, (2048, 2112), c)
    engine, run = _plan(torch, x, y, out, a, c)
    assert engine.config.stream_k, engine.describe()
    run()
    first = out.clone()
    check_norm(torch, out, x, y, a, c, what=engine.describe())
    for _ in range(5):
        _poison(out, c)
        run()
        assert torch.equal(out, first)


def test_sanitized_case(torch):
    """One stream-K launch for compute-sanitizer memcheck (.ci/gpu/engine.sh): 289 tiles on 132 SMs, so a
    data-parallel wave, then shared tiles, with edge tiles in M and N."""
    gen = torch.Generator(device="cuda").manual_seed(9)
    a, c = dt.bfloat16, dt.float32
    x, y = _operand(torch, (2100, 520), a, gen), _operand(torch, (520, 2112), a, gen, "C")
    out = _poisoned(torch, (2100, 2112), c)
    engine, run = _plan(torch, x, y, out, a, c, stream_k_config("pingpong", a), 2)
    assert engine.config.stream_k and engine.store_d is None, engine.describe()
    run()
    run()
    check_norm(torch, out, x, y, a, c, what=engine.describe())
