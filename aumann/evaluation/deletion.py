"""Deletion faithfulness under two oracles: re-simulation (through the simulator) and masking (on the panel).

For a ranking π of the agents (by φ at t*, see :func:`aumann.attribution.metrics.rank_agents`) and
k = 1 … K_del, the agents π[:k] take the scenario's baseline action at t* in a counterfactual fork
that re-simulates step t* from the checkpoint before it; the macro indicator falls from
f = f(z_{t*}) to f_k. The study reports (formulas in :mod:`aumann.attribution.metrics`)

    deletion_auc = mean_relative_drop(f, f_1 … f_Kdel) = (1/K_del) Σ_{k=1}^{K_del} (f − f_k) / f
    drop_at_5    = relative_drop_at_k(f, f_k, 5)       = 100 · (f − f_5) / f

for the attributed (C²) indicator and, beside it, the original indicator. Random is the mean curve
over ``random_orderings`` uniformly random orderings. Forks with the same deleted set are computed
once (rankings often share prefixes).

:class:`MaskingOracle` is the same test on the game the feature-level methods explain: the deleted
agents' feature rows at t* are set to their baseline rows z⁰ and everyone else's rows stay as
recorded — nothing is re-simulated, so what a deleted agent's action did to others stays in.
:func:`deletion_summary` takes either oracle (the study reports ``deletion_auc``/``drop_at_5``
from re-simulation and ``deletion_auc_masking``/``drop_at_5_masking`` from masking; same formulas).

:class:`DeletionOracle` also defines the *re-simulation game* (:func:`resimulation_game`):
v(S) = f after re-simulating t* with every agent outside S at the baseline action.

Forks start from the run's checkpoint before t*: a checked copy where the model copies faithfully,
else a replay from the scenario's factory (``aumann.simulators.fork(..., strategy="auto")``). In
populations with births and deaths (``Scenario.baseline_action_by="id"``) only the agents present
before t* can take the baseline action: they are the players, and ``agent_ids`` (the run panel's
agent axis) maps panel positions to the agents acted on.

Where the scenario gives the re-simulated step as what changes (``Scenario.resimulate_rows_fn``: the factual
step's features, the rows the forced agents change and their values) and both indicators declare a pooled form
(f = ρ(mean_i ψ(z_i)), :class:`~aumann.attribution.indicators.PooledForm`), a fork's f and f original come
from the factual step's sums of ψ and the changed rows alone (:class:`PooledForks`): at 10⁶ agents a few
thousand rows instead of a copy and two passes over all N. The sums are added in another order than one
evaluation over N, so the values agree with it to rounding (~1e-16 relative), not bit for bit; the factual
step's own value is checked against a full evaluation once (beyond 1e-9 relative, or an indicator that
reads context, the oracle evaluates every fork in full). A user's pooled form is also checked as the
attribution engine checks it, between the factual step and the scenario's baseline features, once per distinct
factual step the forks start from (not only at the first): one that is not
f raises :class:`~aumann.errors.IndicatorError`, one that lost the precision of f is not used
(``DeletionOracle.pooled_fallback`` says why, with a warning); aumann's own pooled forms skip that check.

Forks are independent of each other: :meth:`DeletionOracle.prefetch` computes many at once -- on
``threads`` threads, so that the LLM requests of concurrent forks join the backend's common pool
of in-flight requests (a study's wall time is not the sum of per-fork latencies), or through an
``executor`` (process pool or Ray) -- with values identical to computing them one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.attribution import FunctionGame
from aumann.attribution.games import CoalitionCache
from aumann.attribution.indicators import EvalContext, as_indicator, aumanns_own, evaluate, evaluate_pair
from aumann.attribution.metrics import mean_relative_drop, relative_drop, relative_drop_at_k
from aumann.checks import as_torch
from aumann.errors import AumannError, ScenarioCodeError
from aumann.scenarios.base import Scenario


@dataclass
class DeletionOracle:
    """Counterfactual forks of one run at its target step, with a cache keyed by the deleted set."""

    scenario: Scenario
    config: Any
    model_before: Any
    f: Any
    f_original: Any
    agent_ids: Any = None
    _cache: CoalitionCache = field(default_factory=CoalitionCache)  # forks by deleted set: (f, f original)
    forks: int = 0
    threads: int = 1
    executor: Any = None
    _lock: Any = field(default_factory=threading.Lock, repr=False)
    fork_bytes: int | None = None  # the measured peak memory of one fork (sizes the forks in flight)
    _pooled: Any = field(default=None, init=False, repr=False)  # PooledForks; False: does not apply; None: undecided
    _rows_checked: bool = field(default=False, init=False, repr=False)  # the rows hook agreed with the full step

    def _compute(self, key: frozenset[int]) -> tuple[float, float]:
        if self._pooled is None:
            with self._lock:
                if self._pooled is None:
                    self._pooled = PooledForks.of(self.scenario, self.f, self.f_original,
                                                  baseline=self._baseline_features) or False
        rows = self.scenario.step_rows(self.model_before, self.config, sorted(key)) if self._pooled else None
        if rows is not None and not self._rows_checked:
            self._check_rows(key, rows)
        if rows is not None:
            val = self._pooled.values(*rows)
            if val is not None:
                return val
            base, changed, values = rows  # evaluated in full: the step made from its rows, not re-simulated again
            z = base.copy(order="K")
            z[changed] = values
            state = EvalContext(z, {}, None)
        else:
            state = self.scenario.step_state(self.model_before, self.config, sorted(key), agent_ids=self.agent_ids)
        z = state.z
        if isinstance(z, np.ndarray) and z.dtype.kind == "f" and z.dtype != np.float64:
            state = state.with_values(z.astype(np.float64))  # what evaluate makes of it: once for both indicators
        if getattr(z, "ndim", 0) == 2:  # one step: what the two indicators share is done once (evaluate_pair)
            f, fo = evaluate_pair(self.f, self.f_original, state)
            return float(f), float(fo)
        return float(evaluate(self.f, state)), float(evaluate(self.f_original, state))

    def _baseline_features(self) -> np.ndarray:
        """The scenario's attribution baseline z⁰ at the target step (every agent at the baseline action), between
        which and the factual step a user's pooled form is checked (:class:`PooledForks`)."""
        return self.scenario.baseline_features(self.model_before, self.config, agent_ids=self.agent_ids)

    @property
    def pooled_fallback(self) -> str | None:
        """Why the forks are evaluated in full although both indicators declare a pooled form and the scenario gives
        a fork's changed rows (the pooled form lost the precision of f, or could not be checked); ``None`` when the
        pooled sums are used or do not apply."""
        return self._pooled.fallback if self._pooled else None

    def _check_rows(self, key: frozenset[int], rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Once per oracle: the step the rows hook gives (its factual base with the changed rows replaced) is the
        re-simulated step itself (``resimulate_fn`` or a fork), within 1e-12. A hook whose base is not the factual
        step (a stale array, another agent order) or that leaves out a changed row gave deletion values that were
        silently wrong: the pooled form's own check reads the base alone."""
        base, changed, values = rows
        z = base.copy(order="K")
        z[changed] = values
        full = np.asarray(self.scenario.step_state(self.model_before, self.config, sorted(key),
                                                   agent_ids=self.agent_ids).z, dtype=np.float64)
        if full.shape != z.shape or not np.allclose(z, full, rtol=1e-12, atol=1e-12):
            name = self.scenario.name
            if full.shape != z.shape:
                raise ScenarioCodeError(f"resimulate_rows_fn of scenario {name!r} gives a step of shape {z.shape}; the "
                                        f"re-simulated step has {full.shape}")
            bad = np.argwhere(~np.isclose(z, full, rtol=1e-12, atol=1e-12))
            i, d = (int(v) for v in bad[0])
            where = "one of the changed rows" if i in set(changed.tolist()) else "a row it does not list as changed"
            raise ScenarioCodeError(
                f"resimulate_rows_fn of scenario {name!r} disagrees with the re-simulated step (with {len(key)} "
                f"agent(s) at the baseline action): row {i}, feature {d}: {z[i, d]!r} against {full[i, d]!r} "
                f"({len(np.unique(bad[:, 0]))} row(s) differ; row {i} is {where}). Its base must be the factual step's "
                "features and its rows every row the forced agents change")
        self._rows_checked = True

    def _store(self, key: frozenset[int], val: tuple[float, float]) -> tuple[float, float]:
        stored, new = self._cache.put(key, val)
        if new:
            with self._lock:
                self.forks += 1
        return stored

    def values(self, deleted: Sequence[int], *, cache: bool = True) -> tuple[float, float]:
        """(f_k, f_k original) after re-simulating t* with ``deleted`` (panel positions) at the baseline
        action (``cache=False``: fork anyway and keep nothing, for games that visit many one-off coalitions)."""
        key = frozenset(int(i) for i in deleted)
        val = self._cache.get(key)
        if val is not None:
            return val
        if cache:
            return self._store(key, self._compute(key))
        return self.many([key], cache=False)[0]

    def cached(self) -> dict[frozenset[int], tuple[float, float]]:
        """The deleted sets forked so far (with ``cache=True``) and their (f, f original)."""
        return self._cache.as_dict()

    @property
    def coalitions(self) -> CoalitionCache:
        """The fork store (a :class:`~aumann.attribution.games.CoalitionCache` keyed by the deleted set)."""
        return self._cache

    def _compute_all(self, keys: list[frozenset[int]]) -> list[tuple[float, float]]:
        """The forks of ``keys`` (threads or ``executor``; same values as one by one), nothing stored."""
        if len(keys) > 1 and self.executor is not None:
            from aumann.simulators.llm.usage import usage_of

            parts = max(1, min(len(keys), 4 * int(getattr(self.executor, "max_workers", None) or 4)))
            idx = [list(range(i, len(keys), parts)) for i in range(parts)]
            common = (self.scenario, self.config, self.model_before, self.agent_ids)
            sets = [[sorted(keys[j]) for j in ix] for ix in idx]
            if getattr(self.executor, "supports_shared", False):  # the checkpoint travels once (Ray: ray.put)
                results = self.executor.map(fork_values_shared, sets, shared=common)
            else:
                results = self.executor.map(fork_values_task, [(*common, st) for st in sets])
            acct = usage_of(self.model_before)
            out: list[Any] = [None] * len(keys)
            for ix, (vals, spent) in zip(idx, results):
                for j, val in zip(ix, vals):
                    out[j] = val
                if acct is not None:
                    acct.merge(spent)
            return out
        if len(keys) > 1 and self.threads > 1:
            from concurrent.futures import ThreadPoolExecutor

            first, threads = self._sized_threads(keys[0])  # forks in flight sized by what one fork costs
            rest = keys[1:]
            if threads <= 1:
                return [first, *(self._compute(k) for k in rest)]
            with ThreadPoolExecutor(max_workers=min(threads, len(rest)), thread_name_prefix="aumann-fork") as pool:
                return [first, *pool.map(self._compute, rest)]
        return [self._compute(k) for k in keys]

    def _sized_threads(self, key: frozenset[int]) -> tuple[tuple[float, float], int]:
        """Fork ``key`` alone, measuring its peak memory (once per oracle), and the number of forks that may
        run at once within the memory budget (at most ``threads``): threads × a model's copy must fit."""
        from aumann.attribution.memory import items_per_batch, limits, peak_bytes

        if self.fork_bytes is not None:
            return self._compute(key), max(1, min(self.threads, items_per_batch(self.fork_bytes, limits()[1])))
        out: list[tuple[float, float]] = []
        peak = peak_bytes(lambda: out.append(self._compute(key)))
        if not out:  # the probe could not run the fork (no measurement here): run it plainly
            out.append(self._compute(key))
        self.fork_bytes = peak if peak else None
        if not peak:
            return out[0], self.threads
        return out[0], max(1, min(self.threads, items_per_batch(peak, limits()[1])))

    def prefetch(self, sets: Iterable[Sequence[int]]) -> int:
        """Compute the forks of many deleted sets at once (threads or ``executor``); returns how many.

        Values are exactly those :meth:`values` computes one at a time (each fork starts from the
        same checkpoint and depends on nothing but its deleted set).
        """
        todo = list(dict.fromkeys(k for k in (frozenset(int(i) for i in d) for d in sets) if k not in self._cache))
        for key, val in zip(todo, self._compute_all(todo)):
            self._store(key, val)
        return len(todo)

    def many(self, sets: Iterable[Sequence[int]], *, cache: bool = True) -> list[tuple[float, float]]:
        """:meth:`values` of many deleted sets, their forks computed at once (threads or ``executor``).
        ``cache=False``: every set not already cached is forked (repeats included) and nothing is kept; ``sets``
        is read a chunk at a time (:data:`FORK_KEYS_CHUNK`), so what is held is the values, not every deleted set."""
        if cache:
            keys = [frozenset(int(i) for i in d) for d in sets]
            self.prefetch(keys)
            return [self._cache[k] for k in keys]
        out: list[tuple[float, float]] = []
        for keys in _key_chunks(sets, FORK_KEYS_CHUNK):
            out.extend(self._uncached(keys))
            del keys  # not held while the next chunk is read
        return out

    def _uncached(self, keys: list[frozenset[int]]) -> list[tuple[float, float]]:
        """(f, f original) of ``keys``: the cached ones read, the others forked at once and not kept."""
        todo = [j for j, k in enumerate(keys) if k not in self._cache]
        vals = self._compute_all([keys[j] for j in todo])
        with self._lock:
            self.forks += len(todo)
        out = [self._cache.get(k) for k in keys]
        for j, val in zip(todo, vals):
            out[j] = val
        return out  # type: ignore[return-value]

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "executor", "_pooled")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self.executor = None
        self._pooled = None

    def curve(self, order: Sequence[int], k_max: int) -> np.ndarray:
        """(k_max, 2) array of (f_k, f_k original) for k = 1 … k_max."""
        return np.array([self.values(order[:k]) for k in range(1, k_max + 1)])

    def curve_at(self, order: Sequence[int], ks: Sequence[int]) -> np.ndarray:
        """(len(ks), 2) array of (f_k, f_k original) for the given k."""
        return np.array([self.values(order[:k]) for k in ks])


