"""The Shapley family on the masked game: leave-one-out, exact Shapley and exact Banzhaf.

A semivalue of player i is a weighted mean of marginal contributions over coalitions S ∌ i:

    φ_i = Σ_{S ⊆ N∖{i}} w(|S|) · (v(S ∪ {i}) − v(S))

* Shapley:       w(s) = s! (N − s − 1)! / N!   (efficient: Σ_i φ_i = v(N) − v(∅))
* Banzhaf:       w(s) = 1 / 2^{N−1}            (symmetry, dummy, linearity; not efficient)
* leave-one-out: φ_i = v(N) − v(N ∖ {i})     (only S = N ∖ {i}; not efficient)

Exact methods enumerate all 2^N coalitions (batched; N ≤ ``max_players``, default 20). The game is
per step t the baseline-masked indicator of :mod:`aumann.attribution.games` (the same baseline as
the Aumann–Shapley path integral), or any :class:`~aumann.attribution.games.CoalitionGame` through
``method.attribute_game(game, rng=...)``.

``n_evals`` counts evaluations of v the estimator uses: LOO N + 1 per step, exact methods 2^N per
step. The f(z_t), f(z⁰_t) evaluations that fill ``Attribution.delta_v`` are diagnostics, not counted.

References: Shapley (1953); Banzhaf (1965); Wang & Jia (2023), arXiv:2205.15466.
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from aumann.attribution.device import CPU, resolve_device
from aumann.attribution.device import memory_budget as device_budget
from aumann.attribution.games import CoalitionGame, GameError, MaskedIndicatorGame
from aumann.attribution.pooled import DEFAULT_MEMORY_BUDGET, GameKernel
from aumann.attribution.problem import AttributionMethod, Problem
from aumann.attribution.result import Attribution
from aumann.checks import as_int, as_optional_bool, as_seed, user_code
from aumann.errors import IndicatorError, MethodError
from aumann.progress import progress_bar
from aumann.seeding import RNGLike, describe, spawn


@dataclass
class Estimate:
    """One game's estimate: φ (N,), standard errors (N,) or None, evaluations, notes for provenance."""

    phi: np.ndarray
    stderr: np.ndarray | None
    n_evals: int
    info: dict[str, Any] = field(default_factory=dict)


