"""The rows of the faithfulness table: one small object per method, registered by name.

A row is a :class:`Row` subclass: its ``name`` (the ``method`` column), the ``game`` its φ explains,
and ``compute(ctx) -> RowOutput`` (φ at t* over the panel's agents, its standard error and what it
cost), given the run's :class:`~aumann.studies.context.RunContext`. Everything else has a default
that fits a method with values: deletion by its ranking under both oracles (``score``), the
agreement with the reference (``sampled_shapley``), the columns of ``faithfulness.csv``. A row can
add a record section, tables (``tables``) and a report section (``section``). Adding a row is one
class and one :func:`register_row` call; the study driver, the tables and the pages take it from
the registry::

    class Gradient(Row):
        name = "gradient"
        game = "masking"

        def compute(self, ctx):
            ...                                   # φ at t*, shape (N,)
            return RowOutput(phi=phi, cost={"seconds": dt})

    register_row(Gradient())                      # before "random" (the baseline stays last)

The rows run in registry order (which is table order): a row that uses another's output names it in
``needs``. Built in: ``aumann_shapley``, ``sampled_shapley`` (the reference; a second seed gives the
noise ceiling), ``leave_one_out``, ``action_aumann_shapley`` (scenarios with a step map),
``sampled_shapley_resimulation`` (``study.resimulation_reference``), ``llm_judge`` (a ranking, no
values) and ``random`` (the mean of random orderings).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from aumann.attribution.metrics import kendall_tau, set_jaccard, topk_jaccard
from aumann.errors import ConfigError, StudyError
from aumann.evaluation.deletion import deletion_summary, resimulation_game
from aumann.scenarios.base import Scenario, ScenarioConfig
from aumann.studies.context import RunContext

REFERENCE = "sampled_shapley"
"""The row every other row's Kendall τ and top-k Jaccard are measured against."""

#: the per-method metrics of a run record (``rec["methods"][name]``), in order
METRICS = ("deletion_auc", "drop_at_5", "deletion_auc_original", "drop_at_5_original", "deletion_auc_magnitude",
           "drop_at_5_magnitude", "deletion_auc_masking", "drop_at_5_masking", "deletion_auc_masking_magnitude",
           "drop_at_5_masking_magnitude", "kendall_tau", "jaccard_top10", "sum_phi")


@dataclass
class RowOutput:
    """What a row computed for one run.

    Attributes:
        phi: φ at t* on the panel's agent axis (N,); ``None`` for a row that ranks without values (the
            judge gives ``order``) or has nothing to compute (random).
        stderr: its standard error (N,), when the method has one.
        cost: what it cost (``rec["cost"][name]``: e.g. ``{"game", "evaluations", "seconds"}``; seconds are
            moved to ``timings/``).
        attributions: :class:`~aumann.attribution.Attribution` objects to save as
            ``attributions/run-NNN-<label>.npz``, by label.
        ceiling: a second estimate with an independent seed (the noise ceiling of a sampled row).
        order: a ranking of panel positions (rows without values).
        record: the row's own record section (``rec[row.record_key]``).
        info: anything else the row's later steps (``score``, ``finish``) need.
    """

    phi: np.ndarray | None
    stderr: np.ndarray | None = None
    cost: dict[str, Any] | None = None
    attributions: dict[str, Any] = field(default_factory=dict)
    ceiling: np.ndarray | None = None
    order: np.ndarray | None = None
    record: dict[str, Any] | None = None
    info: Any = None