FORK_KEYS_CHUNK = 2**20
"""Members of deleted sets (plus 8 a set) that :meth:`DeletionOracle.many` (``cache=False``) holds as keys at once,
about 80 MB. A sampled game's batch is m permutations × (N − 1) coalitions of up to N agents: read at once, a
re-simulation reference at N = 1000 and 200 permutations held 2·10⁵ sets of ~500 agents, ~7 GB, for the whole of
its forks; in chunks the forks and their values are the same."""


def _key_chunks(sets: Iterable[Sequence[int]], budget: int) -> Iterable[list[frozenset[int]]]:
    """The deleted sets of ``sets`` as keys, in lists of at most ``budget`` members (plus 8 a set)."""
    chunk: list[frozenset[int]] = []
    held = 0
    for d in sets:
        key = frozenset(int(i) for i in d)
        chunk.append(key)
        held += len(key) + 8
        if held >= budget:
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk


class PooledForks:
    """(f, f original) of re-simulated steps given as what changes — ``(base, rows, values)`` from
    :meth:`~aumann.scenarios.base.Scenario.step_rows` — for two indicators with a pooled form: each is
    ρ((S + Σ_rows ψ(values) − Σ_rows ψ(base[rows])) / N), S = Σ_i ψ(base_i) kept for the base (one array
    per checkpoint).

    A user's pooled form is checked first as the attribution engine checks it
    (:meth:`~aumann.attribution.MaskedIndicatorGame.pooled_form_lost`, one implementation): on the masking game
    between the factual step and the scenario's baseline ``baseline()`` (every agent at the baseline action), at
    v(∅), v(N) and seeded coalitions between them — the kind of step a fork is — once for every distinct factual
    step (``base``, told apart by its content) that :meth:`values` is given. A form that is not f there raises
    :class:`~aumann.errors.IndicatorError`; one that lost the precision of f is not used (every fork is evaluated in
    full, the reason in :attr:`fallback`, with an :class:`~aumann.errors.AumannWarning`). aumann's own pooled forms
    skip that check (no baseline is computed for them). For every form, :meth:`values` returns ``None`` where the
    base's own value does not match a full evaluation: the oracle then evaluates in full (the reason recorded too)."""

    def __init__(self, f: Any, g: Any, baseline: Callable[[], Any] | None = None) -> None:
        self.inds = (f, g)
        self.baseline = baseline
        self.fallback: str | None = None  # why the sums are not used (every fork evaluated in full)
        self._checked_steps: set[tuple[Any, ...]] = set()  # fingerprints of the factual steps a user's form passed
        self._base: tuple[Any, ...] | None = None  # (base array, its ψ sums for f and g, or None: no match)
        self._lock = threading.Lock()

    @staticmethod
    def of(scenario: Any, f: Any, g: Any, *, baseline: Callable[[], Any] | None = None) -> PooledForks | None:
        """The helper for ``scenario``'s forks of ``f`` and ``g``, or ``None`` where it does not apply (``baseline``:
        the scenario's baseline features at the target step, asked for only to check a user's pooled form)."""
        if getattr(scenario, "resimulate_rows_fn", None) is None:
            return None
        fi, gi = as_indicator(f), as_indicator(g)
        # the rows carry no living mask (a fixed population, as resimulate_fn's steps): an alive-aware indicator
        # is left to the full evaluation of the re-simulated step
        if any(i.pooled is None or i.uses_context or i.accepts_alive for i in (fi, gi)):
            return None
        return PooledForks(fi, gi, baseline)

    def _has_user_form(self) -> bool:
        return any(not aumanns_own(i) for i in self.inds)

    def _check_forms(self, base: np.ndarray) -> str | None:
        """A user's pooled form checked by the engine's check between ``base`` and the baseline (raises for a form
        that is not f); what was lost where it lost the precision of f or could not be checked, else ``None``."""
        users = [i for i in dict.fromkeys(self.inds) if not aumanns_own(i)]
        if not users:
            return None
        from aumann.attribution import MaskedIndicatorGame, Problem
        from aumann.panel import Panel

        try:
            z0 = None if self.baseline is None else np.asarray(self.baseline(), dtype=np.float64)
        except AumannError as exc:  # the scenario cannot give its baseline here: the forms stay unchecked, unused
            return f"the pooled form of {users[0].name!r} could not be checked against f: {exc}"
        if z0 is None or z0.shape != base.shape:
            return (f"the pooled form of {users[0].name!r} could not be checked against f: no baseline step of the "
                    f"fork's shape {base.shape} (got {None if z0 is None else z0.shape})")
        panel = Panel(base[None])
        for ind in users:
            lost = MaskedIndicatorGame(Problem.build(ind, panel, z0[None]), 0).pooled_form_lost()
            if lost is not None:
                return f"the pooled form of {ind.name!r} loses the precision of f between the step and its baseline " \
                       f"({lost})"
        return None

    def _sums(self, base: np.ndarray) -> tuple[Any, ...] | None:
        import torch

        with self._lock:
            if self.fallback is not None:
                return None
            if self._base is None or self._base[0] is not base:
                # a user's form is checked at every distinct factual step (a base per checkpoint), not only at the
                # first: a form right at an early step and wrong at a later one gave that step's forks silently
                key = _fingerprint(base) if self._has_user_form() else None
                if key is not None and key not in self._checked_steps:
                    self.fallback = self._check_forms(base)
                    if self.fallback is not None:
                        _warn_full(self.fallback)
                        return None
                    self._checked_steps.add(key)
                z = as_torch(base)
                n = base.shape[0]
                with torch.no_grad():
                    sums = tuple(i.pooled.psi(z).to(torch.float64).sum(-2) for i in self.inds)
                    full = evaluate_pair(self.inds[0], self.inds[1], EvalContext(base, {}, None))
                    got = [float(i.pooled.rho(s / n)) for i, s in zip(self.inds, sums)]
                bad = [(i, a, float(v)) for i, a, v in zip(self.inds, got, full)
                       if not np.isclose(a, float(v), rtol=1e-9, atol=1e-12)]
                self._base = (base, None if bad else sums)
                if bad:
                    i, a, v = bad[0]
                    self.fallback = (f"the pooled sums of {i.name!r} give {a:.10g} at the factual step, a full "
                                     f"evaluation {v:.10g}")
                    _warn_full(self.fallback)
            return self._base[1]

    def values(self, base: np.ndarray, rows: np.ndarray, values: np.ndarray) -> tuple[float, float] | None:
        import torch

        n = base.shape[0]
        if 2 * rows.size > n:  # most rows changed: one evaluation over N reads fewer
            return None
        sums = self._sums(base)
        if sums is None:
            return None
        new, old = as_torch(np.ascontiguousarray(values)), as_torch(base[rows])
        out = []
        with torch.no_grad():
            for ind, s in zip(self.inds, sums):
                psi = ind.pooled.psi
                d = psi(new).to(torch.float64).sum(-2) - psi(old).to(torch.float64).sum(-2)
                out.append(float(ind.pooled.rho((s + d) / n)))
        return out[0], out[1]


