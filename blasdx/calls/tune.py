"""``bx.tune``: time the Hopper engine's candidate configurations for one kind of matmul on this GPU.

The engine's rule picks a configuration from the shape alone; it was set from measurements
of a suite of shapes (benchmarks/llm_shapes.py) and is right for most. ``tune(x, y)`` times
each candidate tile configuration and K split count on the arrays given (GPU time of
back-to-back launches between CUDA events, after a warm-up), checks that each candidate's
result matches the rule's on sampled rows, and keeps the fastest in
blasdx.engine.tuning's table on disk: every later ``bx.matmul`` / ``bx.mma`` plan of the same
types, shape, operand layouts and GPU size takes it (also in later processes). Opt-in: nothing is timed
unless asked.
"""

from __future__ import annotations

import dataclasses
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import arrays as _arrays
from ..arrays import resolve_stream
from ..arrays.host_copy import to_host
from ..base import dtypes as _dt
from ..engine import hopper as _hopper
from ..engine import tuning as _tuning
from ..engine import wide as _wide
from ..base.errors import ExecutionError
from ..launch import cuda_modules as _cuda
from ..launch import devices as _devices
from . import matmul as _ag

__all__ = ["CANDIDATES", "SPLITS", "TuneResult", "split_counts", "tune"]

#: Candidate configurations: a base of blasdx.engine.hopper.CONFIGS and what changes in it (the engine's list).
CANDIDATES = _tuning.CANDIDATES
#: K split counts tried with each (each split at least 4 K steps deep).
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
#: Waves tried with each stream-K candidate (its "splits" are the waves of tiles it shares out).
STREAM_K_WAVES = (2, 3, 4)


@dataclass(frozen=True)
class TuneResult:
    """What ``tune`` measured: the rule's plan and time, the fastest candidate, every candidate's time."""

    rule: str
    rule_ms: float
    best: str
    best_ms: float
    timings: tuple[tuple[str, float], ...]

    @property
    def speedup(self) -> float:
        """The rule's time over the fastest candidate's."""
        return self.rule_ms / self.best_ms


def tune(x: Any, y: Any, *, out_dtype: Any = None, candidates: Any = None, repeats: int = 20, keep: bool = True,
         stream: Any = None) -> TuneResult:
    """Time the engine's candidates for ``x @ y`` on this GPU and keep the fastest for later calls.

    x is [M, K] or [batch, M, K], y is [K, N] or [batch, K, N] of a type the Hopper engine runs
    (f16, bf16, tf32-marked float32, fp8, int8; float64 and float32 on its DMMA / FFMA path), as for
    ``bx.matmul``; ``out_dtype`` is matmul's (a tuned configuration serves calls of its result type).
    ``candidates`` is a list of (base name, {field: value} changes): names of
    blasdx.engine.hopper.CONFIGS, default CANDIDATES, or for float64 / float32 names of
    blasdx.engine.wide.tune_candidates, default all of them; each is tried with the split counts of
    SPLITS. ``repeats`` launches
    are timed per candidate; ``keep=False`` measures without recording the winner. The arrays'
    contents are only read; results go to a scratch array. Raises ExecutionError for arrays
    the engine does not run (another type, or a GPU other than sm_90).
    """
    if not isinstance(repeats, int) or repeats < 1:
        raise ExecutionError(f"repeats: expected a positive int, got {repeats!r}")
    _check_candidates(candidates, {*_hopper.CONFIGS, *_wide.tune_candidates(_dt.float64)})  # again once typed
    handle = resolve_stream(stream, (_ag._unwrap(x), _ag._unwrap(y)))
    vx, vy = _ag._view(x, "x", handle), _ag._view(y, "y", handle)
    mx, my = _ag._matrix(vx, "x"), _ag._matrix(vy, "y")
    _ag._check_inner(mx, my, vx, vy)
    result = _ag.RESULT_TYPES.get(vx.dtype)
    if result is not None and out_dtype is not None:
        result = _ag.result_type(vx.dtype, out_dtype)
    wide = result is not None and vx.dtype == vy.dtype and _wide.serves(vx.dtype, result)
    if not wide and (result is None or not _hopper.serves(vx.dtype, result, b=vy.dtype)):
        raise ExecutionError(f"x: tune times the Hopper engine's configurations (wgmma, and DMMA / FFMA for "
                             f"float64 / float32), which do not run {vx.dtype.name} x {vy.dtype.name}")
    if wide:
        named = _wide.tune_candidates(vx.dtype)
        candidates = [(name, {}) for name in named] if candidates is None else list(candidates)
        _check_candidates(candidates, named)
    else:
        candidates = CANDIDATES if candidates is None else list(candidates)
        _check_candidates(candidates, _hopper.CONFIGS)
    device_id = _ag._device_of((vx, vy), ("x", "y"))
    device = _ag._device_info(device_id)
    if device.sm != 90:
        raise ExecutionError(f"tune: the Hopper engine runs on sm_90 GPUs; device {device_id} is sm_{device.sm}")
    m, n, k = mx.rows, my.cols, mx.cols
    batch = _ag._result_batch(mx, my) or 1
    if m * n * k == 0:
        raise ExecutionError(f"tune: nothing to time in a {m} x {n} x {k} product")
    token = _devices.enter(device_id)
    try:
        return _tune(x, vx, vy, mx, my, result, m, n, k, batch, device, device_id, handle, stream, repeats, keep,
                     candidates)
    finally:
        if token is not None:
            _devices.leave(token)


