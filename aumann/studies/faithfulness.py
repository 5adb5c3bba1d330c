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
4. deletion (:mod:`aumann.evaluation.deletion`) by each method's ranking (descending φ; descending |φ|
   reported beside it), and Random (mean over ``random_orderings`` orderings);
5. agreement with the reference: Kendall τ and top-k Jaccard (k = min(10, N/2)); the ceiling is the
   agreement of the two sampled-Shapley runs;
6. the ablations (:mod:`aumann.evaluation.ablations`).

Each run is written atomically to ``runs/run-NNN.json`` (+ ``.npz`` arrays) as soon as it finishes, the
record with a SHA-256 checksum of its content and of its arrays; :func:`run_study` skips runs already on
disk with the same config (resume) after verifying them (:func:`verify_run`), and recomputes — and lists
in ``StudyResult.failed_checks`` — any whose files are truncated, incomplete or edited.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aumann.attribution.metrics import kendall_tau, rank_agents, topk_jaccard
from aumann.errors import ConfigError, StudyError
from aumann.evaluation.deletion import DeletionOracle, deletion_summary, random_summary, resimulation_game
from aumann.io import ensure_output_dir, plain, read_npz, record_checksum, sha256_file, write_json, write_npz
from aumann.scenarios.base import Scenario, ScenarioConfig, target_step
from aumann.simulators import indicator_values

