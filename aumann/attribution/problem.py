"""What every method explains: an indicator, a panel, and a baseline, prepared once.

:class:`Problem` resolves the baseline, holds dead rows at the baseline, evaluates the indicator in
batches with per-step context (and, for alive-aware indicators, the per-step living mask, so that
dead rows never enter f), checks what the indicator returns, and assembles the
:class:`~aumann.attribution.result.Attribution`. Methods (the path integral, the Shapley family)
only decide *where* to evaluate f and how to weigh what comes back.

Baselines z⁰ (``baseline=`` in :func:`aumann.attribution.attribute`):

* ``"zero"`` (default): z⁰ = 0; closed forms apply.
* ``"mean"``: one vector, the mean over all (live) agents and steps.
* ``"pre-event"``: each agent's features at the first step, z⁰_{i,t} = z_{i,0}.
* ``"previous"``: the previous step, z⁰_{i,t} = z_{i,t−1}, so Φ_t attributes the change at t
  (at t = 0 the baseline is z_0 itself and the attribution is zero).
* an array of shape (D,), (N, D) or (T, N, D), used as given (it is never read from the panel's rows).

Newborns and the departed. ``"pre-event"`` and ``"previous"`` read another step's row of each agent;
where that row is dead (the agent was not yet born, or had left and came back later), the baseline
never reads it. ``absent=`` (a keyword of :func:`~aumann.attribution.attribute`) picks the rule:

* ``"entry"`` (default): the agent's first living row at or after that step — the state it entered
  (or re-entered) in; an agent that never lives again takes its last living row before it. So with
  ``"pre-event"`` a newborn's baseline is its state at birth, and with ``"previous"`` an agent at the
  step of its (re-)entry is held at its own state there (φ = 0 for its arrival).
* ``"zero"``: the zero vector.
* ``"mean"``: the ``"mean"`` baseline (the mean over the living rows of every step).

Rows of agents dead at t itself take the same rule (a dead row is held at the baseline and never
read), so φ, Δv and f_values never depend on what dead rows hold, whatever the baseline.

Agents that die during a step. f(z⁰_t) is evaluated over the run's living at t, the same set as f(z_t)
(``provenance["baseline_alive"] = "run"``): an agent that died during step t is out of f at both ends, gets
φ = 0, and its death is not part of Δv_t, even where it would have lived under the baseline action. This is
the paper's path at one scale n_t (one f from z⁰ to z_t); why, and what the other definitions give, is in
docs/baselines.md, "Agents that die during a step".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from aumann.attribution.device import CPU
from aumann.attribution.evalcontext import EvalContext
from aumann.attribution.indicators import Indicator, check_output, evaluate_tensor
from aumann.attribution.memory import cache_owner, item_bytes, items_per_batch, limits, small_enough
from aumann.attribution.result import Attribution
from aumann.checks import as_real_array, as_torch
from aumann.errors import BaselineError, NoLivingAgentsError
from aumann.io import drop_resident, spilled
from aumann.panel import Panel
from aumann.seeding import RNGLike, describe

BASELINES = ("zero", "mean", "pre-event", "previous")
ABSENT = ("entry", "zero", "mean")
"""Rules for an agent whose row at the baseline's step is dead (see the module docstring)."""
BASELINE_ALIVE = "run"
"""The living set f(z⁰_t) is evaluated over: the run's at t (the same as f(z_t)), recorded in provenance wherever a
step has dead rows (see the module docstring)."""
_ALIASES = {"pre_event": "pre-event", "preevent": "pre-event", "population-mean": "mean",
            "population_mean": "mean", "prev": "previous", "previous-step": "previous", "0": "zero"}


def _living_mean(panel: Panel) -> np.ndarray:
    D = panel.shape[2]
    # everyone alive: the rows as they are (the same rows in the same order as the mask would pick; no copy of
    # the panel, 720 MB at 10⁶ × 30 × 6)
    everyone = panel.alive is None or bool(panel.alive.all())
    if spilled(panel.values) and panel.values.dtype.kind == "f":
        return _streamed_mean(panel, everyone)
    live = panel.values if everyone else panel.values[panel.alive]
    return live.reshape(-1, D).mean(axis=0)