class CoalitionMethod(AttributionMethod):
    """Shared driver: one game per step, a kernel per game, an :class:`Estimate` per kernel.

    Subclasses implement :meth:`estimate`. ``fast`` picks the kernel: ``None`` (default) uses a
    structured fast path when the indicator declares one, ``False`` always evaluates v on masks,
    ``True`` requires the fast path. ``device`` (or ``attribute(..., device=)``) is where the
    running-sum kernels and batched evaluations of f run; randomness is always drawn on the host,
    so a seed gives the same permutations and samples on every device. ``memory_budget`` (bytes, an int,
    e.g. ``512 * 2**20``: the working memory of one chunk of coalitions or permutations, and the most one
    coalition may need) defaults to 256 MiB on the host, lowered to half the memory available on the
    machine, and to a share of the free memory on a GPU. Batches of coalitions are sized from the
    indicator's measured cost per coalition (:mod:`aumann.attribution.memory`: a pairwise N × N indicator
    costs N² floats each), so a memory-hungry indicator never takes the machine down through our
    batching; one coalition that alone needs more raises :class:`~aumann.errors.MemoryBudgetError`.
    """

    def __init__(self, *, fast: bool | None = None, memory_budget: int | None = None,
                 device: str | torch.device | None = None) -> None:
        self.fast = as_optional_bool(fast, "fast")
        self.requested_budget = None if memory_budget is None else as_int(memory_budget, "memory_budget (bytes)",
                                                                          minimum=2**16)
        self.device = None if device is None else resolve_device(device)

    @property
    def memory_budget(self) -> int:
        """Bytes per chunk on the host (see :meth:`budget_on` for a device)."""
        return self.budget_on(CPU)

    def budget_on(self, device: torch.device) -> int:
        return device_budget(device, self.requested_budget, DEFAULT_MEMORY_BUDGET)

    @abstractmethod
    def estimate(self, kernel: GameKernel, v0: float, vN: float, rng: np.random.Generator) -> Estimate:
        """φ (and standard errors, evaluations spent) for one step's game kernel."""

    def params(self) -> dict[str, Any]:
        return {}

    def _no_player_notes(self) -> dict[str, Any]:
        """The notes of a step with no player to value (all null): what the method records when it samples none."""
        return {"stopped": "no active player"}

    def _generators(self, rng: RNGLike, n: int) -> list[np.random.Generator]:
        """One generator per step: independent child streams of ``rng``."""
        return spawn(rng, n)

    def _run(self, game: CoalitionGame, rng: np.random.Generator,
             device: torch.device = CPU) -> tuple[Estimate, float, float]:
        # user code runs inside: the game's value function, or the indicator's pooled / agent-wise / quadratic
        # pieces on the fast paths (their exceptions name the indicator or game)
        error = IndicatorError if isinstance(game, MaskedIndicatorGame) else GameError
        with user_code(f"{'indicator' if error is IndicatorError else 'game'} {game.name!r}", error=error):
            kernel = game.kernel(self.fast, memory_budget=self.budget_on(device))
            v0, vN = kernel.ends()
            restrict = getattr(kernel, "restricted", None)
            if restrict is not None:  # the kernel knows its null players: value only the others (nulls get 0)
                sub, active = restrict()
                if sub.n < kernel.n:
                    est = self.estimate(sub, v0, vN, rng) if sub.n else \
                        Estimate(np.zeros(0), np.zeros(0), 2, self._no_player_notes())
                    phi = np.zeros(kernel.n)
                    phi[active] = est.phi
                    se = None
                    if est.stderr is not None:
                        se = np.zeros(kernel.n)
                        se[active] = est.stderr
                    est = Estimate(phi=phi, stderr=se, n_evals=est.n_evals,
                                   info={**est.info, "null_players": int(kernel.n - sub.n)})
                    est.info["path"] = kernel.kind
                    return est, v0, vN
            est = self.estimate(kernel, v0, vN, rng)
        est.info["path"] = kernel.kind
        return est, v0, vN

    def attribute(self, problem: Problem, *, rng: RNGLike = None) -> Attribution:
        """Attribute every step of ``problem`` (called by :func:`aumann.attribution.attribute`)."""
        t0 = time.perf_counter()
        if problem.per_feature:
            raise MethodError(f"{type(self).__name__} attributes to agents (coalitions of agents), not to features; "
                              "per_feature=True is available with AumannShapley()")
        T, N, _ = problem.shape
        gens = self._generators(rng, T)
        phi = np.empty((T, N))
        se = np.empty((T, N))
        ends = np.empty((T, 2))
        has_se = True
        evals = 0
        infos = []
        bar = progress_bar(problem.progress, T, f"{self.name}: steps")
        budget = self.budget_on(problem.device)
        for t in range(T):
            game = MaskedIndicatorGame(problem, t, memory_budget=budget, memory_limit=self.requested_budget)
            est, ends[t, 0], ends[t, 1] = self._run(game, gens[t], problem.device)
            if bar is not None:
                bar.advance()
            phi[t] = est.phi
            if est.stderr is None:
                has_se = False
            else:
                se[t] = est.stderr
            evals += est.n_evals
            infos.append(est.info)
        if bar is not None:
            bar.stop()
        prov = {**self.params(), "game": "baseline-masking", "per_step": _merge(infos),
                "seconds": time.perf_counter() - t0}
        # f(z_t) = v_t(N) and f(z⁰_t) = v_t(∅): the game already has them
        return problem.result(phi, method=self.name, provenance=prov, stderr=se if has_se else None,
                              n_evals=evals, satisfies_efficiency=self.satisfies_efficiency, rng=rng,
                              f_values=ends[:, 1], f_baseline=ends[:, 0])

    def attribute_game(self, game: CoalitionGame, *, rng: RNGLike = None) -> Attribution:
        """Attribute a user :class:`CoalitionGame`; the result has one step (T = 1).

        ``delta_v`` is v(N) − v(∅), ``f_values`` v(N), ``f_baseline`` v(∅); agent ids are the game's
        ``player_ids``.
        """
        as_seed(rng, "rng", error=MethodError)
        if not isinstance(game, CoalitionGame):
            raise GameError(f"attribute_game needs a CoalitionGame (wrap a function with FunctionGame(fn, "
                            f"n_players=N)); got {type(game).__name__}")
        t0 = time.perf_counter()
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # results are checked for finiteness
            est, v0, vN = self._run(game, spawn(rng, 1)[0])
        prov = {**self.params(), "game": game.name, "seed": describe(rng), **est.info,
                "seconds": time.perf_counter() - t0}
        return Attribution(
            phi=est.phi[None, :], delta_v=np.array([vN - v0]), f_values=np.array([vN]), f_baseline=np.array([v0]),
            agent_ids=np.asarray(game.player_ids), steps=np.array([0]), features=(),
            stderr=None if est.stderr is None else est.stderr[None, :], n_evals=est.n_evals,
            satisfies_efficiency=self.satisfies_efficiency, method=self.name, provenance=prov,
        )


