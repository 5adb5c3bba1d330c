"""Monte-Carlo Shapley and Banzhaf estimators with standard errors and stopping rules.

**Sampled Shapley** (Castro, Gómez & Tejada 2009): draw permutations π uniformly; agent i's
marginal along π is v(Pre_π(i) ∪ {i}) − v(Pre_π(i)); φ̂_i is their mean over m permutations. Every
permutation is efficient (its marginals telescope to v(N) − v(∅)), so Σ_i φ̂_i = Δv exactly.
With ``antithetic=True`` each π is paired with its reverse (a pair counts as two permutations) and
the independent units are the pair means. Standard errors: sd(units)/√(number of units) per agent, except that
an agent whose sampled marginals were all equal while another agent's varied (its marginal may differ only in
orderings the draws rarely produce: a unit that matters only in the grand coalition) gets at least √3 times the
step's largest standard error, the rule of three (:mod:`aumann.attribution.unseen`;
``provenance["per_step"]["stderr_unseen"]`` counts the agents raised; the estimate is unchanged). Where no agent's
marginal varied (an additive game) the standard errors stay 0: the sampled value is then exact.

**Sampled Banzhaf**, coalitions S drawn uniformly from 2^N (each agent in with probability ½):

* ``estimator="msr"`` (maximum sample reuse, Wang & Jia 2023): one evaluation per sample;
  φ̂_i = mean{v(S) : i ∈ S} − mean{v(S) : i ∉ S}, standard error
  sqrt(s²_in/n_in + s²_out/n_out).
* ``estimator="marginal"``: per sample, v(S ∪ {i}) − v(S ∖ {i}) for every i (N + 1 evaluations);
  φ̂_i is the mean, standard error sd/√m (with the same rule-of-three floor as sampled Shapley).

Stopping rules (checked after every round of ``round_size`` permutations or samples): the count
(``permutations`` / ``samples``), a budget ``max_evals`` of evaluations of v per step, and
``stderr_tol`` (stop once the largest per-agent standard error is below it). ``n_evals`` counts
exactly the evaluations the estimator used: Shapley m(N − 1) + 2 per step (v(∅) and v(N) are shared
by every permutation), MSR m, marginal m(N + 1).

On pooled, agent-wise and quadratic indicators the marginals come from running sums
(:mod:`aumann.attribution.pooled`), identical to plain evaluation up to rounding.
"""

from __future__ import annotations

import copy
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from aumann.attribution import jit_sampling
from aumann.attribution.distributed import MIN_UNITS_TO_STOP, blocked_estimate, coalition_masks
from aumann.attribution.games import MaskedIndicatorGame
from aumann.attribution.pooled import GameKernel
from aumann.attribution.problem import Problem
from aumann.attribution.result import Attribution
from aumann.attribution.semivalues import CoalitionMethod, Estimate
from aumann.attribution.semivalues import _merge as _merge_infos
from aumann.attribution.threads import background_work
from aumann.attribution.unseen import floored
from aumann.checks import as_bool, as_choice, as_float, as_int, as_torch
from aumann.errors import MethodError
from aumann.progress import progress_bar
from aumann.seeding import RNGLike, spawn


class _Moments:
    """Per-agent running mean and variance of i.i.d. units (shifted sums for stability).

    Units arrive as (c, N) float64 tensors on the kernel's device and stay there; only the final
    mean and standard error come back to the host.
    """

    def __init__(self) -> None:
        self.n = 0
        self.shift: torch.Tensor | None = None

    def add(self, units: torch.Tensor) -> None:
        if self.shift is None:
            self.shift = units[0].clone()
            self.s1 = torch.zeros_like(self.shift)
            self.s2 = torch.zeros_like(self.shift)
            self.d = torch.empty_like(self.shift)  # one scratch row (a fresh one per row cost a page-fault pass)
        if units.device.type == "cpu" and units.dtype == torch.float64 and jit_sampling.available():
            jit_sampling.moments_add(units.numpy(), self.shift.numpy(), self.s1.numpy(), self.s2.numpy())
            self.n += units.shape[0]
            return
        d = self.d
        for row in units:  # row by row: no (c, N) temporaries, two fused updates
            torch.sub(row, self.shift, out=d)
            self.s1 += d
            self.s2.addcmul_(d, d)
        self.n += units.shape[0]

    def ready(self) -> bool:
        return self.n >= 2

    def mean(self) -> np.ndarray:
        return (self.shift + self.s1 / self.n).cpu().numpy()

    def stderr(self) -> np.ndarray:
        """sd/√n per agent, raised for an agent whose units did not vary while another's did
        (:func:`~aumann.attribution.unseen.unseen_floor`: its marginal may differ on orderings not drawn)."""
        return self.stderr_raised()[0]

    def stderr_raised(self) -> tuple[np.ndarray, int]:
        """(standard errors, how many agents the unseen-ordering floor raised)."""
        if self.n < 2:
            return np.full(tuple(self.s1.shape), np.inf), 0
        var = torch.clamp(self.s2 - self.s1**2 / self.n, min=0.0) / (self.n - 1)
        se = torch.sqrt(var / self.n).cpu().numpy()
        return floored(self.mean(), torch.sqrt(var).cpu().numpy(), se, self.n)

    def max_stderr(self) -> float:
        if self.n < 2:
            return float("inf")
        return float(self.stderr().max())


