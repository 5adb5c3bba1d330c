"""Deletion faithfulness: force the top-k attributed agents to the baseline action and re-simulate t*.

For a ranking π of the agents (by φ at t*, descending) and k = 1 … K_del, the agents π[:k] take the
scenario's baseline action at t* in a counterfactual fork that re-simulates step t* from the
checkpoint before it; the macro indicator falls from f = f(z_{t*}) to f_k. Then

    Drop@k = (f − f_k) / f                       (reported in % in the tables)
    deletion AUC = (1/K_del) Σ_{k=1}^{K_del} Drop@k

computed for the attributed (C²) indicator and, beside it, the original indicator. Random is the
mean curve over ``random_orderings`` uniformly random orderings. Forks with the same deleted set
are computed once (rankings often share prefixes).

Forks are independent of each other: :meth:`DeletionOracle.prefetch` computes many at once -- on
``threads`` threads, so that the LLM requests of concurrent forks join the backend's common pool
of in-flight requests (a study's wall time is not the sum of per-fork latencies), or through an
``executor`` (process pool or Ray) -- with values identical to computing them one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.scenarios.base import Scenario, evaluate


@dataclass
class DeletionOracle:
    """Counterfactual forks of one run at its target step, with a cache keyed by the deleted set."""

    scenario: Scenario
    config: Any
    model_before: Any
    f: Any
    f_original: Any
    _cache: dict[frozenset[int], tuple[float, float]] = field(default_factory=dict)
    forks: int = 0
    threads: int = 1
    executor: Any = None
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    def _compute(self, key: frozenset[int]) -> tuple[float, float]:
        z, ctx = self.scenario.step_with_baseline(self.model_before, self.config, sorted(key))
        return float(evaluate(self.f, z, ctx)), float(evaluate(self.f_original, z, ctx))

    def _store(self, key: frozenset[int], val: tuple[float, float]) -> tuple[float, float]:
        with self._lock:
            if key not in self._cache:
                self._cache[key] = val
                self.forks += 1
            return self._cache[key]

    def values(self, deleted: Sequence[int]) -> tuple[float, float]:
        """(f_k, f_k original) after re-simulating t* with ``deleted`` at the baseline action."""
        key = frozenset(int(i) for i in deleted)
        val = self._cache.get(key)
        return val if val is not None else self._store(key, self._compute(key))

    def prefetch(self, sets: Iterable[Sequence[int]]) -> int:
        """Compute the forks of many deleted sets at once (threads or ``executor``); returns how many.

        Values are exactly those :meth:`values` computes one at a time (each fork starts from the
        same checkpoint and depends on nothing but its deleted set).
        """
        todo = list(dict.fromkeys(k for k in (frozenset(int(i) for i in d) for d in sets) if k not in self._cache))
        if len(todo) > 1 and self.executor is not None:
            from aumann.simulators.llm.usage import usage_of

            parts = max(1, min(len(todo), 4 * int(getattr(self.executor, "max_workers", None) or 4)))
            chunks = [todo[i::parts] for i in range(parts)]
            specs = [(self.scenario.name, self.config, self.model_before, [sorted(k) for k in c]) for c in chunks]
            acct = usage_of(self.model_before)
            for chunk, (vals, spent) in zip(chunks, self.executor.map(fork_values_task, specs)):
                for key, val in zip(chunk, vals):
                    self._store(key, val)
                if acct is not None:
                    acct.merge(spent)
        elif len(todo) > 1 and self.threads > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(self.threads, len(todo)), thread_name_prefix="aumann-fork") as pool:
                for key, val in zip(todo, pool.map(self._compute, todo)):
                    self._store(key, val)
        else:
            for key in todo:
                self._store(key, self._compute(key))
        return len(todo)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "executor")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self.executor = None

    def curve(self, order: Sequence[int], k_max: int) -> np.ndarray:
        """(k_max, 2) array of (f_k, f_k original) for k = 1 … k_max."""
        return np.array([self.values(order[:k]) for k in range(1, k_max + 1)])


def fork_values_task(spec: tuple) -> tuple[list[tuple[float, float]], Any]:
    """Executor task: the (f_k, f_k original) of several deleted sets of one checkpoint, and the LLM
    usage they cost in this worker (merged into the parent's account). Top-level, so it pickles."""
    from aumann import scenarios
    from aumann.simulators.llm.usage import Usage, usage_of

    name, config, model_before, sets = spec
    scenario = scenarios.get(name)
    f, f_orig = scenario.indicators(config)
    acct = usage_of(model_before)
    before = acct.copy() if acct is not None else None
    oracle = DeletionOracle(scenario, config, model_before, f, f_orig)
    vals = [oracle.values(d) for d in sets]
    return vals, (acct - before) if acct is not None else Usage()


def normalised_drop(f_full: float, f_k: np.ndarray) -> np.ndarray:
    """(f − f_k)/f (NaN-safe: a zero f gives NaN, reported, not hidden)."""
    if f_full == 0:
        return np.full_like(np.asarray(f_k, dtype=np.float64), np.nan)
    return (f_full - np.asarray(f_k, dtype=np.float64)) / f_full


def ranking(phi: np.ndarray, by: str = "value") -> np.ndarray:
    """Agent positions by descending φ (``"value"``: risk-raising first) or descending |φ|; ties by position."""
    key = np.abs(phi) if by == "magnitude" else np.asarray(phi)
    return np.lexsort((np.arange(key.shape[0]), -key))


def deletion_summary(oracle: DeletionOracle, f_full: tuple[float, float], order: Sequence[int], k_del: int,
                     k_drop: int) -> dict[str, Any]:
    """Deletion curve, AUC and Drop@k (smooth and original) for one ordering."""
    curve = oracle.curve(order, k_del)
    drop = normalised_drop(f_full[0], curve[:, 0])
    drop_o = normalised_drop(f_full[1], curve[:, 1])
    return {"curve": drop, "curve_original": drop_o, "deletion_auc": float(np.mean(drop)),
            "drop_at_k": float(100.0 * drop[k_drop - 1]), "deletion_auc_original": float(np.mean(drop_o)),
            "drop_at_k_original": float(100.0 * drop_o[k_drop - 1])}


def random_summary(oracle: DeletionOracle, f_full: tuple[float, float], n_agents: int, k_del: int, k_drop: int,
                   orderings: int, rng: np.random.Generator) -> dict[str, Any]:
    """The Random row: metrics of the mean curve over ``orderings`` random orderings."""
    curves, curves_o = [], []
    for _ in range(orderings):
        s = deletion_summary(oracle, f_full, rng.permutation(n_agents), k_del, k_drop)
        curves.append(s["curve"])
        curves_o.append(s["curve_original"])
    c, co = np.mean(curves, axis=0), np.mean(curves_o, axis=0)
    return {"curve": c, "curve_original": co, "deletion_auc": float(np.mean(c)),
            "drop_at_k": float(100 * c[k_drop - 1]),
            "deletion_auc_original": float(np.mean(co)), "drop_at_k_original": float(100 * co[k_drop - 1])}


__all__ = ["DeletionOracle", "deletion_summary", "fork_values_task", "normalised_drop", "random_summary", "ranking"]
