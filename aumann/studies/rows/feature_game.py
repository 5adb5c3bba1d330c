"""The rows that explain the per-step masking game at t*: ``aumann_shapley``, ``sampled_shapley`` (the
reference; the per-step masking game or, with ``study.reference_game = "resimulation"``, the re-simulation
game) and ``leave_one_out``."""

from __future__ import annotations

import math

import numpy as np

from aumann.attribution.metrics import kendall_tau, topk_jaccard
from aumann.evaluation.deletion import resimulation_game
from aumann.studies.context import RunContext
from aumann.studies.rows.registry import Row, RowOutput
from aumann.studies.rows.scoring import REFERENCE


class AumannShapleyRow(Row):
    """Straight-path Aumann–Shapley (Gauss–Legendre quadrature) at t*: the attribution over every step
    (the ``attribute`` stage) read at t*."""

    name = "aumann_shapley"

    def compute(self, ctx: RunContext) -> RowOutput:
        return RowOutput(phi=ctx.attribution.phi[ctx.t_star], attributions={self.name: ctx.attribution})


class SampledShapleyRow(Row):
    """The reference: sampled Shapley on ``study.reference_game`` (the per-step masking game, or the
    re-simulation game); a second run with an independent seed (``ceiling_permutations``) is the noise
    ceiling of every agreement column."""

    name = REFERENCE
    message = "sampled Shapley (reference)"

    def compute(self, ctx: RunContext) -> RowOutput:
        from aumann.attribution import SampledShapley, attribute

        st = ctx.config.study
        ceil_perm = st.ceiling_permutations or st.permutations
        if st.reference_game == "resimulation":
            game = resimulation_game(ctx.oracle, ctx.n, players=None if ctx.everyone else ctx.players)
            ss = SampledShapley(permutations=st.permutations).attribute_game(game, rng=ctx.rng("reference"))
            ss2 = SampledShapley(permutations=ceil_perm).attribute_game(game, rng=ctx.rng("ceiling"))
            phi, ceiling = ctx.on_players(ss.phi[0]), ctx.on_players(ss2.phi[0])
        else:
            anti = st.antithetic and st.permutations % 2 == 0 and ceil_perm % 2 == 0
            ss = attribute(ctx.f, ctx.target, method=SampledShapley(permutations=st.permutations, antithetic=anti),
                           baseline=ctx.z0, rng=ctx.rng("reference"))
            ss2 = attribute(ctx.f, ctx.target, method=SampledShapley(permutations=ceil_perm, antithetic=anti),
                            baseline=ctx.z0, rng=ctx.rng("ceiling"))
            phi, ceiling = ss.phi[0], ss2.phi[0]
        cost = {"game": st.reference_game, "evaluations": int(ss.n_evals or 0),
                "seconds": float(ss.provenance.get("seconds", math.nan))}
        return RowOutput(phi=phi, stderr=None if ss.stderr is None else np.asarray(ss.stderr)[0], cost=cost,
                         attributions={self.name: ss, f"{self.name}_ceiling": ss2}, ceiling=ceiling)

    def finish(self, ctx: RunContext, out: RowOutput) -> None:
        ctx.arrays["phi_ceiling"] = out.ceiling
        ctx.rec["ceiling"] = {"kendall_tau": ctx.agree(out.ceiling, out.phi, kendall_tau),
                              "jaccard_top10": ctx.agree(out.ceiling, out.phi, topk_jaccard, ctx.sizes.top_k)}


class LeaveOneOutRow(Row):
    """φ_i = v(N) − v(N ∖ {i}) on the masking game at t*."""

    name = "leave_one_out"

    def compute(self, ctx: RunContext) -> RowOutput:
        from aumann.attribution import LeaveOneOut, attribute

        loo = attribute(ctx.f, ctx.target, method=LeaveOneOut(), baseline=ctx.z0)
        return RowOutput(phi=loo.phi[0], attributions={self.name: loo})


__all__ = ["AumannShapleyRow", "LeaveOneOutRow", "SampledShapleyRow"]
