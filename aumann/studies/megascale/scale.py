"""Scale checks of MegaScale-Social: tier shares vs small biased panels, archetype fidelity, LLM ablation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aumann.attribution.metrics import kendall_tau, topk_jaccard
from aumann.attribution.result import group_shares
from aumann.scenarios.base import target_step
from aumann.scenarios.megascale_social.indicators import CascadePressure, indicator
from aumann.studies.megascale.measures import TIER_COLUMNS
from aumann.tiers import TIER_LABELS, tier_codes, tiers_by_rank


def tier_shares(phi: np.ndarray, tier: np.ndarray) -> dict[str, float]:
    """R_G = Σ_{i∈G} φ_i / Σ_i φ_i per tier label (NaN when Σ φ = 0), every tier reported."""
    return group_shares(phi, tier, groups=TIER_LABELS)


def _shares_rows(name: str, panel: str, n: int, shares: list[dict[str, float]], skipped: int,
                 composition: np.ndarray | None) -> dict[str, Any]:
    row: dict[str, Any] = {"indicator": name, "panel": panel, "n": n, "draws": len(shares), "skipped": skipped}
    for label in TIER_LABELS:
        col = TIER_COLUMNS[label]
        vals = np.array([s[label] for s in shares], dtype=np.float64)
        vals = vals[np.isfinite(vals)]
        row[col] = float(vals.mean()) if vals.size else math.nan
        row[f"{col}_std"] = float(vals.std()) if vals.size > 1 else (0.0 if vals.size else math.nan)
    if composition is not None:
        for g, label in enumerate(TIER_LABELS):
            row[f"agents_{TIER_COLUMNS[label]}"] = float(composition[g])
    return row


def _draw(rng: np.random.Generator, n: int, size: int, p: np.ndarray | None) -> np.ndarray:
    """``size`` of ``n`` agents without replacement, sorted: uniformly, or by successive sampling with
    probabilities ∝ p (Efraimidis–Spirakis keys log(u)/p, the ``size`` largest: O(N) per draw)."""
    if p is None:
        return np.sort(rng.choice(n, size=size, replace=False))
    keys = np.log(rng.random(n)) / p
    return np.sort(np.argpartition(-keys, size - 1)[:size])


def tier_table(cfg: Any, world: Any, x: np.ndarray, z0: np.ndarray, phi_prop: np.ndarray, phi_casc: np.ndarray,
               rng: np.random.Generator) -> list[dict[str, Any]]:
    """R_G by influence tier: the full population next to visibility-biased and uniform small panels.

    Small panels: ``tier_panel_size`` agents drawn without replacement, with probability ∝ followers + 1
    (visibility-biased) or uniformly; attributed at their own scale (f_prop on the sub-panel's means,
    f_casc on the induced subgraph with c = scale / its own nnz; a draw whose subgraph has no edge, or
    whose indicator does not change, is skipped and counted). Tiers are the full population's."""
    n = x.shape[0]
    tier = tiers_by_rank(world.influence)
    code = tier_codes(tier)
    fp = indicator(cfg)
    A = world.network.symmetric()
    rows = [_shares_rows("propagation_risk", "full population", n, [tier_shares(phi_prop, tier)], 0, None),
            _shares_rows("cascade_pressure", "full population", n, [tier_shares(phi_casc, tier)], 0, None)]
    size = min(cfg.tier_panel_size, n)
    vis = world.network.follower_count().astype(np.float64) + 1.0
    for label, p in (("visibility-biased", vis / vis.sum()), ("uniform", None)):
        sp_prop, sp_casc, comp = [], [], []
        skipped_p = skipped_c = 0
        for _ in range(cfg.tier_panel_draws):
            S = _draw(rng, n, size, p)
            comp.append(np.bincount(code[S], minlength=3) / size)
            phi, f1, f0, _ = fp.exact(x[S], z0[S])
            if f1 != f0:
                sp_prop.append(tier_shares(phi, tier[S]))
            else:
                skipped_p += 1
            sub = A[S][:, S].tocsr()
            if sub.nnz == 0:
                skipped_c += 1
                continue
            fc = CascadePressure(sub, scale=cfg.cascade_scale, threshold=cfg.risk_threshold, check=False)
            phi, f1, f0, _ = fc.exact(x[S], z0[S])
            if f1 != f0:
                sp_casc.append(tier_shares(phi, tier[S]))
            else:
                skipped_c += 1
        composition = np.mean(comp, axis=0)
        rows.append(_shares_rows("propagation_risk", f"{label} N={size}", size, sp_prop, skipped_p, composition))
        rows.append(_shares_rows("cascade_pressure", f"{label} N={size}", size, sp_casc, skipped_c, composition))
    return rows


