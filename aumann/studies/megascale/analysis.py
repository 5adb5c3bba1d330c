"""MegaScale-Social's analysis beside the standard faithfulness study: optional stages at t* of each run.

The study (:mod:`aumann.studies.faithfulness`) has already attributed the pooled propagation risk
f_prop (the faithfulness table). These stages (:func:`register`; each recorded in ``rec["stages"]``, a
failing one skipped) add, as tables in the run directory (``rec["analysis"]["tables"]``):

* ``cascade pressure`` — ``exact_attribution``: the exact Aumann–Shapley value at t* of f_prop (closed form)
  and of the cascade pressure f_casc by three routes: the closed form (p + 1 sparse mat-vecs),
  Gauss–Legendre on the analytic gradient, and the engine's generic path integral through torch autograd
  with the custom sparse mat-vec backward; efficiency gap and the largest difference to the closed
  form (each route's wall-clock seconds go to ``timings/run-NNN.json`` as ``analysis/<route>``, not into the
  record or the table: same config and seed, same bytes); and ``cascade``: f_casc evaluated like the
  faithfulness table — sampled Shapley (m permutations,
  the O(N + nnz)-per-permutation edge fast path) and its noise-ceiling twin, leave-one-out (closed form),
  deletion under the masking oracle (K_del and the log-k grid) and under the re-simulation oracle (K_del),
  rank agreement with sampled Shapley. Kendall τ is taken over the agents with r_i ≠ r⁰_i — the only ones
  any method can credit (every other agent is a null player: exactly 0 everywhere);
* ``cascade smoothing gap`` — ``smoothing_gap``: both indicators against their non-smooth originals;
* ``tier shares`` — ``tier_shares``: R_G by influence tier (top 1 %, next 9 %, tail 90 %) at full scale,
  next to visibility-biased N = ``tier_panel_size`` panels drawn from the same run (agents drawn with
  probability ∝ followers + 1, attributed at their own scale: f_prop on the sub-panel's means, f_casc on
  the induced subgraph) and uniform panels of the same size;
* ``archetype fidelity`` — ``fidelity``: a fresh world of ``fidelity_agents`` agents simulated twice with
  the same draws, once with one request per occupied archetype and once with one request per agent,
  compared on the macro series and on the attribution ranking at t*;
* ``LLM ablation`` — ``llm_ablation``: the run re-simulated with the decisions replaced by a constant
  table (the mean answer of the factual run), compared on the macro series;
* ``decisions`` — ``decisions``: requests per step of the factual run (occupied archetypes) and of the
  forks; the run's LLM usage.

They run for MegaScale-Social configs with ``analysis = true`` (the default), in this order, on the run's
``scenario`` random stream.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.attribution import AumannShapley, LeaveOneOut, Panel, SampledShapley, attribute
from aumann.attribution.evalcontext import EvalContext
from aumann.attribution.metrics import rank_agents, relative_gap, topk_jaccard
from aumann.io import drop_resident
from aumann.scenarios.megascale_social.config import MegaScaleConfig
from aumann.scenarios.megascale_social.indicators import cascade_indicator, indicator
from aumann.studies.context import RunContext
from aumann.studies.megascale.deletion import cascade_deletion
from aumann.studies.megascale.measures import nonzero_tau, policy_label
from aumann.studies.megascale.scale import fidelity_check, llm_ablation, tier_table
from aumann.studies.stages import Stage, register_stage

USAGE_KEYS = ("calls", "cache_hits", "retries", "failures", "prompt_tokens", "completion_tokens", "decisions",
              "planned_calls", "latency_p50_s", "latency_p95_s", "cost_usd", "fork_decisions", "fork_calls")


def llm_usage(model: Any, ledger: dict[str, Any]) -> dict[str, Any]:
    """The run's ``llm_usage`` (the keys of the manifest): the backend's counters, with ``decisions`` /
    ``fork_decisions`` from the decider's ledger (factual run vs forks) and ``decisions_per_step``.

    The backend's counters include the scale checks (fidelity, LLM ablation) made with it; ``calls``
    of the offline policy count policy evaluations (nothing is sent)."""
    backend = getattr(model, "backend", None)
    raw = dict(backend.usage.as_dict()) if hasattr(backend, "usage") else {}
    from aumann.simulators.llm import OfflineBackend

    offline = isinstance(backend, OfflineBackend)  # an LLM backend (openai, local, a registered one) sends
    if offline:  # the offline policy sends nothing: its "calls" are policy evaluations
        raw["policy_evaluations"] = raw.get("calls", 0)
        raw["calls"] = raw["planned_calls"] = 0
    out: dict[str, Any] = {k: raw.get(k, 0) for k in USAGE_KEYS}
    for k in ("latency_p50_s", "latency_p95_s", "cost_usd"):
        out[k] = float(raw.get(k, 0.0))
    # the ledger counts every decision asked; the account's decisions are the answered ones (abstentions are
    # invalid_decisions: counted in both, a run where every agent abstained read as 50 % invalid)
    out["decisions"] = int(ledger["decisions"]) - int(ledger.get("invalid_decisions", 0))
    out["fork_decisions"] = int(ledger["fork_decisions"]) - int(ledger.get("fork_invalid_decisions", 0))
    out["fork_calls"] = int(raw.get("fork_calls", 0))
    out["decisions_per_step_max"] = int(ledger["max_decisions_per_step"])
    out["backend_requests"] = int(ledger["backend_requests"])
    if offline:
        out["policy_evaluations"] = int(raw.get("policy_evaluations", 0))
    return out


@dataclass
class _State:
    """What the stages of one run share: the record section, the indicators, φ at t*, the seconds."""

    record: dict[str, Any]
    x: np.ndarray  # features at t* (N, D)
    z0: np.ndarray
    rng: np.random.Generator
    timings: dict[str, float] = field(default_factory=dict)
    fc: Any = None  # f_casc and its original
    fco: Any = None
    phi_p: np.ndarray | None = None  # exact φ of f_prop and f_casc at t*
    phi_c: np.ndarray | None = None
    fc_values: tuple[float, float] = (math.nan, math.nan)  # f_casc at t* and its Δv

    def table(self, name: str, rows: list[dict[str, Any]]) -> None:
        self.record["tables"][name] = rows


def _state(ctx: RunContext) -> _State:
    """The shared state, made (with the record's first keys) by the first stage that runs.

    The record section is ``rec["analysis"]``, the one :func:`~aumann.studies.stages.add_table` writes to: a table
    a user stage added before is kept, and where lanes merged this section into another lane's dict of the same
    key (a user stage's table in lane ``study``), the state follows the merged dict, so that a later stage
    (``decisions``) still writes into the record."""
    st = ctx.extras.get("megascale")
    if st is None:
        model, panel = ctx.run.model, ctx.panel
        record = ctx.rec.setdefault("analysis", {})
        policy = policy_label(ctx.options.backend_label, model, offline=ctx.options.offline_policy_decides())
        record.update({"policy": policy, "t_star": ctx.t_star,
                       "agents": panel.shape[1], "edges": int(model.world.network.nnz)})
        record.setdefault("tables", {})
        st = ctx.extras["megascale"] = _State(record=record, x=np.asarray(panel.values[ctx.t_star], dtype=np.float64),
                                              z0=np.asarray(ctx.z0, dtype=np.float64), rng=ctx.rng("scenario"))
        record["timings"] = st.timings
    elif isinstance(ctx.rec.get("analysis"), dict) and ctx.rec["analysis"] is not st.record:
        st.record = ctx.rec["analysis"]
    return st


def _timed(st: _State, key: str, fn: Any) -> Any:
    t0 = time.perf_counter()
    out = fn()
    st.timings[key] = time.perf_counter() - t0
    return out


def exact_attribution(ctx: RunContext, st: _State) -> None:
    """The ``exact_attribution`` table: f_prop's closed form against the engine; f_casc by three routes."""
    cfg, x, z0 = ctx.config, st.x, st.z0
    ctx.tick("cascade pressure: exact attribution")
    fp = indicator(cfg)
    phi_p, fp1, fp0, info_p = _timed(st, "propagation_exact", lambda: fp.exact(x, z0))
    engine_p = np.asarray(ctx.outputs["aumann_shapley"].phi)
    rows = [{"indicator": fp.name, "method": "closed form (3 scalar integrals)",
             "efficiency_gap": abs(float(phi_p.sum()) - (fp1 - fp0)),
             "max_abs_diff_vs_closed_form": 0.0},
            {"indicator": fp.name, "method": f"engine pooled path (Gauss–Legendre K={cfg.study.quadrature_steps})",
             "efficiency_gap": abs(float(engine_p.sum()) - (fp1 - fp0)),
             "max_abs_diff_vs_closed_form": float(np.max(np.abs(engine_p - phi_p)))}]
    world = ctx.run.model.world
    st.fc, st.fco = fc, _ = cascade_indicator(world, cfg), cascade_indicator(world, cfg, smooth=False)
    phi_c, fc1, fc0, info_c = _timed(st, "cascade_exact", lambda: fc.exact(x, z0))
    dv = fc1 - fc0
    rows.append({"indicator": fc.name, "method": f"closed form ({info_c['degree'] + 1} sparse mat-vecs)",
                 "efficiency_gap": abs(float(phi_c.sum()) - dv),
                 "max_abs_diff_vs_closed_form": 0.0})
    K = cfg.cascade_quadrature_steps
    phi_gl = _timed(st, "cascade_gauss_legendre", lambda: fc.gauss_legendre(x, z0, steps=K))
    rows.append({"indicator": fc.name, "method": f"Gauss–Legendre K={K}, analytic gradient",
                 "efficiency_gap": abs(float(phi_gl.sum()) - dv),
                 "max_abs_diff_vs_closed_form": float(np.max(np.abs(phi_gl - phi_c)))})
    pt = Panel(x[None], features=ctx.panel.features, agent_ids=ctx.panel.agent_ids)
    res_ag = _timed(st, "cascade_autograd", lambda: attribute(fc, pt, method=AumannShapley(steps=K, closed_form=False),
                                                              baseline=z0))
    rows.append({"indicator": fc.name, "method": f"engine autograd K={K}, custom sparse backward",
                 "efficiency_gap": float(res_ag.max_efficiency_gap),
                 "max_abs_diff_vs_closed_form": float(np.max(np.abs(res_ag.phi[0] - phi_c)))})
    st.table("exact_attribution", rows)
    st.record["cascade_scalar_integrals"] = info_c
    st.record["propagation_scalar_integrals"] = info_p
    st.phi_p, st.phi_c = phi_p, phi_c
    st.fc_values = (fc1, dv)


def cascade_table(ctx: RunContext, st: _State) -> None:
    """The ``cascade`` table: f_casc's faithfulness table (sampled Shapley, leave-one-out, deletion, τ)."""
    cfg, x, z0, fc = ctx.config, st.x, st.z0, st.fc
    ctx.tick("cascade pressure: sampled Shapley")
    m = cfg.cascade_permutations
    g_ref, g_ceil, g_rand = (np.random.default_rng(s) for s in np.random.SeedSequence(
        list(st.rng.integers(2**32, size=4))).spawn(3))
    pt = Panel(x[None], features=ctx.panel.features, agent_ids=ctx.panel.agent_ids)
    anti = bool(cfg.study.antithetic) and m % 2 == 0
    ss = _timed(st, "cascade_sampled_shapley", lambda: attribute(
        fc, pt, method=SampledShapley(permutations=m, antithetic=anti), baseline=z0, rng=g_ref))
    ss2 = _timed(st, "cascade_sampled_shapley_ceiling", lambda: attribute(
        fc, pt, method=SampledShapley(permutations=m, antithetic=anti), baseline=z0, rng=g_ceil))
    loo = _timed(st, "cascade_leave_one_out", lambda: attribute(fc, pt, method=LeaveOneOut(), baseline=z0))
    phis = {"aumann_shapley": st.phi_c, "sampled_shapley": ss.phi[0], "leave_one_out": loo.phi[0]}
    support = np.flatnonzero(fc.r_numpy(x) != fc.r_numpy(np.array(np.broadcast_to(z0, x.shape))))
    st.record["cascade_active_agents"] = int(support.size)
    ctx.tick("cascade pressure: deletion")
    dele = cascade_deletion(cfg, ctx.run, ctx.scenario, fc, st.fco, x, z0, phis, ctx.t_star, ctx.sizes, g_rand,
                            threads=ctx.options.fork_threads)
    rows, top_k = [], ctx.sizes.top_k
    for name in ("aumann_shapley", "sampled_shapley", "leave_one_out", "random"):
        row = {"method": name, **dele["rows"][name]}
        if name in phis and name != "sampled_shapley":
            row["kendall_tau"] = nonzero_tau(phis[name], phis["sampled_shapley"], support)
            row["jaccard_top10"] = float(topk_jaccard(phis[name], phis["sampled_shapley"], top_k))
        else:
            row["kendall_tau"] = row["jaccard_top10"] = math.nan
        rows.append(row)
    for row in rows:
        row["kendall_tau_ceiling"] = nonzero_tau(ss2.phi[0], ss.phi[0], support)
        row["jaccard_ceiling"] = float(topk_jaccard(ss2.phi[0], ss.phi[0], top_k))
        row["permutations"] = m  # of sampled Shapley and its ceiling twin ([large].cascade_permutations at scale)
    st.table("cascade", rows)
    st.record["cascade"] = {"f_t_star": st.fc_values[0], "f_original_t_star": dele["f_original"],
                            "delta_v": st.fc_values[1], "permutations": m,
                            "sampled_shapley_info": ss.provenance.get("per_step"),
                            "tau_support": "agents with r_i ≠ r⁰_i (all others are null players: 0 in every method)"}
    if dele.get("pooled_fallback"):  # why the cascade's deletion forks were evaluated in full (absent when not)
        st.record["cascade"]["pooled_fallback"] = dele["pooled_fallback"]
    ctx.arrays.update({"analysis_cascade_phi_aumann_shapley": st.phi_c,
                       "analysis_cascade_phi_sampled_shapley": ss.phi[0],
                       "analysis_cascade_phi_leave_one_out": loo.phi[0],
                       **{f"analysis_cascade_{k}": np.asarray(v) for k, v in dele["arrays"].items()}})


def cascade_pressure(ctx: RunContext) -> None:
    """Stage ``cascade pressure``: the ``exact_attribution`` and ``cascade`` tables."""
    st = _state(ctx)
    exact_attribution(ctx, st)
    cascade_table(ctx, st)


def cascade_smoothing_gap(ctx: RunContext) -> None:
    """Stage ``cascade smoothing gap``: both indicators against their originals (the ``smoothing_gap`` table)."""
    st = _state(ctx)
    ctx.tick("cascade smoothing gap")
    panel, ts, fc, fco = ctx.panel, ctx.t_star, st.fc, st.fco
    fc_series, fco_series = np.empty(panel.shape[0]), np.empty(panel.shape[0])
    for t in range(panel.shape[0]):  # each step with its living mask; a spilled panel's pages read handed back
        step = EvalContext.at_step(panel, t)
        fc_series[t], fco_series[t] = fc.value_pair(fco, step)  # one pass over the graph for both
        drop_resident(panel.values)
    fv, fov = np.asarray(ctx.f_values), np.asarray(ctx.f_original_values)
    phi_co = fco.gauss_legendre(st.x, st.z0, steps=ctx.config.cascade_quadrature_steps)
    phi_c = st.phi_c
    st.table("smoothing_gap", [
        {"indicator": indicator(ctx.config).name, "max_abs_gap": float(np.max(np.abs(fv - fov))),
         "max_rel_gap": relative_gap(fv, fov)[0],
         "t_star_abs_gap": float(abs(fv[ts] - fov[ts])), "t_star_kendall_tau": math.nan},
        {"indicator": fc.name, "max_abs_gap": float(np.max(np.abs(fc_series - fco_series))),
         "max_rel_gap": relative_gap(fc_series, fco_series)[0],
         "t_star_abs_gap": float(abs(fc_series[ts] - fco_series[ts])),
         "t_star_kendall_tau": nonzero_tau(phi_c, phi_co, np.flatnonzero((phi_c != 0) | (phi_co != 0)))}])
    ctx.arrays["analysis_cascade_f_values"] = fc_series
    ctx.arrays["analysis_cascade_f_original_values"] = fco_series


def tier_shares(ctx: RunContext) -> None:
    """Stage ``tier shares``: R_G by influence tier, full scale against small biased and uniform panels."""
    st = _state(ctx)
    ctx.tick("tier shares")
    st.table("tier_shares", tier_table(ctx.config, ctx.run.model.world, st.x, st.z0, st.phi_p, st.phi_c, st.rng))


def archetype_fidelity(ctx: RunContext) -> None:
    """Stage ``archetype fidelity``: one request per archetype against one per agent."""
    st = _state(ctx)
    ctx.tick("archetype fidelity")
    st.table("fidelity", [_timed(st, "fidelity", lambda: fidelity_check(ctx.config, ctx.run.model, st.rng))])


def decisions_llm_ablation(ctx: RunContext) -> None:
    """Stage ``LLM ablation``: the run with every decision replaced by the mean answer."""
    st = _state(ctx)
    ctx.tick("LLM ablation")
    row, ablated = _timed(st, "llm_ablation", lambda: llm_ablation(ctx.config, ctx.run, np.asarray(ctx.f_values)))
    st.table("llm_ablation", [row])
    ctx.arrays["analysis_llm_ablation_f_values"] = ablated


def decisions(ctx: RunContext) -> None:
    """Stage ``decisions``: requests per step (factual run, forks) and the run's LLM usage."""
    st = _state(ctx)
    model = ctx.run.model
    led = model.decider.ledger.as_dict()
    st.table("decisions", [{"step": t, "requests": n} for t, n in enumerate(led["decisions_per_step"])])
    st.record["decisions"] = {k: v for k, v in led.items() if k != "decisions_per_step"}
    st.record["llm_usage"] = llm_usage(model, led)
    st.record["archetype_keys"] = int(model.spec.n_keys)
    st.record["ranking_note"] = ("deletion rankings: descending φ (ties by position, "
                                 f"{rank_agents.__name__}); K_del = {ctx.sizes.k_del}")


_LANE = "scenario analysis"  # one lane: the stages share _State (its random stream is drawn in this order)


def _when(flag: str | None = None) -> Any:
    def when(scenario: Any, config: Any) -> bool | str:
        if not isinstance(config, MegaScaleConfig):
            return False  # another scenario: not part of its study
        if not config.analysis:
            return "analysis = false"
        if flag is not None and not getattr(config, flag):
            return f"{flag} = {getattr(config, flag)!r}"
        return True

    return when


STAGES = (
    Stage("cascade pressure", cascade_pressure, when=_when(), message="scenario analysis",
          ticks=("cascade pressure: exact attribution", "cascade pressure: sampled Shapley",
                 "cascade pressure: deletion"), lane=_LANE),
    Stage("cascade smoothing gap", cascade_smoothing_gap, when=_when(), needs=("cascade pressure",),
          ticks=("cascade smoothing gap",), lane=_LANE),
    Stage("tier shares", tier_shares, when=_when(), needs=("cascade pressure",), ticks=("tier shares",), lane=_LANE),
    Stage("archetype fidelity", archetype_fidelity, when=_when("fidelity_agents"), ticks=("archetype fidelity",),
          lane=_LANE),
    Stage("LLM ablation", decisions_llm_ablation, when=_when("llm_ablation"), ticks=("LLM ablation",), lane=_LANE),
    Stage("decisions", decisions, when=_when()),  # alone, last: it counts the forks' decisions of every stage
)
"""MegaScale-Social's stages, in order (after the study's own optional stages)."""


def register() -> None:
    """Register :data:`STAGES` with the study (done on import of :mod:`aumann.studies.megascale`)."""
    for stage in STAGES:
        register_stage(stage)


__all__ = ["STAGES", "USAGE_KEYS", "archetype_fidelity", "cascade_pressure", "cascade_smoothing_gap", "decisions",
           "decisions_llm_ablation", "llm_usage", "register", "tier_shares"]
