"""Attribution that scales out: step blocks and permutation blocks over any executor.

An executor is anything with ``map(fn, items)`` returning ``[fn(item) ...]`` in order (aumann's
process pool and Ray executors; ``shared=`` is used when the executor declares
``supports_shared``). Attribution never imports the simulation layer: it only calls ``map``.

**Step blocks** (:func:`attribute_over`, what ``attribute(..., executor=...)`` runs): the steps of
a panel are independent problems, so contiguous blocks of steps go to the workers and come back
in order. Every method computes exactly what it computes in one process:

* coalition methods (sampled Shapley / Banzhaf, leave-one-out, exact enumeration) draw one child
  stream per step (``spawn(rng, T)``); a block gets a generator whose children are precisely its
  steps' streams (the same ``SeedSequence`` entropy and spawn key, counting from the block's first
  step), and the caller's ``rng`` is advanced as the single-process run advances it;
* the path integral batches whole steps into one autograd call; blocks are cut on the same batch
  boundaries, so every batch is the same call with the same shapes; an adaptive ``tol`` doubles K
  for all blocks at once from the global efficiency gap, as in one process (closed forms and the
  pooled-linear integral -- one streaming O(T·N) pass with sums across steps -- stay in the driver);
* the result is assembled from the blocks in step order (Σ_i φ and the standard errors included).

So ``attribute(f, panel, m, rng=s, executor=E)`` equals ``attribute(f, panel, m, rng=s)`` bit for
bit, for every executor and worker count (tested).

**Permutation blocks** (:func:`blocked_estimate`, opt-in with ``block_size=`` on
:class:`~aumann.attribution.SampledShapley` / :class:`~aumann.attribution.SampledBanzhaf`): one
step's permutations (or coalitions) are cut into blocks of ``block_size``; block b draws from the
b-th child stream of the step's generator, computes its units' mean and sum of squared deviations
(Welford-style shift by the block's first unit), and the blocks are combined in block order by
the pairwise update of Chan, Golub & LeVeque (1979). The numbers depend on (seed, block_size) only:
the blocks run in the driver when no executor is set (:func:`using`), or on the executor, with the
same bits. A stopping rule (``stderr_tol``) is checked after each block, in order. Blocked
estimates are statistically equivalent to the unblocked stream, not equal to it.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import itertools
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from aumann.attribution.unseen import floored
from aumann.errors import AumannError, ExecutorError, MethodError
from aumann.seeding import RNGLike, describe

#: ``stderr_tol`` is checked only once this many units (permutations, antithetic pairs or samples) are in: a
#: sample variance from two or three units can be 0 by chance (at N = 2 two random orderings agree half the
#: time), and the estimate would stop on it after 2 permutations (the control-variate estimator's pilot is 8-16)
MIN_UNITS_TO_STOP = 16

_EXECUTOR: contextvars.ContextVar[Any] = contextvars.ContextVar("aumann_attribution_executor", default=None)


@contextlib.contextmanager
def using(executor: Any) -> Iterator[None]:
    """Within the block, permutation blocks (``block_size=``) run on ``executor`` (``None``: in-process)."""
    token = _EXECUTOR.set(executor)
    try:
        yield
    finally:
        _EXECUTOR.reset(token)


def current_executor() -> Any:
    """The executor permutation blocks run on (``None``: in this process)."""
    return _EXECUTOR.get()


def _workers(executor: Any) -> int:
    w = getattr(executor, "max_workers", None)
    try:
        return max(1, int(w)) if w is not None else 4
    except (TypeError, ValueError):
        return 4


def _map(executor: Any, fn: Any, items: list[Any], shared: Any = None) -> list[Any]:
    """``executor.map`` with a shared object when the executor ships one once, else bound into ``fn``.

    A failure of the executor itself (a pool that died, a task it cannot ship) is an
    :class:`~aumann.errors.ExecutorError` naming the executor: these blocks run inside the indicator's error
    boundary, which would otherwise report it as the indicator's. The tasks' own errors (aumann's typed errors,
    the indicator's among them) pass through."""
    if executor is None:
        return [fn(shared, it) if shared is not None else fn(it) for it in items]
    try:
        if shared is not None and getattr(executor, "supports_shared", False):
            return list(executor.map(fn, items, shared=shared))
        if shared is not None:
            import functools

            return list(executor.map(functools.partial(fn, shared), items))
        return list(executor.map(fn, items))
    except (AumannError, KeyboardInterrupt):
        raise
    except Exception as exc:
        raise ExecutorError(f"executor {type(executor).__name__} failed to run {len(items)} block(s) of "
                            f"{getattr(fn, '__name__', 'work')}: {type(exc).__name__}: {str(exc)[:300]}") from exc


def check_executor(executor: Any) -> Any:
    """``executor`` if it is ``None`` or has a callable ``map(fn, items)``, else a :class:`MethodError`."""
    if executor is not None and not callable(getattr(executor, "map", None)):
        raise MethodError(f"executor must have a map(fn, items) method (a process pool, LocalExecutor, RayExecutor); "
                          f"got {type(executor).__name__} {executor!r:.80}")
    return executor


# ---------------------------------------------------------------------------------------------- seeds
def _seed_sequence(rng: Any) -> tuple[np.random.SeedSequence, type | None]:
    """The SeedSequence ``spawn(rng, n)`` spawns from, and the bit generator type of a Generator."""
    if isinstance(rng, np.random.Generator):
        ss = getattr(rng.bit_generator, "seed_seq", None)
        if not isinstance(ss, np.random.SeedSequence):
            raise MethodError("cannot split this Generator's streams over an executor: its bit generator has no "
                              "SeedSequence; pass an int seed or np.random.default_rng(seed)")
        return ss, type(rng.bit_generator)
    if isinstance(rng, np.random.SeedSequence):
        return rng, None
    return np.random.SeedSequence(rng), None


def _from(rng: Any, start: int, pinned: tuple[np.random.SeedSequence, type | None] | None = None) -> Any:
    """A generator (or SeedSequence) whose ``spawn(·, k)`` gives the children ``start … start + k − 1``
    that ``spawn(rng, ·)`` gives, without touching ``rng``."""
    ss, bit = pinned if pinned is not None else _seed_sequence(rng)
    seq = np.random.SeedSequence(ss.entropy, spawn_key=ss.spawn_key, pool_size=ss.pool_size,
                                 n_children_spawned=ss.n_children_spawned + start)
    return np.random.Generator(bit(seq)) if bit is not None else seq


# ---------------------------------------------------------------------------------------------- step blocks
def _keep_layout(a: np.ndarray) -> np.ndarray:
    """A compact copy of ``a`` with its axes in the same memory order (a recorder's (T, N, D) panel is
    often laid out N-major): kernels reduce in memory order, so the layout is part of the bits."""
    return a.copy(order="K")


def _sub_problem(problem: Any, t0: int, t1: int) -> Any:
    """The steps t0 … t1 − 1 of ``problem`` as a problem of their own (same resolved baseline and label,
    arrays in the same memory layout)."""
    panel = problem.panel.select_steps(slice(t0, t1))
    x = _keep_layout(problem.x[t0:t1])
    base = problem.baseline if problem.baseline.shape[0] == 1 else _keep_layout(problem.baseline[t0:t1])
    ctx = {k: v[t0:t1] for k, v in problem._ctx.items()}
    alive = None if problem.alive is None else problem.alive[t0:t1]
    return dataclasses.replace(problem, panel=panel, x=x, baseline=base, _ctx=ctx, alive=alive, progress=False)


def _alignment(method: Any, problem: Any, steps: int | None) -> int:
    """Blocks of steps are multiples of this many steps: the path integral's batch of whole steps
    (so every autograd call is the one the single-process run makes), else 1."""
    if steps is None:
        return 1
    from aumann.attribution.device import memory_budget as device_budget

    _, N, D = problem.shape
    item_bytes = N * D * (4 if problem.x.dtype == np.float32 else 8)
    budget = device_budget(problem.device, getattr(method, "memory_budget", None), 256 * 2**20)
    per_batch = max(1, int(budget // (6 * item_bytes)))
    return max(1, per_batch // steps)


def _blocks(T: int, align: int, executor: Any) -> list[tuple[int, int]]:
    units = math.ceil(T / align)
    n = max(1, min(units, 2 * _workers(executor)))
    per = math.ceil(units / n)
    edges = [*range(0, T, per * align), T]
    return [(a, b) for a, b in itertools.pairwise(edges) if b > a]


def _block_task(item: tuple) -> Any:
    method, sub, rng = item
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return method.attribute(sub, rng=rng)


def _merge_per_step(blocks: list[Any], key: str, sizes: list[int]) -> Any:
    vals: list[Any] = []
    for res, size in zip(blocks, sizes):
        v = (res.provenance.get("per_step") or {}).get(key)
        vals.extend(v if isinstance(v, list) and len(v) == size else [v] * size)
    return vals[0] if all(v == vals[0] for v in vals) else vals


def _assemble(problem: Any, blocks: list[Any], sizes: list[int], rng: RNGLike, seconds: float) -> Any:
    from aumann.attribution.result import Attribution

    first = blocks[0]
    cat = (lambda name: np.concatenate([getattr(b, name) for b in blocks]))  # noqa: E731
    sums = [b._phi_sums for b in blocks]
    prov = dict(first.provenance)
    for b in blocks[1:]:  # a note only some blocks set (``baseline_alive``: an agent dead in a later block only)
        for k, v in b.provenance.items():
            prov.setdefault(k, v)
    prov["seed"] = rng if rng is None else describe(rng)
    if "per_step" in prov and isinstance(prov["per_step"], dict):
        keys = dict.fromkeys(k for b in blocks for k in (b.provenance.get("per_step") or {}))
        prov["per_step"] = {k: _merge_per_step(blocks, k, sizes) for k in keys}
    prov["seconds"] = seconds  # (no block count: where it ran is not what it computed -- same bytes as serial)
    n_evals = None if any(b.n_evals is None for b in blocks) else int(sum(b.n_evals for b in blocks))
    return Attribution(
        phi=cat("phi"), delta_v=cat("delta_v"), f_values=cat("f_values"), f_baseline=cat("f_baseline"),
        agent_ids=problem.panel.agent_ids, steps=problem.panel.steps, features=problem.panel.features,
        phi_features=None if first.phi_features is None else cat("phi_features"),
        stderr=None if any(b.stderr is None for b in blocks) else cat("stderr"), n_evals=n_evals,
        satisfies_efficiency=first.satisfies_efficiency, method=first.method, provenance=prov,
        groups=dict(problem.panel.groups), phi_sums=None if any(s is None for s in sums) else np.concatenate(sums))


def attribute_over(method: Any, problem: Any, rng: RNGLike, executor: Any) -> Any:
    """``method.attribute(problem, rng=rng)`` computed in blocks of steps on ``executor`` (same bits)."""
    t0 = time.perf_counter()
    T = problem.shape[0]
    from aumann.attribution.path import AumannShapley
    from aumann.attribution.semivalues import CoalitionMethod

    if isinstance(method, CoalitionMethod):
        if getattr(method, "block_size", None) is not None and T < _workers(executor):
            with using(executor):  # few steps: their permutation blocks fan out instead
                return method.attribute(problem, rng=rng)
        common = bool(getattr(method, "common_permutations", False))
        pinned = _seed_sequence(rng if rng is not None else np.random.SeedSequence())
        if rng is None:
            rng = pinned[0]
        spans = _blocks(T, 1, executor)
        items = [(method, _sub_problem(problem, a, b), _from(rng, 0 if common else a, pinned)) for a, b in spans]
        blocks = _map(executor, _block_task, items)
        method._generators(rng, T)  # advance the caller's rng exactly as the single-process run does
        return _assemble(problem, blocks, [b - a for a, b in spans], rng, time.perf_counter() - t0)
    if isinstance(method, AumannShapley):
        if method.uses_closed_form(problem) or method._linear_pooled(problem) is not None:
            # closed forms and the pooled-linear integral are one streaming pass over the panel, O(T·N) and
            # memory-bound, whose sums are taken across steps at once: they stay here, in one piece
            return method.attribute(problem, rng=rng)
        steps, history = method.steps, []
        while True:
            fixed = copy.copy(method)
            fixed.steps, fixed.tol = steps, None
            spans = _blocks(T, _alignment(fixed, problem, steps), executor)
            blocks = _map(executor, _block_task, [(fixed, _sub_problem(problem, a, b), None) for a, b in spans])
            res = _assemble(problem, blocks, [b - a for a, b in spans], rng, 0.0)
            gap = float(res.relative_efficiency_gap.max())
            history.append((steps, gap))
            if method.tol is None or gap <= method.tol or steps * 2 > method.max_steps:
                break
            steps *= 2
        res.provenance["seconds"] = time.perf_counter() - t0
        if method.tol is not None:
            res.provenance.update({"tol": method.tol, "adaptive_history": history,
                                   "converged": history[-1][1] <= method.tol})
        return res
    # any other method: its steps in one block on the executor (nothing to split safely)
    return _map(executor, _block_task, [(method, problem, rng)])[0]


# ---------------------------------------------------------------------------------------------- permutation blocks
@dataclasses.dataclass
class _Block:
    """One block's units: count, per-agent mean and sum of squared deviations (M2)."""

    n: int
    mean: np.ndarray
    m2: np.ndarray


def _chan(a: _Block | None, b: _Block) -> _Block:
    """The pairwise update: the moments of a's units followed by b's (Chan, Golub & LeVeque 1979)."""
    if a is None:
        return b
    n = a.n + b.n
    d = b.mean - a.mean
    return _Block(n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n))


def _moments(units: Iterator[np.ndarray], n_agents: int) -> _Block:
    """Mean and M2 of a stream of (c, N) unit arrays, shifted by the first unit for stability."""
    count, shift = 0, None
    s1 = np.zeros(n_agents)
    s2 = np.zeros(n_agents)
    for chunk in units:
        for row in chunk:
            if shift is None:
                shift = row.copy()
            d = row - shift
            s1 += d
            s2 += d * d
        count += chunk.shape[0]
    if shift is None:
        return _Block(0, np.zeros(n_agents), np.zeros(n_agents))
    return _Block(count, shift + s1 / count, s2 - s1 * s1 / count)


def _shapley_block(kernel: Any, item: tuple) -> _Block:
    """One block of sampled-Shapley units: ``units`` permutations (pairs when antithetic) from ``gen``."""
    gen, units, antithetic, chunk = item
    n = kernel.n

    def draws() -> Iterator[np.ndarray]:
        left = units
        while left > 0:
            c = min(chunk, left)
            perms = np.empty((c, n), dtype=np.int64)
            for r in range(c):
                perms[r] = gen.permutation(n)
            yield kernel.units(perms, antithetic).detach().to(torch.float64).cpu().numpy()
            left -= c

    with torch.no_grad():
        return _moments(draws(), n)


def coalition_masks(rng: np.random.Generator, c: int, n: int) -> np.ndarray:
    """``c`` uniformly random coalitions of ``n`` players as a (c, n) bool array: row r is the bits of
    ``rng.bytes(⌈n/8⌉)`` (its r-th call), so the draws do not depend on how the rows are chunked. Drawn as one
    array of 32-bit words — the words ``Generator.bytes`` draws, one ⌈n/32⌉-word row per call, the generator
    left in the same state (tested on every numpy bit generator) — instead of a Python loop over the rows
    (23 µs a row: most of a sampled-Banzhaf sample's cost at small N)."""
    nbytes = (n + 7) // 8
    words = rng.integers(0, 2**32, size=(c, (nbytes + 3) // 4), dtype=np.uint32)
    rows = words.astype("<u4", copy=False).view(np.uint8).reshape(c, -1)[:, :nbytes]
    return np.unpackbits(rows, axis=1, count=n).astype(bool)


def _banzhaf_block(kernel: Any, item: tuple) -> tuple[Any, ...]:
    """One block of sampled-Banzhaf coalitions from ``gen``: marginal units (``"marginal"``), or the
    per-agent in/out value moments (``"msr"``)."""
    gen, samples, estimator, chunk = item
    n = kernel.n

    def masks_of(c: int) -> np.ndarray:
        return coalition_masks(gen, c, n)

    if estimator == "marginal":
        def draws() -> Iterator[np.ndarray]:
            left = samples
            while left > 0:
                c = min(chunk, left)
                yield np.asarray(kernel.flip_marginals(masks_of(c)), dtype=np.float64)
                left -= c

        return ("marginal", _moments(draws(), n))
    vals, masks = [], []
    left = samples
    while left > 0:
        c = min(chunk, left)
        m = masks_of(c)
        masks.append(m)
        vals.append(np.asarray(kernel.values(m), dtype=np.float64))
        left -= c
    v = np.concatenate(vals)
    mf = np.concatenate(masks).astype(np.float64)
    shift = float(v[0])
    d = v - shift
    n_in = mf.sum(axis=0)
    s_in, q_in = d @ mf, (d * d) @ mf
    n_out = len(v) - n_in
    s_out, q_out = float(d.sum()) - s_in, float((d * d).sum()) - q_in
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_in = np.where(n_in > 0, shift + s_in / np.maximum(n_in, 1), 0.0)
        mean_out = np.where(n_out > 0, shift + s_out / np.maximum(n_out, 1), 0.0)
        m2_in = np.where(n_in > 0, q_in - s_in * s_in / np.maximum(n_in, 1), 0.0)
        m2_out = np.where(n_out > 0, q_out - s_out * s_out / np.maximum(n_out, 1), 0.0)
    return ("msr", n_in, mean_in, m2_in, n_out, mean_out, m2_out)


def _chan_vec(n_a: np.ndarray, mean_a: np.ndarray, m2_a: np.ndarray, n_b: np.ndarray, mean_b: np.ndarray,
              m2_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_chan` per agent, with per-agent counts (zero counts on either side are handled)."""
    n = n_a + n_b
    safe = np.maximum(n, 1)
    d = mean_b - mean_a
    mean = np.where(n_a == 0, mean_b, np.where(n_b == 0, mean_a, mean_a + d * (n_b / safe)))
    m2 = np.where(n_a == 0, m2_b, np.where(n_b == 0, m2_a, m2_a + m2_b + d * d * (n_a * n_b / safe)))
    return n, mean, m2


def _stderr(m2: np.ndarray, n: Any) -> np.ndarray:
    return np.sqrt(np.maximum(m2, 0.0) / (n - 1) / n)


def _floored(acc: Any) -> tuple[np.ndarray, int]:
    """A block accumulator's standard errors with the unseen-ordering floor (:mod:`aumann.attribution.unseen`)."""
    return floored(acc.mean, np.sqrt(np.maximum(acc.m2, 0.0) / (acc.n - 1)), _stderr(acc.m2, acc.n), acc.n)


def blocked_estimate(method: Any, kernel: Any, v0: float, vN: float, rng: np.random.Generator) -> Any:
    """The permutation-block estimate of ``method`` (``block_size`` set) for one step's kernel: the
    blocks run on :func:`current_executor` (the kernel shipped once), else here; same numbers."""
    from aumann.attribution.semivalues import Estimate

    n = kernel.n
    executor = current_executor()
    shapley = method.name == "sampled_shapley"
    if shapley:
        if n == 1:
            return Estimate(phi=np.array([vN - v0]), stderr=np.zeros(1), n_evals=2,
                            info={"permutations": 0, "stopped": "single player"})
        per = 2 if method.antithetic else 1
        m = method._budget(n)
        total = m // per
        chunk = max(1, kernel.chunk_permutations() // per)
    else:
        cost = 1 if method.estimator == "msr" else n + 1
        m = method.samples
        if method.max_evals is not None:
            affordable = method.max_evals // cost
            if affordable < 2:
                raise MethodError(f"max_evals={method.max_evals} buys {affordable} sample(s) with the "
                                  f"{method.estimator!r} estimator ({cost} evaluation(s) each, N = {n}); at least 2 "
                                  f"are needed, i.e. max_evals ≥ {2 * cost}")
            m = min(m, affordable)
        total = m
        per = 1
        budget = method.memory_budget
        chunk = max(1, budget // (24 * n)) if method.estimator == "msr" else \
            max(1, budget // kernel.flip_sample_bytes())
    size = max(1, method.block_size // per) if shapley else method.block_size
    counts = [min(size, total - s) for s in range(0, total, size)]
    gens = rng.spawn(len(counts))
    # waves of blocks, so a stopping rule can end the estimate without computing every block
    wave = len(counts) if method.stderr_tol is None else max(1, _workers(executor) if executor is not None else 1)
    acc: _Block | None = None
    msr: tuple[np.ndarray, ...] | None = None
    used, stopped = 0, "permutations" if shapley else "samples"
    b = 0
    while b < len(counts):
        span = range(b, min(len(counts), b + wave))
        if shapley:
            items = [(gens[i], counts[i], method.antithetic, chunk) for i in span]
            results = _map(executor, _shapley_block, items, shared=kernel)
        else:
            items = [(gens[i], counts[i], method.estimator, chunk) for i in span]
            results = _map(executor, _banzhaf_block, items, shared=kernel)
        done = False
        for res in results:
            if shapley or res[0] == "marginal":
                acc = _chan(acc, res if shapley else res[1])
                se_max = float(_floored(acc)[0].max()) if acc.n >= 2 else math.inf
            else:
                parts = res[1:]
                msr = parts if msr is None else (*_chan_vec(*msr[:3], *parts[:3]), *_chan_vec(*msr[3:], *parts[3:]))
                n_in, _, m2_in, n_out, _, m2_out = msr
                ready = bool(n_in.min() >= 2 and n_out.min() >= 2)
                se_max = float(np.sqrt(m2_in / (n_in - 1) / n_in + m2_out / (n_out - 1) / n_out).max()) \
                    if ready else math.inf
            used += counts[b]
            b += 1
            if method.stderr_tol is not None and used >= MIN_UNITS_TO_STOP and se_max < method.stderr_tol:
                stopped = "stderr_tol"
                done = True
                break
        if done:
            break
    if stopped in ("permutations", "samples") and m < (method.permutations if shapley else method.samples):
        stopped = "max_evals"
    info = {"stopped": stopped, "block_size": method.block_size, "blocks": b}
    if shapley:
        assert acc is not None
        info["permutations"] = acc.n * per
        se, info["stderr_unseen"] = _floored(acc)
        return Estimate(phi=acc.mean, stderr=se, n_evals=acc.n * per * (n - 1) + 2, info=info)
    info["samples"] = used
    if acc is not None:  # marginal estimator
        se, info["stderr_unseen"] = _floored(acc)
        return Estimate(phi=acc.mean, stderr=se, n_evals=used * (n + 1), info=info)
    assert msr is not None
    n_in, mean_in, m2_in, n_out, mean_out, m2_out = msr
    if not (n_in.min() >= 2 and n_out.min() >= 2):
        raise MethodError(f"with {used} samples some of the N = {n} agents were in (or out of) fewer than two "
                          "sampled coalitions, so the MSR estimate or its standard error is undefined; raise samples")
    se = np.sqrt(np.maximum(m2_in, 0) / (n_in - 1) / n_in + np.maximum(m2_out, 0) / (n_out - 1) / n_out)
    return Estimate(phi=mean_in - mean_out, stderr=se, n_evals=used, info=info)


__all__ = ["attribute_over", "blocked_estimate", "current_executor", "using"]
