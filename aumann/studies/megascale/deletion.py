"""Deletion of the cascade pressure f_casc at t* under both oracles (masking; re-simulation of t*).

Same definitions as the faithfulness table (``deletion_auc`` = mean relative drop over k = 1 … K_del,
``drop_at_5`` = 100 · relative drop at k = min(5, K_del), ``deletion_auc_logk`` = mean relative drop over
the log-k grid), for the rankings of Aumann–Shapley, sampled Shapley and leave-one-out (descending φ)
and the mean curve of random orderings. The masking oracle sets the deleted agents' features to the
baseline (f recomputed in one pass along the ordering, O(k + Σ deg)); the re-simulation oracle forks
the checkpoint before t*, makes the deleted agents take the baseline action and re-simulates t*
through the same decision backend (its requests are the factual step's: cache hits for an LLM).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aumann.attribution.metrics import log_k_grid, mean_relative_drop, rank_agents, relative_drop, relative_drop_at_k
from aumann.evaluation.deletion import DeletionOracle


def cascade_deletion(cfg: Any, run: Any, scenario: Any, fc: Any, fco: Any, x: np.ndarray, z0: np.ndarray,
                     phis: dict[str, np.ndarray], ts: int, sizes: Any, rng: np.random.Generator, *,
                     threads: int = 1) -> dict[str, Any]:
    """Rows {method: metrics} and curves for f_casc (see the module docstring); the re-simulation forks run on
    ``threads`` threads (the same values on any number)."""
    n = x.shape[0]
    k_del, k_drop = sizes.k_del, sizes.k_drop
    kd = list(range(1, k_del + 1))
    grid = log_k_grid(n) if cfg.study.log_k_grid else []
    f_full = fc.value(x)
    fo_full = fco.value(x)
    depth = max(k_del, max(grid, default=1))  # the longest prefix any curve deletes
    orders = {name: rank_agents(phi, "value", top=depth) for name, phi in phis.items()}
    randoms = [rng.permutation(n)[:depth] for _ in range(cfg.study.random_orderings)]
    rows: dict[str, dict[str, Any]] = {}
    arrays: dict[str, np.ndarray] = {}

    # the masking game's kernels (one curve per ordering, O(k + Σ deg)) and the fork oracle (its forks in the one
    # coalition store, keyed by the deleted set)
    base = np.broadcast_to(np.asarray(z0, dtype=np.float64), x.shape)
    kernel, kernel_original = fc.masking_kernel(x, base), fco.masking_kernel(x, base)

    def masking(order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sm = kernel.curve(order, kd + grid)
        og = kernel_original.curve(order, kd)
        return sm[:k_del], og, sm[k_del:]

    oracle = DeletionOracle(scenario, cfg, run.before(ts), fc, fco, threads=threads)

    def resim(deleted: np.ndarray) -> tuple[float, float]:
        return oracle.values(deleted)

    def summarise(curves_mask: list, curves_res: list) -> dict[str, Any]:
        sm = np.mean([c[0] for c in curves_mask], axis=0)
        og = np.mean([c[1] for c in curves_mask], axis=0)
        lg = np.mean([c[2] for c in curves_mask], axis=0) if grid else None
        row = {"deletion_auc_masking": mean_relative_drop(f_full, sm),
               "drop_at_5_masking": relative_drop_at_k(f_full, sm, k_drop),
               "deletion_auc_masking_original": mean_relative_drop(fo_full, og),
               "deletion_auc_logk_masking": mean_relative_drop(f_full, lg) if grid else math.nan}
        if curves_res:
            res = np.mean(curves_res, axis=0)
            row.update({"deletion_auc": mean_relative_drop(f_full, res[:, 0]),
                        "drop_at_5": relative_drop_at_k(f_full, res[:, 0], k_drop),
                        "deletion_auc_original": mean_relative_drop(fo_full, res[:, 1])})
        else:
            row.update({"deletion_auc": math.nan, "drop_at_5": math.nan, "deletion_auc_original": math.nan})
        curves = {"masking": relative_drop(f_full, sm)}
        if grid:
            curves["logk_masking"] = relative_drop(f_full, lg)
        if curves_res:
            curves["resimulation"] = relative_drop(f_full, np.mean(curves_res, axis=0)[:, 0])
        return row, curves

    do_resim = bool(cfg.cascade_resimulation)
    if do_resim:  # every deleted set forked ahead, at once (then each curve reads the store)
        oracle.prefetch([o[:k] for o in [*orders.values(), *randoms] for k in kd])
    for name, order in orders.items():
        cm = [masking(order)]
        cr = [np.array([resim(order[:k]) for k in kd])] if do_resim else []
        rows[name], curves = summarise(cm, cr)
        arrays.update({f"curve_{k}_{name}": v for k, v in curves.items()})
    cm = [masking(o) for o in randoms]
    cr = [np.array([resim(o[:k]) for k in kd]) for o in randoms] if do_resim else []
    rows["random"], curves = summarise(cm, cr)
    arrays.update({f"curve_{k}_random": v for k, v in curves.items()})
    arrays["log_k_grid"] = np.asarray(grid)
    return {"rows": rows, "arrays": arrays, "f_original": fo_full, "forks": oracle.forks,
            "pooled_fallback": oracle.pooled_fallback}


__all__ = ["cascade_deletion"]