class Row:
    """One row of the faithfulness table (see the module docstring)."""

    name: ClassVar[str] = ""
    game: ClassVar[str] = "masking"  # the game its φ explains: "masking", "resimulation" (or "-": no game)
    needs: ClassVar[tuple[str, ...]] = ()  # rows whose outputs ``compute`` reads (computed before it)
    message: ClassVar[str | None] = None  # progress message while it computes (None: none of its own)
    record_key: ClassVar[str | None] = None  # where ``RowOutput.record`` goes in the run record
    title: ClassVar[str | None] = None  # the heading of its report section (None: no section)

    def enabled(self, scenario: Scenario, config: ScenarioConfig) -> bool:
        """Whether runs of ``scenario`` under ``config`` get this row (checked before any run)."""
        return True

    def compute(self, ctx: RunContext) -> RowOutput | None:
        """φ at t* (and its cost) for the run in ``ctx``; ``None``: this run has no such row."""
        raise NotImplementedError

    def deletion_orders(self, ctx: RunContext, out: RowOutput) -> list[np.ndarray]:
        """The orderings whose prefixes ``score`` deletes (forked ahead, all at once)."""
        return [ctx.ranked(out.phi, "value"), ctx.ranked(out.phi, "abs")]

    def score(self, ctx: RunContext, out: RowOutput) -> dict[str, float]:
        """The row's metrics (:data:`METRICS`): deletion by its ranking, agreement with the reference."""
        return score_values(ctx, self.name, out.phi)

    def finish(self, ctx: RunContext, out: RowOutput) -> None:
        """After every row is scored: record what needs the others (e.g. the noise ceiling)."""

    def tables(self, result: Any) -> dict[str, list[dict[str, Any]]]:
        """Tables of its own (``<name>.csv`` / ``.md``) from the finished :class:`StudyResult`."""
        return {}

    def section(self, run_dir: Path, records: Sequence[dict[str, Any]]) -> list[Any]:
        """Its report blocks (under ``title`` in "How sure"), built from the run directory alone."""
        return []

    def cost_rows(self, records: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
        """("what", value) lines for the report's "Work done" table."""
        return []


# ---------------------------------------------------------------------------------------------- registry
_ROWS: list[Row] = []


def register_row(row: Row | type[Row], *, before: str | None = "random") -> Row:
    """Register a row (an instance or a class with a no-argument constructor) under ``row.name``.

    It goes into the table before the row ``before`` (default: before ``random``, which stays last;
    ``None``: at the end). Its ``needs`` must already be registered ahead of it. Registering a name again
    replaces that row in place.
    """
    if isinstance(row, type):
        row = row()
    if not isinstance(row, Row) or not isinstance(row.name, str) or not row.name.isidentifier():
        raise ConfigError(f"register_row needs a Row with an identifier-like name; got {row!r}")
    names = [r.name for r in _ROWS]
    if row.name in names:
        _ROWS[names.index(row.name)] = row
        return row
    at = names.index(before) if before in names else len(_ROWS)
    missing = [n for n in row.needs if n not in names[:at]]
    if missing:
        raise ConfigError(f"row {row.name!r} needs {missing}, which must be registered before it")
    _ROWS.insert(at, row)
    return row


def unregister_row(name: str) -> None:
    """Remove a registered row (built-in ones too; the reference ``sampled_shapley`` cannot go)."""
    if name == REFERENCE:
        raise ConfigError(f"the reference row {REFERENCE!r} cannot be removed")
    _ROWS[:] = [r for r in _ROWS if r.name != name]


def rows() -> tuple[Row, ...]:
    """The registered rows, in table order."""
    return tuple(_ROWS)


def row_names() -> tuple[str, ...]:
    """Their names (the ``method`` column), in table order."""
    return tuple(r.name for r in _ROWS)


def get_row(name: str) -> Row:
    """The registered row ``name`` (:class:`ConfigError` when there is none)."""
    for r in _ROWS:
        if r.name == name:
            return r
    raise ConfigError(f"no row named {name!r}; registered rows: {list(row_names())}")


# ---------------------------------------------------------------------------------------------- stages
def compute_rows(ctx: RunContext) -> None:
    """The ``rows`` stage: every enabled row's ``compute``, in table order (into ``ctx.outputs``)."""
    for row in rows():
        if not row.enabled(ctx.scenario, ctx.config):
            continue
        absent = [n for n in row.needs if n not in ctx.outputs]
        if absent:
            raise StudyError(f"row {row.name!r} needs the output of {absent}, which this run did not compute")
        if row.message:
            ctx.tick(row.message)
        out = row.compute(ctx)
        if out is None:
            continue
        ctx.outputs[row.name] = out
        if out.cost is not None:
            ctx.rec["cost"][row.name] = out.cost
        if row.record_key is not None and out.record is not None:
            ctx.rec[row.record_key] = out.record
        ctx.saved.update(out.attributions)


def score_rows(ctx: RunContext) -> None:
    """The ``deletion`` stage: fork every deleted set at once, then each row's metrics and ``finish``."""
    ctx.tick("deletion forks")
    sets = []
    for name, out in ctx.outputs.items():
        sets += [order[:k] for order in get_row(name).deletion_orders(ctx, out)
                 for k in range(1, ctx.sizes.k_del + 1)]
    ctx.oracle.prefetch(sets)
    for name, out in ctx.outputs.items():
        ctx.rec["methods"][name] = get_row(name).score(ctx, out)
    for name, out in ctx.outputs.items():
        get_row(name).finish(ctx, out)
    ctx.rec["forks"] = ctx.oracle.forks


def score_order(ctx: RunContext, name: str, order: np.ndarray, magnitude: np.ndarray | None) -> dict[str, float]:
    """Deletion metrics of one ranking (and, when given, of the |φ| ranking) under both oracles; the
    curves go to ``ctx.arrays`` as ``curve[_original|_magnitude|_masking]_<name>``."""
    sizes, f_full = ctx.sizes, ctx.f_full
    by_val = deletion_summary(ctx.oracle, f_full, order, sizes.k_del, sizes.k_drop)
    by_mask = deletion_summary(ctx.masking, f_full, order, sizes.k_del, sizes.k_drop)
    nan = {"deletion_auc": math.nan, "drop_at_k": math.nan}
    by_mag = deletion_summary(ctx.oracle, f_full, magnitude, sizes.k_del, sizes.k_drop) if magnitude is not None \
        else nan
    by_mask_mag = deletion_summary(ctx.masking, f_full, magnitude, sizes.k_del, sizes.k_drop) \
        if magnitude is not None else nan
    ctx.arrays[f"curve_{name}"] = by_val["curve"]
    ctx.arrays[f"curve_original_{name}"] = by_val["curve_original"]
    if magnitude is not None:
        ctx.arrays[f"curve_magnitude_{name}"] = by_mag["curve"]
    ctx.arrays[f"curve_masking_{name}"] = by_mask["curve"]
    return {"deletion_auc": by_val["deletion_auc"], "drop_at_5": by_val["drop_at_k"],
            "deletion_auc_original": by_val["deletion_auc_original"],
            "drop_at_5_original": by_val["drop_at_k_original"],
            "deletion_auc_magnitude": by_mag["deletion_auc"], "drop_at_5_magnitude": by_mag["drop_at_k"],
            "deletion_auc_masking": by_mask["deletion_auc"], "drop_at_5_masking": by_mask["drop_at_k"],
            "deletion_auc_masking_magnitude": by_mask_mag["deletion_auc"],
            "drop_at_5_masking_magnitude": by_mask_mag["drop_at_k"]}


def score_values(ctx: RunContext, name: str, phi: np.ndarray) -> dict[str, float]:
    """A row with values: deletion by descending φ (and |φ|), Kendall τ and top-k Jaccard against the
    reference, Σφ; the log-k grid when the study deletes along it."""
    order = ctx.orders[name] = ctx.ranked(phi, "value")
    ctx.arrays[f"phi_{name}"] = phi
    metrics = score_order(ctx, name, order, ctx.ranked(phi, "abs"))
    ref = ctx.phi[REFERENCE]
    compare = name != REFERENCE
    metrics.update({"kendall_tau": ctx.agree(phi, ref, kendall_tau) if compare else math.nan,
                    "jaccard_top10": ctx.agree(phi, ref, topk_jaccard, ctx.sizes.top_k) if compare else math.nan,
                    "sum_phi": float(np.sum(phi))})
    if ctx.grid is not None:
        g_res = deletion_summary(ctx.oracle, ctx.f_full, order, ctx.grid)
        g_mask = deletion_summary(ctx.masking, ctx.f_full, order, ctx.grid)
        metrics.update({"deletion_auc_logk": g_res["deletion_auc"],
                        "deletion_auc_logk_masking": g_mask["deletion_auc"]})
        ctx.arrays[f"curve_logk_{name}"] = g_res["curve"]
        ctx.arrays[f"curve_logk_masking_{name}"] = g_mask["curve"]
    return metrics


# ---------------------------------------------------------------------------------------------- built-in rows
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
        from aumann.evaluation.action import step_map_gap

        sm = ctx.scenario.step_map(ctx.model_before, ctx.config)
        deleted = list({frozenset(int(i) for i in o[:k]) for o in ctx.orders.values()
                        for k in range(1, ctx.sizes.k_del + 1)})
        vals = [ctx.oracle.values(sorted(d))[0] for d in deleted]
        ctx.rec["action"]["coalition_gap"] = step_map_gap(sm, ctx.f, [sorted(d) for d in deleted], vals,
                                                          scale=ctx.rec["action"]["delta_v"], n_features=ctx.panel.D)

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
        judged = ask_judge(trace, ctx.options.judge, seed=int(ctx.rng("judge").integers(2**31)))
        order = np.asarray(players)[judged.ranking]  # trace positions → panel positions
        ctx.arrays["judge_ranking"] = order
        return RowOutput(phi=None, order=order, info=judged)

    def deletion_orders(self, ctx: RunContext, out: RowOutput) -> list[np.ndarray]:
        return [out.order]

    def score(self, ctx: RunContext, out: RowOutput) -> dict[str, float]:
        order, top_k = out.order, ctx.sizes.top_k
        ctx.orders[self.name] = order
        metrics = score_order(ctx, self.name, order, None)
        metrics.update({"kendall_tau": math.nan,
                        "jaccard_top10": set_jaccard(order[:top_k], ctx.ranked(ctx.phi[REFERENCE], "value")[:top_k]),
                        "sum_phi": math.nan})
        if ctx.grid is not None:  # the judge names K_del agents, too few for the log-k grid
            metrics.update({"deletion_auc_logk": math.nan, "deletion_auc_logk_masking": math.nan})
        named = {int(x) for x in order[:top_k]}
        ctx.rec["judge"] = {**out.info.summary(), "ranking": [int(x) for x in order], "k": ctx.sizes.k_del,
                            "top_k": top_k,
                            "overlap": {m: len(named & {int(x) for x in ctx.ranked(phi, "value")[:top_k]})
                                        for m, phi in ctx.phi.items()}}
        return metrics

    def tables(self, result: Any) -> dict[str, list[dict[str, Any]]]:
        from aumann.studies.tables import judge_table

        return {"judge_overlap": judge_table(result)}

    def section(self, run_dir: Path, records: Sequence[dict[str, Any]]) -> list[Any]:
        from aumann.studies.action_sections import judge_blocks

        return judge_blocks(run_dir, records)


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

    def score(self, ctx: RunContext, out: RowOutput) -> dict[str, float]:
        sizes, pool, m = ctx.sizes, ctx.deletion_pool, ctx.config.study.random_orderings
        draw = ctx.rng("random")
        rnd = deletion_summary(ctx.oracle, ctx.f_full, [draw.permutation(pool) for _ in range(m)], sizes.k_del,
                               sizes.k_drop)
        draw = ctx.rng("random_masking")
        rnd_mask = deletion_summary(ctx.masking, ctx.f_full, [draw.permutation(pool) for _ in range(m)], sizes.k_del,
                                    sizes.k_drop)
        metrics = {"deletion_auc": rnd["deletion_auc"], "drop_at_5": rnd["drop_at_k"],
                   "deletion_auc_original": rnd["deletion_auc_original"],
                   "drop_at_5_original": rnd["drop_at_k_original"],
                   "deletion_auc_magnitude": rnd["deletion_auc"], "drop_at_5_magnitude": rnd["drop_at_k"],
                   "deletion_auc_masking": rnd_mask["deletion_auc"], "drop_at_5_masking": rnd_mask["drop_at_k"],
                   "deletion_auc_masking_magnitude": rnd_mask["deletion_auc"],
                   "drop_at_5_masking_magnitude": rnd_mask["drop_at_k"],
                   "kendall_tau": math.nan, "jaccard_top10": math.nan, "sum_phi": math.nan}
        ctx.arrays.update({"curve_random": rnd["curve"], "curve_original_random": rnd["curve_original"],
                           "curve_masking_random": rnd_mask["curve"]})
        if ctx.grid is not None:
            draw, kmax = ctx.rng("random_grid"), int(max(ctx.grid))
            g_res = deletion_summary(ctx.oracle, ctx.f_full, [draw.permutation(pool)[:kmax] for _ in range(m)],
                                     ctx.grid)
            g_mask = deletion_summary(ctx.masking, ctx.f_full, [draw.permutation(pool)[:kmax] for _ in range(m)],
                                      ctx.grid)
            metrics.update({"deletion_auc_logk": g_res["deletion_auc"],
                            "deletion_auc_logk_masking": g_mask["deletion_auc"]})
            ctx.arrays["curve_logk_random"] = g_res["curve"]
            ctx.arrays["curve_logk_masking_random"] = g_mask["curve"]
        return metrics


for _row in (AumannShapleyRow, SampledShapleyRow, LeaveOneOutRow, ActionRow, ResimulationReferenceRow, JudgeRow,
             RandomRow):
    register_row(_row, before=None)

BUILTIN = row_names()
"""The built-in rows, in table order."""

__all__ = ["BUILTIN", "METRICS", "REFERENCE", "ActionRow", "AumannShapleyRow", "JudgeRow", "LeaveOneOutRow",
           "RandomRow", "ResimulationReferenceRow", "Row", "RowOutput", "SampledShapleyRow", "compute_rows",
           "get_row", "register_row", "row_names", "rows", "score_order", "score_rows", "score_values",
           "unregister_row"]
