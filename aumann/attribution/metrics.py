"""Agreement and faithfulness metrics for attributions.

Every function accepts :class:`~aumann.attribution.result.Attribution` objects or numpy arrays. Two
Attributions are aligned by agent id (the second is reordered to the first's ids; a different set
of ids is a :class:`MetricError` naming the ids that differ). ``step`` picks one step (by position);
without it, elementwise metrics use the whole (T, N) φ and ranking metrics use Φ_i = Σ_t φ_{i,t}.

Definitions, normalisation and direction (↑ = higher means closer / more faithful):

* ``mae``                mean_i |φ̂_i − φ_i|, in the units of f; unnormalised. ↓
* ``cosine``             ⟨φ̂, φ⟩ / (‖φ̂‖ ‖φ‖) ∈ [−1, 1]; scale-free. ↑
* ``efficiency_error``   |Σ_i φ̂_{i,t} − Δv_t| per step, units of f (``relative=True``: / |Δv_t|). ↓
* ``kendall_tau``        Kendall τ-b ∈ [−1, 1] of φ̂ vs φ; with ``k``, on the reference's top-k agents
                         (largest φ, or largest |φ| with ``by="abs"``). ↑
* ``spearman``           Spearman ρ ∈ [−1, 1]. ↑
* ``topk_jaccard``       |top_k(φ̂) ∩ top_k(φ)| / |top_k(φ̂) ∪ top_k(φ)| ∈ [0, 1]. ↑ (``set_jaccard``: the same
                         index of two given sets, e.g. a judge's named agents)
* ``deletion_curve``     delete (put into the baseline state) agents in decreasing order of φ̂ and
                         record the indicator F(k) after deleting the top k. Normalised drop
                         D(k) = (F(0) − F(k)) / (F(0) − F(N)) ∈ ℝ (1 = the whole change removed).
  ``deletion_auc``       the trapezoid area under D against k/N ∈ [0, 1]. ↑ (a faithful attribution
                         removes the change with the first agents it names)
  ``drop_at_k``          D(k). ↑
* ``rank_agents``        agent positions by descending φ (``by="value"``) or descending |φ| (``by="abs"``),
                         ties broken by position — the one ordering every ranking metric uses.
* ``topk_overlap``       |top_k(φ̂) ∩ top_k(φ)| ∈ {0, …, k} (the paper's "top-10 overlap"). ↑

The faithfulness study's deletion metrics (f = the indicator before deletion, f_k = after the top-k
agents are deleted by some oracle; both in the units of f; normalised by f, not by F(0) − F(N)):

* ``relative_drop``       (f − f_k) / f for each k (NaN when f = 0: reported, not hidden).
* ``mean_relative_drop``  (1/K_del) Σ_{k=1}^{K_del} (f − f_k) / f — the ``deletion_auc`` column of
                          ``faithfulness.csv``. ↑
* ``relative_drop_at_k``  100 · (f − f_k) / f — the ``drop_at_5`` column (k = 5), in percent. ↑
* ``log_k_grid``          the k at which large-N studies also delete: 1, 3, 10, 30, …, 10⁵ (k ≤ N/2);
                          the mean relative drop over it is the ``deletion_auc_logk`` column.

A *deletion oracle* is a callable ``oracle(deleted_ids) -> float`` that puts the given agents into
their baseline state and returns the indicator; :func:`masking_oracle` builds the baseline-masking one
for an indicator and a panel (the same game the coalition methods explain); a simulator can supply one
that re-runs the model with those agents taking a baseline action.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aumann.attribution import jit_rank
from aumann.attribution.result import Attribution
from aumann.attribution.threads import run_items
from aumann.checks import as_float, as_int, as_real_array, user_code
from aumann.errors import MetricError

Scores = Attribution | np.ndarray | Sequence[float]


def _align(est: Scores, ref: Scores) -> tuple[Any, Any]:
    if isinstance(est, Attribution) and isinstance(ref, Attribution):
        a, b = np.asarray(est.agent_ids), np.asarray(ref.agent_ids)
        if est.T != ref.T:
            raise MetricError(f"the attributions have different numbers of steps: {est.T} vs {ref.T}")
        if not np.array_equal(a, b):
            sa, sb = set(a.tolist()), set(b.tolist())
            if sa != sb or len(sa) != len(a):
                only_a, only_b = sorted(map(str, sa - sb))[:5], sorted(map(str, sb - sa))[:5]
                raise MetricError(f"the attributions cover different agents: {len(a)} vs {len(b)} ids; only in "
                                  f"the first: {only_a}, only in the second: {only_b}")
            pos = {v: i for i, v in enumerate(b.tolist())}
            order = np.array([pos[v] for v in a.tolist()])
            return est.phi, ref.phi[:, order]
        return est.phi, ref.phi
    return (est.phi if isinstance(est, Attribution) else est, ref.phi if isinstance(ref, Attribution) else ref)


def _pick(x: np.ndarray, step: int | None, rank: bool, is_attr: bool) -> np.ndarray:
    if step is not None:
        if x.ndim != 2:
            raise MetricError(f"step= needs (T, N) attributions; got shape {x.shape}")
        if not -x.shape[0] <= step < x.shape[0]:
            raise MetricError(f"step {step} is outside the {x.shape[0]} steps")
        return x[step]
    if rank and x.ndim == 2:
        if is_attr:
            return x.sum(axis=0)
        raise MetricError(f"ranking metrics compare agents: pass 1-D scores (N,) or step=; got shape {x.shape}")
    return x


def _scores(x: Any, what: str) -> np.ndarray:
    """Scores as float64, finite (NaN/inf make every comparison meaningless: refused, not propagated)."""
    arr = as_real_array(x, what, error=MetricError, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0].tolist()
        raise MetricError(f"{what} holds {int((~np.isfinite(arr)).sum())} NaN/inf value(s) (first at index {bad}); "
                          "metrics compare finite attributions")
    return arr


def _pair(est: Scores, ref: Scores, step: int | None, rank: bool) -> tuple[np.ndarray, np.ndarray]:
    a, b = _align(est, ref)
    if step is not None:
        step = as_int(step, "step", error=MetricError)
    a = _pick(_scores(a, "the estimate"), step, rank, isinstance(est, Attribution))
    b = _pick(_scores(b, "the reference"), step, rank, isinstance(ref, Attribution))
    if a.shape != b.shape:
        raise MetricError(f"cannot compare attributions of shapes {a.shape} and {b.shape} (same agents needed)")
    if a.size == 0:
        raise MetricError("cannot compare empty attributions")
    return a, b


def mae(estimate: Scores, reference: Scores, *, step: int | None = None) -> float:
    """Mean absolute error over agents (and steps). Lower is better."""
    a, b = _pair(estimate, reference, step, rank=False)
    return float(np.mean(np.abs(a - b)))


def cosine(estimate: Scores, reference: Scores, *, step: int | None = None) -> float:
    """Cosine similarity of the flattened attribution vectors, in [−1, 1]. Higher is better."""
    a, b = _pair(estimate, reference, step, rank=False)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        raise MetricError("cosine similarity is undefined for an all-zero attribution")
    return float(np.dot(a.ravel(), b.ravel()) / (na * nb))


def efficiency_error(attribution: Attribution | np.ndarray, delta_v: np.ndarray | float | None = None, *,
                     relative: bool = False) -> np.ndarray:
    """Per-step |Σ_i φ_{i,t} − Δv_t| (÷ |Δv_t| with ``relative``). Lower is better.

    Args:
        attribution: an :class:`Attribution`, or φ as (N,) or (T, N) with ``delta_v`` given.
        delta_v: Δv_t (scalar or (T,)); taken from the Attribution when omitted.
        relative: divide by |Δv_t|.
    """
    if isinstance(attribution, Attribution):
        phi = attribution.phi
        dv = attribution.delta_v if delta_v is None else np.atleast_1d(_scores(delta_v, "delta_v"))
    else:
        if delta_v is None:
            raise MetricError("efficiency_error on an array needs delta_v")
        phi = np.atleast_2d(_scores(attribution, "phi"))
        dv = np.atleast_1d(_scores(delta_v, "delta_v"))
    if dv.shape != (phi.shape[0],):
        raise MetricError(f"delta_v must have one value per step ({phi.shape[0]}); got shape {dv.shape}")
    err = np.abs(phi.sum(axis=1) - dv)
    return err / np.maximum(np.abs(dv), np.finfo(np.float64).tiny) if relative else err


RANK_BY = ("value", "abs")


def rank_agents(scores: np.ndarray, by: str = "value", *, top: int | None = None) -> np.ndarray:
    """Agent positions in decreasing order of ``scores`` (``by="value"``: who pushed f up first) or of
    ``|scores|`` (``by="abs"``: largest effect either way first); ties keep position order. With ``top``:
    the first ``top`` of that order only (:func:`largest_first`: no sort of all N).

    >>> rank_agents(np.array([0.1, -0.5, 0.3])).tolist(), rank_agents(np.array([0.1, -0.5, 0.3]), "abs").tolist()
    ([2, 0, 1], [1, 2, 0])
    """
    if by not in RANK_BY:
        raise MetricError(f"by must be 'value' or 'abs'; got {by!r}")
    x = _scores(scores, "scores")
    if x.ndim != 1:
        raise MetricError(f"rank_agents takes one score per agent (N,); got shape {x.shape}")
    key = np.abs(x) if by == "abs" else x
    if top is not None:
        top = as_int(top, "top", minimum=0, error=MetricError)
        if top < x.size:
            return largest_first(key, top) if top else np.zeros(0, dtype=np.intp)
    return np.argsort(-key, kind="stable")


def _top(x: np.ndarray, k: int, by: str) -> np.ndarray:
    if by not in RANK_BY:
        raise MetricError(f"by must be 'value' or 'abs'; got {by!r}")
    k = as_int(k, "k", error=MetricError)
    if not 1 <= k <= x.size:
        raise MetricError(f"k must be between 1 and the number of agents ({x.size}); got {k}")
    x = _scores(x, "scores")
    if x.ndim != 1:
        raise MetricError(f"top-k takes one score per agent (N,); got shape {x.shape}")
    return largest_first(np.abs(x) if by == "abs" else x, k)


def largest_first(key: np.ndarray, k: int) -> np.ndarray:
    """``np.argsort(-key, kind="stable")[:k]`` — the positions of the k largest keys, largest first, ties in
    position order — without sorting all N: a partition finds the k-th largest, the keys above it and the
    first of those equal to it make the k, and only they are sorted (at 10⁶ agents and k = 10 about 20× less
    work than the full sort). Non-finite keys take the full sort."""
    key = np.asarray(key)
    n = key.shape[0]
    if k >= n or n < 4096 or 8 * k > n:
        return np.argsort(-key, kind="stable")[:k]
    neg = -key
    kth = np.partition(neg, k - 1)[k - 1]
    if not np.isfinite(kth) or not np.isfinite(neg).all():
        return np.argsort(-key, kind="stable")[:k]
    above = np.flatnonzero(neg < kth)
    tied = np.flatnonzero(neg == kth)[: k - above.size]
    chosen = np.sort(np.concatenate([above, tied]))
    return chosen[np.argsort(neg[chosen], kind="stable")]


#: scores closer than this share of the largest |score| are ties for rank agreement (round-off between
#: agents that are tied in exact arithmetic, e.g. identical agents or dead rows, must not rank them)
TIE_RTOL = 1e-12


_THREADED_TAU = 1 << 16  # agents from which τ's two tie-rank sorts run on two threads


def _tie_runs(x: np.ndarray, rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """(the stable sort order of ``x`` (1-D float64, ≥ 2 values), the tie run of each sorted position): runs
    are numbered 0, 1, … from the lowest; a value within ``rtol`` · max|x| of the one before it in sorted
    order is in its run."""
    order = np.argsort(x, kind="stable")
    srt = x[order]
    new = np.ones(x.size, dtype=bool)
    new[1:] = np.diff(srt) > rtol * float(np.max(np.abs(srt)))
    return order, np.cumsum(new) - 1


def _dense_runs(x: np.ndarray, rtol: float) -> np.ndarray:
    """Each agent's tie run (:func:`_tie_runs`), in agent order: int32 (int64 from 2³¹ agents)."""
    order, run = _tie_runs(x, rtol)
    out = np.empty(x.size, dtype=np.int32 if x.size < 2**31 else np.int64)
    out[order] = run
    return out