class MaskingOracle:
    """The masking oracle at the target step: f after the deleted agents' features are set to their
    baseline z⁰ (no re-simulation; the per-step masking game's v(N ∖ D)).

    The curve is the masking game's own (:meth:`~aumann.attribution.pooled.GameKernel.curve` of
    :class:`~aumann.attribution.MaskedIndicatorGame`): running sums along the ordering for pooled
    indicators (O(k) for the first k agents, over the living at n_t when the step has dead rows),
    one sparse pass for network indicators, batched evaluation of the masked array otherwise. The
    step's context and living mask travel with its features as one
    :class:`~aumann.attribution.indicators.EvalContext`, so an alive-aware indicator is evaluated over
    the living exactly as the engine evaluates it.

    Args:
        f, f_original: the attributed (C²) and the original indicator.
        z: the step's features (N, D), or its :class:`~aumann.attribution.indicators.EvalContext` (features,
            context and living mask together; then ``context`` and ``alive`` are not given).
        z0: the baseline (N, D) (or anything broadcastable to it).
        context: the step's world state {name: array} (with a plain ``z``).
        alive: the step's living mask (N,) (with a plain ``z``); ``None``: everyone alive.
    """

    def __init__(self, f: Any, f_original: Any, z: Any, z0: np.ndarray, context: dict[str, Any] | None = None,
                 *, alive: Any = None) -> None:
        import torch

        from aumann.attribution import MaskedIndicatorGame, Problem
        from aumann.attribution.indicators import EvalContext
        from aumann.panel import Panel

        state = z if isinstance(z, EvalContext) else EvalContext(np.asarray(z), context, alive)
        if isinstance(z, EvalContext) and (context is not None or alive is not None):
            raise ValueError("MaskingOracle: an EvalContext carries its own context and living mask; pass it alone")
        self.state = state
        self.inds = (as_indicator(f), as_indicator(f_original))
        zz = np.asarray(state.z.detach().cpu().numpy() if isinstance(state.z, torch.Tensor) else state.z)
        self.z = zz
        self.z0 = np.broadcast_to(np.asarray(z0), zz.shape)
        self.context = state.context
        panel = Panel(zz[None], alive=None if state.alive is None else state.alive[None],
                      context={k: np.asarray(v)[None] for k, v in (state.context or {}).items()})
        base = np.array(self.z0, dtype=panel.dtype)  # a writable copy (z0 may be a broadcast view)
        self.games = tuple(MaskedIndicatorGame(Problem.build(ind, panel, base), 0) for ind in self.inds)
        self.kernels = tuple(g.kernel() for g in self.games)
        self.evaluations = 0

    def values(self, deleted: Sequence[int]) -> tuple[float, float]:
        """(f, f original) with the ``deleted`` agents at the baseline."""
        return tuple(float(v) for v in self.curve_at(np.asarray(deleted, dtype=np.int64), [len(deleted)])[0])

    def curve(self, order: Sequence[int], k_max: int) -> np.ndarray:
        """(k_max, 2) array of (f_k, f_k original) for k = 1 … k_max."""
        return self.curve_at(order, range(1, k_max + 1))

    def curve_at(self, order: Sequence[int], ks: Sequence[int]) -> np.ndarray:
        """(len(ks), 2) array of (f_k, f_k original) for the given k (deleting order[:k])."""
        order = np.asarray(order, dtype=np.int64)
        ks = np.asarray(list(ks), dtype=np.int64)
        out = np.empty((ks.size, 2))
        for j, kernel in enumerate(self.kernels):
            out[:, j] = kernel.curve(order, ks)
            self.evaluations += int(ks.size)
        return out


