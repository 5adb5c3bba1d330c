"""The rows that explain the per-step masking game at t*: ``aumann_shapley``, ``sampled_shapley`` (plain
permutation sampling; the per-step masking game or, with ``study.reference_game = "resimulation"``, the
re-simulation game), ``sampled_shapley_cv`` (the same Shapley value with the Aumann–Shapley control variate)
and ``leave_one_out``. One of the two sampled rows is the reference
(:func:`~aumann.studies.rows.scoring.reference_row`, ``study.reference_estimator``): it alone runs a second
seed for the noise ceiling and records ``rec["reference"]`` (which estimator, its median standard error)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from aumann.attribution.metrics import kendall_tau, topk_jaccard
from aumann.evaluation.deletion import resimulation_game
from aumann.studies.context import RunContext
from aumann.studies.rows.registry import Row, RowOutput
from aumann.studies.rows.scoring import REFERENCE, reference_row


def record_reference(ctx: RunContext, name: str, out: RowOutput) -> None:
    """The reference row's ``finish``: the noise ceiling (its second seed against it, ``rec["ceiling"]``,
    ``phi_ceiling``) and which estimator it is with its median standard error (``rec["reference"]``)."""
    if name != reference_row(ctx.config):
        return
    st = ctx.config.study
    ctx.arrays["phi_ceiling"] = out.ceiling
    ctx.rec["ceiling"] = {"kendall_tau": ctx.agree(out.ceiling, out.phi, kendall_tau),
                          "jaccard_top10": ctx.agree(out.ceiling, out.phi, topk_jaccard, ctx.sizes.top_k)}
    se = None if out.stderr is None else float(np.median(out.stderr))
    m = row_permutations(st, name)
    ctx.rec["reference"] = {"method": name, "game": st.reference_game, "permutations": m,
                            "ceiling_permutations": st.ceiling_permutations or m,
                            "median_stderr": math.nan if se is None else se}


#: fork permutations that confirm the step-map control on the re-simulation game (at most ``study.permutations``)
RESIMULATION_FORK_PERMUTATIONS = 16


def check_cv_counts(scenario: Any, config: Any) -> None:
    """Before any run: on the re-simulation game the ``sampled_shapley_cv`` row of a scenario with a step map runs
    min(16, m) fork permutations, and the control variate needs 4 units. With ``--permutations 3`` the study
    stopped with the estimator's MethodError after simulating and after the plain reference's m·(N − 1) + 2 forks.
    (The masking game's counts are checked by the config itself, :class:`~aumann.scenarios.base.StudyConfig`.)"""
    from aumann.attribution.control_variate import MIN_UNITS
    from aumann.errors import ConfigError

    st = config.study
    if st.reference_game != "resimulation" or getattr(scenario, "step_map", None) is None:
        return
    m = row_permutations(st, SampledShapleyCVRow.name)
    if min(RESIMULATION_FORK_PERMUTATIONS, m) < MIN_UNITS:
        key = "cv_permutations" if st.cv_permutations is not None else "permutations (--permutations)"
        raise ConfigError(f"study.{key} = {m}: on the re-simulation game the sampled_shapley_cv row runs min(16, m) "
                          f"fork permutations and its control variate needs {MIN_UNITS}; use ≥ {MIN_UNITS} (or "
                          "study.cv_permutations for that row alone)")


def paired(study: Any, *counts: int) -> bool:
    """Whether a sampled row pairs its permutations with their reverses (``study.antithetic``): only where every
    count it runs is even and makes two pairs at least (a standard error needs two units) — its own and, for the
    reference, its noise ceiling's — so the ceiling is a second seed of the *same* estimator. (Before, the
    control-variate reference at m = 40 ran antithetic and its ceiling at 39 did not; the plain row dropped its
    pairs for an odd ceiling count it does not run when it is not the reference; and ``permutations = 2`` with
    ``cv_permutations = 8``, accepted by the config, stopped the study after its simulations with the plain
    row's MethodError: one pair has no standard error.)"""
    return bool(study.antithetic) and all(c % 2 == 0 and c >= 4 for c in counts)


def row_permutations(study: Any, name: str) -> int:
    """The permutations a sampled row runs: ``study.cv_permutations`` (when set) for the control-variate row,
    ``study.permutations`` otherwise."""
    if name == SampledShapleyCVRow.name and study.cv_permutations is not None:
        return int(study.cv_permutations)
    return int(study.permutations)


class AumannShapleyRow(Row):
    """Straight-path Aumann–Shapley (Gauss–Legendre quadrature) at t*: the attribution over every step
    (the ``attribute`` stage) read at t*."""

    name = "aumann_shapley"

    def compute(self, ctx: RunContext) -> RowOutput:
        return RowOutput(phi=ctx.attribution.phi[ctx.t_star], attributions={self.name: ctx.attribution})


class SampledShapleyRow(Row):
    """Plain permutation sampling on ``study.reference_game`` (the per-step masking game, or the
    re-simulation game). When it is the reference (:func:`~aumann.studies.rows.scoring.reference_row`) a
    second run with an independent seed (``ceiling_permutations``) is the noise ceiling of every agreement
    column."""

    name = REFERENCE
    message = "sampled Shapley (plain)"

    def compute(self, ctx: RunContext) -> RowOutput:
        from aumann.attribution import SampledShapley, attribute

        st = ctx.config.study
        ceil_perm = st.ceiling_permutations or st.permutations
        is_ref = reference_row(ctx.config) == self.name
        ss2 = ceiling = None
        if st.reference_game == "resimulation":
            game = resimulation_game(ctx.oracle, ctx.n, players=None if ctx.everyone else ctx.players)
            ss = SampledShapley(permutations=st.permutations).attribute_game(game, rng=ctx.rng("reference"))
            if is_ref:
                ss2 = SampledShapley(permutations=ceil_perm).attribute_game(game, rng=ctx.rng("ceiling"))
                ceiling = ctx.on_players(ss2.phi[0])
            phi = ctx.on_players(ss.phi[0])
        else:
            anti = paired(st, st.permutations, *([ceil_perm] if is_ref else []))
            ss = attribute(ctx.f, ctx.target, method=SampledShapley(permutations=st.permutations, antithetic=anti),
                           baseline=ctx.z0, rng=ctx.rng("reference"))
            if is_ref:
                ss2 = attribute(ctx.f, ctx.target, method=SampledShapley(permutations=ceil_perm, antithetic=anti),
                                baseline=ctx.z0, rng=ctx.rng("ceiling"))
                ceiling = ss2.phi[0]
            phi = ss.phi[0]
        cost = {"game": st.reference_game, "evaluations": int(ss.n_evals or 0),
                "seconds": float(ss.provenance.get("seconds", math.nan))}
        saved = {self.name: ss} if ss2 is None else {self.name: ss, f"{self.name}_ceiling": ss2}
        return RowOutput(phi=phi, stderr=None if ss.stderr is None else np.asarray(ss.stderr)[0], cost=cost,
                         attributions=saved, ceiling=ceiling)

    def finish(self, ctx: RunContext, out: RowOutput) -> None:
        record_reference(ctx, self.name, out)


class SampledShapleyCVRow(Row):
    """Sampled Shapley with the Aumann–Shapley control variate (issue 25) on the reference's game: the same
    Shapley value as ``sampled_shapley``, from ``study.permutations`` permutations with a far smaller standard
    error where the indicator is smooth (:class:`~aumann.attribution.SampledShapleyCV`). On the re-simulation
    game (``study.reference_game = "resimulation"``, a scenario with a step map, a fixed population) the step
    map's own marginals are the control: 16 fork permutations confirm it, ``study.permutations`` map-only
    permutations carry the estimate (:func:`~aumann.evaluation.resimulation_shapley_cv`). Its record holds the
    median standard error beside plain sampling's (``reference_median_stderr``: the ``sampled_shapley`` row's,
    the name kept from when plain sampling was always the reference). On the masking game it is the default
    reference (``study.reference_estimator``): then a second seed (``ceiling_permutations``, stream
    ``ceiling``) is the noise ceiling."""

    name = "sampled_shapley_cv"
    message = "sampled Shapley with the Aumann–Shapley control variate"
    record_key = "sampled_shapley_cv"

    def compute(self, ctx: RunContext) -> RowOutput | None:
        from aumann.attribution import SampledShapleyCV, attribute

        st = ctx.config.study
        m = row_permutations(st, self.name)
        t0 = time.perf_counter()
        if st.reference_game == "resimulation":
            if ctx.scenario.step_map is None or not ctx.everyone:
                return None
            from aumann.evaluation.resimulation_cv import resimulation_shapley_cv

            res = resimulation_shapley_cv(ctx.scenario, ctx.model_before, ctx.config,
                                          permutations=min(RESIMULATION_FORK_PERMUTATIONS, m), control="step-map",
                                          map_permutations=m, oracle=ctx.oracle, rng=ctx.rng(self.name),
                                          agent_ids=ctx.panel.agent_ids)
            cost = {"game": "resimulation", "step_evals": int(res.provenance["forks"]),
                    "map_evaluations": int(res.provenance.get("map_evaluations", 0))}
            info = res.provenance
        else:
            is_ref = reference_row(ctx.config) == self.name
            anti = paired(st, m, *([st.ceiling_permutations or m] if is_ref else []))
            res = attribute(ctx.f, ctx.target, method=SampledShapleyCV(permutations=m, antithetic=anti),
                            baseline=ctx.z0, rng=ctx.rng(self.name))
            cost = {"game": "masking", "evaluations": int(res.n_evals or 0)}
            info = res.provenance["per_step"]
        cost["seconds"] = time.perf_counter() - t0
        saved, ceiling = {self.name: res}, None
        if reference_row(ctx.config) == self.name:  # the reference: a second seed is the noise ceiling
            ceil_perm = st.ceiling_permutations or m
            anti = paired(st, m, ceil_perm)  # as the row itself: a second seed of the same estimator
            ctx.release_freed()
            res2 = attribute(ctx.f, ctx.target, method=SampledShapleyCV(permutations=ceil_perm, antithetic=anti),
                             baseline=ctx.z0, rng=ctx.rng("ceiling"))
            saved[f"{self.name}_ceiling"], ceiling = res2, res2.phi[0]
        se = np.asarray(res.stderr)[0]
        plain = ctx.outputs.get(REFERENCE)
        ref_se = None if plain is None else plain.stderr
        record = {"permutations": int(info.get("permutations", m)), "control": info.get("control"),
                  "median_stderr": float(np.median(se)),
                  "reference_median_stderr": float(np.median(ref_se)) if ref_se is not None else math.nan,
                  "variance_reduction": float(info.get("variance_reduction") or math.nan)}
        if info.get("control_fallback"):  # no gradient: the row is plain sampling on the same permutations, and why
            record["control_fallback"] = info["control_fallback"]
        if info.get("variance_reduction_note"):  # why it is null (unbounded), as in the attribution's provenance
            record["variance_reduction_note"] = str(info["variance_reduction_note"])
        return RowOutput(phi=res.phi[0], stderr=se, cost=cost, attributions=saved, record=record, ceiling=ceiling)

    def finish(self, ctx: RunContext, out: RowOutput) -> None:
        record_reference(ctx, self.name, out)

    def cost_rows(self, records: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
        recs = [r[self.record_key] for r in records if r.get(self.record_key)]
        if not recs:
            return []
        se = float(np.mean([r["median_stderr"] for r in recs]))
        ref = float(np.mean([r["reference_median_stderr"] for r in recs]))
        return [("sampled Shapley with the control variate: median standard error (plain sampling's)",
                 f"{se:.3g} ({ref:.3g})")]


class LeaveOneOutRow(Row):
    """φ_i = v(N) − v(N ∖ {i}) on the masking game at t*."""

    name = "leave_one_out"

    def compute(self, ctx: RunContext) -> RowOutput:
        from aumann.attribution import LeaveOneOut, attribute

        loo = attribute(ctx.f, ctx.target, method=LeaveOneOut(), baseline=ctx.z0)
        return RowOutput(phi=loo.phi[0], attributions={self.name: loo})


__all__ = ["AumannShapleyRow", "LeaveOneOutRow", "SampledShapleyCVRow", "SampledShapleyRow", "check_cv_counts",
           "record_reference", "row_permutations"]