def _dense_runs_kept(x: np.ndarray, rtol: float) -> np.ndarray:
    """:func:`_dense_runs`, kept for the last few score vectors of 2¹⁶+ agents (keyed by a SHA-1 of their bytes):
    a study compares the same φ with several others (each row with the reference, every pair of the
    ablations' baselines), and at 10⁶ agents a vector's stable sort costs ~0.2 s against ~5 ms for its hash.
    Callers must not write into the result."""
    if x.size < _KEEP_RUNS_FROM:
        return _dense_runs(x, rtol)
    x = np.ascontiguousarray(x, dtype=np.float64)
    key = (hashlib.sha1(memoryview(x).cast("B")).digest(), x.size, float(rtol))
    with _RUNS_LOCK:
        hit = _RUNS.get(key)
        if hit is not None:
            _RUNS.move_to_end(key)
            return hit
    out = _dense_runs(x, rtol)
    with _RUNS_LOCK:
        _RUNS[key] = out
        while len(_RUNS) > _RUNS_KEPT:
            _RUNS.popitem(last=False)
    return out


_KEEP_RUNS_FROM = 1 << 16
_RUNS_KEPT = 6
_RUNS: OrderedDict[tuple, np.ndarray] = OrderedDict()
_RUNS_LOCK = threading.Lock()