def _streamed_mean(panel: Panel, everyone: bool) -> np.ndarray:
    """:func:`_living_mean` of a spilled panel (:func:`aumann.io.spill`) a step at a time, each step's pages
    handed back after it: the same bits as ``mean(axis=0)`` over all living rows (a float reduction over the
    outer axis adds the rows in order; the running sum is carried as the first row of the next step's), without
    the whole panel resident at once (7 GB at 10⁷ agents)."""
    values, alive = panel.values, panel.alive
    acc, count = None, 0
    for t in range(values.shape[0]):
        rows = values[t] if everyone else values[t][alive[t]]
        count += rows.shape[0]
        if acc is None:
            acc = np.add.reduce(rows, axis=0)
        else:
            acc = np.add.reduce(np.concatenate([acc[None], rows]), axis=0)
        drop_resident(values)
    return np.true_divide(acc, count, out=acc, casting="unsafe")


def _source_rows(panel: Panel, src: np.ndarray, absent: str) -> np.ndarray:
    """Rows (len(src), N, D) of the panel at steps ``src[k]`` for every agent, where a dead row is replaced by
    the ``absent`` rule (never reading a dead row)."""
    T = panel.shape[0]
    values, alive = panel.values, panel.alive
    out = values[src].copy()
    dead = ~alive[src]  # (S, N)
    if not dead.any():
        return out
    if absent == "zero":
        out[dead] = 0
        return out
    if absent == "mean":
        out[dead] = _living_mean(panel).astype(out.dtype)
        return out
    steps = np.arange(T)[:, None]
    nxt = np.where(alive, steps, T)[::-1]  # first living step ≥ s, per agent (T: none)
    nxt = np.minimum.accumulate(nxt, axis=0)[::-1]
    prv = np.maximum.accumulate(np.where(alive, steps, -1), axis=0)  # last living step ≤ s (-1: none)
    s_idx, i_idx = np.nonzero(dead)
    s = src[s_idx]
    after, before = nxt[s, i_idx], prv[s, i_idx]
    take = np.where(after < T, after, before)
    ok = take >= 0
    out[s_idx[ok], i_idx[ok]] = values[take[ok], i_idx[ok]]
    out[s_idx[~ok], i_idx[~ok]] = 0  # never alive: any value (it is dead everywhere); zero
    return out


def resolve_baseline(spec: Any, panel: Panel, absent: str = "entry") -> tuple[np.ndarray, str]:
    """The baseline as an array broadcastable to (T, N, D) (leading dims may be 1) and its label.

    ``absent``: the rule for agents whose row at the baseline's step is dead (``"entry"``, ``"zero"``,
    ``"mean"``; see the module docstring); used by ``"pre-event"`` and ``"previous"`` only.
    """
    T, N, D = panel.shape
    if absent.__class__ is not str or absent not in ABSENT:  # checked whatever the baseline: a typo is one anywhere
        raise BaselineError(f"absent must be one of {list(ABSENT)} (how an agent whose row at the baseline's step is "
                            f"dead takes its baseline); got {absent!r}")
    if spec is None or (spec.__class__ is str and spec == "zero"):
        return np.zeros((1, 1, D), dtype=panel.dtype), "zero"
    if isinstance(spec, str):
        key = _ALIASES.get(spec.lower(), spec.lower())
        if key == "zero":
            return np.zeros((1, 1, D), dtype=panel.dtype), "zero"
        if key == "mean":
            return _living_mean(panel).reshape(1, 1, D).astype(panel.dtype), "mean"
        has_dead = panel.alive is not None and not panel.alive.all()
        if key == "pre-event":
            if not has_dead:
                return panel.values[:1].copy(), "pre-event"
            return _source_rows(panel, np.array([0]), absent), "pre-event"
        if key == "previous":
            if not has_dead:
                return np.concatenate([panel.values[:1], panel.values[:-1]], axis=0), "previous"
            return _source_rows(panel, np.maximum(np.arange(T) - 1, 0), absent), "previous"
        raise BaselineError(f"unknown baseline {spec!r}; use one of {list(BASELINES)} or an array of shape "
                            f"(D,) = ({D},), (N, D) = ({N}, {D}) or (T, N, D) = ({T}, {N}, {D})")
    arr = as_real_array(_by_feature_name(spec, panel), "baseline", error=BaselineError, dtype=panel.dtype)
    if arr.shape == (D,):
        arr = arr.reshape(1, 1, D)
    elif arr.shape == (N, D):
        arr = arr[None]
    elif arr.shape != (T, N, D):
        raise BaselineError(f"baseline array of shape {arr.shape} does not fit the panel; expected (D,) = ({D},), "
                            f"(N, D) = ({N}, {D}) or (T, N, D) = ({T}, {N}, {D})")
    if not np.all(np.isfinite(arr)):
        raise BaselineError("baseline contains NaN or inf")
    label = "zero" if not np.any(arr) else f"array{tuple(arr.shape)}"
    return arr, label


