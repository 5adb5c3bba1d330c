"""The ``random`` row: the baseline every ranking is compared with (random orderings of the players)."""

from __future__ import annotations

import copy
import math

import numpy as np

from aumann.evaluation.deletion import deletion_summary
from aumann.studies.context import RunContext
from aumann.studies.rows.registry import Row, RowOutput
from aumann.studies.rows.scoring import deletion_metrics, logk_metrics


class RandomRow(Row):
    """The baseline: the mean deletion curve of ``study.random_orderings`` uniformly random orderings of the
    players (independent orderings for each oracle and for the log-k grid)."""

    name = "random"
    game = "-"

    def compute(self, ctx: RunContext) -> RowOutput:
        return RowOutput(phi=None)

    def deletion_orders(self, ctx: RunContext, out: RowOutput) -> list[np.ndarray]:
        g = copy.deepcopy(ctx.rng("random"))  # the orderings ``score`` will draw, drawn from a copy
        return [g.permutation(ctx.deletion_pool) for _ in range(ctx.config.study.random_orderings)]

    def grid_orders(self, ctx: RunContext, out: RowOutput) -> list[np.ndarray]:
        if ctx.grid is None:
            return []
        g, kmax = copy.deepcopy(ctx.rng("random_grid")), int(max(ctx.grid))  # what ``score`` will draw
        return [g.permutation(ctx.deletion_pool)[:kmax] for _ in range(ctx.config.study.random_orderings)]

    def score(self, ctx: RunContext, out: RowOutput) -> dict[str, float]:
        """Deletion by the random orderings under both oracles (and on the log-k grid), then their metrics."""
        sizes, pool, m = ctx.sizes, ctx.deletion_pool, ctx.config.study.random_orderings
        draw = ctx.rng("random")
        rnd = deletion_summary(ctx.oracle, ctx.f_full, [draw.permutation(pool) for _ in range(m)], sizes.k_del,
                               sizes.k_drop)
        draw = ctx.rng("random_masking")
        rnd_mask = deletion_summary(ctx.masking, ctx.f_full, [draw.permutation(pool) for _ in range(m)], sizes.k_del,
                                    sizes.k_drop)
        if ctx.grid is not None:
            draw, kmax = ctx.rng("random_grid"), int(max(ctx.grid))
            g_res = deletion_summary(ctx.oracle, ctx.f_full, [draw.permutation(pool)[:kmax] for _ in range(m)],
                                     ctx.grid)
            g_mask = deletion_summary(ctx.masking, ctx.f_full, [draw.permutation(pool)[:kmax] for _ in range(m)],
                                      ctx.grid)
        metrics = {**deletion_metrics(rnd, rnd_mask, rnd, rnd_mask),  # no values: |φ| orders as φ does
                   "kendall_tau": math.nan, "jaccard_top10": math.nan, "sum_phi": math.nan}
        ctx.arrays.update({"curve_random": rnd["curve"], "curve_original_random": rnd["curve_original"],
                           "curve_masking_random": rnd_mask["curve"]})
        if ctx.grid is not None:
            metrics.update(logk_metrics(ctx, self.name, g_res, g_mask))
        return metrics

__all__ = ["RandomRow"]
