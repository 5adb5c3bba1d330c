"""The rows on the re-simulation game (the step t* re-run through the simulator): ``action_aumann_shapley``
(Aumann–Shapley through the scenario's step map) and ``sampled_shapley_resimulation`` (sampled Shapley on
the re-simulation game, ``study.resimulation_reference``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aumann.attribution.metrics import kendall_tau, topk_jaccard
from aumann.evaluation.deletion import resimulation_game
from aumann.scenarios.base import Scenario, ScenarioConfig
from aumann.studies.context import RunContext
from aumann.studies.rows.registry import Row, RowOutput
from aumann.studies.rows.scoring import REFERENCE


class ActionRow(Row):
    """Aumann–Shapley of the re-simulation game through the scenario's step map (fixed populations)."""

    name = "action_aumann_shapley"
    game = "resimulation"
    message = "action attribution"
    record_key = "action"
    title = "Action attribution through the simulator"
    RECORD = ("steps", "tol", "grad_evals", "value_evals", "step_evals", "panels", "kinks", "converged", "phi_change",
              "exact_map", "holds", "delta_v_map", "map_efficiency_gap", "fork_gap", "feature_gap", "seconds")

    def enabled(self, scenario: Scenario, config: ScenarioConfig) -> bool:
        return bool(config.study.action_attribution and scenario.step_map is not None)

    def compute(self, ctx: RunContext) -> RowOutput | None:
        from aumann.evaluation.action import ActionAumannShapley, ActionProblem

        if not ctx.everyone:  # step maps describe fixed populations: with births and deaths there is no such row
            return None
        st = ctx.config.study
        method = ActionAumannShapley(steps=st.quadrature_steps, tol=st.action_tol)
        act = method.attribute(ActionProblem(ctx.scenario, ctx.model_before, ctx.config, step=ctx.t_star,
                                             agent_ids=ctx.panel.agent_ids))
        p = act.provenance
        record = {k: p[k] for k in self.RECORD}
        record.update({"delta_v": float(act.delta_v[0]), "sum_phi": float(act.phi.sum()),
                       "efficiency_gap": float(act.efficiency_gap[0]),
                       "relative_efficiency_gap": float(act.relative_efficiency_gap[0])})
        cost = {"game": "resimulation", "step_evals": int(p["step_evals"]), "grad_evals": int(p["grad_evals"]),
                "seconds": float(p["seconds"])}
        return RowOutput(phi=act.phi[0], cost=cost, attributions={self.name: act}, record=record)

    def finish(self, ctx: RunContext, out: RowOutput) -> None:
        """The G-vs-fork gap on every coalition the deletion curves forked."""
        from aumann.evaluation.action import build_step_map, step_map_gap

        sm = build_step_map(ctx.scenario, ctx.model_before, ctx.config)
        deleted = list({frozenset(int(i) for i in o[:k]) for o in ctx.orders.values()
                        for k in range(1, ctx.sizes.k_del + 1)})
        vals = [ctx.oracle.values(sorted(d))[0] for d in deleted]
        ctx.rec["action"]["coalition_gap"] = step_map_gap(sm, ctx.f, [sorted(d) for d in deleted], vals,
                                                          scale=ctx.rec["action"]["delta_v"], n_features=ctx.panel.D,
                                                          name=ctx.scenario.name)

    def tables(self, result: Any) -> dict[str, list[dict[str, Any]]]:
        from aumann.studies.tables import action_table

        return {"action_attribution": action_table(result)}

    def section(self, run_dir: Path, records: Sequence[dict[str, Any]]) -> list[Any]:
        from aumann.studies.action_sections import action_blocks

        return action_blocks(run_dir, records)

    def cost_rows(self, records: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
        from aumann.studies.action_sections import action_cost_rows

        return action_cost_rows(records)


class ResimulationReferenceRow(Row):
    """Sampled Shapley on the re-simulation game (``study.resimulation_reference``), two seeds for its
    noise ceiling; every row's agreement with it is recorded (``rec["resimulation_reference"]``)."""

    name = "sampled_shapley_resimulation"
    game = "resimulation"
    needs = (REFERENCE,)
    message = "re-simulation reference"
    title = "Agreement on the re-simulation game"

    def enabled(self, scenario: Scenario, config: ScenarioConfig) -> bool:
        return bool(config.study.resimulation_reference)

    def compute(self, ctx: RunContext) -> RowOutput:
        from aumann.attribution import SampledShapley

        st = ctx.config.study
        if st.reference_game == "resimulation":  # the reference row already plays this game
            ref = ctx.outputs[REFERENCE]
            rr, seconds = ref.attributions[REFERENCE], float(ref.cost["seconds"])
            phi, ceiling = ref.phi, ref.ceiling
        else:
            t0 = time.perf_counter()
            game = resimulation_game(ctx.oracle, ctx.n, players=None if ctx.everyone else ctx.players)
            rr = SampledShapley(permutations=st.permutations).attribute_game(game, rng=ctx.rng("resimulation"))
            seconds = time.perf_counter() - t0
            rr2 = SampledShapley(permutations=st.ceiling_permutations or st.permutations).attribute_game(
                game, rng=ctx.rng("resimulation_ceiling"))
            phi, ceiling = ctx.on_players(rr.phi[0]), ctx.on_players(rr2.phi[0])
        return RowOutput(phi=phi, cost={"game": "resimulation", "step_evals": int(rr.n_evals or 0),
                                        "seconds": seconds}, attributions={self.name: rr}, ceiling=ceiling)

    def finish(self, ctx: RunContext, out: RowOutput) -> None:
        ctx.arrays["phi_ceiling_resimulation"] = out.ceiling
        top_k = ctx.sizes.top_k
        ctx.rec["resimulation_reference"] = {
            "permutations": ctx.config.study.permutations,
            "agreement": {m: {"kendall_tau": ctx.agree(phi, out.phi, kendall_tau),
                              "jaccard_top10": ctx.agree(phi, out.phi, topk_jaccard, top_k)}
                          for m, phi in ctx.phi.items() if m != self.name},
            "ceiling": {"kendall_tau": ctx.agree(out.ceiling, out.phi, kendall_tau),
                        "jaccard_top10": ctx.agree(out.ceiling, out.phi, topk_jaccard, top_k)},
        }

    def tables(self, result: Any) -> dict[str, list[dict[str, Any]]]:
        from aumann.studies.tables import resimulation_table

        return {"resimulation_agreement": resimulation_table(result)}

    def section(self, run_dir: Path, records: Sequence[dict[str, Any]]) -> list[Any]:
        from aumann.studies.action_sections import resimulation_blocks

        return resimulation_blocks(run_dir)

    def cost_rows(self, records: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
        from aumann.studies.action_sections import resimulation_cost_rows

        return resimulation_cost_rows(records)


__all__ = ["ActionRow", "ResimulationReferenceRow"]