def _fingerprint(base: np.ndarray) -> tuple[Any, ...]:
    """A factual step told apart by its content (shape, dtype, a digest of its bytes; ~10 ms per 10⁷ values), so
    that a step is checked once however many arrays hold it."""
    import hashlib

    arr = np.ascontiguousarray(base)
    return arr.shape, arr.dtype.str, hashlib.blake2b(memoryview(arr).cast("B"), digest_size=16).hexdigest()


def _warn_full(why: str) -> None:
    import warnings

    from aumann.errors import AumannWarning

    warnings.warn(f"deletion forks evaluate every fork in full, not from the pooled sums: {why}", AumannWarning,
                  stacklevel=5)


def fork_values_task(spec: tuple) -> tuple[list[tuple[float, float]], Any]:
    """Executor task: the (f_k, f_k original) of several deleted sets of one checkpoint, and the LLM
    usage they cost in this worker (merged into the parent's account). Top-level, so it pickles."""
    return fork_values_shared(spec[:4], spec[4])


def fork_values_shared(common: tuple, sets: list[list[int]]) -> tuple[list[tuple[float, float]], Any]:
    """:func:`fork_values_task` with ``(scenario, config, model_before, agent_ids)`` as the executor's
    shared object (shipped once per batch of forks; never modified: every fork copies the checkpoint)."""
    from aumann import scenarios
    from aumann.simulators.llm.usage import Usage, usage_of

    scenario, config, model_before, agent_ids = common
    if isinstance(scenario, str):  # a registered name
        scenario = scenarios.get(scenario)
    f, f_orig = scenario.indicators(config)
    acct = usage_of(model_before)
    before = acct.copy() if acct is not None else None
    oracle = DeletionOracle(scenario, config, model_before, f, f_orig, agent_ids=agent_ids)
    vals = [oracle.values(d) for d in sets]
    return vals, (acct - before) if acct is not None else Usage()