METHODS = ("aumann_shapley", "sampled_shapley", "leave_one_out", "random")
ATTRIBUTED = ("aumann_shapley", "sampled_shapley", "leave_one_out")
FAITHFULNESS_COLUMNS = ("scenario", "method", "deletion_auc", "drop_at_5", "kendall_tau", "jaccard_top10",
                        "deletion_auc_std", "drop_at_5_std", "kendall_tau_std", "jaccard_top10_std",
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
                          "config": config.model_dump(mode="json", exclude={"runs"})}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def analyse_run(scenario: Scenario, config: ScenarioConfig, run: Any, seq: np.random.SeedSequence,
                *, tick: Callable[[str], None] | None = None, attribution_prefix: Path | None = None,
                ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The study on one simulated run: (JSON-able record, arrays for plots and the run directory).

    With ``attribution_prefix`` the :class:`~aumann.attribution.Attribution` objects are saved as
    ``<prefix>-aumann_shapley.npz`` (every step, per-agent baselines), ``-sampled_shapley.npz``,
    ``-sampled_shapley_ceiling.npz`` and ``-leave_one_out.npz`` (step t*); ``Attribution.load`` reads them.
    """
    from aumann.attribution import AumannShapley, LeaveOneOut, SampledShapley, attribute

    tick = tick or (lambda _msg: None)
    st = config.study
    g_ref, g_ceil, g_rand, g_abl = (np.random.default_rng(s) for s in seq.spawn(4))
    f, f_orig = scenario.indicators(config)
    panel = run.panel
    T, N, _ = panel.shape
    ids = panel.agent_ids
    fv, fov = indicator_values(f, panel), indicator_values(f_orig, panel)
    ts = target_step(fv)
    # per-agent baselines for every step we hold a checkpoint for (all steps when keep_from=0)
    z0_all = np.stack([scenario.baseline_features(run.before(t), config, agent_ids=ids) if t in run.checkpoints
                       else np.zeros((N, panel.D)) for t in range(T)])
    model_before = run.before(ts)
    # the players: agents that can take the baseline action at t* (all N for fixed populations)
    players = scenario.present(model_before, ids)
    everyone = len(players) == N
    is_player = np.zeros(N, dtype=bool)
    is_player[players] = True
    sizes = StudySizes.of(config, n=len(players))
    tick("attribute (all steps)")
    as_method = AumannShapley(steps=st.quadrature_steps, closed_form=False)
    res_all = attribute(f, panel, method=as_method, baseline=z0_all)
    pt = panel.select_steps([ts])
    z0 = z0_all[ts]
    phi = {"aumann_shapley": res_all.phi[ts]}
    tick("sampled Shapley (reference)")
    oracle = DeletionOracle(scenario, config, model_before, f, f_orig, agent_ids=ids)
    ceil_perm = st.ceiling_permutations or st.permutations
    if st.reference_game == "resimulation":
        game = resimulation_game(oracle, N, players=None if everyone else players)
        ss = SampledShapley(permutations=st.permutations).attribute_game(game, rng=g_ref)
        ss2 = SampledShapley(permutations=ceil_perm).attribute_game(game, rng=g_ceil)
        phi["sampled_shapley"], phi_ceiling = np.zeros(N), np.zeros(N)
        phi["sampled_shapley"][players], phi_ceiling[players] = ss.phi[0], ss2.phi[0]
    else:
        ss = attribute(f, pt, method=SampledShapley(permutations=st.permutations), baseline=z0, rng=g_ref)
        ss2 = attribute(f, pt, method=SampledShapley(permutations=ceil_perm), baseline=z0, rng=g_ceil)
        phi["sampled_shapley"] = ss.phi[0]
        phi_ceiling = ss2.phi[0]
    loo = attribute(f, pt, method=LeaveOneOut(), baseline=z0)
    phi["leave_one_out"] = loo.phi[0]
    if attribution_prefix is not None:
        for label, res in (("aumann_shapley", res_all), ("sampled_shapley", ss), ("sampled_shapley_ceiling", ss2),
                           ("leave_one_out", loo)):
            res.save(attribution_prefix.with_name(f"{attribution_prefix.name}-{label}.npz"))

    tick("deletion forks")
    f_full = (float(fv[ts]), float(fov[ts]))
    rec: dict[str, Any] = {"t_star": ts, "f_t_star": f_full[0], "f_original_t_star": f_full[1],
                           "efficiency_gap": float(res_all.efficiency_gap[ts]),
                           "delta_v": float(res_all.delta_v[ts]), "methods": {},
                           "fork_strategy": run.strategy, "players": len(players), "k_del": sizes.k_del,
                           "top_k": sizes.top_k}

    def ranked(values: np.ndarray, by: str) -> np.ndarray:
        order = rank_agents(values, by)
        return order if everyone else order[is_player[order]]

    def agree(a: np.ndarray, b: np.ndarray, how: Any, *extra: Any) -> float:
        return float(how(a, b, *extra) if everyone else how(a[players], b[players], *extra))

    arrays: dict[str, np.ndarray] = {"f_values": fv, "f_original_values": fov, "phi_all": res_all.phi,
                                     "phi_ceiling": phi_ceiling}
    for name in ATTRIBUTED:
        by_val = deletion_summary(oracle, f_full, ranked(phi[name], "value"), sizes.k_del, sizes.k_drop)
        by_mag = deletion_summary(oracle, f_full, ranked(phi[name], "abs"), sizes.k_del, sizes.k_drop)
        ref = phi["sampled_shapley"]
        compare = name != "sampled_shapley"
        rec["methods"][name] = {
            "deletion_auc": by_val["deletion_auc"], "drop_at_5": by_val["drop_at_k"],
            "deletion_auc_original": by_val["deletion_auc_original"],
            "drop_at_5_original": by_val["drop_at_k_original"],
            "deletion_auc_magnitude": by_mag["deletion_auc"], "drop_at_5_magnitude": by_mag["drop_at_k"],
            "kendall_tau": agree(phi[name], ref, kendall_tau) if compare else math.nan,
            "jaccard_top10": agree(phi[name], ref, topk_jaccard, sizes.top_k) if compare else math.nan,
            "sum_phi": float(np.sum(phi[name])),
        }
        arrays[f"phi_{name}"] = phi[name]
        arrays[f"curve_{name}"] = by_val["curve"]
        arrays[f"curve_original_{name}"] = by_val["curve_original"]
        arrays[f"curve_magnitude_{name}"] = by_mag["curve"]
    rnd = random_summary(oracle, f_full, N if everyone else players, sizes.k_del, sizes.k_drop, st.random_orderings,
                         g_rand)
    rec["methods"]["random"] = {"deletion_auc": rnd["deletion_auc"], "drop_at_5": rnd["drop_at_k"],
                                "deletion_auc_original": rnd["deletion_auc_original"],
                                "drop_at_5_original": rnd["drop_at_k_original"],
                                "deletion_auc_magnitude": rnd["deletion_auc"], "drop_at_5_magnitude": rnd["drop_at_k"],
                                "kendall_tau": math.nan, "jaccard_top10": math.nan, "sum_phi": math.nan}
    arrays["curve_random"] = rnd["curve"]
    arrays["curve_original_random"] = rnd["curve_original"]
    rec["ceiling"] = {"kendall_tau": agree(phi_ceiling, phi["sampled_shapley"], kendall_tau),
                      "jaccard_top10": agree(phi_ceiling, phi["sampled_shapley"], topk_jaccard, sizes.top_k)}
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
    return rec, arrays


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


def run_study(scenario: Scenario, config: ScenarioConfig, *, out_dir: str | Path | None = None, backend: Any = None,
              backend_label: str = "offline", progress: Any = None) -> StudyResult:
    """Run (or resume) the faithfulness study for ``config.runs`` runs.

    Args:
        scenario: a registered scenario.
        config: its config (``runs``, ``seed`` and ``study`` are read here).
        out_dir: run directory; every finished run is written atomically to ``runs/`` and skipped
            when found again with the same config digest. ``None`` keeps everything in memory.
        backend: a DecisionBackend or ``None`` (offline policy).
        backend_label: recorded in the digest (a run computed with another backend is not reused).
        progress: optional callable ``progress(run_index, message)`` (the CLI drives a Rich bar).
    """
    if not isinstance(config, scenario.config_model):
        raise ConfigError(f"run_study needs the {scenario.config_model.__name__} of scenario {scenario.name!r} (from "
                          f"scenario.load_config()); got {type(config).__name__}")
    digest = config_digest(scenario, config, backend_label)
    seqs = np.random.SeedSequence(config.seed).spawn(config.runs)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        ensure_output_dir(out, "study output directory")
    records, arrays, panels = [], [], []
    failed: list[dict[str, Any]] = []
    resumed = computed = 0
    for r, seq in enumerate(seqs):
        tick = (lambda msg, r=r: progress(r, msg)) if progress is not None else None
        rec_path = out / "runs" / f"run-{r:03d}.json" if out is not None else None
        if rec_path is not None and rec_path.exists():  # an .npz alone is a run interrupted mid-write: recomputed
            status, why, old, old_arrays = verify_run(rec_path, digest)
            if status == "done":
                records.append(old)
                arrays.append(old_arrays)
                panels.append(None)
                resumed += 1
                if tick:
                    tick("resumed")
                continue
            if status == "corrupt":
                failed.append({"run": r, "file": f"runs/{rec_path.name}", "reason": why})
        sim_seq, study_seq = seq.spawn(2)
        if tick:
            tick("simulate")
        run = scenario.simulate(config, rng=np.random.default_rng(sim_seq), backend=backend, keep_from=0,
                                strategy=config.study.fork_strategy)
        prefix = out / "attributions" / f"run-{r:03d}" if out is not None else None
        rec, arr = analyse_run(scenario, config, run, study_seq, tick=tick, attribution_prefix=prefix)
        rec.update({"run": r, "digest": digest, "scenario": scenario.name, "seed_spawn_key": list(seq.spawn_key)})
        if out is not None:
            run.panel.save(out / "panels" / f"run-{r:03d}")
            npz = write_npz(rec_path.with_suffix(".npz"), arr)
            rec["arrays_sha256"] = sha256_file(npz)
        rec = plain(rec)  # exactly what the JSON file holds (NaN → None), so a resumed run reads back the same
        rec["checksum"] = record_checksum(rec)
        if out is not None:
            write_json(rec_path, rec)
        records.append(rec)
        arrays.append(arr)
        panels.append(run.panel)
        computed += 1
        if tick:
            tick("done")
    return StudyResult(scenario=scenario.name, records=records, arrays=arrays, out_dir=out, resumed=resumed,
                       computed=computed, sizes=StudySizes.of(config), panels=panels, failed_checks=failed)


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
    "StudyResult",
    "StudySizes",
    "analyse_run",
    "config_digest",
    "run_study",
]