def _by_feature_name(spec: Any, panel: Panel) -> Any:
    """A pandas baseline labelled by feature names (a Series such as ``df[cols].mean()``, a frame with one column per
    feature) in the panel's feature order: it was read by position, so ``df[["income", "wealth"]].mean()`` for a
    panel of (wealth, income) gave wealth the income's baseline, silently. Names that are not the panel's features
    are a :class:`~aumann.errors.BaselineError`; unnamed (0, 1, ...) labels stay positional."""
    if type(spec).__module__.split(".")[0] != "pandas":
        return spec
    import pandas as pd

    labels = spec.index if isinstance(spec, pd.Series) else getattr(spec, "columns", None)
    if labels is None or isinstance(labels, pd.RangeIndex):
        return spec
    names = [str(c) for c in labels]
    if names == list(panel.features):
        return spec
    if sorted(names) != sorted(panel.features):
        raise BaselineError(f"the baseline is labelled by {names[:10]}, which are not the panel's features "
                            f"{list(panel.features)[:10]}: give one value per feature, labelled by the panel's feature "
                            "names (or an unlabelled array in the panel's feature order)")
    order = [names.index(f) for f in panel.features]
    return spec.iloc[order] if isinstance(spec, pd.Series) else spec.iloc[:, order]


@dataclass
class Problem:
    """An indicator, a panel and a baseline, ready for a method."""

    f: Indicator
    panel: Panel
    x: np.ndarray  # (T, N, D), dead rows replaced by the baseline
    baseline: np.ndarray  # broadcastable to (T, N, D)
    baseline_label: str
    per_feature: bool = False
    progress: bool = False
    _ctx: dict[str, torch.Tensor] = field(default_factory=dict)
    alive: np.ndarray | None = None  # (T, N) living mask handed to an alive-aware f; None: all rows enter f
    device: torch.device = CPU
    absent: str | None = None  # the rule for dead source rows of "pre-event"/"previous", when it applied

    @classmethod
    def build(cls, f: Indicator, panel: Panel, baseline: Any = "zero", *, per_feature: bool = False,
              progress: bool = False, device: torch.device = CPU, absent: str = "entry") -> Problem:
        base, label = resolve_baseline(baseline, panel, absent)
        x = panel.values
        if panel.alive is not None and not panel.alive.all():
            x = np.where(panel.alive[..., None], panel.values, np.broadcast_to(base, panel.shape))
        ctx = {k: as_torch(v, device=device) for k, v in panel.context.items()} if panel.context else {}
        alive = None
        if f.accepts_alive and panel.alive is not None and not panel.alive.all():
            alive = panel.alive
            empty = np.flatnonzero(~alive.any(axis=1))
            if empty.size:
                labels = [panel.steps[t].item() if hasattr(panel.steps[t], "item") else panel.steps[t]
                          for t in empty[:5]]
                # (true of a sum over the living as of a mean: the mask is what they share, not the averaging)
                raise NoLivingAgentsError(
                    f"indicator {f.name!r} takes the alive mask (it reads the living agents only), but no agent is "
                    f"alive at step {labels[0]!r} (index {int(empty[0])}; {empty.size} such step(s): {labels}): an "
                    "alive-aware indicator is not evaluated over nobody (n_t = 0; a mean or share there is 0/0), so "
                    "such a step has no attribution; drop those steps (panel.select_steps) or use an indicator "
                    "without the alive keyword")
        applied = absent if (label in ("pre-event", "previous") and panel.alive is not None
                             and not panel.alive.all()) else None
        return cls(f=f, panel=panel, x=x, baseline=base, baseline_label=label, per_feature=per_feature,
                   progress=progress, _ctx=ctx, alive=alive, device=device, absent=applied)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.panel.shape

    @property
    def baseline_is_zero(self) -> bool:
        return self.baseline_label == "zero"

    def baseline_at(self, t: int) -> np.ndarray:
        """(N, D) baseline of step t."""
        b = self.baseline[t if self.baseline.shape[0] > 1 else 0]
        return np.broadcast_to(b, self.shape[1:])

    def baseline_full(self) -> np.ndarray:
        """(T, N, D) baseline (a broadcast view when possible)."""
        return np.broadcast_to(self.baseline, self.shape)

    def context_for(self, t_idx: np.ndarray | Sequence[int]) -> dict[str, torch.Tensor] | None:
        if not self._ctx:
            return None
        idx = as_torch(np.asarray(t_idx, dtype=np.int64), device=self.device)
        return {k: v[idx] for k, v in self._ctx.items()}

    def alive_for(self, t_idx: np.ndarray | Sequence[int]) -> torch.Tensor | None:
        """The (B, N) living mask of the steps ``t_idx`` (None when every row enters f)."""
        if self.alive is None:
            return None
        return as_torch(self.alive[np.asarray(t_idx, dtype=np.int64)]).to(self.device)

    def state(self, z: torch.Tensor, t_idx: np.ndarray | Sequence[int]) -> EvalContext:
        """The :class:`EvalContext` of a batch z (B, N, D) whose element b belongs to step ``t_idx[b]``:
        those steps' context and living mask travel with it."""
        alive = None if self.alive is None else self.alive[np.asarray(t_idx, dtype=np.int64)]
        return EvalContext(z, self.context_for(t_idx), alive, batched=True)

    def evaluate(self, z: torch.Tensor, t_idx: np.ndarray | Sequence[int]) -> torch.Tensor:
        """f on a batch z of shape (B, N, D) whose element b belongs to step ``t_idx[b]`` → (B,), checked by
        :func:`~aumann.attribution.indicators.check_output`: a float32 or float64 tensor (half precision is refused),
        finite, one value per element; an :class:`~aumann.errors.IndicatorError` names what is wrong and the steps."""
        out = evaluate_tensor(self.f, self.state(z, t_idx))

        def steps(bad: np.ndarray) -> str:  # the labels of the steps whose values are NaN/inf
            t = np.unique(np.asarray(t_idx)[bad.reshape(-1)] if bad.ndim else np.asarray(t_idx))
            return f" (steps {t.tolist()[:5]})"

        return check_output(self.f.name, out, tuple(z.shape), steps)

    def item_bytes(self, *, grad: bool = False, static: int | None = None, limit: int | None = None,
                   what: str | None = None, target: int | None = None) -> int:
        """Bytes one evaluation point (one (N, D) element of a batch) costs the indicator, measured once per
        problem on copies of the first step (with its backward pass when ``grad``); at least ``static``
        (default: four copies of a point). See :mod:`aumann.attribution.memory`.

        Raises:
            MemoryBudgetError: one point alone needs more than ``limit`` bytes (default: half the memory
                available on the machine, or the device's free memory).
        """
        _, N, D = self.shape
        dtype = torch.float32 if self.x.dtype == np.float32 else torch.float64
        point = N * D * (4 if dtype == torch.float32 else 8)
        static = 4 * point if static is None else int(static)
        limit = limits(self.device, limit)[1]  # a requested limit, lowered to what the machine can give
        x0 = as_torch(np.ascontiguousarray(self.x[0]), dtype=dtype, device=self.device)

        def run(b: int) -> None:
            z = x0.expand(b, N, D).clone()
            t_idx = np.zeros(b, dtype=np.int64)
            if not grad:
                with torch.no_grad():
                    self.evaluate(z, t_idx)
                return
            z.requires_grad_(True)
            out = self.evaluate(z, t_idx)
            if out.requires_grad:
                torch.autograd.grad(out.sum(), z, allow_unused=True)

        label = what or ("integration point (forward and backward pass)" if grad else "coalition")
        owner = cache_owner(self.f)
        key = (N, D, str(dtype), bool(grad), str(self.device), self.alive is not None, bool(self._ctx))
        return item_bytes(run, static, key=key, owner=owner, device=self.device, limit=limit, target=target,
                          what=f"{label} of indicator {self.f.name!r} (N = {N}, D = {D})")

    def batch_items(self, items: int, target: int, *, grad: bool = False, static: int | None = None,
                    limit: int | None = None) -> int:
        """How many evaluation points of the indicator one batch of ``target`` bytes takes when ``items`` are
        to be evaluated: all of them when even a quadratic-in-N cost would fit (nothing to measure), else
        ``target`` over the measured cost of one point (:meth:`item_bytes`)."""
        _, N, D = self.shape
        point = N * D * self.x.itemsize
        if small_enough(items, point, N, target):
            return max(1, items)
        return items_per_batch(self.item_bytes(grad=grad, static=static, limit=limit, target=target), target)

    def values_at(self, which: str, chunk: int) -> np.ndarray:
        """f(z_t) (``which="x"``) or f(z⁰_t) (``"baseline"``) for every step, in chunks of steps."""
        T = self.shape[0]
        out = np.empty(T, dtype=np.float64)
        src = self.x if which == "x" else self.baseline_full()
        with torch.no_grad():
            for s in range(0, T, chunk):
                idx = np.arange(s, min(T, s + chunk))
                z = as_torch(np.ascontiguousarray(src[idx]), device=self.device)
                out[idx] = self.evaluate(z, idx).double().cpu().numpy()
        return out

    def result(self, phi: np.ndarray, *, method: str, provenance: dict[str, Any],
               f_values: np.ndarray | None = None, f_baseline: np.ndarray | None = None,
               phi_features: np.ndarray | None = None, stderr: np.ndarray | None = None,
               n_evals: int | None = None, satisfies_efficiency: bool = True,
               rng: RNGLike = None, phi_sums: np.ndarray | None = None) -> Attribution:
        """Assemble the :class:`Attribution`; f(z_t), f(z⁰_t) are evaluated unless the method has them.

        ``phi_sums`` (Σ_i φ_{i,t}, when the method computed it anyway) is attached so that the
        efficiency gap and ``by_step()`` cost nothing.
        """
        if f_values is None or f_baseline is None:
            chunk = max(1, int(2**27 // max(1, self.x[0].nbytes)))
            fv = self.values_at("x", chunk) if f_values is None else np.asarray(f_values, dtype=np.float64)
            fb = self.values_at("baseline", chunk) if f_baseline is None else np.asarray(f_baseline, np.float64)
        else:
            fv = f_values if f_values.__class__ is np.ndarray and f_values.dtype == np.float64 \
                else np.asarray(f_values, dtype=np.float64)
            fb = f_baseline if f_baseline.__class__ is np.ndarray and f_baseline.dtype == np.float64 \
                else np.asarray(f_baseline, dtype=np.float64)
        if self.panel.alive is not None and not self.panel.alive.all():
            # dead rows sit at the baseline on every path and in every coalition: dummies, φ = 0 exactly
            # (a sampled estimator such as Banzhaf's MSR would otherwise report its noise for them)
            dead = ~self.panel.alive
            if np.any(np.asarray(phi)[dead]):
                phi, phi_sums = np.where(dead, 0.0, phi), None
            if stderr is not None:
                stderr = np.where(dead, 0.0, stderr)
            if phi_features is not None and np.any(phi_features[dead]):
                phi_features = np.where(dead[..., None], 0.0, phi_features)
        prov = {"method": method, "indicator": self.f.name, "baseline": self.baseline_label,
                "dtype": _name(self.panel.dtype), "seed": rng if rng is None else describe(rng),
                "device": _name(self.device), **provenance}
        if self.absent is not None:
            prov["absent"] = self.absent
        if self.panel.alive is not None and not self.panel.alive.all():
            # which living set f(z⁰_t) is evaluated over: the run's at t, as f(z_t) (docs/baselines.md, "Agents that
            # die during a step"); an agent that died during step t is out of f at both ends
            prov["baseline_alive"] = BASELINE_ALIVE
        res = Attribution(
            phi=phi if isinstance(phi, np.ndarray) else np.asarray(phi), delta_v=fv - fb, f_values=fv,
            f_baseline=fb, agent_ids=self.panel.agent_ids, steps=self.panel.steps, features=self.panel.features,
            phi_features=phi_features if self.per_feature else None, stderr=stderr, n_evals=n_evals,
            satisfies_efficiency=satisfies_efficiency, method=method, provenance=prov,
            groups=dict(self.panel.groups), phi_sums=phi_sums,
        )
        return res


_NAMES: dict[Any, str] = {}


def _name(key: np.dtype | torch.device) -> str:
    name = _NAMES.get(key)  # str(dtype) runs Python code in numpy: ~5 µs a call
    if name is None:
        name = _NAMES[key] = str(key)
    return name


class AttributionMethod(ABC):
    """An attribution method: hyperparameters in ``__init__``, one verb, declared capabilities."""

    name: ClassVar[str] = "method"
    satisfies_efficiency: ClassVar[bool] = False
    exact: ClassVar[bool] = False
    #: the torch device the method asks for (``None``: the call's ``device=``, else cpu)
    device: Any = None

    @abstractmethod
    def attribute(self, problem: Problem, *, rng: RNGLike = None) -> Attribution:
        """Attribute ``problem`` and return an :class:`Attribution`."""


__all__ = ["ABSENT", "BASELINES", "BASELINE_ALIVE", "AttributionMethod", "Problem", "resolve_baseline"]
