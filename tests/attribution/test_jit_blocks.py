"""The closed forms' block kernels (issue 26): the exact order of every addition, bit for bit, against an
independent numpy emulation of the documented order; the same bits whatever the thread count, the split
of the blocks into tasks and the output's alignment (streaming stores or not)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aumann.attribution import Panel, attribute, indicators, jit, streaming
from aumann.attribution import threads as item_threads
from aumann.attribution.streaming import column_sums, weighted_rows

pytestmark = pytest.mark.skipif(jit.kernels() is None, reason="numba is not installed")

LANES, BLOCK = 8, 4096  # the documented lanes and block size (jit._LANES, jit._BLOCK)


def _parts(n: int) -> list[tuple[int, int]]:
    """The order of the fold: one step's parts (block-aligned cuts of 128·1024 agents for big steps)."""
    cuts = streaming._cuts(n)
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True))


def _emulated_column_sums(x: np.ndarray) -> np.ndarray:
    """Column sums in the documented order, with numpy: per block, ``LANES`` consecutive agents side by
    side, each lane summed sequentially (an axis-0 reduction of a (rows, LANES·D) array adds row after
    row); block vectors added in order within a part; lanes folded into features j → j mod D in order;
    the tail after the last whole group of ``LANES`` added last; parts added in order."""
    T, n, D = x.shape
    body = n // LANES * LANES
    out = np.zeros((T, D))
    for t in range(T):
        flat = x[t].reshape(-1)
        for a, b in _parts(n):
            tot = np.zeros(LANES * D)
            for i in range(a, min(b, body), BLOCK):
                end = min(body, i + BLOCK)
                block = flat[i * D:end * D].reshape(-1, LANES * D).astype(np.float64)
                acc = np.zeros(LANES * D)
                for row in block:  # sequential, one row of LANES agents at a time
                    acc = acc + row
                tot = tot + acc
            s = np.zeros(D)
            for j in range(LANES * D):
                s[j % D] += tot[j]
            if b == n:
                for k in range(body * D, n * D):
                    s[k % D] += float(flat[k])
            out[t] += s
    return out