def tie_ranks(x: np.ndarray, rtol: float = TIE_RTOL) -> np.ndarray:
    """Average ranks of ``x`` with values within ``rtol`` · max|x| of their neighbour in sorted order tied."""
    x = np.asarray(x, dtype=np.float64)
    if x.size < 2:
        return np.ones_like(x)
    order, run = _tie_runs(x, rtol)  # the run (group of ties) of each sorted position
    pos = np.arange(1, x.size + 1, dtype=np.float64)
    mean_rank = np.bincount(run, weights=pos) / np.bincount(run)
    out = np.empty(x.size)
    out[order] = mean_rank[run]
    return out


def kendall_tau(estimate: Scores, reference: Scores, *, k: int | None = None, by: str = "value",
                step: int | None = None, tie_rtol: float = TIE_RTOL) -> float:
    """Kendall τ-b of the estimate against the reference, in [−1, 1]; higher is better.

    Tie-aware: τ-b corrects for ties on either side, and scores within ``tie_rtol`` of the largest
    |score| of their side are ties (round-off between agents that are equal in exact arithmetic does
    not rank them; ``tie_rtol=0`` compares the raw floats). ``nan`` when either side is constant.
    With ``k``, τ is computed on the reference's top-k agents only (Appendix D's top-k τ).
    """
    from scipy.stats import kendalltau

    a, b = _pair(estimate, reference, step, rank=True)
    if k is not None:
        k = as_int(k, "k", error=MetricError)
        if k < 2:
            raise MetricError(f"top-k Kendall τ needs k ≥ 2; got {k}")
        idx = _top(b, k, by)
        a, b = a[idx], b[idx]
    tie_rtol = as_float(tie_rtol, "tie_rtol", minimum=0, error=MetricError)
    if tie_rtol > 0 and a.ndim == 1 and a.size >= _COMPILED_TAU and jit_rank.available():
        return _tau_b_runs(a, b, tie_rtol)
    if tie_rtol > 0:  # the two sides' ranks on two threads where a core is idle (numpy's sorts drop the GIL)
        a, b = run_items(lambda x: tie_ranks(x, tie_rtol), [a, b], work=a.size, threshold=_THREADED_TAU)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(kendalltau(a, b).statistic)


