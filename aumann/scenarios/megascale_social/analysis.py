"""MegaScale-Social's analysis beside the standard faithfulness study (one call per run, at t*).

The study driver (:mod:`aumann.studies.faithfulness`) has already attributed the pooled propagation
risk f_prop (the faithfulness table). This adds, as tables in the run directory:

* ``exact_attribution`` — the exact Aumann–Shapley value at t* of f_prop (closed form) and of the
  cascade pressure f_casc by three routes: the closed form (p + 1 sparse mat-vecs), Gauss–Legendre on
  the analytic gradient, and the engine's generic path integral through torch autograd with the custom
  sparse mat-vec backward; seconds, efficiency gap and the largest difference to the closed form;
* ``cascade`` — f_casc evaluated like the faithfulness table: sampled Shapley (m permutations, the
  O(N + nnz)-per-permutation edge fast path) and its noise-ceiling twin, leave-one-out (closed form),
  deletion under the masking oracle (K_del and the log-k grid) and under the re-simulation oracle
  (K_del), rank agreement with sampled Shapley. Kendall τ is taken over the agents with r_i ≠ r⁰_i —
  the only ones any method can credit (every other agent is a null player: exactly 0 everywhere);
* ``smoothing_gap`` — both indicators against their non-smooth originals;
* ``tier_shares`` — R_G by influence tier (top 1 %, next 9 %, tail 90 %) at full scale, next to
  visibility-biased N = ``tier_panel_size`` panels drawn from the same run (agents drawn with
  probability ∝ followers + 1, attributed at their own scale: f_prop on the sub-panel's means, f_casc on
  the induced subgraph) and uniform panels of the same size;
* ``fidelity`` — the archetype-fidelity check: a fresh world of ``fidelity_agents`` agents simulated
  twice with the same draws, once with one request per occupied archetype and once with one request
  per agent, compared on the macro series and on the attribution ranking at t*;
* ``llm_ablation`` — the run re-simulated with the decisions replaced by a constant table (the mean
  answer of the factual run), compared on the macro series;
* ``decisions`` — requests per step of the factual run (occupied archetypes) and of the forks.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from aumann.attribution import AumannShapley, LeaveOneOut, Panel, SampledShapley, attribute
from aumann.attribution.metrics import rank_agents, topk_jaccard
from aumann.scenarios.megascale_social.analysis_deletion import cascade_deletion
from aumann.scenarios.megascale_social.analysis_scale import fidelity_check, llm_ablation, tier_table
from aumann.scenarios.megascale_social.indicators import cascade_indicator, indicator
from aumann.scenarios.megascale_social.measures import nonzero_tau, policy_label


def _rel(f_full: float, vals: np.ndarray) -> np.ndarray:
    return (f_full - np.asarray(vals)) / f_full if f_full != 0 else np.full(np.shape(vals), math.nan)


USAGE_KEYS = ("calls", "cache_hits", "retries", "failures", "prompt_tokens", "completion_tokens", "decisions",
              "planned_calls", "latency_p50_s", "latency_p95_s", "cost_usd", "fork_decisions", "fork_calls")


def llm_usage(model: Any, ledger: dict[str, Any]) -> dict[str, Any]:
    """The run's ``llm_usage`` (the keys of the manifest): the backend's counters, with ``decisions`` /
    ``fork_decisions`` from the decider's ledger (factual run vs forks) and ``decisions_per_step``.

    The backend's counters include the scale checks (fidelity, LLM ablation) made with it; ``calls``
    of the offline policy count policy evaluations (nothing is sent)."""
    backend = getattr(model, "backend", None)
    raw = dict(backend.usage.as_dict()) if hasattr(backend, "usage") else {}
    offline = getattr(backend, "name", "") != "openai"
    if offline:  # the offline policy sends nothing: its "calls" are policy evaluations
        raw["policy_evaluations"] = raw.get("calls", 0)
        raw["calls"] = raw["planned_calls"] = 0
    out: dict[str, Any] = {k: raw.get(k, 0) for k in USAGE_KEYS}
    for k in ("latency_p50_s", "latency_p95_s", "cost_usd"):
        out[k] = float(raw.get(k, 0.0))
    out["decisions"] = int(ledger["decisions"])
    out["fork_decisions"] = int(ledger["fork_decisions"])
    out["fork_calls"] = int(raw.get("fork_calls", 0))
    out["decisions_per_step_max"] = int(ledger["max_decisions_per_step"])
    out["backend_requests"] = int(ledger["backend_requests"])
    if offline:
        out["policy_evaluations"] = int(raw.get("policy_evaluations", 0))
    return out


def analyse(cfg: Any, run: Any, study: dict[str, Any]) -> dict[str, Any]:
    """The scenario analysis (see the module docstring); returns record, arrays and tables."""
    tick = study.get("tick") or (lambda _m: None)
    ts, z0, rng = int(study["t_star"]), np.asarray(study["z0"], dtype=np.float64), study["rng"]
    sizes = study["sizes"]
    model, panel = run.model, run.panel
    world = model.world
    T, N, _ = panel.shape
    x = np.asarray(panel.values[ts], dtype=np.float64)
    timings: dict[str, float] = {}
    record: dict[str, Any] = {"policy": policy_label(study.get("backend_label", "offline"), model), "t_star": ts,
                              "agents": N, "edges": int(world.network.nnz)}
    tables: dict[str, list[dict[str, Any]]] = {}
    arrays: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ exact attribution at t*
    tick("cascade pressure: exact attribution")
    fp = indicator(cfg)
    t0 = time.perf_counter()
    phi_p, fp1, fp0, info_p = fp.exact(x, z0)
    timings["propagation_exact"] = time.perf_counter() - t0
    engine_p = np.asarray(study["phi"]["aumann_shapley"])
    rows = [{"indicator": fp.name, "method": "closed form (3 scalar integrals)",
             "seconds": timings["propagation_exact"], "efficiency_gap": abs(float(phi_p.sum()) - (fp1 - fp0)),
             "max_abs_diff_vs_closed_form": 0.0},
            {"indicator": fp.name, "method": f"engine pooled path (Gauss–Legendre K={cfg.study.quadrature_steps})",
             "seconds": math.nan, "efficiency_gap": abs(float(engine_p.sum()) - (fp1 - fp0)),
             "max_abs_diff_vs_closed_form": float(np.max(np.abs(engine_p - phi_p)))}]
    fc = cascade_indicator(world, cfg)
    fco = cascade_indicator(world, cfg, smooth=False)
    t0 = time.perf_counter()
    phi_c, fc1, fc0, info_c = fc.exact(x, z0)
    timings["cascade_exact"] = time.perf_counter() - t0
    dv = fc1 - fc0
    rows.append({"indicator": fc.name, "method": f"closed form ({info_c['degree'] + 1} sparse mat-vecs)",
                 "seconds": timings["cascade_exact"], "efficiency_gap": abs(float(phi_c.sum()) - dv),
                 "max_abs_diff_vs_closed_form": 0.0})
    K = cfg.cascade_quadrature_steps
    t0 = time.perf_counter()
    phi_gl = fc.gauss_legendre(x, z0, steps=K)
    timings["cascade_gauss_legendre"] = time.perf_counter() - t0
    rows.append({"indicator": fc.name, "method": f"Gauss–Legendre K={K}, analytic gradient",
                 "seconds": timings["cascade_gauss_legendre"], "efficiency_gap": abs(float(phi_gl.sum()) - dv),
                 "max_abs_diff_vs_closed_form": float(np.max(np.abs(phi_gl - phi_c)))})
    pt = Panel(x[None], features=panel.features, agent_ids=panel.agent_ids)
    t0 = time.perf_counter()
    res_ag = attribute(fc, pt, method=AumannShapley(steps=K, closed_form=False), baseline=z0)
    timings["cascade_autograd"] = time.perf_counter() - t0
    rows.append({"indicator": fc.name, "method": f"engine autograd K={K}, custom sparse backward",
                 "seconds": timings["cascade_autograd"], "efficiency_gap": float(res_ag.max_efficiency_gap),
                 "max_abs_diff_vs_closed_form": float(np.max(np.abs(res_ag.phi[0] - phi_c)))})
    tables["exact_attribution"] = rows
    record["cascade_scalar_integrals"] = info_c
    record["propagation_scalar_integrals"] = info_p

    # ------------------------------------------------------------------ cascade pressure: the faithfulness table
    tick("cascade pressure: sampled Shapley")
    m = cfg.cascade_permutations
    g_ref, g_ceil, g_rand = (np.random.default_rng(s) for s in np.random.SeedSequence(
        list(rng.integers(2**32, size=4))).spawn(3))
    t0 = time.perf_counter()
    anti = bool(cfg.study.antithetic) and m % 2 == 0
    ss = attribute(fc, pt, method=SampledShapley(permutations=m, antithetic=anti), baseline=z0, rng=g_ref)
    timings["cascade_sampled_shapley"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ss2 = attribute(fc, pt, method=SampledShapley(permutations=m, antithetic=anti), baseline=z0, rng=g_ceil)
    timings["cascade_sampled_shapley_ceiling"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    loo = attribute(fc, pt, method=LeaveOneOut(), baseline=z0)
    timings["cascade_leave_one_out"] = time.perf_counter() - t0
    phis = {"aumann_shapley": phi_c, "sampled_shapley": ss.phi[0], "leave_one_out": loo.phi[0]}
    support = np.flatnonzero(fc.r_numpy(x) != fc.r_numpy(np.array(np.broadcast_to(z0, x.shape))))
    record["cascade_active_agents"] = int(support.size)
    tick("cascade pressure: deletion")
    dele = cascade_deletion(cfg, run, study["scenario"], fc, fco, x, z0, phis, ts, sizes, g_rand)
    crow = []
    secs = {"aumann_shapley": timings["cascade_exact"], "sampled_shapley": timings["cascade_sampled_shapley"],
            "leave_one_out": timings["cascade_leave_one_out"]}
    for name in ("aumann_shapley", "sampled_shapley", "leave_one_out", "random"):
        row = {"method": name, **dele["rows"][name]}
        if name in phis and name != "sampled_shapley":
            row["kendall_tau"] = nonzero_tau(phis[name], phis["sampled_shapley"], support)
            row["jaccard_top10"] = float(topk_jaccard(phis[name], phis["sampled_shapley"], sizes.top_k))
        else:
            row["kendall_tau"] = row["jaccard_top10"] = math.nan
        row["seconds"] = secs.get(name, math.nan)
        crow.append(row)
    for row in crow:
        row["kendall_tau_ceiling"] = nonzero_tau(ss2.phi[0], ss.phi[0], support)
        row["jaccard_ceiling"] = float(topk_jaccard(ss2.phi[0], ss.phi[0], sizes.top_k))
    tables["cascade"] = crow
    record["cascade"] = {"f_t_star": fc1, "f_original_t_star": dele["f_original"], "delta_v": dv,
                         "permutations": m, "sampled_shapley_info": ss.provenance.get("per_step"),
                         "tau_support": "agents with r_i ≠ r⁰_i (all others are null players: 0 in every method)"}
    arrays.update({"cascade_phi_aumann_shapley": phi_c, "cascade_phi_sampled_shapley": ss.phi[0],
                   "cascade_phi_leave_one_out": loo.phi[0], **{f"cascade_{k}": v for k, v in dele["arrays"].items()}})

    # ------------------------------------------------------------------ smoothing gaps
    tick("smoothing gaps")
    fc_series = np.array([fc.value(panel.values[t]) for t in range(T)])
    fco_series = np.array([fco.value(panel.values[t]) for t in range(T)])
    fv, fov = np.asarray(study["f_values"]), np.asarray(study["f_original_values"])
    phi_co = fco.gauss_legendre(x, z0, steps=K)
    tables["smoothing_gap"] = [
        {"indicator": fp.name, "max_abs_gap": float(np.max(np.abs(fv - fov))),
         "max_rel_gap": float(np.max(np.abs(fv - fov) / np.maximum(np.abs(fov), 1e-12))),
         "t_star_abs_gap": float(abs(fv[ts] - fov[ts])), "t_star_kendall_tau": math.nan},
        {"indicator": fc.name, "max_abs_gap": float(np.max(np.abs(fc_series - fco_series))),
         "max_rel_gap": float(np.max(np.abs(fc_series - fco_series) / np.maximum(np.abs(fco_series), 1e-12))),
         "t_star_abs_gap": float(abs(fc_series[ts] - fco_series[ts])),
         "t_star_kendall_tau": nonzero_tau(phi_c, phi_co, np.flatnonzero((phi_c != 0) | (phi_co != 0)))}]
    arrays["cascade_f_values"] = fc_series
    arrays["cascade_f_original_values"] = fco_series

    # ------------------------------------------------------------------ tiers: full scale vs N = 100 panels
    tick("tier shares")
    tables["tier_shares"] = tier_table(cfg, world, x, z0, phi_p, phi_c, rng)

    # ------------------------------------------------------------------ archetype fidelity, LLM ablation
    if cfg.fidelity_agents:
        tick("archetype fidelity")
        t0 = time.perf_counter()
        tables["fidelity"] = [fidelity_check(cfg, model, rng)]
        timings["fidelity"] = time.perf_counter() - t0
    if cfg.llm_ablation:
        tick("LLM ablation")
        t0 = time.perf_counter()
        row, ablated = llm_ablation(cfg, run, fv)
        tables["llm_ablation"] = [row]
        arrays["llm_ablation_f_values"] = ablated
        timings["llm_ablation"] = time.perf_counter() - t0

    # ------------------------------------------------------------------ decisions per step
    led = model.decider.ledger.as_dict()
    tables["decisions"] = [{"step": t, "requests": n} for t, n in enumerate(led["decisions_per_step"])]
    record["decisions"] = {k: v for k, v in led.items() if k != "decisions_per_step"}
    record["llm_usage"] = llm_usage(model, led)
    record["archetype_keys"] = int(model.spec.n_keys)
    record["timings"] = timings
    record["ranking_note"] = ("deletion rankings: descending φ (ties by position, "
                              f"{rank_agents.__name__}); K_del = {sizes.k_del}")
    return {"record": record, "arrays": arrays, "tables": tables}


__all__ = ["analyse"]