def _check_candidates(candidates: Any, names: Any) -> None:
    """ExecutionError unless ``candidates`` (None: the defaults) are (name of ``names``, {field: value}) pairs."""
    if candidates is None:
        return
    for entry in candidates:
        if not (isinstance(entry, tuple) and len(entry) == 2 and entry[0] in names and isinstance(entry[1], dict)):
            raise ExecutionError(f"candidates: expected (name, changes) pairs with a name of {sorted(names)}, "
                                 f"got {entry!r}")


def _candidate(a: Any, wide: bool, base: str, changes: dict) -> Any:
    """The configuration of one candidate: a wide-path tile by name, or one of hopper.CONFIGS for this input type;
    ExecutionError for changes of fields the configuration does not have."""
    try:
        if wide:
            return dataclasses.replace(_wide.tune_candidates(a)[base], **changes)
        return dataclasses.replace(_hopper.CONFIGS[base], bk=128 // a.size, promotion=_hopper.promotion_of(a),
                                   **changes)
    except TypeError as exc:
        raise ExecutionError(f"candidates: ({base!r}, {changes!r}): {exc}") from None


def _tune(x: Any, vx: Any, vy: Any, mx: Any, my: Any, result: Any, m: int, n: int, k: int, batch: int, device: Any,
          device_id: int, handle: int, stream: Any, repeats: int, keep: bool, candidates: list) -> TuneResult:
    core = _arrays.as_core_stream(stream, handle)
    shape = (batch, m, n) if batch > 1 or mx.batch is not None or my.batch is not None else (m, n)
    out = _ag._allocate(_ag._unwrap(x), shape, result, device_id, handle)
    vout = _arrays.as_array(out, "out", stream=handle)
    rows = np.unique(np.linspace(0, m - 1, min(m, 16)).astype(int))

    def plan_of(config: Any, splits: Any) -> Any:
        engine, reason = _ag._engine_plan(vx, vy, mx, my, result, m, n, k, batch, device, vout, config, splits)
        if engine is None:
            raise ExecutionError(f"tune: the engine does not run these arrays ({reason})")
        return engine

    def run(engine: Any) -> None:
        engine.run(device_id, core, handle, vx, vy, None, vout, 1, 0)

    def sampled() -> np.ndarray:
        return to_host(vout, core, handle)[..., rows, :].astype(np.float64)

    rule = plan_of(None, None)
    run(rule)
    reference = sampled()
    scale = float(np.linalg.norm(reference)) or 1.0
    rule_ms = _time(lambda: run(rule), core, repeats)
    a = vx.dtype
    timings: list[tuple[str, float]] = [(rule.describe(), rule_ms)]
    best: tuple[float, Any, int] = (rule_ms, rule.config, rule.splits)
    steps_of = math.ceil(k / (128 // a.size))
    plans = []
    wide = isinstance(rule, _wide.WidePlan)
    for base, changes in candidates:
        config = _candidate(a, wide, base, changes)
        if wide and not _wide.reads(a, config, rule.route_a.k_major, rule.route_b.k_major):
            timings.append((f"{config}: its warp tiles do not read these layouts", math.inf))
            continue
        for splits in STREAM_K_WAVES if changes.get("stream_k") else split_counts(steps_of):
            try:
                plans.append(plan_of(config, splits))
            except Exception as exc:  # noqa: BLE001  (a candidate TMA or the scheduler refuses is skipped)
                timings.append((f"{config} x{splits}: {type(exc).__name__}", math.inf))

    def compiled(engine: Any) -> Any:
        try:
            return engine.compiled
        except Exception as exc:  # noqa: BLE001  (reported when the candidate runs)
            return exc

    with ThreadPoolExecutor(max(1, min(16, os.cpu_count() or 1))) as pool:  # NVRTC releases the GIL
        list(pool.map(compiled, plans))
    for engine in plans:
        try:
            run(engine)
        except Exception as exc:  # noqa: BLE001  (a candidate that does not fit this GPU is skipped)
            timings.append((f"{engine.describe()}: {type(exc).__name__}", math.inf))
            continue
        if float(np.linalg.norm(sampled() - reference)) > 1e-2 * scale:
            raise ExecutionError(f"tune: {engine.describe()} disagrees with the rule's result; please report")
        ms = _time(lambda engine=engine: run(engine), core, repeats)
        timings.append((engine.describe(), ms))
        if ms < best[0]:
            best = (ms, engine.config, engine.splits)
    best_ms, config, splits = best
    if keep and (config, splits) != (rule.config, rule.splits):
        key = _tuning.key_of(a, vy.dtype, result, m, n, k, batch, device.multiprocessors, *rule.routes_given,
                             getattr(rule.config, "promotion", 0))
        _tuning.TUNED.put(key, dataclasses.asdict(config), splits, best_ms)
    best_text = next(text for text, ms in timings if ms == best_ms)
    return TuneResult(rule.describe(), rule_ms, best_text, best_ms, tuple(timings))


def split_counts(steps: int) -> list[int]:
    """The counts of SPLITS tried on ``steps`` K steps: each split at least MIN_STEPS_PER_FIXUP_SPLIT deep and
    none empty (12 splits of 64 steps are chunks of 6, the last one empty: that is 11 splits, tried as such
    only if SPLITS names it)."""
    counts = []
    for splits in SPLITS:
        chunk = math.ceil(steps / splits)
        if splits > 1 and chunk < _hopper.MIN_STEPS_PER_FIXUP_SPLIT:
            break
        if _hopper.nonempty_splits(steps, splits) == splits:
            counts.append(splits)
    return counts


def timing_event_options() -> Any:
    """cuda.core's options of an event that records time (the field's name is cuda.core's own)."""
    return _cuda.core().EventOptions(timing_enabled=True)


def _time(fn: Any, core: Any, repeats: int) -> float:
    """Milliseconds per launch of ``repeats`` back-to-back launches between two CUDA events (after a warm-up)."""
    events = timing_event_options()
    fn()
    begin = core.record(options=events)
    for _ in range(repeats):
        fn()
    end = core.record(options=events)
    end.sync()
    return float(end - begin) / repeats
