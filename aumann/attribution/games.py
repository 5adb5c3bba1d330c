"""Coalition games: what the Shapley-family baselines explain.

The default game is baseline masking of the engine's problem. Per step t the players are the N
agents and

    v_t(S) = f(z_t with every agent outside S set to its baseline z⁰_{i,t}),

evaluated on all N agents (agents are never removed; the scale stays N), with the same baseline and
per-step context the Aumann–Shapley path integral used. So v_t(N) − v_t(∅) = Δv_t and every method
explains the same change.

Any other game plugs in through :class:`CoalitionGame`: a batched callable ``v(masks[B, N]) -> [B]``
(boolean masks, True = member). Wrap a plain function with :class:`FunctionGame`, e.g. a game that
re-simulates a model with non-members taking a baseline action, and call
``method.attribute_game(game, rng=...)``.

Games with structure (pooled, agent-wise or quadratic indicators, see :mod:`aumann.attribution.pooled`)
hand the methods a fast kernel; ``kernel(fast=False)`` forces plain evaluation.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from aumann.attribution.indicators import aumanns_own
from aumann.attribution.pooled import (
    DEFAULT_MEMORY_BUDGET,
    AdditiveKernel,
    AgentwiseIndicator,
    GameKernel,
    GenericKernel,
    PooledRows,
    QuadraticIndicator,
    QuadraticKernel,
)
from aumann.attribution.problem import Problem
from aumann.checks import as_int, as_real_array, as_torch, user_code
from aumann.errors import AumannWarning, GameError, IndicatorError, NonFiniteGameError


class CoalitionCache:
    """The values of coalitions already computed, keyed by coalition (a ``frozenset`` of player indices).

    The one coalition store of the package (as shapiq's ``Game`` keeps its value storage): a game owns it
    (``CoalitionGame(cache=True)`` / ``FunctionGame(..., cache=True)``), and the deletion study's fork
    oracle keeps its forks in one (keyed by the deleted set), which its re-simulation game shares.
    Thread-safe; the first value stored for a key wins; ``hits`` and ``misses`` count look-ups.
    """

    def __init__(self) -> None:
        self._store: dict[frozenset[int], Any] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(members: Any) -> frozenset[int]:
        """The key of a coalition given as player indices (any iterable) or a boolean mask (N,)."""
        arr = np.asarray(members)
        if arr.dtype == bool:
            arr = np.flatnonzero(arr)
        return frozenset(int(i) for i in arr.reshape(-1))

    def get(self, key: frozenset[int], default: Any = None) -> Any:
        val = self._store.get(key, default)
        if val is default:
            self.misses += 1
        else:
            self.hits += 1
        return val

    def put(self, key: frozenset[int], value: Any) -> tuple[Any, bool]:
        """Store ``value`` under ``key`` unless a value is there; (the stored value, whether it was new)."""
        with self._lock:
            if key in self._store:
                return self._store[key], False
            self._store[key] = value
            return value, True

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def __len__(self) -> int:
        return len(self._store)

    def __getitem__(self, key: frozenset[int]) -> Any:
        return self._store[key]

    def as_dict(self) -> dict[frozenset[int], Any]:
        """A copy of what is stored."""
        return dict(self._store)

    def __getstate__(self) -> dict:
        return {"_store": self._store, "hits": self.hits, "misses": self.misses}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class CoalitionGame(ABC):
    """A cooperative game on N players, evaluated in batches.

    Subclasses implement :meth:`__call__` (``masks`` bool (B, N) → float64 (B,)); they may override
    :meth:`kernel` to offer a fast path. ``player_ids`` label the players in results. A game whose
    ``cache`` is a :class:`CoalitionCache` evaluates each coalition once (:meth:`checked` looks it up).
    """

    n_players: int
    player_ids: np.ndarray
    name: str = "game"
    row_bytes: int = 64  # working memory per evaluated coalition, for batching
    cache: CoalitionCache | None = None

    @abstractmethod
    def __call__(self, masks: np.ndarray) -> np.ndarray:
        """v(S) for a batch of coalitions: ``masks`` bool (B, N), read-only → float64 (B,)."""

    def kernel(self, fast: bool | None = None, *, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> GameKernel:
        """The primitives coalition methods use (plain evaluation unless a subclass knows better)."""
        if fast is True:
            raise GameError(f"game {self.name!r} declares no fast path (pooled, agent-wise or quadratic "
                            "indicator); use fast=None or fast=False")
        return GenericKernel(self.checked, self.n_players, row_bytes=self.row_bytes, memory_budget=memory_budget)

    def checked(self, masks: np.ndarray) -> np.ndarray:
        """``self(masks)`` with the output checked: float64 of shape (B,), finite (coalitions in the game's
        ``cache`` are looked up, the others evaluated in one batch and stored)."""
        masks = np.asarray(masks, dtype=bool)
        if masks.ndim != 2 or masks.shape[1] != self.n_players:
            raise GameError(f"coalition masks must have shape (B, N) = (B, {self.n_players}); got {masks.shape}")
        if self.cache is None:
            return self._evaluate_checked(masks)
        keys = [CoalitionCache.key(m) for m in masks]
        out = np.empty(len(keys))
        first: dict[frozenset[int], int] = {}  # each missing coalition once, even when a batch repeats it
        for j, k in enumerate(keys):
            v = self.cache.get(k)
            if v is None:
                first.setdefault(k, j)
            else:
                out[j] = v
        if first:
            vals = self._evaluate_checked(masks[list(first.values())])
            for k, v in zip(first, vals):
                self.cache.put(k, float(v))
            for j, k in enumerate(keys):
                if k in first:
                    out[j] = self.cache[k]
        return out

    def _evaluate_checked(self, masks: np.ndarray) -> np.ndarray:
        # the game sees a read-only view: the estimators read these masks again after the call (exact methods
        # index their values by them, MSR sums over them), so a game that wrote into them (m[:, 0] = True)
        # silently changed every estimate; now the write itself fails, naming the game
        view = masks.view()
        view.flags.writeable = False
        try:
            with user_code(f"game {self.name!r}", error=GameError):
                out = self(view)
        except GameError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValueError) and "read-only" in str(cause):
                raise GameError(f"game {self.name!r} wrote into the coalition masks it was given ({cause}); they "
                                "are read-only: the estimators read them again after the call. Compute on a copy "
                                "(masks.copy())") from cause
            raise
        out = as_real_array(out, f"the value of game {self.name!r}", error=GameError, dtype=np.float64)
        if out.shape != (masks.shape[0],):
            raise GameError(f"game {self.name!r} returned shape {out.shape} for {masks.shape[0]} coalitions; "
                            f"v(masks[B, N]) must return shape (B,)")
        if not np.all(np.isfinite(out)):
            bad = int(np.flatnonzero(~np.isfinite(out))[0])
            raise NonFiniteGameError(f"game {self.name!r} returned NaN/inf ({out[bad]!r}) for the coalition of "
                                     f"{int(masks[bad].sum())} of {self.n_players} players")
        return out

    def empty_value(self) -> float:
        return float(self.checked(np.zeros((1, self.n_players), dtype=bool))[0])

    def full_value(self) -> float:
        return float(self.checked(np.ones((1, self.n_players), dtype=bool))[0])


class FunctionGame(CoalitionGame):
    """A user game from a batched function ``v(masks: bool[B, N]) -> [B]`` (numpy or torch out).

    Args:
        fn: the batched value function.
        n_players: N.
        player_ids: labels of the players (default 0..N−1).
        name: a name for messages and provenance.
        cache: ``True`` (or a :class:`CoalitionCache` to share) to evaluate each coalition once — for games
            whose evaluations are expensive (a fork per coalition) and whose methods revisit coalitions.

    Example:
        >>> import numpy as np
        >>> w = np.array([1.0, 2.0, 3.0])
        >>> game = FunctionGame(lambda m: (m * w).sum(axis=1) ** 2, n_players=3)
        >>> float(game.full_value())
        36.0
    """

    def __init__(self, fn: Callable[[np.ndarray], Any], n_players: int, *,
                 player_ids: Sequence[Any] | np.ndarray | None = None, name: str | None = None,
                 cache: bool | CoalitionCache = False) -> None:
        if not callable(fn):
            raise GameError(f"a game needs a callable v(masks[B, N]) -> [B]; got {type(fn).__name__}")
        self.fn = fn
        self.n_players = as_int(n_players, "n_players (a game needs at least one player)", minimum=1,
                                error=GameError)
        try:
            self.player_ids = np.arange(self.n_players) if player_ids is None else np.asarray(player_ids)
        except (ValueError, TypeError) as exc:
            raise GameError(f"player_ids must be a flat sequence of {self.n_players} labels: {exc}") from exc
        if self.player_ids.shape != (self.n_players,):
            raise GameError(f"player_ids must have length n_players = {self.n_players}; got {self.player_ids.shape}")
        if self.player_ids.dtype == object:
            self.player_ids = self.player_ids.astype(str)
        self.name = str(name or getattr(fn, "__name__", "game"))
        self.cache = cache if isinstance(cache, CoalitionCache) else (CoalitionCache() if cache else None)

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        return self.fn(masks)


class MaskedIndicatorGame(CoalitionGame):
    """v_t(S) = f(z_t with agents outside S at the baseline z⁰_t), for step index ``t`` of a problem."""

    def __init__(self, problem: Problem, t: int, *, memory_budget: int = DEFAULT_MEMORY_BUDGET,
                 memory_limit: int | None = None) -> None:
        T, N, D = problem.shape
        t = as_int(t, "step index", error=GameError)
        if not 0 <= t < T:
            raise GameError(f"step index {t} is outside the panel's {T} steps")
        self.problem = problem
        self.t = int(t)
        self.n_players = N
        self.player_ids = problem.panel.agent_ids
        self.name = problem.f.name
        self.device = problem.device
        self.x = as_torch(np.ascontiguousarray(problem.x[t]), device=self.device)  # (N, D)
        base = problem.baseline[t if problem.baseline.shape[0] > 1 else 0]  # (N, D) or (1, D)
        # a shared baseline row stays a broadcast view (no (N, D) copy per step)
        self.b = as_torch(np.ascontiguousarray(base), device=self.device).to(self.x.dtype).expand(N, D)
        self.row_bytes = 4 * N * D * self.x.element_size()
        self.memory_budget = memory_budget
        self.memory_limit = memory_limit

    def coalition_bytes(self) -> int:
        """Working memory of one coalition's evaluation: at least four copies of the step, or what the
        indicator was measured to use (once per problem; a pairwise N × N indicator costs N² floats)."""
        return self.problem.item_bytes(static=self.row_bytes, limit=self.memory_limit)

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        B = masks.shape[0]
        out = np.empty(B, dtype=np.float64)
        # batches sized by the measured cost of a coalition (small batches need no measurement)
        step = self.problem.batch_items(B, self.memory_budget, static=self.row_bytes, limit=self.memory_limit) \
            if B > 1 else 1
        with torch.no_grad():
            for s in range(0, B, step):
                m = torch.tensor(masks[s:s + step], device=self.device)[..., None]  # (a copy: masks are read-only)
                z = torch.where(m, self.x, self.b)  # (b, N, D)
                t_idx = np.full(z.shape[0], self.t, dtype=np.int64)
                out[s:s + step] = self.problem.evaluate(z, t_idx).to(torch.float64).cpu().numpy()
        return out

    def kernel(self, fast: bool | None = None, *, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> GameKernel:
        """The step's kernel, knowing its null players (:attr:`~aumann.attribution.pooled.GameKernel.players`):
        the agents whose row equals their baseline row are in every coalition as they are out of it — every agent
        dead at t (the problem puts a dead row at its baseline) and anyone unchanged — so the coalition methods
        sample the others only (a kernel with a ``restricted`` of its own, a network indicator's, keeps it)."""
        kernel = self._kernel(fast, memory_budget)
        # only where the restricted game keeps the kernel's cost (its own _on, or the generic kernel, which evaluates
        # through values anyway): the default _on evaluates the whole game on prefix masks, which for a kernel with
        # running sums of its own (a scenario's masking_kernel: f_prop's product of means at 10⁶ agents) is O(N)
        # evaluations of O(N) each per permutation instead of one O(N) walk; such a kernel samples every agent, as
        # before (unbiased; the null players only cost work)
        if type(kernel).restricted is GameKernel.restricted and (
                type(kernel)._on is not GameKernel._on or isinstance(kernel, GenericKernel)):
            changed = (self.x != self.b.to(self.x.dtype)).any(dim=1).cpu().numpy()
            if not changed.all():
                kernel.players = np.flatnonzero(changed)
        return kernel

    def _kernel(self, fast: bool | None, memory_budget: int) -> GameKernel:
        f = self.problem.f
        custom = getattr(f, "masking_kernel", None)
        alive = self.problem.alive  # a living mask: pooled forms (and kernels taking alive=) average over the living
        if custom is not None and fast is not False:  # the indicator's own structured kernel
            # an indicator's own kernel is a host (numpy) kernel: the step's features come to the host
            if alive is None:
                return custom(_np(self.x), _np(self.b), memory_budget=memory_budget)
            if _takes_alive(custom):
                return custom(_np(self.x), _np(self.b), memory_budget=memory_budget, alive=alive[self.t])
        agentwise = isinstance(f, AgentwiseIndicator | QuadraticIndicator)
        structured = not f.uses_context and (f.pooled is not None and f.pooled.living if alive is not None else
                                             agentwise or f.pooled is not None)
        if fast is False or (fast is None and not structured):
            return GenericKernel(self.checked, self.n_players, row_bytes=self.row_bytes,
                                 memory_budget=memory_budget)
        if not structured:
            why = "it reads the per-step context" if f.uses_context else "it declares no pooled form"
            raise GameError(f"indicator {f.name!r} has no fast path ({why}); use fast=None or fast=False")
        kernel, guarded = self._structured_kernel(memory_budget)
        if not isinstance(kernel, AdditiveKernel):
            return kernel
        lost = self._check_pooled_form(kernel, trusted=not guarded)
        if lost is None:
            return kernel
        if fast is True:
            raise IndicatorError(f"indicator {f.name!r}: its pooled form loses the precision of f at step index "
                                 f"{self.t} ({lost}); use fast=None (plain evaluation there) or fast=False")
        warnings.warn(f"indicator {f.name!r}: its pooled form (running sums) loses the precision of f on this panel "
                      f"({lost}: features far from 0 next to their spread, e.g. a large offset with a baseline "
                      "near the data?); the coalition methods evaluate f on masks at such steps instead (slower, "
                      "exact)", AumannWarning, stacklevel=2)
        return GenericKernel(self.checked, self.n_players, row_bytes=self.row_bytes, memory_budget=memory_budget)

    def _structured_kernel(self, memory_budget: int, *, pooled_only: bool = False) -> tuple[GameKernel, bool]:
        """The quadratic or running-sum kernel of a structured indicator (``pooled_only``: of its pooled form) and
        whether f's per-agent functions are user code (handed copies, and their pooled form checked inside)."""
        f = self.problem.f
        alive = self.problem.alive
        x64, b64 = self.x.to(torch.float64), self.b.to(torch.float64)
        # x64 may be the panel's own memory (and b64 the caller's baseline array): a user's psi / q / s gets copies,
        # and one that writes into them is refused below, as an indicator that writes into z is
        guarded = not aumanns_own(f)
        if guarded:
            x64, b64 = x64.clone(), b64.clone()
        versions = (x64._version, b64._version)
        with torch.no_grad():
            # block updates of C u: a host kernel
            if isinstance(f, QuadraticIndicator) and alive is None and not pooled_only:
                if tuple(f.C.shape) != (self.n_players, self.n_players):
                    raise IndicatorError(f"indicator {f.name!r}: C has shape {tuple(f.C.shape)}; the panel has "
                                         f"N = {self.n_players} agents, so C must be ({self.n_players}, "
                                         f"{self.n_players})")
                q = (lambda z: f.q(z)) if f.q is not None else (lambda z: torch.zeros(z.shape[:-1], dtype=z.dtype))
                arrs = [_np(g(v)) for g in (q, f.s) for v in (x64, b64)]
                _refuse_writes(f, versions, x64, b64)
                return QuadraticKernel(q=arrs[0], q0=arrs[1], s=arrs[2], s0=arrs[3],
                                       C=f.C.to(torch.float64).numpy()), guarded
            rows = None
            if isinstance(f, AgentwiseIndicator) and alive is None and not pooled_only:
                a, b, rho = f.psi(x64), f.psi(b64), f.rho
            elif alive is None:
                n = self.n_players
                pa, pb = f.pooled.psi(x64), f.pooled.psi(b64)
                a, b, rho = pa / n, pb / n, f.pooled.rho
                rows = PooledRows(_np(pa), _np(pb), None, n)
            else:  # means over the living at n_t: dead players add nothing on either side (dummies)
                live_np = alive[self.t]
                live = as_torch(live_np).to(device=x64.device, dtype=torch.float64)[:, None]
                w = live / live.sum()
                pa, pb = f.pooled.psi(x64), f.pooled.psi(b64)
                a, b, rho = pa * w, pb * w, f.pooled.rho
                rows = PooledRows(_np(pa), _np(pb), live_np, int(live_np.sum()))
        _refuse_writes(f, versions, x64, b64)
        if a.shape != b.shape or a.ndim != 2 or a.shape[0] != self.n_players:
            raise IndicatorError(f"indicator {f.name!r}: psi must map (N, D) to (N, P); got {tuple(a.shape)}")
        product = getattr(f.pooled, "log1p_product", None) if f.pooled is not None and rho is f.pooled.rho else None
        kernel = AdditiveKernel(a=a, b=b, rho=rho, memory_budget=memory_budget, device=self.device, rows=rows,
                                log1p_product=product)
        return kernel, guarded

    def pooled_form_lost(self) -> str | None:
        """The check of f's pooled form at this step (:meth:`_check_pooled_form`), for the path integral's
        pooled-linear fast path: what the running sums got at the corners when they miss f there (None when they
        agree); a pooled form that agrees at the corners but not at the seeded coalitions between them raises."""
        kernel, guarded = self._structured_kernel(DEFAULT_MEMORY_BUDGET, pooled_only=True)
        assert isinstance(kernel, AdditiveKernel)  # pooled_only: the running sums of the pooled form
        return self._check_pooled_form(kernel, trusted=not guarded)

    def _check_pooled_form(self, kernel: AdditiveKernel, *, trusted: bool = False) -> str | None:
        """The running-sum kernel against f itself: None when it reproduces f at the two corners v(∅) and v(N) (to
        4·10⁶ ulps of the precision f and ρ compute in: 9e-10 of their scale in float64; in float32 only a total
        loss), else what it got there (the pooled form lost the precision of f: use f itself). ρ of the pooled means
        can cancel catastrophically where plain f does not: var's ρ(m) = m₂ − m₁² on features with an offset of 1e8
        and spread 1 (the mean baseline) gave f(z) = 8 for a true 2.25, and every coalition value along with it.
        (The deletion oracle's pooled forks check a user's pooled form here too.)

        Unless ``trusted`` (aumann's own pooled forms), also :data:`POOLED_CHECKS` seeded coalitions between the
        corners at one seeded step of the problem (:func:`pooled_check_step`; each agent in with probability ½,
        whatever the method's rng), one O(N) evaluation of f each (~20 ms at N = 10⁶ for var, once per problem
        rather than at every step: three more evaluations at each of T steps would have made leave-one-out several
        times slower): a user's pooled form that agrees at ∅ and N but is not f in between (ρ(m) = m² M declared
        for f = m³) gave wrong coalition values, and wrong attributions, silently.

        A point where the running sums miss f is told apart from a loss of precision by how far ρ can move there
        when its sums move by the rounding that forming them can explain (:meth:`AdditiveKernel.rounding_reach`):
        within that reach the form lost the precision of f (returned: f itself is used); beyond it, ρ(mean ψ) is
        not f. A user's form that was plainly wrong at the corners (ρ(m) = m² for f = m³: 1.77 for f's 2.36) was
        reported as a loss of precision ("features far from 0 next to their spread") and f used instead.

        Raises:
            IndicatorError: (a user's form) the running sums miss f at a checked point by more than rounding
                explains: the pooled form is not f.
        """
        if not bool(kernel.delta.any()):  # z = z⁰ on every row: every marginal is exactly 0 whatever ρ rounds
            return None
        fast = np.asarray(kernel.ends(), dtype=np.float64)  # (ρ checked there)
        with torch.no_grad():
            out = kernel.rho(torch.stack([kernel.sum_b, kernel.sum_a]))
        dtypes = [self.x.dtype] + ([out.dtype] if isinstance(out, torch.Tensor) and out.is_floating_point() else [])
        eps = max(torch.finfo(d).eps for d in dtypes)
        rtol = 4e6 * eps
        masks = np.empty((0, self.n_players), dtype=bool)
        if not trusted and self.t == pooled_check_step(self.problem.shape[0]):  # one random bit per agent, coalition
            bits = np.random.default_rng([POOLED_SEED, self.t]).integers(
                0, 256, (POOLED_CHECKS, -(-self.n_players // 8)), dtype=np.uint8)
            masks = np.unpackbits(bits, axis=1, count=self.n_players).astype(bool)
        plain = np.empty(2 + len(masks))
        with torch.no_grad():  # f at z⁰ and z: two points, as the result's f(z) would be (no coalition batching)
            z = torch.stack([self.b, self.x])
            plain[:2] = self.problem.evaluate(z, np.array([self.t, self.t])).to(torch.float64).cpu().numpy()
            for k, m in enumerate(masks):  # one point at a time: O(N·D) memory, as the corners
                # the coalition as the game makes it (torch.where), with a mask of z's shape: an (N, 1) mask
                # broadcast against the baseline's broadcast row took 35 ms at N = 10⁶, this takes 5
                full = torch.from_numpy(m).to(self.device)[:, None].expand(self.x.shape).contiguous()
                zs = torch.where(full, self.x, self.b)[None]
                plain[2 + k] = float(self.problem.evaluate(zs, np.array([self.t]))[0])
        scale = max(float(np.abs(plain).max()), abs(float(plain[1] - plain[0])))
        tol = rtol * scale + 1e-300
        inside = np.asarray(kernel.values(masks), dtype=np.float64) if len(masks) else np.empty(0)
        got = np.concatenate([fast, inside])
        off = np.abs(got - plain) > tol
        if not off.any():
            return None
        if not trusted:  # a user's form: off by more than rounding explains is a wrong form, not a lost precision
            sums = torch.cat([torch.stack([kernel.sum_b, kernel.sum_a]), kernel.sums(masks)]) if len(masks) else \
                torch.stack([kernel.sum_b, kernel.sum_a])
            reach = kernel.rounding_reach(sums, eps)
            wrong = off & (np.abs(got - plain) > np.maximum(reach, tol))
            if wrong.any():
                k = int(np.argmax(wrong))
                where = (f"v(∅) (step index {self.t}, every agent at the baseline)" if k == 0
                         else f"v(N) (step index {self.t}, every agent at z)" if k == 1
                         else f"a coalition between v(∅) and v(N) (step index {self.t}, {int(masks[k - 2].sum())} of "
                              f"{self.n_players} agents at z, the rest at the baseline)")
                ends = "" if k < 2 or off[:2].any() else "; the two ends agree"
                raise IndicatorError(
                    f"indicator {self.name!r}: its pooled form is not f: at {where} the running "
                    f"sums ρ(mean ψ) give {got[k]:.10g} and f itself {plain[k]:.10g}, {abs(got[k] - plain[k]):.3g} "
                    f"apart, where rounding the sums can move ρ by {reach[k]:.3g} at most ({int(wrong.sum())} of "
                    f"{len(got)} checked points disagree{ends}). A pooled form must give f(z) = ρ(mean_i ψ(z_i)) at "
                    "every z, not only at the ends: fix psi / rho, or drop pooled= (the methods then evaluate f "
                    "itself)")
        if off[:2].any():
            return (f"v(∅), v(N) = {fast[0]:.6g}, {fast[1]:.6g} by running sums, {plain[0]:.6g}, {plain[1]:.6g} by f "
                    "itself")
        k = 2 + int(np.argmax(off[2:]))
        return f"v(S) = {got[k]:.10g} by running sums, {plain[k]:.10g} by f itself at a seeded coalition S"


#: seeded coalitions between the corners at which a user's pooled form is checked against f (one O(N) evaluation
#: each), and the seed of the step they are drawn at (its first word; the second is the step index)
POOLED_CHECKS = 3
POOLED_SEED = 0x9E3779B9


def pooled_check_step(T: int) -> int:
    """The step index (of T) at which a user's pooled form is checked between the corners: seeded, so the same
    for every method and call on a panel of T steps."""
    return int(np.random.default_rng(POOLED_SEED).integers(T))


def _refuse_writes(f: Any, versions: tuple[int, int], x: torch.Tensor, b: torch.Tensor) -> None:
    if (x._version, b._version) != versions:
        raise IndicatorError(f"indicator {f.name!r}: its fast path's per-agent function (pooled psi, agent-wise "
                             "psi, or quadratic q / s) modified its input in place; every value computed from it "
                             "would be wrong. Compute on a new tensor (z * 2, z.clone())")


def _takes_alive(fn: Any) -> bool:
    try:
        return "alive" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).cpu().numpy()


__all__ = ["CoalitionCache", "CoalitionGame", "FunctionGame", "GameError", "MaskedIndicatorGame"]