def resimulation_game(oracle: DeletionOracle, n: int, which: int = 0,
                      players: Sequence[int] | None = None, *, cache: bool = False) -> FunctionGame:
    """v(S): the indicator (``which`` 0: attributed, 1: original) after re-simulating the target step
    with the agents outside S at the baseline action. Every evaluation is a fork (counted in
    ``oracle.forks``); coalitions are not cached unless ``cache`` (sampled coalitions rarely repeat,
    and caching m·N of them would hold m·N sets of up to N ids).

    The players are panel positions ``players`` (default ``0 … n−1``); player j is position ``players[j]``.
    """
    pos = np.arange(n) if players is None else np.asarray(players, dtype=np.int64)

    def v(masks: np.ndarray) -> np.ndarray:
        masks = np.asarray(masks, dtype=bool)  # the batch's forks at once (threads / executor)
        return np.array([val[which] for val in oracle.many((pos[~m] for m in masks), cache=cache)])

    game = FunctionGame(v, n_players=len(pos), name="resimulation")
    # what one coalition of a batch holds here until the batch's forks are done: its (f, f original) pair of
    # floats in the oracle's list (~120 bytes; the deleted sets are read a chunk at a time, FORK_KEYS_CHUNK).
    # The generic kernel adds the coalition's mask row (N bools) to this when it sizes its chunks.
    game.row_bytes = 128
    return game