class _Permutations:
    """Uniform permutations of range(n) drawn from ``rng`` one after another (``rng.permutation``),
    the next batch drawn in a background thread while the caller computes (numpy shuffles without
    the GIL). The sequence depends only on ``rng``, never on batching, on the device or on ``dtype``
    (int32 when every kernel takes it: half the memory)."""

    def __init__(self, rng: np.random.Generator, n: int, batch: int, limit: int, dtype: type = np.int64) -> None:
        self.rng, self.n, self.batch, self.left = rng, n, max(1, batch), limit
        self.dtype = np.int32 if dtype == np.int32 and n < 2**31 else np.int64
        self.buf = np.empty((0, n), dtype=self.dtype)
        self.pending: Future[np.ndarray] | None = None
        self._ahead()

    def _draw(self, c: int) -> np.ndarray:
        with background_work():  # drawn ahead: the walks of the batch before still take both cores
            out = np.empty((c, self.n), dtype=self.dtype)
            if jit_sampling.available():  # the same permutations, drawn ~2× faster (see jit_sampling)
                jit_sampling.draw_permutations(self.rng, out)
                return out
            for r in range(c):
                out[r] = self.rng.permutation(self.n)
            return out

    def _ahead(self) -> None:
        c = min(self.batch, self.left)
        if c > 0:
            self.left -= c
            self.pending = _drawer().submit(self._draw, c)

    def take(self, c: int) -> np.ndarray:
        parts = []
        while c > 0:
            if not len(self.buf):
                assert self.pending is not None, "asked for more permutations than the limit"
                self.buf = self.pending.result()
                self.pending = None
                self._ahead()
            parts.append(self.buf[:c])
            c -= len(parts[-1])
            self.buf = self.buf[len(parts[-1]):]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None


def _permutation_dtype(kernels: list[GameKernel]) -> type:
    """int32 when every kernel takes int32 permutations, else int64."""
    ok = all(np.int32 in getattr(k, "permutation_dtypes", (np.int64,)) for k in kernels)
    return np.int32 if ok else np.int64


_DRAWER: tuple[int, ThreadPoolExecutor] | None = None


def _drawer() -> ThreadPoolExecutor:
    """One background thread per process (a forked child gets a fresh one: threads do not survive fork)."""
    global _DRAWER
    if _DRAWER is None or _DRAWER[0] != os.getpid():
        _DRAWER = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="aumann-permutations"))
    return _DRAWER[1]


#: the most permutations (samples) per step a sampled estimator takes: 10⁹ draws already put the standard error
#: at 3·10⁻⁵ of the marginals' spread and take a minute at N = 2 (hours at any real N); a count such as 10**30
#: was accepted and the step never ended. For a precision rather than a count, add ``stderr_tol``.
MAX_DRAWS = 10**9


def _check_stopping(count: int, max_evals: int | None, stderr_tol: float | None, round_size: int | None,
                    what: str) -> tuple[int, int | None, float | None, int | None]:
    """The stopping parameters, validated: (count, max_evals, stderr_tol, round_size)."""
    count = as_int(count, f"{what} (standard errors need two independent units)", minimum=2)
    if count > MAX_DRAWS:
        raise MethodError(f"{what} must be at most MAX_DRAWS = 10**9 per step (a count that cannot finish); got "
                          f"{count:.3g}: for a precision rather than a count, add stderr_tol=")
    return (count,
            None if max_evals is None else as_int(max_evals, "max_evals", minimum=1),
            None if stderr_tol is None else as_float(stderr_tol, "stderr_tol", minimum=0, exclusive_minimum=True),
            None if round_size is None else as_int(round_size, "round_size", minimum=1))