def _f_prop_value(fp: Any, feats: dict[str, np.ndarray]) -> float:
    w = np.asarray(feats["influence"], dtype=np.float64).mean()
    s = np.asarray(feats["risk"], dtype=np.float64).mean()
    a = np.asarray(feats["posted"], dtype=np.float64).mean() + np.asarray(feats["reshared"], dtype=np.float64).mean()
    return float(np.log1p(fp.scale * w * s * a))


def fidelity_check(cfg: Any, model: Any, rng: np.random.Generator) -> dict[str, Any]:
    """One request per archetype vs one per agent on a fresh world of ``fidelity_agents`` agents.

    Both runs share the world and the counter-based draws (same step key), so they differ only in how
    decisions are made. Compared: the f_prop series and the endorsement share (max |Δ|, correlation),
    t*, and the Aumann–Shapley ranking at the archetype run's t* (Kendall τ, top-10 and top-100 Jaccard)."""
    from aumann.scenarios.megascale_social.features import baseline_features, make_recorder
    from aumann.scenarios.megascale_social.model import MegaScaleSocial, world_for
    from aumann.simulators import indicator_values, simulate

    n_f = int(cfg.fidelity_agents)
    T_f = int(min(cfg.steps, cfg.fidelity_steps))
    cfg_f = cfg.model_copy(update={"agents": n_f, "steps": T_f})
    world = world_for(cfg_f, np.random.default_rng(int(rng.integers(2**63))), fixture=model.world.fixture)
    key = int(rng.integers(2**63))
    backend = model.decider.backend
    fp = indicator(cfg)
    out: dict[str, Any] = {"agents": n_f, "steps": T_f}
    panels, series, models = {}, {}, {}
    for mode in ("archetype", "agent"):
        m = MegaScaleSocial(cfg_f, rng=0, world=world, backend=backend, mode=mode, step_key=key)
        panels[mode] = simulate(m, T_f, make_recorder(cfg_f))
        series[mode] = indicator_values(fp, panels[mode])
        models[mode] = m
        per = m.decider.ledger.per_step()
        out[f"requests_per_step_{mode}"] = float(np.mean(per)) if per else 0.0
    fa, fi = series["archetype"], series["agent"]
    ea = models["archetype"].datacollector.get_model_vars_dataframe()["endorse_share"].to_numpy()
    ei = models["agent"].datacollector.get_model_vars_dataframe()["endorse_share"].to_numpy()
    ts = target_step(fa)
    z0 = baseline_features(models["archetype"], cfg_f)
    phis = [fp.exact(np.asarray(panels[m].values[ts], dtype=np.float64), z0)[0] for m in ("archetype", "agent")]
    out.update({
        "f_max_abs_diff": float(np.max(np.abs(fa - fi))),
        "f_max_rel_diff": float(np.max(np.abs(fa - fi)) / max(float(np.max(np.abs(fi))), 1e-12)),
        "f_corr": float(np.corrcoef(fa, fi)[0, 1]) if np.std(fa) > 0 and np.std(fi) > 0 else math.nan,
        "endorse_share_max_abs_diff": float(np.max(np.abs(ea - ei))),
        "t_star_archetype": ts, "t_star_agent": target_step(fi),
        "kendall_tau": float(kendall_tau(phis[0], phis[1])),
        "jaccard_top10": float(topk_jaccard(phis[0], phis[1], min(10, n_f // 2))),
        "jaccard_top100": float(topk_jaccard(phis[0], phis[1], min(100, n_f // 2))),
    })
    return out


def llm_ablation(cfg: Any, run: Any, f_factual: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """Re-simulate the run with every decision replaced by the factual run's mean answer (same world and
    draws); compare the f_prop series. Returns (row, ablated series)."""
    from aumann.scenarios.megascale_social.model import MegaScaleSocial

    model = run.model
    mean = model.answer_sum / max(1, model.answer_count)
    m = MegaScaleSocial(model.config, rng=0, world=model.world, backend=model.decider.backend, constant=mean,
                        step_key=model.step_key)
    fp = indicator(cfg)
    T = len(f_factual)
    ablated = np.empty(T)
    for t in range(T):
        m.step()
        ablated[t] = _f_prop_value(fp, m.features())
    diff = np.abs(ablated - f_factual)
    f_range = float(np.max(f_factual) - np.min(f_factual))
    row = {"mean_post": float(mean[0]), "mean_reshare": float(mean[1]), "mean_stance_shift": float(mean[2]),
           "f_max_abs_diff": float(diff.max()), "f_mean_abs_diff": float(diff.mean()),
           "f_max_abs_diff_over_range": float(diff.max() / f_range) if f_range > 0 else math.nan,
           "t_star_factual": target_step(f_factual), "t_star_ablated": target_step(ablated),
           "endorse_share_final_factual": float(model.last.get("endorse_share", math.nan)),
           "endorse_share_final_ablated": float(m.last.get("endorse_share", math.nan))}
    return row, ablated


__all__ = ["fidelity_check", "llm_ablation", "tier_table"]