def scenario_resimulation_game(scenario: Scenario, model: Any, config: Any, *, original: bool = False,
                               agent_ids: Any = None) -> FunctionGame:
    """The re-simulation coalition game of ``scenario`` at the step ``model`` is about to take
    (``original=True`` values coalitions with the original indicator instead of the C² surrogate).

    For populations with births and deaths pass the run panel's ``agent_ids``: the players are the
    agents among them present in ``model`` (see :meth:`Scenario.present`)."""
    f, f_orig = scenario.indicators(config)
    oracle = DeletionOracle(scenario, config, model, f, f_orig, agent_ids=agent_ids)
    if agent_ids is None:
        return resimulation_game(oracle, config.agents, which=1 if original else 0)
    return resimulation_game(oracle, len(agent_ids), which=1 if original else 0,
                             players=scenario.present(model, agent_ids))


def deletion_summary(oracle: Any, f_full: tuple[float, float], orders: Any, ks: int | Sequence[int],
                     k_drop: int | None = None) -> dict[str, Any]:
    """The deletion metrics of one ordering, or of the mean curve of several — the study's one summary.

    Args:
        oracle: a deletion oracle (:class:`DeletionOracle`, :class:`MaskingOracle`: anything with
            ``curve_at(order, ks)`` → (len(ks), 2) values of (f, f original)).
        f_full: (f, f original) with nobody deleted.
        orders: one ordering of panel positions (deletes ``order[:k]``), or a sequence of orderings whose
            curves are averaged (the Random row).
        ks: the deletion depths: an int K for k = 1 … K, or the depths themselves (e.g. the log-k grid).
        k_drop: also report the relative drop (%) after ``k_drop`` deletions (``ks`` must be 1 … K).

    Returns:
        ``curve`` and ``curve_original`` (relative drops (f − f_k)/f per depth), ``deletion_auc`` and
        ``deletion_auc_original`` (their means) and, with ``k_drop``, ``drop_at_k`` and ``drop_at_k_original``.
    """
    depths = list(range(1, int(ks) + 1)) if isinstance(ks, int | np.integer) else [int(k) for k in ks]
    single = np.ndim(orders) == 1 if isinstance(orders, np.ndarray) else bool(len(orders)) and np.ndim(orders[0]) == 0
    if single:
        curve = oracle.curve_at(orders, depths)
    else:
        curve = np.mean([oracle.curve_at(order, depths) for order in orders], axis=0)
    out = {"curve": relative_drop(f_full[0], curve[:, 0]), "curve_original": relative_drop(f_full[1], curve[:, 1]),
           "deletion_auc": mean_relative_drop(f_full[0], curve[:, 0]),
           "deletion_auc_original": mean_relative_drop(f_full[1], curve[:, 1])}
    if k_drop is not None:
        out["drop_at_k"] = relative_drop_at_k(f_full[0], curve[:, 0], k_drop)
        out["drop_at_k_original"] = relative_drop_at_k(f_full[1], curve[:, 1], k_drop)
    return out