def _check_block(block_size: int | None) -> int | None:
    """``block_size``: permutations (samples) per block of the blocked estimator, or ``None``."""
    return None if block_size is None else as_int(block_size, "block_size (permutations or samples per block)",
                                                  minimum=2)


def _block_param(method: CoalitionMethod) -> dict:
    return {} if method.block_size is None else {"block_size": method.block_size}


class SampledShapley(CoalitionMethod):
    """Permutation-sampling Shapley values with standard errors.

    Args:
        permutations: m, the number of permutations per step (a forward/reversed pair counts as two), 2 to
            :data:`MAX_DRAWS` (10⁹).
        antithetic: pair every permutation with its reverse (m must be even); units are pair means.
        max_evals: budget of evaluations of v per step (m(N − 1) + 2 at most); caps m.
        stderr_tol: stop a step early once every agent's standard error is below this (checked from
            :data:`MIN_UNITS_TO_STOP` units on).
        round_size: permutations per round between stopping checks (default: all m at once when
            no stderr_tol, else 32).
        fast: ``None`` auto fast path, ``False`` plain evaluation, ``True`` require the fast path.
        memory_budget: bytes (an int) of working memory per chunk of permutations, and the most one
            coalition may need (see :class:`~aumann.attribution.semivalues.CoalitionMethod`).
        common_permutations: use the same permutations for every step (common random numbers)
            instead of an independent stream per step. Each step's estimate and standard error are
            as before in distribution, but the steps are no longer independent (do not add their
            variances). The steps run in lockstep: each permutation is drawn once for all T steps
            (on the host the draw costs about as much as a step's running sums), and each step's
            numbers equal running it alone on that shared stream — null players included: a step
            whose game knows its null players (a network indicator's agents with δr = 0) samples its
            other players only, as it does alone, so steps with the same number of active players
            share the draws. Any stopping rule applies per step.
        device: torch device of the running-sum kernels (permutations are drawn on the host).
        block_size: cut each step's permutations into blocks of this many, each drawn from its own
            child stream and combined in block order (:mod:`aumann.attribution.distributed`): the
            blocks can run on an executor (``attribute(..., executor=...)``) with the same numbers
            as in one process. ``None`` (default): one sequential stream.

    Example:
        >>> import numpy as np
        >>> from aumann.attribution import Panel, attribute, SampledShapley
        >>> z = np.abs(np.random.default_rng(0).normal(size=(2, 50, 3)))
        >>> res = attribute("heat", Panel(z), method=SampledShapley(permutations=200), rng=1)
        >>> res.stderr.shape, res.n_evals == 2 * (200 * 49 + 2), res.max_efficiency_gap < 1e-12
        ((2, 50), True, True)
    """

    name: ClassVar[str] = "sampled_shapley"
    satisfies_efficiency: ClassVar[bool] = True
    exact: ClassVar[bool] = False

    def __init__(self, permutations: int = 1000, *, antithetic: bool = False, max_evals: int | None = None,
                 stderr_tol: float | None = None, round_size: int | None = None, fast: bool | None = None,
                 memory_budget: int | None = None, common_permutations: bool = False,
                 device: str | torch.device | None = None, block_size: int | None = None) -> None:
        super().__init__(fast=fast, memory_budget=memory_budget, device=device)
        permutations, max_evals, stderr_tol, round_size = _check_stopping(
            permutations, max_evals, stderr_tol, round_size, "permutations")
        self.block_size = _check_block(block_size)
        self.antithetic = as_bool(antithetic, "antithetic")
        if self.antithetic and (permutations % 2 or permutations < 4):
            raise MethodError(f"antithetic sampling pairs each permutation with its reverse and a pair counts "
                              f"as two permutations, so permutations must be even and ≥ 4 (two pairs, for a "
                              f"standard error); got {permutations}")
        self.permutations = permutations
        self.max_evals = max_evals
        self.stderr_tol = stderr_tol
        self.round_size = round_size
        self.common_permutations = as_bool(common_permutations, "common_permutations")

    def params(self):
        return {"permutations": self.permutations, "antithetic": self.antithetic, "max_evals": self.max_evals,
                "stderr_tol": self.stderr_tol, "common_permutations": self.common_permutations,
                **_block_param(self)}

    def __repr__(self) -> str:
        return (f"SampledShapley(permutations={self.permutations}, antithetic={self.antithetic}, "
                f"max_evals={self.max_evals}, stderr_tol={self.stderr_tol}, "
                f"common_permutations={self.common_permutations})")

    def _budget(self, n: int) -> int:
        """m after the ``max_evals`` cap, for N = n ≥ 2 players."""
        per = 2 if self.antithetic else 1
        m = self.permutations
        if self.max_evals is not None:
            affordable = (self.max_evals - 2) // (n - 1)
            affordable -= affordable % per
            if affordable < 2 * per:
                raise MethodError(f"max_evals={self.max_evals} buys {max(affordable, 0)} permutation(s) of N = {n} "
                                  f"agents ({n - 1} evaluations each + 2); at least {2 * per} are needed for "
                                  f"standard errors, i.e. max_evals ≥ {2 * per * (n - 1) + 2}")
            m = min(m, affordable)
        return m

    def _no_player_notes(self) -> dict[str, Any]:
        # as the lockstep run notes such a step (common_permutations), so a step alone and in lockstep agree
        return {"permutations": 0, "stopped": "no active player", "stderr_unseen": 0}

    def _generators(self, rng: RNGLike, n: int) -> list[np.random.Generator]:
        if not self.common_permutations:
            return super()._generators(rng, n)
        shared = spawn(rng, 1)[0]
        return [copy.deepcopy(shared) for _ in range(n)]  # the same stream for every step

    def attribute(self, problem: Problem, *, rng: RNGLike = None) -> Attribution:
        T, N, _ = problem.shape
        if not self.common_permutations or T == 1 or N < 2 or problem.per_feature or self.block_size is not None:
            return super().attribute(problem, rng=rng)
        return self._attribute_lockstep(problem, rng)

    def _attribute_lockstep(self, problem: Problem, rng: RNGLike) -> Attribution:
        """All steps in lockstep on one stream: each chunk of permutations is drawn once and every
        step's kernel consumes it. The numbers equal running each step alone on that stream (the
        moments add permutation by permutation, so chunking changes nothing).

        A step whose kernel knows its null players (e.g. a network indicator's agents with δr = 0) is
        sampled, as when run alone, on its active players only: steps are grouped by their number of
        active players n', and each group draws permutations of n' from its own copy of the stream
        (the draws of a step alone), so null players get exactly 0 and the others the step-alone numbers."""
        t0 = time.perf_counter()
        T, N, _ = problem.shape
        budget = self.budget_on(problem.device)
        kernels = [MaskedIndicatorGame(problem, t, memory_budget=budget, memory_limit=self.requested_budget
                                       ).kernel(self.fast, memory_budget=budget) for t in range(T)]
        ends = np.array([k.ends() for k in kernels])  # (T, 2): v(∅), v(N)
        per = 2 if self.antithetic else 1
        active: list[np.ndarray | None] = []
        played: list[GameKernel] = []
        for k in kernels:  # the kernel each step alone would sample (restricted to its non-null players)
            restrict = getattr(k, "restricted", None)
            sub, idx = restrict() if restrict is not None else (k, None)
            if idx is not None and sub.n == k.n:
                sub, idx = k, None
            played.append(sub)
            active.append(idx)
        groups: dict[int, list[int]] = {}
        for t, k in enumerate(played):
            groups.setdefault(k.n, []).append(t)
        phi, se = np.zeros((T, N)), np.zeros((T, N))
        used, stopped, unseen = [0] * T, ["permutations"] * T, [0] * T
        streams = self._generators(rng, len(groups))  # copies of one stream: a group draws as a step alone
        bar = progress_bar(problem.progress, T, f"{self.name}: steps in lockstep")
        try:
            for (n_sub, steps), stream in zip(groups.items(), streams):
                if n_sub <= 1:  # nobody to sample: no null player and one other gets everything
                    for t in steps:
                        if n_sub == 1:
                            phi[t, active[t] if active[t] is not None else 0] = ends[t, 1] - ends[t, 0]
                        stopped[t] = "single player" if n_sub == 1 else "no active player"
                else:
                    est = self._lockstep_group([played[t] for t in steps], n_sub, stream, per)
                    for t, (p, s_, k, u, why) in zip(steps, est):
                        cols = slice(None) if active[t] is None else active[t]
                        phi[t, cols], se[t, cols], used[t], stopped[t], unseen[t] = p, s_, u, why, k
                if bar is not None:
                    bar.advance(len(steps))
        finally:
            if bar is not None:
                bar.stop()
        infos = []
        for t in range(T):
            info = {"permutations": used[t], "stopped": stopped[t], "stderr_unseen": unseen[t]}
            if active[t] is not None:
                info["null_players"] = int(N - played[t].n)
            info["path"] = kernels[t].kind
            infos.append(info)
        prov = {**self.params(), "game": "baseline-masking", "per_step": _merge_infos(infos),
                "seconds": time.perf_counter() - t0}
        n_evals = sum(u * (played[t].n - 1) + 2 if played[t].n > 1 else 2 for t, u in enumerate(used))
        return problem.result(phi, method=self.name, provenance=prov, stderr=se, n_evals=n_evals,
                              satisfies_efficiency=True, rng=rng, f_values=ends[:, 1], f_baseline=ends[:, 0])

    def _lockstep_group(self, kernels: list[GameKernel], n: int, stream: np.random.Generator,
                        per: int) -> list[tuple[np.ndarray, np.ndarray, int, int, str]]:
        """Steps with n ≥ 2 players each, on one stream of permutations of n: (φ, stderr, agents the unseen floor
        raised, permutations, stop)."""
        m = self._budget(n)
        units = m // per
        round_units = units if self.round_size is None and self.stderr_tol is None else \
            max(2, (self.round_size or 32) // per)
        chunk = max(1, min(k.chunk_permutations() for k in kernels) // per)
        moms = [_Moments() for _ in kernels]
        live = list(range(len(kernels)))
        stopped = ["permutations"] * len(kernels)
        draws = _Permutations(stream, n, batch=min(chunk, units), limit=units, dtype=_permutation_dtype(kernels))
        done = 0
        try:
            while done < units and live:
                target = min(units, done + round_units)
                while done < target:
                    c = min(chunk, target - done)
                    perms = draws.take(c)
                    for j in live:
                        moms[j].add(kernels[j].units(perms, self.antithetic))
                    done += c
                if self.stderr_tol is not None:
                    for j in [j for j in live
                              if moms[j].n >= MIN_UNITS_TO_STOP and moms[j].max_stderr() < self.stderr_tol]:
                        stopped[j] = "stderr_tol"
                        live.remove(j)
        finally:
            draws.close()
        return [(mom.mean(), *mom.stderr_raised(), mom.n * per,
                 "max_evals" if why == "permutations" and m < self.permutations else why)
                for mom, why in zip(moms, stopped)]

    def estimate(self, kernel: GameKernel, v0: float, vN: float, rng: np.random.Generator) -> Estimate:
        if self.block_size is not None:  # permutation blocks (aumann.attribution.distributed)
            return blocked_estimate(self, kernel, v0, vN, rng)
        n = kernel.n
        per = 2 if self.antithetic else 1  # permutations per unit
        if n == 1:  # a single player gets everything, no sampling needed
            return Estimate(phi=np.array([vN - v0]), stderr=np.zeros(1), n_evals=2,
                            info={"permutations": 0, "stopped": "single player", "stderr_unseen": 0})
        m = self._budget(n)
        units_total = m // per
        round_units = units_total if self.round_size is None and self.stderr_tol is None else \
            max(2, (self.round_size or 32) // per)
        chunk_units = max(1, kernel.chunk_permutations() // per)
        mom = _Moments()
        stopped = "permutations"
        draws = _Permutations(rng, n, batch=min(chunk_units, units_total), limit=units_total,
                              dtype=_permutation_dtype([kernel]))
        try:
            while mom.n < units_total:
                target = min(units_total, mom.n + round_units)
                while mom.n < target:
                    c = min(chunk_units, target - mom.n)
                    mom.add(kernel.units(draws.take(c), self.antithetic))
                if self.stderr_tol is not None and mom.n >= MIN_UNITS_TO_STOP and mom.max_stderr() < self.stderr_tol:
                    stopped = "stderr_tol"
                    break
        finally:
            draws.close()
        if stopped == "permutations" and m < self.permutations:
            stopped = "max_evals"
        used = mom.n * per
        se, raised = mom.stderr_raised()
        return Estimate(phi=mom.mean(), stderr=se, n_evals=used * (n - 1) + 2,
                        info={"permutations": used, "stopped": stopped, "stderr_unseen": raised})


class SampledBanzhaf(CoalitionMethod):
    """Monte-Carlo Banzhaf values (maximum-sample-reuse or marginal-difference) with standard errors.

    Args:
        samples: m coalitions per step, each agent in with probability ½ (2 to :data:`MAX_DRAWS`, 10⁹).
        estimator: ``"msr"`` (one evaluation per sample; default) or ``"marginal"`` (N + 1 per sample).
        max_evals: budget of evaluations of v per step; caps m.
        stderr_tol: stop a step early once every agent's standard error is below this (checked from
            :data:`MIN_UNITS_TO_STOP` units on).
        round_size: samples per round between stopping checks.
        fast: ``None`` auto fast path, ``False`` plain evaluation, ``True`` require the fast path.
        memory_budget: bytes (an int) of working memory per chunk of samples, and the most one coalition
            may need (see :class:`~aumann.attribution.semivalues.CoalitionMethod`).
        block_size: samples per block of the blocked estimator (see :class:`SampledShapley`).

    Example:
        >>> import numpy as np
        >>> from aumann.attribution import Panel, attribute, SampledBanzhaf
        >>> z = np.abs(np.random.default_rng(0).normal(size=(50, 3)))
        >>> res = attribute("var", Panel(z), method=SampledBanzhaf(samples=500), rng=1)
        >>> res.n_evals, res.satisfies_efficiency
        (500, False)
    """

    name: ClassVar[str] = "sampled_banzhaf"
    satisfies_efficiency: ClassVar[bool] = False
    exact: ClassVar[bool] = False

    def __init__(self, samples: int = 1000, *, estimator: Literal["msr", "marginal"] = "msr",
                 max_evals: int | None = None, stderr_tol: float | None = None, round_size: int | None = None,
                 fast: bool | None = None, memory_budget: int | None = None,
                 device: str | torch.device | None = None, block_size: int | None = None) -> None:
        super().__init__(fast=fast, memory_budget=memory_budget, device=device)
        samples, max_evals, stderr_tol, round_size = _check_stopping(samples, max_evals, stderr_tol, round_size,
                                                                     "samples")
        self.block_size = _check_block(block_size)
        self.estimator = as_choice(estimator, "estimator (Banzhaf: 'msr' = maximum sample reuse, 'marginal' = "
                                   "marginal differences)", ("msr", "marginal"))
        self.samples = samples
        self.max_evals = max_evals
        self.stderr_tol = stderr_tol
        self.round_size = round_size

    def params(self):
        return {"samples": self.samples, "estimator": self.estimator, "max_evals": self.max_evals,
                "stderr_tol": self.stderr_tol, **_block_param(self)}

    def __repr__(self) -> str:
        return (f"SampledBanzhaf(samples={self.samples}, estimator={self.estimator!r}, "
                f"max_evals={self.max_evals}, stderr_tol={self.stderr_tol})")

    @staticmethod
    def _masks(rng: np.random.Generator, c: int, n: int) -> np.ndarray:
        return coalition_masks(rng, c, n)  # the draws do not depend on the chunking

    def estimate(self, kernel: GameKernel, v0: float, vN: float, rng: np.random.Generator) -> Estimate:
        if self.block_size is not None:  # sample blocks (aumann.attribution.distributed)
            return blocked_estimate(self, kernel, v0, vN, rng)
        n = kernel.n
        cost = 1 if self.estimator == "msr" else n + 1
        m = self.samples
        if self.max_evals is not None:
            affordable = self.max_evals // cost
            if affordable < 2:
                raise MethodError(f"max_evals={self.max_evals} buys {affordable} sample(s) with the {self.estimator!r} "
                                  f"estimator ({cost} evaluation(s) each, N = {n}); at least 2 are needed, i.e. "
                                  f"max_evals ≥ {2 * cost}")
            m = min(m, affordable)
        round_n = m if self.round_size is None and self.stderr_tol is None else max(2, self.round_size or 32)
        if self.estimator == "msr":
            chunk = max(1, self.memory_budget // (48 * n))  # masks, two masked (c, N) rows and their running sums
        else:
            chunk = max(1, self.memory_budget // kernel.flip_sample_bytes())
        done = 0
        stopped = "samples"
        acc = _MSR(n) if self.estimator == "msr" else _Moments()
        while done < m:
            target = min(m, done + round_n)
            while done < target:
                c = min(chunk, target - done)
                masks = self._masks(rng, c, n)
                if self.estimator == "msr":
                    acc.add(masks, kernel.values(masks))
                else:
                    acc.add(as_torch(kernel.flip_marginals(masks)))
                done += c
            if self.stderr_tol is not None and acc.ready() and done >= MIN_UNITS_TO_STOP \
                    and acc.stderr().max() < self.stderr_tol:
                stopped = "stderr_tol"
                break
        if stopped == "samples" and m < self.samples:
            stopped = "max_evals"
        if not acc.ready():
            raise MethodError(f"with {done} samples some of the N = {n} agents were in (or out of) fewer than two "
                              "sampled coalitions, so the MSR estimate or its standard error is undefined; "
                              "raise samples")
        se, raised = acc.stderr_raised() if isinstance(acc, _Moments) else (acc.stderr(), 0)
        return Estimate(phi=acc.mean(), stderr=se, n_evals=done * cost,
                        info={"samples": done, "stopped": stopped, "stderr_unseen": raised})


class _MSR:
    """Per-agent moments of v(S) over sampled S containing / not containing the agent.

    The sums take the samples one after another in draw order, shifted by the first value (``np.add.accumulate``
    is that sequential loop), so the numbers do not depend on how the samples were chunked (``memory_budget``):
    a chunk's mean as the shift and one matrix product per chunk moved them in the last bits."""

    def __init__(self, n: int) -> None:
        self.n_in = np.zeros(n)
        self.s_in = np.zeros(n)
        self.q_in = np.zeros(n)
        self.count = 0
        self.tot = self.tot2 = 0.0
        self.shift: float | None = None

    def add(self, masks: np.ndarray, v: np.ndarray) -> None:
        if self.shift is None:
            self.shift = float(v[0])
        d = v - self.shift
        dd = d * d
        mf = masks.astype(np.float64)
        self.n_in += mf.sum(axis=0)  # whole numbers: exact in any order
        if jit_sampling.available():  # the same bits, without the (c, N) temporaries
            jit_sampling.msr_add(np.ascontiguousarray(masks, dtype=bool), d, self.s_in, self.q_in)
        else:
            self.s_in = _running(self.s_in, d[:, None] * mf)
            self.q_in = _running(self.q_in, dd[:, None] * mf)
        self.count += len(v)
        self.tot = float(_running(np.array([self.tot]), d[:, None])[0])
        self.tot2 = float(_running(np.array([self.tot2]), dd[:, None])[0])

    def ready(self) -> bool:
        n_out = self.count - self.n_in
        return bool(self.n_in.min() >= 2 and n_out.min() >= 2) if self.count else False

    def _parts(self):
        n_out = self.count - self.n_in
        s_out, q_out = self.tot - self.s_in, self.tot2 - self.q_in
        mean_in, mean_out = self.s_in / self.n_in, s_out / n_out
        var_in = np.maximum(self.q_in - self.n_in * mean_in**2, 0) / (self.n_in - 1)
        var_out = np.maximum(q_out - n_out * mean_out**2, 0) / (n_out - 1)
        return mean_in, mean_out, var_in / self.n_in + var_out / n_out

    def mean(self) -> np.ndarray:
        mean_in, mean_out, _ = self._parts()
        return mean_in - mean_out

    def stderr(self) -> np.ndarray:
        return np.sqrt(self._parts()[2])


def _running(total: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``total`` plus the (c, N) ``rows`` added one after another (the loop ``for r in rows: total += r``)."""
    return np.add.accumulate(np.concatenate([total[None], rows]), axis=0)[-1].copy()


__all__ = ["SampledBanzhaf", "SampledShapley"]