def _merge(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-step notes as lists (a single value when every step agrees; ``None`` for a step without the note).

    Every step's keys, not the first step's: a first step with no player to sample (a network indicator's step
    where no agent moved) has no ``permutations`` or ``stopped``, and the notes of all the other steps were
    dropped with it."""
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for info in infos for k in info):
        vals = [i.get(key) for i in infos]
        out[key] = vals[0] if all(v == vals[0] for v in vals) else vals
    return out


class LeaveOneOut(CoalitionMethod):
    """φ_i = v(N) − v(N ∖ {i}); N + 1 evaluations of v per step (O(N) on pooled indicators).

    Example:
        >>> import numpy as np
        >>> from aumann.attribution import Panel, attribute, LeaveOneOut
        >>> res = attribute("lin", Panel(np.ones((4, 2))), method=LeaveOneOut())
        >>> res.phi.round(3).tolist()
        [[0.5, 0.5, 0.5, 0.5]]
    """

    name: ClassVar[str] = "leave_one_out"
    satisfies_efficiency: ClassVar[bool] = False
    exact: ClassVar[bool] = True

    def estimate(self, kernel, v0, vN, rng):
        return Estimate(phi=np.asarray(kernel.loo(vN), dtype=np.float64), stderr=None, n_evals=kernel.n + 1)

    def __repr__(self) -> str:
        return "LeaveOneOut()"


class _Enumeration(CoalitionMethod):
    def __init__(self, *, max_players: int = 20, fast: bool | None = None, memory_budget: int | None = None,
                 device: str | torch.device | None = None) -> None:
        super().__init__(fast=fast, memory_budget=memory_budget, device=device)
        self.max_players = as_int(max_players, "max_players", minimum=1, maximum=30)

    def params(self):
        return {"max_players": self.max_players}

    @abstractmethod
    def weights(self, n: int) -> np.ndarray:
        """w(s) for s = 0..n (w(n) is never used: no coalition of size n leaves a player out)."""

    def estimate(self, kernel, v0, vN, rng):
        n = kernel.n
        if n > self.max_players:
            raise MethodError(
                f"{type(self).__name__} enumerates all 2^N coalitions: N = {n} agents would need 2^{n} = "
                f"{2.0**n:.3g} evaluations per step (limit max_players={self.max_players}). Use "
                f"{'SampledShapley(permutations=m)' if self.name == 'exact_shapley' else 'SampledBanzhaf(samples=m)'}"
                " for an estimate with standard errors, or AumannShapley() (linear in N)")
        codes = np.arange(2**n, dtype=np.int64)
        bits = ((codes[:, None] >> np.arange(n)) & 1).astype(bool)  # (2^N, N)
        vals = np.empty(2**n)
        rows = max(1, self.memory_budget // (32 * n + 64))  # bits, masks, and a kernel's masked sums
        for s in range(0, 2**n, rows):
            vals[s:s + rows] = kernel.values(bits[s:s + rows])
        w = self.weights(n)[bits.sum(axis=1)]  # weight of each coalition by its size
        phi = np.empty(n)
        for i in range(n):
            without = codes[~bits[:, i]]
            # summed in sorted order: symmetric players (the same multiset of terms) get bit-identical values
            phi[i] = np.sort(w[without] * (vals[without | (1 << i)] - vals[without])).sum()
        return Estimate(phi=phi, stderr=None, n_evals=2**n)


class ExactShapley(_Enumeration):
    """Exact Shapley values by enumerating all 2^N coalitions per step (N ≤ ``max_players``, default 20).

    Example:
        >>> import numpy as np
        >>> from aumann.attribution import Panel, attribute, ExactShapley
        >>> res = attribute("pairwise", Panel(np.array([[1.0], [1.0], [2.0]])), method=ExactShapley())
        >>> [round(float(p), 6) for p in res.phi[0]]   # Appendix A: 1/6, 1/6, 2/9
        [0.166667, 0.166667, 0.222222]
    """

    name: ClassVar[str] = "exact_shapley"
    satisfies_efficiency: ClassVar[bool] = True
    exact: ClassVar[bool] = True

    def weights(self, n):
        return np.array([1.0 / (n * math.comb(n - 1, s)) for s in range(n)] + [0.0])

    def __repr__(self) -> str:
        return f"ExactShapley(max_players={self.max_players})"


class ExactBanzhaf(_Enumeration):
    """Exact Banzhaf values, φ_i = 2^{1−N} Σ_{S∌i} (v(S∪i) − v(S)), by enumeration (N ≤ ``max_players``)."""

    name: ClassVar[str] = "exact_banzhaf"
    satisfies_efficiency: ClassVar[bool] = False
    exact: ClassVar[bool] = True

    def weights(self, n):
        return np.full(n + 1, 2.0 ** (1 - n))

    def __repr__(self) -> str:
        return f"ExactBanzhaf(max_players={self.max_players})"


__all__ = ["CoalitionMethod", "Estimate", "ExactBanzhaf", "ExactShapley", "LeaveOneOut"]
