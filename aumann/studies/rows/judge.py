"""The ``llm_judge`` row: the LLM-as-judge baseline (a ranking of the agents it names, no values)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann.attribution.metrics import set_jaccard
from aumann.errors import StudyError
from aumann.scenarios.base import Scenario, ScenarioConfig
from aumann.studies.context import RunContext
from aumann.studies.rows.registry import Row, RowOutput
from aumann.studies.rows.scoring import reference_row, score_order


class JudgeRow(Row):
    """The LLM-as-judge baseline: a ranking of the agents it names (no values: no magnitude ordering, no τ)."""

    name = "llm_judge"
    game = "-"
    message = "judge"
    title = "LLM-as-judge"

    def enabled(self, scenario: Scenario, config: ScenarioConfig) -> bool:
        return config.study.judge != "off"

    def compute(self, ctx: RunContext) -> RowOutput | None:
        from aumann.evaluation.judge import ask_judge, judge_trace

        if ctx.options.judge is None:
            return None
        from aumann.attribution.problem import resolve_baseline

        ts, players, panel = ctx.t_star, ctx.players, ctx.panel
        # the step before t* never through a dead row (a newborn's "before" is its state at birth)
        before = resolve_baseline("previous", panel)[0][ts][players] if ts > 0 else None
        trace = judge_trace(ctx.scenario.features, before,
                            panel.values[ts][players], ctx.z0[players], ctx.f_values[: ts + 1], ts, ctx.sizes.k_del,
                            agent_ids=np.asarray(panel.agent_ids)[players],
                            max_candidates=ctx.config.study.judge_candidates, indicator=getattr(ctx.f, "name", "f"))
        try:
            judged = ask_judge(trace, ctx.options.judge, seed=int(ctx.rng("judge").integers(2**31)))
        except Exception as exc:  # no usable answer: the row is recorded as failed and the study goes on
            from aumann.simulators.llm import is_abstention

            if not is_abstention(exc):
                raise
            # recorded as a failed optional part of the rows stage (run record, manifest, report), as
            # stages.attempt records one; --strict stops the study
            ctx.stages["row llm_judge"] = {"status": "failed", "optional": True, "error": type(exc).__name__,
                                           "message": " ".join(str(exc).split())[:500]}
            if ctx.options.strict:
                err = StudyError(f"stage 'row llm_judge' failed (run {ctx.options.run_index}): "
                                 f"{type(exc).__name__}: {exc}")
                err.failed_stage = "row llm_judge"
                raise err from exc
            return None
        order = np.asarray(players)[judged.ranking]  # trace positions → panel positions
        ctx.arrays["judge_ranking"] = order
        return RowOutput(phi=None, order=order, info=judged)

    def deletion_orders(self, ctx: RunContext, out: RowOutput) -> list[np.ndarray]:
        return [out.order]

    def grid_orders(self, ctx: RunContext, out: RowOutput) -> list[np.ndarray]:
        return []  # the judge names K_del agents, too few for the log-k grid

    def score(self, ctx: RunContext, out: RowOutput) -> dict[str, float]:
        order, top_k = out.order, ctx.sizes.top_k
        ctx.orders[self.name] = order
        metrics = score_order(ctx, self.name, order, None)
        ref = ctx.phi[reference_row(ctx.config)]
        metrics.update({"kendall_tau": math.nan,
                        "jaccard_top10": set_jaccard(order[:top_k], ctx.ranked(ref, "value", top_k)),
                        "sum_phi": math.nan})
        if ctx.grid is not None:  # the judge names K_del agents, too few for the log-k grid
            metrics.update({"deletion_auc_logk": math.nan, "deletion_auc_logk_masking": math.nan})
        named = {int(x) for x in order[:top_k]}
        ctx.rec["judge"] = {**out.info.summary(), "ranking": [int(x) for x in order], "k": ctx.sizes.k_del,
                            "top_k": top_k,
                            "overlap": {m: len(named & {int(x) for x in ctx.ranked(phi, "value", top_k)})
                                        for m, phi in ctx.phi.items()}}
        return metrics

    def tables(self, result: Any) -> dict[str, list[dict[str, Any]]]:
        from aumann.studies.tables import judge_table

        return {"judge_overlap": judge_table(result)}

    def section(self, run_dir: Path, records: Sequence[dict[str, Any]]) -> list[Any]:
        from aumann.studies.action_sections import judge_blocks

        return judge_blocks(run_dir, records)


__all__ = ["JudgeRow"]
