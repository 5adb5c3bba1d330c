"""Monte-Carlo Shapley and Banzhaf estimators with standard errors and stopping rules.

**Sampled Shapley** (Castro, Gómez & Tejada 2009): draw permutations π uniformly; agent i's
marginal along π is v(Pre_π(i) ∪ {i}) − v(Pre_π(i)); φ̂_i is their mean over m permutations. Every
permutation is efficient (its marginals telescope to v(N) − v(∅)), so Σ_i φ̂_i = Δv exactly.
With ``antithetic=True`` each π is paired with its reverse (a pair counts as two permutations) and
the independent units are the pair means. Standard errors: sd(units)/√(number of units) per agent.

**Sampled Banzhaf**, coalitions S drawn uniformly from 2^N (each agent in with probability ½):

* ``estimator="msr"`` (maximum sample reuse, Wang & Jia 2023): one evaluation per sample;
  φ̂_i = mean{v(S) : i ∈ S} − mean{v(S) : i ∉ S}, standard error
  sqrt(s²_in/n_in + s²_out/n_out).
* ``estimator="marginal"``: per sample, v(S ∪ {i}) − v(S ∖ {i}) for every i (N + 1 evaluations);
  φ̂_i is the mean, standard error sd/√m.

Stopping rules (checked after every round of ``round_size`` permutations or samples): the count
(``permutations`` / ``samples``), a budget ``max_evals`` of evaluations of v per step, and
``stderr_tol`` (stop once the largest per-agent standard error is below it). ``n_evals`` counts
exactly the evaluations the estimator used: Shapley m(N − 1) + 2 per step (v(∅) and v(N) are shared
by every permutation), MSR m, marginal m(N + 1).

On pooled, agent-wise and quadratic indicators the marginals come from running sums
(:mod:`aumann.attribution.pooled`), identical to plain evaluation up to rounding.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np

from aumann.attribution.pooled import DEFAULT_MEMORY_BUDGET, GameKernel
from aumann.attribution.semivalues import CoalitionMethod, Estimate
from aumann.checks import as_bool, as_choice, as_float, as_int
from aumann.errors import MethodError


class _Moments:
    """Per-agent running mean and variance of i.i.d. units (shifted sums for stability)."""

    def __init__(self) -> None:
        self.n = 0
        self.shift: np.ndarray | None = None

    def add(self, units: np.ndarray) -> None:
        if self.shift is None:
            self.shift = units[0].copy()
            self.s1 = np.zeros_like(self.shift)
            self.s2 = np.zeros_like(self.shift)
        d = units - self.shift
        self.s1 += d.sum(axis=0)
        d *= d
        self.s2 += d.sum(axis=0)
        self.n += units.shape[0]

    def ready(self) -> bool:
        return self.n >= 2

    def mean(self) -> np.ndarray:
        return self.shift + self.s1 / self.n

    def stderr(self) -> np.ndarray:
        if self.n < 2:
            return np.full_like(self.s1, np.inf)
        var = np.maximum(self.s2 - self.s1**2 / self.n, 0.0) / (self.n - 1)
        return np.sqrt(var / self.n)


def _check_stopping(count: int, max_evals: int | None, stderr_tol: float | None, round_size: int | None,
                    what: str) -> tuple[int, int | None, float | None, int | None]:
    """The stopping parameters, validated: (count, max_evals, stderr_tol, round_size)."""
    return (as_int(count, f"{what} (standard errors need two independent units)", minimum=2),
            None if max_evals is None else as_int(max_evals, "max_evals", minimum=1),
            None if stderr_tol is None else as_float(stderr_tol, "stderr_tol", minimum=0, exclusive_minimum=True),
            None if round_size is None else as_int(round_size, "round_size", minimum=1))


class SampledShapley(CoalitionMethod):
    """Permutation-sampling Shapley values with standard errors.

    Args:
        permutations: m, the number of permutations per step (a forward/reversed pair counts as two).
        antithetic: pair every permutation with its reverse (m must be even); units are pair means.
        max_evals: budget of evaluations of v per step (m(N − 1) + 2 at most); caps m.
        stderr_tol: stop a step early once every agent's standard error is below this.
        round_size: permutations per round between stopping checks (default: all m at once when
            no stderr_tol, else 32).
        fast: ``None`` auto fast path, ``False`` plain evaluation, ``True`` require the fast path.
        memory_budget: bytes of working memory per chunk of permutations.

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
                 memory_budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        super().__init__(fast=fast, memory_budget=memory_budget)
        permutations, max_evals, stderr_tol, round_size = _check_stopping(
            permutations, max_evals, stderr_tol, round_size, "permutations")
        self.antithetic = as_bool(antithetic, "antithetic")
        if self.antithetic and (permutations % 2 or permutations < 4):
            raise MethodError(f"antithetic sampling pairs each permutation with its reverse and a pair counts "
                              f"as two permutations, so permutations must be even and ≥ 4 (two pairs, for a "
                              f"standard error); got {permutations}")
        self.permutations = permutations
        self.max_evals = max_evals
        self.stderr_tol = stderr_tol
        self.round_size = round_size

    def params(self):
        return {"permutations": self.permutations, "antithetic": self.antithetic, "max_evals": self.max_evals,
                "stderr_tol": self.stderr_tol}

    def __repr__(self) -> str:
        return (f"SampledShapley(permutations={self.permutations}, antithetic={self.antithetic}, "
                f"max_evals={self.max_evals}, stderr_tol={self.stderr_tol})")

    def estimate(self, kernel: GameKernel, v0: float, vN: float, rng: np.random.Generator) -> Estimate:
        n = kernel.n
        per = 2 if self.antithetic else 1  # permutations per unit
        m = self.permutations
        if n == 1:  # a single player gets everything, no sampling needed
            return Estimate(phi=np.array([vN - v0]), stderr=np.zeros(1), n_evals=2,
                            info={"permutations": 0, "stopped": "single player"})
        if self.max_evals is not None:
            affordable = (self.max_evals - 2) // (n - 1)
            affordable -= affordable % per
            if affordable < 2 * per:
                raise MethodError(f"max_evals={self.max_evals} buys {max(affordable, 0)} permutation(s) of N = {n} "
                                  f"agents ({n - 1} evaluations each + 2); at least {2 * per} are needed for "
                                  f"standard errors, i.e. max_evals ≥ {2 * per * (n - 1) + 2}")
            m = min(m, affordable)
        units_total = m // per
        round_units = units_total if self.round_size is None and self.stderr_tol is None else \
            max(2, (self.round_size or 32) // per)
        chunk_units = max(1, kernel.chunk_permutations() // per)
        mom = _Moments()
        stopped = "permutations"
        while mom.n < units_total:
            target = min(units_total, mom.n + round_units)
            while mom.n < target:
                c = min(chunk_units, target - mom.n)
                perms = np.stack([rng.permutation(n) for _ in range(c)])
                fwd, rev = kernel.prefix_marginals(perms, reverse=self.antithetic)
                if rev is not None:
                    fwd += rev
                    fwd *= 0.5
                mom.add(fwd)
            if self.stderr_tol is not None and mom.n >= 2 and mom.stderr().max() < self.stderr_tol:
                stopped = "stderr_tol"
                break
        if stopped == "permutations" and m < self.permutations:
            stopped = "max_evals"
        used = mom.n * per
        return Estimate(phi=mom.mean(), stderr=mom.stderr(), n_evals=used * (n - 1) + 2,
                        info={"permutations": used, "stopped": stopped})


class SampledBanzhaf(CoalitionMethod):
    """Monte-Carlo Banzhaf values (maximum-sample-reuse or marginal-difference) with standard errors.

    Args:
        samples: m coalitions per step, each agent in with probability ½.
        estimator: ``"msr"`` (one evaluation per sample; default) or ``"marginal"`` (N + 1 per sample).
        max_evals: budget of evaluations of v per step; caps m.
        stderr_tol: stop a step early once every agent's standard error is below this.
        round_size: samples per round between stopping checks.
        fast: ``None`` auto fast path, ``False`` plain evaluation, ``True`` require the fast path.
        memory_budget: bytes of working memory per chunk of samples.

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
                 fast: bool | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        super().__init__(fast=fast, memory_budget=memory_budget)
        samples, max_evals, stderr_tol, round_size = _check_stopping(samples, max_evals, stderr_tol, round_size,
                                                                     "samples")
        self.estimator = as_choice(estimator, "estimator (Banzhaf: 'msr' = maximum sample reuse, 'marginal' = "
                                   "marginal differences)", ("msr", "marginal"))
        self.samples = samples
        self.max_evals = max_evals
        self.stderr_tol = stderr_tol
        self.round_size = round_size

    def params(self):
        return {"samples": self.samples, "estimator": self.estimator, "max_evals": self.max_evals,
                "stderr_tol": self.stderr_tol}

    def __repr__(self) -> str:
        return (f"SampledBanzhaf(samples={self.samples}, estimator={self.estimator!r}, "
                f"max_evals={self.max_evals}, stderr_tol={self.stderr_tol})")

    @staticmethod
    def _masks(rng: np.random.Generator, c: int, n: int) -> np.ndarray:
        nbytes = (n + 7) // 8  # one row at a time: the draws do not depend on the chunking
        rows = [np.unpackbits(np.frombuffer(rng.bytes(nbytes), dtype=np.uint8), count=n) for _ in range(c)]
        return np.stack(rows).astype(bool)

    def estimate(self, kernel: GameKernel, v0: float, vN: float, rng: np.random.Generator) -> Estimate:
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
            chunk = max(1, self.memory_budget // (24 * n))
        else:
            chunk = max(1, self.memory_budget // (64 * n * (1 if kernel.kind != "generic" else n)))
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
                    acc.add(kernel.flip_marginals(masks))
                done += c
            if self.stderr_tol is not None and acc.ready() and acc.stderr().max() < self.stderr_tol:
                stopped = "stderr_tol"
                break
        if stopped == "samples" and m < self.samples:
            stopped = "max_evals"
        if not acc.ready():
            raise MethodError(f"with {done} samples some of the N = {n} agents were in (or out of) fewer than two "
                              "sampled coalitions, so the MSR estimate or its standard error is undefined; "
                              "raise samples")
        return Estimate(phi=acc.mean(), stderr=acc.stderr(), n_evals=done * cost,
                        info={"samples": done, "stopped": stopped})


class _MSR:
    """Per-agent moments of v(S) over sampled S containing / not containing the agent."""

    def __init__(self, n: int) -> None:
        self.n_in = np.zeros(n)
        self.s_in = np.zeros(n)
        self.q_in = np.zeros(n)
        self.count = 0
        self.tot = self.tot2 = 0.0
        self.shift: float | None = None

    def add(self, masks: np.ndarray, v: np.ndarray) -> None:
        if self.shift is None:
            self.shift = float(v.mean())
        d = v - self.shift
        mf = masks.astype(np.float64)
        self.n_in += mf.sum(axis=0)
        self.s_in += d @ mf
        self.q_in += (d * d) @ mf
        self.count += len(v)
        self.tot += float(d.sum())
        self.tot2 += float((d * d).sum())

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


__all__ = ["SampledBanzhaf", "SampledShapley"]
