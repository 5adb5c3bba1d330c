"""The deletion-faithfulness study over any registered scenario (paper, Appendix P).

Per run r (seeds spawned from the config's root seed):

1. simulate T steps; f(z_t) for every step; the target t* = argmax_{t ≥ ⌈T/2⌉} f(z_t);
2. the per-agent baseline z⁰ = the features every agent would have under the baseline action at t*
   (:meth:`Scenario.baseline_features`), so attribution and deletion remove the same thing;
3. attributions at t* with that baseline: ``aumann_shapley`` (straight-path Aumann–Shapley,
   Gauss–Legendre quadrature), ``sampled_shapley`` (the reference: the per-step masking game
   v(S) = f(z⁰ + 1_S ⊙ (z − z⁰)) with ``permutations`` permutations, or the re-simulation game in
   which non-members take the baseline action and t* is replayed), ``leave_one_out``; a second
   sampled-Shapley run with an independent seed gives the noise ceiling;
4. when the scenario has a step map: ``action_aumann_shapley``, the Aumann–Shapley value of the
   re-simulation game through the simulator (:func:`aumann.evaluation.action_attribution`); with
   ``resimulation_reference``, sampled Shapley on the re-simulation game
   (``sampled_shapley_resimulation``, two seeds for its noise ceiling); and the ``llm_judge`` row
   (:mod:`aumann.evaluation.judge`; the heuristic stand-in offline);
5. deletion (:mod:`aumann.evaluation.deletion`) by each method's ranking (descending φ; descending |φ|
   reported beside it), and Random (mean over ``random_orderings`` orderings), under both oracles:
   re-simulation (``deletion_auc``, ``drop_at_5``) and masking (``deletion_auc_masking``,
   ``drop_at_5_masking``);
6. agreement with the reference: Kendall τ and top-k Jaccard (k = min(10, N/2)); the ceiling is the
   agreement of the two sampled-Shapley runs; on the re-simulation game, the agreement of
   ``action_aumann_shapley`` (and the others) with ``sampled_shapley_resimulation``;
7. the ablations (:mod:`aumann.evaluation.ablations`).

The run record's JSON structure is documented in ``docs/scenarios.md`` ("Run records").

Each run is written atomically to ``runs/run-NNN.json`` (+ ``.npz`` arrays) as soon as it finishes, the
record with a SHA-256 checksum of its content and of its arrays; :func:`run_study` skips runs already on
disk with the same config (resume) after verifying them (:func:`verify_run`), and recomputes — and lists
in ``StudyResult.failed_checks`` — any whose files are truncated, incomplete or edited.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aumann.attribution.metrics import kendall_tau, log_k_grid, rank_agents, topk_jaccard
from aumann.errors import ConfigError, StudyError
from aumann.evaluation.deletion import (
    DeletionOracle,
    MaskingOracle,
    deletion_summary,
    grid_summary,
    random_grid_summary,
    random_summary,
    resimulation_game,
)
from aumann.io import ensure_output_dir, plain, read_npz, record_checksum, sha256_file, write_json, write_npz
from aumann.scenarios.base import Scenario, ScenarioConfig, target_step
from aumann.simulators import indicator_values

METHODS = ("aumann_shapley", "sampled_shapley", "leave_one_out", "action_aumann_shapley",
           "sampled_shapley_resimulation", "llm_judge", "random")
"""Every row the table can have, in table order (a run has the ones its scenario and config enable)."""
ATTRIBUTED = ("aumann_shapley", "sampled_shapley", "leave_one_out")
"""The feature-game (masking) methods every run has."""
FAITHFULNESS_COLUMNS = ("scenario", "method", "deletion_auc", "drop_at_5", "deletion_auc_masking", "drop_at_5_masking",
                        "kendall_tau", "jaccard_top10", "deletion_auc_std", "drop_at_5_std",
                        "deletion_auc_masking_std", "drop_at_5_masking_std", "kendall_tau_std", "jaccard_top10_std",
                        "kendall_tau_ceiling", "jaccard_ceiling")


@dataclass(frozen=True)
class StudySizes:
    """K_del = min(20, N/2), top-k = min(10, N/2), Drop@k with k = min(5, K_del) (config may override)."""

    k_del: int
    top_k: int
    k_drop: int

    @classmethod
    def of(cls, config: ScenarioConfig, n: int | None = None) -> StudySizes:
        """Sizes for ``n`` players (default ``config.agents``; the agents present before t* when the
        population has births and deaths)."""
        n = config.agents if n is None else int(n)
        k_del = config.study.k_del or max(1, min(20, n // 2))
        top_k = config.study.top_k or max(1, min(10, n // 2))
        return cls(k_del=min(k_del, n), top_k=min(top_k, n), k_drop=min(5, k_del))


def config_digest(scenario: Scenario, config: ScenarioConfig, backend_label: str) -> str:
    """A short hash identifying what a run computes (config + scenario + backend) for resume checks."""
    payload = json.dumps({"scenario": scenario.name, "backend": backend_label,
                          "config": config.model_dump(mode="json", exclude={"runs", "execution"})}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def has_action_row(scenario: Scenario, config: ScenarioConfig) -> bool:
    """Whether runs of ``scenario`` under ``config`` get the ``action_aumann_shapley`` row."""
    return bool(config.study.action_attribution and scenario.step_map is not None)


def judge_backend(config: ScenarioConfig, backend: Any) -> Any:
    """The judge of the ``llm_judge`` row (``None`` when ``study.judge = "off"``).

    ``"auto"``: the run's LLM backend when it has one (not an offline policy), else the heuristic
    stand-in; ``"llm"`` requires an LLM backend (:class:`ConfigError` otherwise).
    """
    from aumann.evaluation.judge import heuristic_backend, with_judge_fallback
    from aumann.simulators.llm import OfflineBackend

    mode = config.study.judge
    is_llm = backend is not None and not isinstance(backend, OfflineBackend)
    if mode == "off":
        return None
    if mode == "llm" and not is_llm:
        raise ConfigError("study.judge = 'llm' needs an LLM backend (--backend openai ...); use 'heuristic' or "
                          "'auto' for the offline stand-in")
    if mode == "llm" or (mode == "auto" and is_llm):
        return with_judge_fallback(backend)  # a dry run's fallback answers the judge with the stand-in
    return heuristic_backend()


def study_stages(scenario: Scenario, config: ScenarioConfig) -> tuple[str, ...]:
    """The progress messages one run of the study emits, in order (for progress bars)."""
    st = config.study
    return ("simulate", "attribute (all steps)", "sampled Shapley (reference)",
            *(("action attribution",) if has_action_row(scenario, config) else ()),
            *(("re-simulation reference",) if st.resimulation_reference else ()),
            *(("judge",) if st.judge != "off" else ()),
            "deletion forks", *(("ablations",) if st.ablations else ()), "done")


def _jaccard_sets(a: np.ndarray, b: np.ndarray) -> float:
    sa, sb = {int(x) for x in a}, {int(x) for x in b}
    return len(sa & sb) / len(sa | sb) if sa | sb else float("nan")


def deletion_sets(phi: dict[str, np.ndarray], sizes: StudySizes, n: Any, orderings: int,
                  rng: np.random.Generator, ranked: Callable[[np.ndarray, str], np.ndarray],
                  extra: Sequence[np.ndarray] = ()) -> list[np.ndarray]:
    """Every deleted set the deletion step will ask the oracle for (so they can be forked at once):
    the prefixes k = 1 … K_del of each method's rankings (every method in ``phi``, by value and by
    |φ|), of the ``extra`` orderings (the judge's) and of the random orderings of ``n`` (a count, or
    the players' positions) -- drawn from a copy of ``rng``, which is left untouched."""
    import copy

    orders = [ranked(phi[m], by) for m in phi for by in ("value", "abs")] + [np.asarray(o) for o in extra]
    g = copy.deepcopy(rng)
    orders += [g.permutation(n) for _ in range(orderings)]
    return [o[:k] for o in orders for k in range(1, sizes.k_del + 1)]


def analyse_run(scenario: Scenario, config: ScenarioConfig, run: Any, seq: np.random.SeedSequence,
                *, tick: Callable[[str], None] | None = None, attribution_prefix: Path | None = None,
                judge: Any = None, fork_threads: int = 1, executor: Any = None, backend_label: str = "offline",
                attributions: dict[str, Any] | None = None,
                ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The study on one simulated run: (JSON-able record, arrays for plots and the run directory).

    Counterfactual forks (deletion curves, the re-simulation game) are computed ahead in batches:
    on ``fork_threads`` threads (so that their LLM requests share the backend's in-flight pool) or
    through ``executor``; the results do not depend on either.

    With ``attribution_prefix`` the :class:`~aumann.attribution.Attribution` objects are saved as
    ``<prefix>-aumann_shapley.npz`` (every step, per-agent baselines), ``-sampled_shapley.npz``,
    ``-sampled_shapley_ceiling.npz``, ``-leave_one_out.npz`` and, when computed,
    ``-action_aumann_shapley.npz`` and ``-sampled_shapley_resimulation.npz`` (step t*);
    ``Attribution.load`` reads them; with ``attributions`` (a dict) they are put there instead, by
    label, for the caller to write (a worker writes nothing). Their wall-clock seconds go to the
    record's ``attribution_seconds`` (moved to ``timings/`` by :func:`split_timing`), never into
    the saved files. ``judge``: the judge backend of the ``llm_judge`` row (:func:`judge_backend`;
    ``None``: no such row).
    """
    import time

    from aumann.attribution import AumannShapley, LeaveOneOut, SampledShapley, attribute
    from aumann.evaluation.action import action_attribution, step_map_gap

    tick = tick or (lambda _msg: None)
    st = config.study
    g_ref, g_ceil, g_rand, g_abl = (np.random.default_rng(s) for s in seq.spawn(4))
    # further streams are spawned after the first four, so they never perturb the streams above
    g_rand_mask, g_rand_grid, g_scenario = (np.random.default_rng(s) for s in seq.spawn(3))
    g_rr, g_rr_ceil, g_judge = (np.random.default_rng(s) for s in seq.spawn(3))
    f, f_orig = scenario.indicators(config)
    panel = run.panel
    _, N, _ = panel.shape
    ids = panel.agent_ids
    fv, fov = indicator_values(f, panel), indicator_values(f_orig, panel)
    ts = target_step(fv)
    # per-agent baselines for every step: the scenario's own (e.g. step-independent (N, D)), or stacked
    # from the checkpoint before each step we hold one for (all steps when keep_from=0)
    z0_all = scenario.baselines(run, config, agent_ids=ids)
    model_before = run.before(ts)
    # the players: agents that can take the baseline action at t* (all N for fixed populations)
    players = scenario.present(model_before, ids)
    everyone = len(players) == N
    is_player = np.zeros(N, dtype=bool)
    is_player[players] = True
    sizes = StudySizes.of(config, n=len(players))
    tick("attribute (all steps)")
    as_method = AumannShapley(steps=st.quadrature_steps, closed_form=False)
    res_all = attribute(f, panel, method=as_method, baseline=z0_all, executor=executor)  # step blocks: same bits
    pt = panel.select_steps([ts])
    z0 = np.ascontiguousarray(z0_all[ts] if z0_all.ndim == 3 else z0_all, dtype=np.float64)
    phi = {"aumann_shapley": res_all.phi[ts]}
    tick("sampled Shapley (reference)")
    oracle = DeletionOracle(scenario, config, model_before, f, f_orig, agent_ids=ids, threads=fork_threads,
                            executor=executor)
    ceil_perm = st.ceiling_permutations or st.permutations
    if st.reference_game == "resimulation":
        game = resimulation_game(oracle, N, players=None if everyone else players)
        ss = SampledShapley(permutations=st.permutations).attribute_game(game, rng=g_ref)
        ss2 = SampledShapley(permutations=ceil_perm).attribute_game(game, rng=g_ceil)
        phi["sampled_shapley"], phi_ceiling = np.zeros(N), np.zeros(N)
        phi["sampled_shapley"][players], phi_ceiling[players] = ss.phi[0], ss2.phi[0]
    else:
        anti = st.antithetic and st.permutations % 2 == 0 and ceil_perm % 2 == 0
        ss = attribute(f, pt, method=SampledShapley(permutations=st.permutations, antithetic=anti), baseline=z0,
                       rng=g_ref)
        ss2 = attribute(f, pt, method=SampledShapley(permutations=ceil_perm, antithetic=anti), baseline=z0,
                        rng=g_ceil)
        phi["sampled_shapley"] = ss.phi[0]
        phi_ceiling = ss2.phi[0]
    loo = attribute(f, pt, method=LeaveOneOut(), baseline=z0)
    phi["leave_one_out"] = loo.phi[0]
    saved = {"aumann_shapley": res_all, "sampled_shapley": ss, "sampled_shapley_ceiling": ss2, "leave_one_out": loo}

    def ranked(values: np.ndarray, by: str) -> np.ndarray:
        order = rank_agents(values, by)
        return order if everyone else order[is_player[order]]

    f_full = (float(fv[ts]), float(fov[ts]))
    masking = MaskingOracle(f, f_orig, pt.values[0], z0, {k: np.asarray(v)[0] for k, v in pt.context.items()})
    grid = log_k_grid(len(players)) if st.log_k_grid else None
    rec: dict[str, Any] = {"t_star": ts, "f_t_star": f_full[0], "f_original_t_star": f_full[1],
                           "efficiency_gap": float(res_all.efficiency_gap[ts]),
                           "delta_v": float(res_all.delta_v[ts]), "methods": {}, "cost": {},
                           "fork_strategy": run.strategy, "players": len(players), "k_del": sizes.k_del,
                           "top_k": sizes.top_k,
                           "policy": "offline policy" if backend_label == "offline" else f"LLM ({backend_label})"}
    if grid is not None:
        rec["log_k_grid"] = grid

    def agree(a: np.ndarray, b: np.ndarray, how: Any, *extra: Any) -> float:
        return float(how(a, b, *extra) if everyone else how(a[players], b[players], *extra))

    arrays: dict[str, np.ndarray] = {"f_values": fv, "f_original_values": fov, "phi_all": res_all.phi,
                                     "phi_ceiling": phi_ceiling}
    rec["cost"]["sampled_shapley"] = {"game": st.reference_game, "evaluations": int(ss.n_evals or 0),
                                      "seconds": float(ss.provenance.get("seconds", math.nan))}

    # step maps describe fixed populations (every agent a player); with births and deaths there is no such row
    if has_action_row(scenario, config) and everyone:
        tick("action attribution")
        act = action_attribution(scenario, model_before, config, steps=st.quadrature_steps, tol=st.action_tol,
                                 step=ts, agent_ids=panel.agent_ids)
        phi["action_aumann_shapley"] = act.phi[0]
        saved["action_aumann_shapley"] = act
        p = act.provenance
        rec["action"] = {k: p[k] for k in ("steps", "tol", "grad_evals", "value_evals", "step_evals", "panels",
                                           "kinks", "converged", "phi_change", "exact_map", "holds", "delta_v_map",
                                           "map_efficiency_gap", "fork_gap", "feature_gap", "seconds")}
        rec["action"].update({"delta_v": float(act.delta_v[0]), "sum_phi": float(act.phi.sum()),
                              "efficiency_gap": float(act.efficiency_gap[0]),
                              "relative_efficiency_gap": float(act.relative_efficiency_gap[0])})
        rec["cost"]["action_aumann_shapley"] = {"game": "resimulation", "step_evals": int(p["step_evals"]),
                                                "grad_evals": int(p["grad_evals"]), "seconds": float(p["seconds"])}

    phi_ceiling_rr = None
    if st.resimulation_reference:
        tick("re-simulation reference")
        if st.reference_game == "resimulation":  # the reference row already plays this game
            rr, rr2, rr_seconds = ss, ss2, float(ss.provenance.get("seconds", math.nan))
        else:
            t_rr = time.perf_counter()
            game = resimulation_game(oracle, N, players=None if everyone else players)
            rr = SampledShapley(permutations=st.permutations).attribute_game(game, rng=g_rr)
            rr_seconds = time.perf_counter() - t_rr
            rr2 = SampledShapley(permutations=ceil_perm).attribute_game(game, rng=g_rr_ceil)
        phi["sampled_shapley_resimulation"], phi_ceiling_rr = np.zeros(N), np.zeros(N)
        phi["sampled_shapley_resimulation"][players], phi_ceiling_rr[players] = rr.phi[0], rr2.phi[0]
        saved["sampled_shapley_resimulation"] = rr
        rec["cost"]["sampled_shapley_resimulation"] = {"game": "resimulation", "step_evals": int(rr.n_evals or 0),
                                                       "seconds": rr_seconds}
        arrays["phi_ceiling_resimulation"] = phi_ceiling_rr

    judged = None
    if judge is not None:
        from aumann.evaluation.judge import ask_judge, judge_trace

        tick("judge")
        trace = judge_trace(scenario.features, panel.values[ts - 1][players] if ts > 0 else None,
                            panel.values[ts][players], z0[players], fv[: ts + 1], ts, sizes.k_del,
                            agent_ids=np.asarray(ids)[players], max_candidates=st.judge_candidates,
                            indicator=getattr(f, "name", "f"))
        judged = ask_judge(trace, judge, seed=int(g_judge.integers(2**31)))
        judge_order = np.asarray(players)[judged.ranking]  # trace positions → panel positions
        arrays["judge_ranking"] = judge_order

    if attribution_prefix is not None or attributions is not None:
        import dataclasses

        for label, res in saved.items():  # wall-clock seconds go to timings/, not into the saved attribution
            prov = dict(res.provenance)
            secs = prov.pop("seconds", None)
            if secs is not None:
                rec.setdefault("attribution_seconds", {})[label] = float(secs)
            res = dataclasses.replace(res, provenance=prov)
            if attributions is not None:
                attributions[label] = res
            else:
                res.save(attribution_prefix.with_name(f"{attribution_prefix.name}-{label}.npz"))

    tick("deletion forks")
    oracle.prefetch(deletion_sets(phi, sizes, N if everyone else players, st.random_orderings, g_rand, ranked,
                                  extra=[judge_order] if judged is not None else ()))
    ref = phi["sampled_shapley"]
    orders: dict[str, np.ndarray] = {}
    for name in (m for m in METHODS if m in phi):
        orders[name] = order = ranked(phi[name], "value")
        by_val = deletion_summary(oracle, f_full, order, sizes.k_del, sizes.k_drop)
        by_mag = deletion_summary(oracle, f_full, ranked(phi[name], "abs"), sizes.k_del, sizes.k_drop)
        by_mask = deletion_summary(masking, f_full, order, sizes.k_del, sizes.k_drop)
        by_mask_mag = deletion_summary(masking, f_full, ranked(phi[name], "abs"), sizes.k_del, sizes.k_drop)
        compare = name != "sampled_shapley"
        rec["methods"][name] = {
            "deletion_auc": by_val["deletion_auc"], "drop_at_5": by_val["drop_at_k"],
            "deletion_auc_original": by_val["deletion_auc_original"],
            "drop_at_5_original": by_val["drop_at_k_original"],
            "deletion_auc_magnitude": by_mag["deletion_auc"], "drop_at_5_magnitude": by_mag["drop_at_k"],
            "deletion_auc_masking": by_mask["deletion_auc"], "drop_at_5_masking": by_mask["drop_at_k"],
            "deletion_auc_masking_magnitude": by_mask_mag["deletion_auc"],
            "drop_at_5_masking_magnitude": by_mask_mag["drop_at_k"],
            "kendall_tau": agree(phi[name], ref, kendall_tau) if compare else math.nan,
            "jaccard_top10": agree(phi[name], ref, topk_jaccard, sizes.top_k) if compare else math.nan,
            "sum_phi": float(np.sum(phi[name])),
        }
        arrays[f"phi_{name}"] = phi[name]
        arrays[f"curve_{name}"] = by_val["curve"]
        arrays[f"curve_original_{name}"] = by_val["curve_original"]
        arrays[f"curve_magnitude_{name}"] = by_mag["curve"]
        arrays[f"curve_masking_{name}"] = by_mask["curve"]
        if grid is not None:
            g_res, g_mask = grid_summary(oracle, f_full, order, grid), grid_summary(masking, f_full, order, grid)
            rec["methods"][name].update({"deletion_auc_logk": g_res["deletion_auc_logk"],
                                         "deletion_auc_logk_masking": g_mask["deletion_auc_logk"]})
            arrays[f"curve_logk_{name}"] = g_res["curve"]
            arrays[f"curve_logk_masking_{name}"] = g_mask["curve"]
    if judged is not None:
        orders["llm_judge"] = judge_order
        jd = deletion_summary(oracle, f_full, judge_order, sizes.k_del, sizes.k_drop)
        jm = deletion_summary(masking, f_full, judge_order, sizes.k_del, sizes.k_drop)
        rec["methods"]["llm_judge"] = {
            "deletion_auc": jd["deletion_auc"], "drop_at_5": jd["drop_at_k"],
            "deletion_auc_original": jd["deletion_auc_original"], "drop_at_5_original": jd["drop_at_k_original"],
            "deletion_auc_magnitude": math.nan, "drop_at_5_magnitude": math.nan,
            "deletion_auc_masking": jm["deletion_auc"], "drop_at_5_masking": jm["drop_at_k"],
            "deletion_auc_masking_magnitude": math.nan, "drop_at_5_masking_magnitude": math.nan,
            "kendall_tau": math.nan,
            "jaccard_top10": _jaccard_sets(judge_order[: sizes.top_k], ranked(ref, "value")[: sizes.top_k]),
            "sum_phi": math.nan,
        }
        arrays["curve_llm_judge"] = jd["curve"]
        arrays["curve_original_llm_judge"] = jd["curve_original"]
        arrays["curve_masking_llm_judge"] = jm["curve"]
        if grid is not None:  # the judge names K_del agents, too few for the log-k grid
            rec["methods"]["llm_judge"].update({"deletion_auc_logk": math.nan, "deletion_auc_logk_masking": math.nan})
        rec["judge"] = {**judged.summary(), "ranking": [int(x) for x in judge_order], "k": sizes.k_del,
                        "top_k": sizes.top_k,
                        "overlap": {m: len({int(x) for x in judge_order[: sizes.top_k]}
                                           & {int(x) for x in ranked(phi[m], "value")[: sizes.top_k]})
                                    for m in METHODS if m in phi}}
    who = N if everyone else players
    rnd = random_summary(oracle, f_full, who, sizes.k_del, sizes.k_drop, st.random_orderings, g_rand)
    rnd_mask = random_summary(masking, f_full, who, sizes.k_del, sizes.k_drop, st.random_orderings, g_rand_mask)
    rec["methods"]["random"] = {"deletion_auc": rnd["deletion_auc"], "drop_at_5": rnd["drop_at_k"],
                                "deletion_auc_original": rnd["deletion_auc_original"],
                                "drop_at_5_original": rnd["drop_at_k_original"],
                                "deletion_auc_magnitude": rnd["deletion_auc"], "drop_at_5_magnitude": rnd["drop_at_k"],
                                "deletion_auc_masking": rnd_mask["deletion_auc"],
                                "drop_at_5_masking": rnd_mask["drop_at_k"],
                                "deletion_auc_masking_magnitude": rnd_mask["deletion_auc"],
                                "drop_at_5_masking_magnitude": rnd_mask["drop_at_k"],
                                "kendall_tau": math.nan, "jaccard_top10": math.nan, "sum_phi": math.nan}
    arrays["curve_random"] = rnd["curve"]
    arrays["curve_original_random"] = rnd["curve_original"]
    arrays["curve_masking_random"] = rnd_mask["curve"]
    if grid is not None:
        g_res = random_grid_summary(oracle, f_full, who, grid, st.random_orderings, g_rand_grid)
        g_mask = random_grid_summary(masking, f_full, who, grid, st.random_orderings, g_rand_grid)
        rec["methods"]["random"].update({"deletion_auc_logk": g_res["deletion_auc_logk"],
                                         "deletion_auc_logk_masking": g_mask["deletion_auc_logk"]})
        arrays["curve_logk_random"] = g_res["curve"]
        arrays["curve_logk_masking_random"] = g_mask["curve"]
    rec["ceiling"] = {"kendall_tau": agree(phi_ceiling, phi["sampled_shapley"], kendall_tau),
                      "jaccard_top10": agree(phi_ceiling, phi["sampled_shapley"], topk_jaccard, sizes.top_k)}
    if phi_ceiling_rr is not None:
        rr_ref = phi["sampled_shapley_resimulation"]
        rec["resimulation_reference"] = {
            "permutations": st.permutations,
            "agreement": {m: {"kendall_tau": agree(phi[m], rr_ref, kendall_tau),
                              "jaccard_top10": agree(phi[m], rr_ref, topk_jaccard, sizes.top_k)}
                          for m in METHODS if m in phi and m != "sampled_shapley_resimulation"},
            "ceiling": {"kendall_tau": agree(phi_ceiling_rr, rr_ref, kendall_tau),
                        "jaccard_top10": agree(phi_ceiling_rr, rr_ref, topk_jaccard, sizes.top_k)},
        }
    if "action_aumann_shapley" in phi:
        sm = scenario.step_map(model_before, config)
        deleted = list({frozenset(int(i) for i in o[:k]) for o in orders.values() for k in range(1, sizes.k_del + 1)})
        vals = [oracle.values(sorted(d))[0] for d in deleted]
        rec["action"]["coalition_gap"] = step_map_gap(sm, f, [sorted(d) for d in deleted], vals,
                                                      scale=rec["action"]["delta_v"], n_features=panel.D)
    rec["forks"] = oracle.forks
    gap = scenario.gap_report(config, pt, ranks=True, method=as_method, baseline=z0).as_dict()
    rec["smoothing_gap"] = {"max_abs": float(np.max(np.abs(fv - fov))),
                            "max_rel": float(np.max(np.abs(fv - fov) / np.maximum(np.abs(fov), 1e-12))),
                            "t_star_abs": float(abs(fv[ts] - fov[ts])),
                            "t_star_kendall_tau": gap.get("mean_kendall_tau", math.nan),
                            "t_star_top_k_jaccard": gap.get("mean_top_k_jaccard", math.nan),
                            "note": gap.get("rank_note")}
    if st.ablations:
        from aumann.evaluation.ablations import run_ablations

        tick("ablations")
        rec["ablations"] = run_ablations(scenario, config, panel, ts, z0, phi["aumann_shapley"], g_abl, sizes.top_k)
    if scenario.analysis is not None:
        tick("scenario analysis")
        out = scenario.analysis(config, run, {
            "t_star": ts, "z0": z0, "phi": phi, "f_values": fv, "f_original_values": fov, "rng": g_scenario,
            "backend_label": backend_label, "sizes": sizes, "tick": tick, "deletion_forks": oracle.forks,
            "scenario": scenario})
        rec["analysis"] = dict(out.get("record", {}))
        rec["analysis"]["tables"] = {k: list(v) for k, v in out.get("tables", {}).items()}
        arrays.update({f"analysis_{k}": np.asarray(v) for k, v in out.get("arrays", {}).items()})
    return rec, arrays


def split_timing(rec: dict[str, Any]) -> dict[str, float]:
    """Take the wall-clock seconds out of a run record (in place) and return them per method.

    Run records hold only what the config and seed determine (same config + seed → same bytes,
    whatever the executor or machine load); the seconds live beside them in ``timings/run-NNN.json``
    and :func:`with_timing` puts them back for tables and reports."""
    timing: dict[str, float] = {}
    for label, sec in (rec.pop("attribution_seconds", None) or {}).items():
        timing[f"attributions/{label}"] = sec
    act = rec.get("action")
    if isinstance(act, dict) and "seconds" in act:
        timing["action_aumann_shapley"] = act.pop("seconds")
    for m, c in (rec.get("cost") or {}).items():
        if isinstance(c, dict) and "seconds" in c:
            sec = c.pop("seconds")
            timing.setdefault(m, sec)
    return timing


def with_timing(rec: dict[str, Any], timing: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of run record ``rec`` with the seconds of :func:`split_timing` back in place (missing: None)."""
    import copy

    out = copy.deepcopy(rec)
    timing = timing or {}
    if isinstance(out.get("action"), dict):
        out["action"]["seconds"] = timing.get("action_aumann_shapley")
    for m, c in (out.get("cost") or {}).items():
        if isinstance(c, dict):
            c["seconds"] = timing.get(m)
    return out


def read_timing(run_dir: Path, r: int) -> dict[str, Any]:
    """The seconds of run ``r`` in ``run_dir`` (``timings/run-NNN.json``; ``{}`` when absent or unreadable)."""
    p = Path(run_dir) / "timings" / f"run-{r:03d}.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data.get("seconds", {}) if isinstance(data, dict) and isinstance(data.get("seconds"), dict) else {}


@dataclass
class StudyResult:
    """Every run's record (in run order) plus where they live and how many were resumed."""

    scenario: str
    records: list[dict[str, Any]]
    arrays: list[dict[str, np.ndarray]]
    out_dir: Path | None
    resumed: int = 0
    computed: int = 0
    sizes: StudySizes | None = None
    panels: list[Any] = field(default_factory=list)
    #: finished runs found on disk that failed verification and were recomputed: {run, file, reason}
    failed_checks: list[dict[str, Any]] = field(default_factory=list)
    usage: Any = None  # the LLM usage (aumann.simulators.llm.Usage) of the runs computed now
    timings: list[dict[str, Any]] = field(default_factory=list)  # per run: seconds per method (split_timing)

    def timed_records(self) -> list[dict[str, Any]]:
        """The records with their seconds back in place (:func:`with_timing`), for tables and reports."""
        timings = self.timings or [{}] * len(self.records)
        return [with_timing(rec, t) for rec, t in zip(self.records, timings)]


def run_study(scenario: Scenario, config: ScenarioConfig, *, out_dir: str | Path | None = None, backend: Any = None,
              backend_label: str = "offline", progress: Any = None, executor: Any = None,
              write: bool = True) -> StudyResult:
    """Run (or resume) the faithfulness study for ``config.runs`` runs.

    Args:
        scenario: a registered scenario.
        config: its config (``runs``, ``seed`` and ``study`` are read here).
        out_dir: run directory; every finished run is written atomically to ``runs/`` and skipped
            when found again with the same config digest. ``None`` keeps everything in memory.
        backend: a DecisionBackend or ``None`` (offline policy).
        backend_label: recorded in the digest (a run computed with another backend is not reused).
        progress: optional callable ``progress(run_index, message)`` (the CLI drives a Rich bar).
        executor: ``LocalExecutor`` / ``RayExecutor`` (``.map(fn, specs)``): with two or more runs to
            compute, the runs go to it in parallel; with one, its forks (deletion, re-simulation
            game) do (offline policy; an LLM backend's forks run on threads sharing its request
            pool). Results are bit-identical to the serial study. A parallel run's LLM usage is
            merged back into ``backend.usage``; each worker gets 1/W of the backend's concurrency
            and rate limits (W workers) and an equal share of what is left of its caps.
        write: ``False`` reads finished runs from ``out_dir`` but writes nothing (dry runs).
    """
    from aumann.simulators.llm.usage import Usage, usage_of

    if not isinstance(config, scenario.config_model):
        raise ConfigError(f"run_study needs the {scenario.config_model.__name__} of scenario {scenario.name!r} (from "
                          f"scenario.load_config()); got {type(config).__name__}")
    digest = config_digest(scenario, config, backend_label)
    judge_backend(config, backend)  # a bad study.judge fails before any run
    seqs = np.random.SeedSequence(config.seed).spawn(config.runs)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None and write:  # every folder a finished run is written to, before the first simulation
        for folder in (out, out / "runs", out / "panels", out / "attributions"):
            ensure_output_dir(folder, "study output directory")
    records: list[Any] = [None] * config.runs
    arrays: list[Any] = [None] * config.runs
    panels: list[Any] = [None] * config.runs
    timings: list[dict[str, Any]] = [{} for _ in range(config.runs)]
    failed: list[dict[str, Any]] = []
    resumed = computed = 0
    spent = Usage()
    todo = []
    for r, seq in enumerate(seqs):
        rec_path = out / "runs" / f"run-{r:03d}.json" if out is not None else None
        if rec_path is not None and rec_path.exists():  # an .npz alone is a run interrupted mid-write: recomputed
            status, why, old, old_arrays = verify_run(rec_path, digest)
            if status == "done":
                records[r] = old
                arrays[r] = old_arrays
                timings[r] = read_timing(out, r)
                resumed += 1
                if progress is not None:
                    progress(r, "resumed")
                continue
            if status == "corrupt":
                failed.append({"run": r, "file": f"runs/{rec_path.name}", "reason": why})
        todo.append((r, seq))
    parallel = executor is not None and len(todo) > 1 and not (isinstance(getattr(executor, "max_workers", 2), int)
                                                              and executor.max_workers in (0, 1))
    if parallel:
        account = usage_of(backend)
        dest = out if write else None
        # an executor with an LLM service (Ray) serves one cache and one set of limits to all workers;
        # otherwise each worker gets an equal share of the limits and of what is left of the caps
        share = executor.serve_llm(backend) if callable(getattr(executor, "serve_llm", None)) else \
            _share_budget(backend, len(todo), min(len(todo), int(getattr(executor, "max_workers", None) or 2)))
        specs = [(scenario, config, r, seq, share, digest, backend_label) for r, seq in todo]

        def _done(i: int, res: Any) -> None:
            nonlocal computed
            r = todo[i][0]
            delta = res.usage if not isinstance(res, BaseException) else getattr(res, "llm_usage", None)
            if delta is not None:
                spent.merge(delta)
                if account is not None:
                    account.merge(delta)
            if isinstance(res, BaseException):
                return
            # the driver writes each run as it arrives (workers send results, never files), so a run
            # finished before a failure elsewhere is kept for resume
            records[r] = write_run(dest, res) if dest is not None else seal_record(res.record)
            arrays[r], panels[r], timings[r] = res.arrays, res.panel, res.timing
            computed += 1
            if progress is not None:
                progress(r, "done (worker)")

        results = executor.map(compute_run_task, specs, on_result=_done, return_exceptions=True)
        errors = [res for res in results if isinstance(res, BaseException)]
        if errors:
            raise errors[0]
    else:
        for r, seq in todo:
            tick = (lambda msg, r=r: progress(r, msg)) if progress is not None else None
            rec, arr, panel, delta, timing = compute_run(scenario, config, r, seq, out if write else None, backend,
                                                         digest, backend_label=backend_label, tick=tick,
                                                         executor=executor)
            spent.merge(delta)
            records[r], arrays[r], panels[r], timings[r] = rec, arr, panel, timing
            computed += 1
            if tick:
                tick("done")
    return StudyResult(scenario=scenario.name, records=records, arrays=arrays, out_dir=out, resumed=resumed,
                       computed=computed, sizes=StudySizes.of(config), panels=panels, usage=spent,
                       failed_checks=failed, timings=timings)


def _fork_threads(backend: Any) -> int:
    """Threads for concurrent forks: the LLM backend's concurrency (requests of forks share its
    in-flight pool); 1 for the offline policy (CPU-bound, nothing to overlap)."""
    if backend is None or not hasattr(backend, "concurrency") or getattr(backend, "name", "") == "offline":
        return 1
    return max(1, min(64, int(backend.concurrency)))


def compute_run(scenario: Scenario, config: ScenarioConfig, r: int, seq: np.random.SeedSequence, out: Path | None,
                backend: Any, digest: str, *, tick: Callable[[str], None] | None = None, executor: Any = None,
                backend_label: str = "offline",
                ) -> tuple[dict[str, Any], dict[str, np.ndarray], Any, Any, dict[str, float]]:
    """Simulate and analyse run ``r`` (and write it when ``out`` is given): (record, arrays, panel,
    the LLM usage it cost, seconds per method). Decisions inside forks are counted as ``fork_*``
    usage. The record holds no wall-clock time (:func:`split_timing`): the seconds are returned
    apart and written to ``timings/run-NNN.json``."""
    done = compute_run_unwritten(scenario, config, r, seq, backend, digest, tick=tick, executor=executor,
                                 backend_label=backend_label)
    rec = write_run(out, done) if out is not None else seal_record(done.record)
    return rec, done.arrays, done.panel, done.usage, done.timing


@dataclass
class ComputedRun:
    """A run computed but not yet written: what a worker sends back to the driver, which alone
    writes the run directory (:func:`write_run`)."""

    r: int
    digest: str
    record: dict[str, Any]  # without arrays_sha256 and checksum (added when written)
    arrays: dict[str, np.ndarray]
    panel: Any
    usage: Any
    timing: dict[str, float]
    attributions: dict[str, Any]


def compute_run_unwritten(scenario: Scenario, config: ScenarioConfig, r: int, seq: np.random.SeedSequence,
                          backend: Any, digest: str, *, tick: Callable[[str], None] | None = None,
                          executor: Any = None, backend_label: str = "offline") -> ComputedRun:
    """Simulate and analyse run ``r`` without touching the disk (see :func:`compute_run`)."""
    import contextlib

    from aumann.simulators.llm.usage import Usage, usage_of

    shared = usage_of(backend)
    before = shared.copy() if shared is not None else None
    sim_seq, study_seq = seq.spawn(2)
    if tick:
        tick("simulate")
    # every step's checkpoint is kept only when the per-step baselines are built from them
    keep = 0 if scenario.baseline_all_fn is None else None
    run = scenario.simulate(config, rng=np.random.default_rng(sim_seq), backend=backend, keep_from=keep,
                            strategy=config.study.fork_strategy)
    account = shared if shared is not None else usage_of(run.model)
    threads = _fork_threads(backend)
    attributions: dict[str, Any] = {}
    # forks of an LLM run go to an executor that serves the LLM to its workers (Ray), else to threads
    serves = threads > 1 and callable(getattr(executor, "serve_llm", None))
    if serves:
        executor.serve_llm(backend)
    with account.fork_scope() if account is not None else contextlib.nullcontext():  # LLM backends: threads
        rec, arr = analyse_run(scenario, config, run, study_seq, tick=tick, attributions=attributions,
                               judge=judge_backend(config, backend), fork_threads=threads,
                               executor=executor if threads == 1 or serves else None, backend_label=backend_label)
    rec.update({"run": r, "digest": digest, "scenario": scenario.name, "seed_spawn_key": list(seq.spawn_key)})
    timing = plain(split_timing(rec))  # wall-clock seconds live beside the record, not in it
    if account is None:
        delta = Usage()
    elif before is not None:
        delta = account - before
    else:
        delta = account.copy()
    return ComputedRun(r, digest, rec, arr, run.panel, delta, timing, attributions)


def seal_record(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` as its JSON file holds it (NaN → None) with its checksum, so a resumed run reads back the same."""
    rec = plain(rec)
    rec["checksum"] = record_checksum(rec)
    return rec


def write_run(out: Path, done: ComputedRun) -> dict[str, Any]:
    """Write a computed run into the run directory ``out`` (the driver's job, never a worker's):
    attributions, panel, arrays (their SHA-256 into the record), timings, then the sealed record
    last (its presence marks the run finished). Returns the sealed record."""
    r = done.r
    rec = dict(done.record)
    prefix = out / "attributions" / f"run-{r:03d}"
    for label, res in done.attributions.items():
        res.save(prefix.with_name(f"{prefix.name}-{label}.npz"))
    rec_path = out / "runs" / f"run-{r:03d}.json"
    done.panel.save(out / "panels" / f"run-{r:03d}")
    npz = write_npz(rec_path.with_suffix(".npz"), done.arrays)
    rec["arrays_sha256"] = sha256_file(npz)
    write_json(out / "timings" / f"run-{r:03d}.json", {"run": r, "digest": done.digest, "seconds": done.timing})
    rec = seal_record(rec)
    write_json(rec_path, rec)
    return rec


def compute_run_task(spec: tuple) -> ComputedRun:
    """Executor task for one run (top-level): computes it and sends it back unwritten -- a worker
    needs no access to the run directory. The scenario travels as an object (a scenario file's
    module is installed in the worker by the executor). A failure carries the usage spent so far
    as ``exc.llm_usage``."""
    from aumann import scenarios
    from aumann.simulators.llm.usage import usage_of

    scenario, config, r, seq, backend, digest, backend_label = spec
    if isinstance(scenario, str):  # a registered name (earlier callers)
        scenario = scenarios.get(scenario)
    shared = usage_of(backend)
    before = shared.copy() if shared is not None else None
    try:
        return compute_run_unwritten(scenario, config, r, seq, backend, digest, backend_label=backend_label)
    except BaseException as exc:
        if shared is not None:
            exc.llm_usage = shared - before
        raise
    finally:
        if hasattr(backend, "close"):
            backend.close()


def _share_budget(backend: Any, parts: int, workers: int) -> Any:
    """A copy of an LLM ``backend`` for runs in parallel: its caps allow 1/``parts`` of what is left,
    and its concurrency and rate limits are 1/``workers`` of the backend's, so the totals hold."""
    if backend is None or not hasattr(backend, "concurrency") or getattr(backend, "name", "") == "offline":
        return backend
    import copy

    from aumann.simulators.llm.ratelimit import RateLimiter

    b = copy.copy(backend)
    b.concurrency = max(1, backend.concurrency // workers)
    lim = backend.limiter
    b.limiter = RateLimiter(lim.rpm / workers if lim.rpm else None, lim.tpm / workers if lim.tpm else None)
    u = backend.usage
    if b.max_calls is not None:
        b.max_calls = u.total_calls + max(0, b.max_calls - u.total_calls) // parts
    if b.max_tokens is not None:
        b.max_tokens = u.total_tokens + max(0, b.max_tokens - u.total_tokens) // parts
    if b.max_cost is not None:
        b.max_cost = u.cost_usd + max(0.0, b.max_cost - u.cost_usd) / parts
    return b


#: keys every finished run record holds; a record without one of them is recomputed
RUN_KEYS = ("run", "digest", "t_star", "f_t_star", "methods", "ceiling", "smoothing_gap", "arrays_sha256",
            "checksum")
#: arrays every finished run's ``.npz`` holds
RUN_ARRAYS = ("f_values", "f_original_values", "phi_all", "phi_ceiling",
              *(f"{kind}_{m}" for m in ATTRIBUTED for kind in ("phi", "curve", "curve_original",
                                                               "curve_magnitude")),
              "curve_random", "curve_original_random")


def verify_run(rec_path: Path, digest: str) -> tuple[str, str | None, dict[str, Any] | None,
                                                       dict[str, np.ndarray] | None]:
    """Check a finished run on disk before resuming it → (status, reason, record, arrays).

    ``status`` is ``"done"`` (the record's checksum and the arrays' SHA-256 verify, every key and array is
    there, same config digest), ``"todo"`` (computed under another config: recomputed, not an error) or
    ``"corrupt"`` (unreadable or truncated JSON or ``.npz``, missing keys or arrays, an edited number — the
    checksum does not match); ``reason`` says what failed.
    """
    npz = rec_path.with_suffix(".npz")
    try:
        rec = json.loads(rec_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "corrupt", "the record (.json) is missing", None, None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return "corrupt", f"the record is unreadable ({type(exc).__name__})", None, None
    if not isinstance(rec, dict):
        return "corrupt", "the record is not a JSON object", None, None
    missing = [k for k in RUN_KEYS if k not in rec]
    if missing:
        return "corrupt", f"the record lacks {missing}", None, None
    if record_checksum({k: v for k, v in rec.items() if k != "checksum"}) != rec["checksum"]:
        return "corrupt", "the record's checksum does not match (edited or damaged)", None, None
    if rec["digest"] != digest:
        return "todo", None, None, None
    if not npz.is_file():
        return "corrupt", "its arrays (.npz) are missing", None, None
    if sha256_file(npz) != rec["arrays_sha256"]:
        return "corrupt", "its arrays (.npz) do not match their checksum (truncated, edited or replaced)", None, None
    try:
        arrays, _ = read_npz(npz, error=StudyError, what="run arrays")
    except StudyError as exc:
        return "corrupt", str(exc), None, None
    lacking = [k for k in RUN_ARRAYS if k not in arrays]
    if lacking:
        return "corrupt", f"its arrays lack {lacking[:5]}", None, None
    return "done", None, rec, arrays


__all__ = [
    "ATTRIBUTED",
    "FAITHFULNESS_COLUMNS",
    "METHODS",
    "ComputedRun",
    "StudyResult",
    "StudySizes",
    "analyse_run",
    "compute_run",
    "compute_run_task",
    "compute_run_unwritten",
    "config_digest",
    "deletion_sets",
    "has_action_row",
    "judge_backend",
    "read_timing",
    "run_study",
    "seal_record",
    "split_timing",
    "study_stages",
    "with_timing",
    "write_run",
]