def _pool(n_agents: int | Sequence[int]) -> Any:
    return np.asarray(n_agents, dtype=np.int64) if not isinstance(n_agents, int | np.integer) else int(n_agents)


def random_summary(oracle: Any, f_full: tuple[float, float], n_agents: int | Sequence[int], k_del: int,
                   k_drop: int, orderings: int, rng: np.random.Generator) -> dict[str, Any]:
    """:func:`deletion_summary` of ``orderings`` random orderings of ``n_agents`` agents (an int: positions
    0 … n−1; a sequence: those positions), drawn from ``rng`` (kept for callers of the earlier API)."""
    pool = _pool(n_agents)
    return deletion_summary(oracle, f_full, [rng.permutation(pool) for _ in range(orderings)], k_del, k_drop)


def grid_summary(oracle: Any, f_full: tuple[float, float], order: Sequence[int], ks: Sequence[int]) -> dict[str, Any]:
    """:func:`deletion_summary` along the grid ``ks``, its means named ``deletion_auc_logk`` (earlier API)."""
    out = deletion_summary(oracle, f_full, order, list(ks))
    return {"curve": out["curve"], "curve_original": out["curve_original"],
            "deletion_auc_logk": out["deletion_auc"], "deletion_auc_logk_original": out["deletion_auc_original"]}


def random_grid_summary(oracle: Any, f_full: tuple[float, float], n_agents: int | Sequence[int], ks: Sequence[int],
                        orderings: int, rng: np.random.Generator) -> dict[str, Any]:
    """:func:`grid_summary` of the mean curve of ``orderings`` random orderings (earlier API)."""
    kmax, pool = int(max(ks)), _pool(n_agents)
    return grid_summary(oracle, f_full, [rng.permutation(pool)[:kmax] for _ in range(orderings)], ks)


__all__ = ["DeletionOracle", "MaskingOracle", "PooledForks", "deletion_summary", "fork_values_task", "grid_summary",
           "random_grid_summary", "random_summary", "resimulation_game", "scenario_resimulation_game"]