def _emulated_rows(x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """φ = x₀c₀ + x₁c₁ + … (left to right, float64, rounded once to x's dtype) and its sums in the
    documented order: per block, lanes summed sequentially, lanes then added in order; blocks in order
    within a part; tail last; parts in order."""
    T, n, D = x.shape
    x64 = x.astype(np.float64)
    if D <= 8:
        phi64 = x64[:, :, 0] * c[:, None, 0]
        for k in range(1, D):
            phi64 = phi64 + x64[:, :, k] * c[:, None, k]
    else:  # the run-time-D loop starts from 0.0
        phi64 = np.zeros((T, n))
        for k in range(D):
            phi64 = phi64 + x64[:, :, k] * c[:, None, k]
    phi = phi64.astype(x.dtype)
    body = n // LANES * LANES
    sums = np.zeros(T)
    for t in range(T):
        stored = phi[t].astype(np.float64)
        for a, b in _parts(n):
            tot = 0.0
            for i in range(a, min(b, body), BLOCK):
                lanes = np.zeros(LANES)
                for row in stored[i:min(body, i + BLOCK)].reshape(-1, LANES):
                    lanes = lanes + row
                block = 0.0
                for v in lanes:
                    block = block + v
                tot = tot + block
            if b == n:
                for v in stored[body:n]:
                    tot = tot + v
            sums[t] += tot
    return phi, sums


@pytest.mark.parametrize("D", [1, 3, 8, 9])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("T,N", [(1, 262_144 * 2 + 4_101), (3, 20_011), (3, 4_096 * 3)])
def test_kernels_add_in_the_documented_order(D, dtype, T, N, rng):
    """Bit for bit: the compiled column sums, φ and Σφ equal the numpy emulation of their order (values
    spanning six decades, so a different order would round differently)."""
    x = (rng.normal(size=(T, N, D)) * 10 ** rng.uniform(-3, 3, size=(1, 1, D))).astype(dtype)
    c = rng.normal(size=(T, D))
    assert x.size >= streaming._COMPILED  # the compiled path
    np.testing.assert_array_equal(column_sums(x), _emulated_column_sums(x))
    phi, sums = weighted_rows(x, c)
    ref_phi, ref_sums = _emulated_rows(x, c)
    assert phi.dtype == x.dtype
    np.testing.assert_array_equal(phi, ref_phi)
    np.testing.assert_array_equal(sums, ref_sums)
    # and they are the sums they claim to be, to rounding
    exact = [[math.fsum(x[t, :, d].astype(np.float64)) for d in range(D)] for t in range(T)]
    np.testing.assert_allclose(column_sums(x), exact, rtol=1e-10, atol=1e-300)


def test_block_kernels_on_any_range_and_alignment(rng):
    """The rows kernel on an arbitrary range of blocks writes exactly those blocks, the same bits into an
    output aligned for streaming stores as into a misaligned one, and the same per-block sums."""
    T, N, D = 2, 50_003, 3
    x = rng.normal(size=(T, N, D))
    c = rng.normal(size=(T, D))
    nblk = jit.blocks(N)
    kernel = jit.rows_blocks_kernel(D)
    outs, parts = [], []
    for shift in (0, 1):  # 0: a 64-byte-aligned output (streaming stores), 1: 8 bytes off
        mem = np.zeros(T * N + 16)
        off = (-mem.ctypes.data % 64) // 8 + shift
        out = mem[off:off + T * N].reshape(T, N)
        partial = np.full((T, nblk), np.nan)
        for g0, g1 in [(0, 3), (3, 4), (4, 2 * nblk - 1)]:  # left out: the last block of step 1
            kernel(x, c, g0, g1, nblk, out, partial)
        outs.append(out.copy())
        parts.append(partial.copy())
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(parts[0], parts[1])
    last = (nblk - 1) * BLOCK
    assert np.all(outs[0][1, last:] == 0.0) and np.isnan(parts[0][1, -1])  # never touched
    ref_phi, _ = _emulated_rows(x, c)
    np.testing.assert_array_equal(outs[0][0, :N // 8 * 8], ref_phi[0, :N // 8 * 8])
    np.testing.assert_array_equal(outs[0][1, :last], ref_phi[1, :last])


@pytest.mark.parametrize("T,N", [(1, 1_000_003), (14, 30_001)])
def test_same_bits_whatever_the_threads(T, N, rng, monkeypatch):
    """One thread, two threads with helpers forced on, and the pool's split: the same closed form."""
    z = np.abs(rng.normal(size=(T, N, 3)))
    old = torch.get_num_threads()
    results = []
    try:
        for threads, idle in [(1, 0), (2, 0), (2, 1), (3, 2)]:
            torch.set_num_threads(threads)
            monkeypatch.setattr(item_threads, "idle_cores", lambda idle=idle: idle)
            res = attribute(indicators.get("heat"), Panel(z))
            results.append((np.array(res.phi), res.by_step(), column_sums(z)))
    finally:
        torch.set_num_threads(old)
    for phi, sums, cs in results[1:]:
        np.testing.assert_array_equal(phi, results[0][0])
        np.testing.assert_array_equal(sums, results[0][1])
        np.testing.assert_array_equal(cs, results[0][2])


def test_a_helper_error_reaches_the_caller():
    """An exception in a task run by a pool helper is raised in the caller (after every helper stopped)."""
    def fn(k: int) -> int:
        if k == 5:
            raise KeyError("task 5")
        return k

    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(item_threads, "idle_cores", lambda: 1)
            with pytest.raises(KeyError, match="task 5"):
                streaming._run(fn, list(range(12)))
            assert streaming._run(lambda k: k * k, list(range(12))) == [k * k for k in range(12)]
    finally:
        torch.set_num_threads(old)


def test_big_outputs_are_aligned_for_streaming_stores():
    for shape in [(1, 1_000_000), (3, 300_001), (2, 10_000_000)]:  # recycled, recycled, too big to recycle
        out = streaming.fresh(shape, np.float64)
        assert out.shape == shape and out.flags.c_contiguous and out.flags.writeable
        assert out.ctypes.data % 64 == 0
        out[...] = 1.0


def test_nested_calls_from_a_helper_run_their_items_themselves(monkeypatch):
    """An item that itself calls run_items (e.g. a τ inside a threaded loop) must not wait on the pool whose
    only thread it occupies: it runs its items itself, and the results are those of a plain loop."""
    import threading

    monkeypatch.setattr(item_threads, "idle_cores", lambda: 1)
    old = torch.get_num_threads()
    seen = set()

    def inner(k: int) -> int:
        seen.add(threading.current_thread().name.startswith("aumann-items"))
        return k + 1

    def outer(j: int) -> list[int]:
        return item_threads.run_items(inner, list(range(j, j + 3)))

    try:
        torch.set_num_threads(2)
        done: list = []
        t = threading.Thread(target=lambda: done.append(item_threads.run_items(outer, list(range(8)))), daemon=True)
        t.start()
        t.join(timeout=60)
        assert not t.is_alive(), "nested run_items deadlocked"
    finally:
        torch.set_num_threads(old)
    assert done[0] == [[j + 1, j + 2, j + 3] for j in range(8)]
    assert True in seen  # the helper thread did run items