_COMPILED_TAU = 1 << 12  # agents from which τ-b is counted by the compiled kernel (:mod:`~aumann.attribution.jit_rank`)


def _tau_b_runs(a: np.ndarray, b: np.ndarray, tie_rtol: float) -> float:
    """:func:`kendall_tau`'s τ-b of two 1-D score vectors (``tie_rtol`` > 0) from their tie runs: the same
    float as ``scipy.stats.kendalltau`` of their :func:`tie_ranks`. Its dense ranks are these runs (runs are
    disjoint ranges of sorted positions, so their average ranks differ and keep the runs' order), and
    τ-b = (tot − ties_a − ties_b + ties_both − 2 · discordant) / √(tot − ties_a) / √(tot − ties_b) is formed
    from the same integers by the same float operations."""
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    ra, rb = run_items(lambda x: _dense_runs_kept(x, tie_rtol), [xa, xb], work=xa.size, threshold=_THREADED_TAU)
    na, nb = int(ra.max()) + 1, int(rb.max()) + 1
    if na == 1 or nb == 1:  # one side constant (every score tied): τ is undefined
        return math.nan

    def ties(runs: np.ndarray) -> int:
        cnt = np.bincount(runs).astype(np.int64, copy=False)
        return int((cnt * (cnt - 1) // 2).sum())

    size = xa.size
    tot = (size * (size - 1)) // 2
    xtie, ytie = ties(ra), ties(rb)
    dis, ntie = jit_rank.tau_counts(ra, rb, na, nb)
    con_minus_dis = tot - xtie - ytie + ntie - 2 * dis
    tau = con_minus_dis / np.sqrt(tot - xtie) / np.sqrt(tot - ytie)
    return float(np.minimum(1.0, max(-1.0, tau)))


def relative_gap(value: np.ndarray, reference: np.ndarray, *, rtol: float = 1e-9) -> tuple[float, int]:
    """(max |value − reference| / |reference| over the entries where the reference is not ~0, how many were
    left out): entries with |reference| ≤ ``rtol`` · max(|value|, |reference|) have no meaningful relative
    gap (a tiny absolute gap over an original of 0 read 1.4e+10); ``nan`` when every entry is left out."""
    v = as_real_array(value, "value", error=MetricError, dtype=np.float64).reshape(-1)
    r = as_real_array(reference, "reference", error=MetricError, dtype=np.float64).reshape(-1)
    if v.shape != r.shape:
        raise MetricError(f"relative_gap needs equal shapes; got {v.shape} and {r.shape}")
    scale = max(float(np.max(np.abs(v), initial=0.0)), float(np.max(np.abs(r), initial=0.0)))
    ok = np.abs(r) > rtol * scale
    if not ok.any():
        return math.nan, int(r.size)
    return float(np.max(np.abs(v[ok] - r[ok]) / np.abs(r[ok]))), int((~ok).sum())


def spearman(estimate: Scores, reference: Scores, *, step: int | None = None) -> float:
    """Spearman rank correlation, in [−1, 1]; higher is better. ``nan`` when either side is constant
    (the correlation is undefined), as for :func:`kendall_tau` — without scipy's warning."""
    from scipy.stats import spearmanr

    a, b = _pair(estimate, reference, step, rank=True)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(spearmanr(a, b).statistic)


def topk_jaccard(estimate: Scores, reference: Scores, k: int, *, by: str = "value",
                 step: int | None = None, tie_rtol: float = TIE_RTOL) -> float:
    """|top_k(est) ∩ top_k(ref)| / |top_k(est) ∪ top_k(ref)|, in [0, 1]; higher is better.

    ``nan`` when either side's scores (``|scores|`` with ``by="abs"``) all tie within ``tie_rtol`` · their
    largest and k < N, as :func:`kendall_tau` is then: such a side has no top k (a constant indicator, Δv = 0,
    gives φ = 0 everywhere), and the index would measure the tie-break (position order), not agreement — two
    all-zero attributions read 1.0. With k = N both top-k are every agent: 1.0."""
    a, b = _pair(estimate, reference, step, rank=True)
    top_a, top_b = _top(a, k, by), _top(b, k, by)
    tie_rtol = as_float(tie_rtol, "tie_rtol", minimum=0, error=MetricError)
    if k < a.size and (_all_tied(np.abs(a) if by == "abs" else a, tie_rtol)
                       or _all_tied(np.abs(b) if by == "abs" else b, tie_rtol)):
        return math.nan
    return set_jaccard(top_a, top_b)


def _all_tied(x: np.ndarray, rtol: float) -> bool:
    """Every score in one tie run (:func:`_tie_runs`: each within ``rtol`` · max|x| of the next in sorted order);
    the sort only where the spread alone does not decide."""
    scale = rtol * float(np.max(np.abs(x)))
    spread = float(np.ptp(x))
    if spread <= scale:
        return True
    if spread > (x.size - 1) * scale:
        return False
    return bool(np.all(np.diff(np.sort(x)) <= scale))


def set_jaccard(a: Iterable[Any], b: Iterable[Any]) -> float:
    """|A ∩ B| / |A ∪ B| of two collections of agents (e.g. two top-k lists), in [0, 1]; ``nan`` when both
    are empty. The one Jaccard index: :func:`topk_jaccard` is it on the top-k of two attributions."""
    sa = {x.item() if hasattr(x, "item") else x for x in a}
    sb = {x.item() if hasattr(x, "item") else x for x in b}
    union = sa | sb
    return len(sa & sb) / len(union) if union else math.nan


def topk_overlap(estimate: Scores, reference: Scores, k: int, *, by: str = "value",
                 step: int | None = None) -> int:
    """|top_k(est) ∩ top_k(ref)|, an integer in [0, k] (the paper's "top-10 overlap"); higher is better."""
    a, b = _pair(estimate, reference, step, rank=True)
    return len(set(_top(a, k, by).tolist()) & set(_top(b, k, by).tolist()))


# ---------------------------------------------------------------------- the study's deletion metrics
def log_k_grid(n: int, top: int = 100_000) -> list[int]:
    """The log-spaced deletion grid k = 1, 3, 10, 30, 100, … up to min(``top``, N/2) (at least [1])."""
    ks: list[int] = []
    e = 0
    while True:
        for m in (1, 3):
            k = m * 10**e
            if k > min(top, max(1, n // 2)):
                return ks or [1]
            ks.append(k)
        e += 1


def relative_drop(f: float, f_k: np.ndarray | Sequence[float]) -> np.ndarray:
    """(f − f_k) / f for each entry of ``f_k`` (NaN where f = 0: a zero indicator cannot be normalised,
    and the tables report that instead of hiding it)."""
    fk = as_real_array(f_k, "f_k", error=MetricError, dtype=np.float64)
    f = as_float(f, "f", finite=False, error=MetricError)
    if f == 0 or not np.isfinite(f):
        return np.full_like(fk, np.nan)
    return (float(f) - fk) / float(f)


def mean_relative_drop(f: float, f_k: np.ndarray | Sequence[float]) -> float:
    """(1/K) Σ_{k=1}^{K} (f − f_k) / f over the K = len(f_k) deletion depths k = 1 … K (f_k: the
    indicator after the top-k agents are deleted). The ``deletion_auc`` column of the study."""
    fk = as_real_array(f_k, "f_k", error=MetricError, dtype=np.float64)
    if fk.ndim != 1 or fk.size == 0:
        raise MetricError(f"mean_relative_drop needs f_k for k = 1 … K as a non-empty 1-D array; got shape {fk.shape}")
    return float(np.mean(relative_drop(f, fk)))


def relative_drop_at_k(f: float, f_k: np.ndarray | Sequence[float], k: int) -> float:
    """100 · (f − f_k) / f in percent, with ``f_k[k − 1]`` the indicator after deleting the top k agents.
    The ``drop_at_5`` column of the study (k = 5)."""
    fk = as_real_array(f_k, "f_k", error=MetricError, dtype=np.float64)
    k = as_int(k, "k", error=MetricError)
    if fk.ndim != 1 or not 1 <= k <= fk.size:
        raise MetricError(f"k must be between 1 and the deletion depth {fk.size}; got {k}")
    return float(100.0 * relative_drop(f, fk[k - 1 : k])[0])


@dataclass(frozen=True)
class DeletionCurve:
    """Indicator after deleting the top-k agents, for each k in ``ks`` (0 and N included).

    Attributes:
        ks: numbers of deleted agents (increasing, from 0 to N).
        values: F(k), the oracle's indicator after deleting the top k.
        drop: D(k) = (F(0) − F(k)) / (F(0) − F(N)).
        auc: trapezoid area under D against k/N. Higher is more faithful.
    """

    ks: np.ndarray
    values: np.ndarray
    drop: np.ndarray
    auc: float

    def drop_at(self, k: int) -> float:
        hit = np.flatnonzero(self.ks == k)
        if not hit.size:
            raise MetricError(f"k = {k} is not on this curve; its ks are {self.ks.tolist()[:10]}...")
        return float(self.drop[hit[0]])


def _scores_and_ids(scores: Scores, step: int | None) -> tuple[np.ndarray, np.ndarray]:
    if step is not None:
        step = as_int(step, "step", error=MetricError)
    if isinstance(scores, Attribution):
        return _pick(scores.phi, step, True, True), np.asarray(scores.agent_ids)
    x = _pick(_scores(scores, "scores"), step, True, False)
    return x, np.arange(x.size)


def deletion_curve(scores: Scores, oracle: Callable[[np.ndarray], float], *, ks: Sequence[int] | None = None,
                   step: int | None = None) -> DeletionCurve:
    """Delete agents in decreasing order of ``scores`` and record the indicator.

    Args:
        scores: an Attribution (agent ids are passed to the oracle) or (N,) scores (positions are passed).
        oracle: ``oracle(deleted_ids) -> float``: the indicator with those agents in the baseline state.
        ks: numbers of agents to delete (default: about 20 evenly spaced values); 0 and N are added.
        step: one step of the attribution (default Φ_i = Σ_t φ_{i,t}).
    """
    x, ids = _scores_and_ids(scores, step)
    n = x.size
    if ks is None:
        grid = np.unique(np.linspace(0, n, min(n, 20) + 1).round().astype(int))
    else:  # each k a whole number of agents: astype(int) made 2.7 the curve at 2 and NaN a point at k = -2⁶³
        if isinstance(ks, str | bytes) or np.ndim(ks) != 1:
            raise MetricError(f"ks must be a 1-D sequence of agent counts; got {ks!r}")
        grid = np.array([as_int(k, "ks (numbers of agents to delete)", error=MetricError) for k in ks], dtype=np.int64)
    if grid.size and (grid.min() < 0 or grid.max() > n):
        raise MetricError(f"ks must lie between 0 and N = {n}; got {grid.min()}..{grid.max()}")
    grid = np.unique(np.concatenate([[0, n], grid]))
    order = ids[rank_agents(x)]
    with user_code("the deletion oracle", error=MetricError):
        values = np.array([float(oracle(order[:k])) for k in grid])
    if not np.all(np.isfinite(values)):
        k_bad = int(grid[np.flatnonzero(~np.isfinite(values))[0]])
        raise MetricError(f"the deletion oracle returned NaN/inf after deleting the top {k_bad} agent(s)")
    span = values[0] - values[-1]
    if span == 0:
        raise MetricError("deleting every agent does not change the indicator (F(0) = F(N)); the deletion curve "
                          "cannot be normalised")
    drop = (values[0] - values) / span
    xs = grid / n
    auc = float(np.sum((drop[1:] + drop[:-1]) * np.diff(xs)) / 2)
    return DeletionCurve(ks=grid, values=values, drop=drop, auc=auc)


def deletion_auc(scores: Scores, oracle: Callable[[np.ndarray], float], *, ks: Sequence[int] | None = None,
                 step: int | None = None) -> float:
    """Area under the normalised deletion drop curve (see :func:`deletion_curve`). Higher is better."""
    return deletion_curve(scores, oracle, ks=ks, step=step).auc


def drop_at_k(scores: Scores, oracle: Callable[[np.ndarray], float], k: int, *, step: int | None = None) -> float:
    """D(k): the share of the change F(0) − F(N) removed by deleting the top-k agents. Higher is better."""
    return deletion_curve(scores, oracle, ks=[k], step=step).drop_at(k)


def masking_oracle(f: Any, panel: Any, *, step: int = 0, baseline: Any = "zero") -> Callable[[np.ndarray], float]:
    """The baseline-masking deletion oracle of step ``step``: F(deleted) = v_t(N ∖ deleted), the masking
    game's kernel curve (:meth:`~aumann.attribution.pooled.GameKernel.curve`: running sums for pooled
    indicators, over the living at n_t when the step has dead rows).

    Deleted agents are given by id (the panel's ``agent_ids``).
    """
    from aumann.attribution.games import MaskedIndicatorGame
    from aumann.attribution.indicators import as_indicator
    from aumann.attribution.problem import Problem
    from aumann.panel import Panel

    panel = panel if isinstance(panel, Panel) else Panel(panel)
    kernel = MaskedIndicatorGame(Problem.build(as_indicator(f), panel, baseline), step).kernel()

    def oracle(deleted: np.ndarray) -> float:
        # (the ids as given: np.asarray made text of [1, "2"], and the number 1 then deleted the agent "1")
        ids = deleted if isinstance(deleted, np.ndarray) else list(deleted)
        pos = panel.agent_index(ids) if len(ids) else np.zeros(0, dtype=np.int64)
        pos = np.unique(np.atleast_1d(np.asarray(pos, dtype=np.int64)))  # a set: repeats delete once
        return float(kernel.curve(pos, [pos.size])[0])

    return oracle


__all__ = [
    "RANK_BY",
    "TIE_RTOL",
    "DeletionCurve",
    "MetricError",
    "cosine",
    "deletion_auc",
    "deletion_curve",
    "drop_at_k",
    "efficiency_error",
    "kendall_tau",
    "largest_first",
    "log_k_grid",
    "mae",
    "masking_oracle",
    "mean_relative_drop",
    "rank_agents",
    "relative_drop",
    "relative_drop_at_k",
    "relative_gap",
    "set_jaccard",
    "spearman",
    "tie_ranks",
    "topk_jaccard",
    "topk_overlap",
]
