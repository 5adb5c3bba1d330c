"""The run directory's tables (CSV + Markdown), plots (PNG, lazy matplotlib Agg) and report.

Files written by :func:`write_outputs`:

* ``faithfulness.csv`` / ``.md``: columns ``scenario, method, deletion_auc, drop_at_5,
  deletion_auc_masking, drop_at_5_masking, kendall_tau, jaccard_top10`` + ``*_std`` +
  ``kendall_tau_ceiling, jaccard_ceiling`` (rows ``aumann_shapley``, ``sampled_shapley``,
  ``leave_one_out``, ``action_aumann_shapley`` (scenarios with a step map),
  ``sampled_shapley_resimulation`` (when enabled), ``llm_judge`` (unless off), ``random``; mean and
  std over runs);
* ``faithfulness_extended.csv`` / ``.md``: the original indicator's deletion metrics and the
  magnitude ordering beside the attributed indicator's;
* ``action_attribution.csv`` / ``.md`` (scenarios with a step map): per run, efficiency against the
  forks, G-vs-fork gaps and cost (next to sampled Shapley's on the re-simulation game when run);
* ``resimulation_agreement.csv`` / ``.md`` (with ``study.resimulation_reference``): agreement with
  sampled Shapley on the re-simulation game and its noise ceiling;
* ``judge_overlap.csv`` / ``.md`` (with a judge): the judge's top-k overlap with each method;
* ``path_ablation``, ``f_sensitivity``, ``baseline_ablation`` (``.csv`` / ``.md``);
* ``macro_curve.png`` (f over steps per run, t* marked, original indicator dashed),
  ``attribution_heatmap.png`` (agent × step φ of run 0, the 30 agents with the largest Σ_t |φ|),
  ``deletion_curves.png`` (mean normalised drop vs k per method, re-simulation and masking oracles);
* ``report.md``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann.io import atomic_path, write_text
from aumann.studies.faithfulness import FAITHFULNESS_COLUMNS, StudyResult
from aumann.studies.tables import (
    action_table,
    extended_table,
    faithfulness_table,
    judge_table,
    methods_of,
    pair_table,
    path_table,
    resimulation_table,
)

GAMES = (
    "Two games are scored with the same formulas. **Re-simulation** (`deletion_auc`, `drop_at_5`): the top-k "
    "agents take the baseline action at t* and step t* is re-simulated, so what their actions did to other agents "
    "is removed too. **Masking** (`deletion_auc_masking`, `drop_at_5_masking`): the top-k agents' feature rows at "
    "t* are set to their baseline rows and nothing is re-simulated — the game `aumann_shapley`, `sampled_shapley` "
    "and `leave_one_out` explain; `action_aumann_shapley` explains the re-simulation game. Agents are ranked by "
    "signed φ (who pushed f up first); the ranking by |φ| (the paper's wording) is in the extended table."
)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "–" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def to_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """CSV text of ``rows`` (NaN written as empty)."""
    cols = list(columns or (rows[0].keys() if rows else []))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow(["" if isinstance(r.get(c), float) and math.isnan(r[c]) else r.get(c, "") for c in cols])
    return buf.getvalue()


def to_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A GitHub Markdown table of ``rows``."""
    cols = list(columns or (rows[0].keys() if rows else []))
    if not cols:
        return "_(empty)_\n"
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def headline_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The paper-style table: mean ± std, "= ref" for the reference row, "–" where undefined."""
    out = ["| Method | Deletion AUC (re-sim) | Drop@5 % (re-sim) | Deletion AUC (masking) | Drop@5 % (masking) | "
           "τ vs Shapley | J_top vs Shapley |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = r["method"] == "sampled_shapley"

        def pm(c: str, digits: int = 3, r=r) -> str:
            if not math.isfinite(r[c]):
                return "–"
            return f"{r[c]:.{digits}f} ± {r[c + '_std']:.{digits}f}"

        tau = "= ref" if ref else pm("kendall_tau")
        jac = "= ref" if ref else pm("jaccard_top10")
        out.append(f"| {r['method']} | {pm('deletion_auc')} | {pm('drop_at_5', 1)} | {pm('deletion_auc_masking')} | "
                   f"{pm('drop_at_5_masking', 1)} | {tau} | {jac} |")
    ceil = rows[0] if rows else None
    if ceil is not None:
        out.append(f"\nNoise ceiling (two sampled-Shapley runs, different seeds): "
                   f"τ = {ceil['kendall_tau_ceiling']:.3f}, J = {ceil['jaccard_ceiling']:.3f}.")
    return "\n".join(out) + "\n"


def write_tables(result: StudyResult, out: Path) -> dict[str, list[dict[str, Any]]]:
    """Write every table as CSV and Markdown; return them by name."""
    tables = {
        "faithfulness": faithfulness_table(result),
        "faithfulness_extended": extended_table(result),
        "action_attribution": action_table(result),
        "resimulation_agreement": resimulation_table(result),
        "judge_overlap": judge_table(result),
        "path_ablation": path_table(result.scenario, result.records),
        "f_sensitivity": pair_table(result.scenario, result.records, "f_sensitivity"),
        "baseline_ablation": pair_table(result.scenario, result.records, "baseline"),
    }
    optional = ("action_attribution", "resimulation_agreement", "judge_overlap")
    for name, rows in tables.items():
        if name in optional and not rows:
            continue
        cols = FAITHFULNESS_COLUMNS if name == "faithfulness" else None
        write_text(out / f"{name}.csv", to_csv(rows, cols))
        write_text(out / f"{name}.md", to_markdown(rows, cols))
    return tables


def write_plots(result: StudyResult, out: Path) -> list[Path]:
    """macro_curve.png, attribution_heatmap.png, deletion_curves.png (matplotlib Agg, imported lazily)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for r, (rec, arr) in enumerate(zip(result.records, result.arrays)):
        line = ax.plot(arr["f_values"], lw=1.2, alpha=0.8, label="C² surrogate" if r == 0 else None)[0]
        if r == 0:
            ax.plot(arr["f_original_values"], ls="--", lw=1, color=line.get_color(), label="original")
        ax.plot([rec["t_star"]], [rec["f_t_star"]], "o", color=line.get_color())
    T = len(result.arrays[0]["f_values"])
    ax.axvline(math.ceil(T / 2), color="grey", lw=0.8, ls=":", label="⌈T/2⌉")
    ax.set(xlabel="step t", ylabel="f(z_t)", title=f"{result.scenario}: macro indicator, t* marked (● per run)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "macro_curve.png")
    with atomic_path(paths[-1]) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)

    phi = np.asarray(result.arrays[0]["phi_all"])  # (T, N)
    top = np.argsort(-np.abs(phi).sum(axis=0))[: min(30, phi.shape[1])]
    fig, ax = plt.subplots(figsize=(8, 5))
    lim = float(np.abs(phi[:, top]).max()) or 1.0
    im = ax.imshow(phi[:, top].T, aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
    ax.axvline(result.records[0]["t_star"], color="k", lw=1)
    ax.set(xlabel="step t", ylabel="agent (top by Σ|φ|)", yticks=range(len(top)), yticklabels=[str(i) for i in top],
           title=f"{result.scenario}: Aumann–Shapley φ (run 0; line = t*)")
    ax.tick_params(axis="y", labelsize=6)
    fig.colorbar(im, ax=ax, label="φ_{i,t}")
    fig.tight_layout()
    paths.append(out / "attribution_heatmap.png")
    with atomic_path(paths[-1]) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, what in ((axes[0], "curve", "re-simulation"), (axes[1], "curve_masking", "masking")):
        for name in methods_of(result):
            arrs = [a[f"{key}_{name}"] for a in result.arrays if f"{key}_{name}" in a]
            if not arrs:
                continue
            curves = np.array(arrs)
            k = np.arange(1, curves.shape[1] + 1)
            ax.plot(k, 100 * curves.mean(axis=0), marker=".", label=name)
        ax.set(xlabel="k (agents deleted at t*)", title=f"{what} oracle")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("drop (f − f_k)/f  [%]")
    fig.suptitle(f"{result.scenario}: deletion curves (mean over runs; agents ranked by signed φ)")
    fig.tight_layout()
    paths.append(out / "deletion_curves.png")
    with atomic_path(paths[-1]) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return paths


def _mean(recs: Sequence[dict[str, Any]], key: str) -> float:
    vals = np.array([r["smoothing_gap"].get(key, math.nan) for r in recs], dtype=np.float64)
    vals = vals[np.isfinite(vals)]
    return float(vals.mean()) if vals.size else math.nan


def _finite(vals: Sequence[Any]) -> np.ndarray:
    arr = np.array([math.nan if v is None else v for v in vals], dtype=np.float64)
    return arr[np.isfinite(arr)]


def _action_section(result: StudyResult, rows: list[dict[str, Any]]) -> list[str]:
    acts = [r["action"] for r in result.records if r.get("action")]
    if not acts:
        return []
    exact = all(a["exact_map"] for a in acts)
    holds = acts[0].get("holds") or ""
    eff = _finite([a["relative_efficiency_gap"] for a in acts])
    fork = _finite([a.get("fork_gap") for a in acts])
    cmax = _finite([(a.get("coalition_gap") or {}).get("max_rel") for a in acts])
    cmean = _finite([(a.get("coalition_gap") or {}).get("mean_rel") for a in acts])
    evals = _finite([a["step_evals"] for a in acts])
    grads = _finite([a["grad_evals"] for a in acts])
    secs = _finite([a["seconds"] for a in acts])
    rr = [r["cost"]["sampled_shapley_resimulation"] for r in result.records
          if r.get("cost", {}).get("sampled_shapley_resimulation")]
    n_agents = len(result.arrays[0]["phi_aumann_shapley"]) if result.arrays else 0
    if rr:
        cost = (f"sampled Shapley on the same game (`sampled_shapley_resimulation`): "
                f"{np.mean([c['step_evals'] for c in rr]):.0f} forks (step re-simulations) and "
                f"{np.mean([c['seconds'] for c in rr]):.1f} s per run")
    else:
        perms = result.records[0].get("cost", {}).get("sampled_shapley", {}).get("evaluations")
        cost = ("sampled Shapley on the same game was not run (`study.resimulation_reference = true` or "
                "`--resimulation-reference` runs it)"
                + (f"; with the same permutations it would take {perms} forks per run" if perms else ""))
    map_kind = ("G equals the simulator at every corner of the cube (decisions at t read only the state before t)"
                if exact else f"G holds {holds}; it equals the simulator at λ = 1 and λ = 0 only")
    return [
        "\n## Action attribution through the simulator (`action_aumann_shapley`)\n",
        f"The Aumann–Shapley value of the re-simulation game at t* through the scenario's step map G (the step as a "
        f"torch function of the agents' participation intensities λ ∈ [0, 1]^N; λ = 1 recorded action, λ = 0 baseline "
        f"action): φ_i = ∫₀¹ ∂f(G(τ·1))/∂λ_i dτ, so an agent is credited for what its action did to the others. "
        f"{map_kind}. Efficiency against the fork-measured Δv = v(N) − v(∅): max relative gap "
        f"{eff.max() if eff.size else math.nan:.2g} over runs; G-vs-fork gap at λ = 1 and λ = 0: max "
        f"{fork.max() if fork.size else math.nan:.2g}; on the coalitions the deletion curves re-simulated: max "
        f"{cmax.max() if cmax.size else math.nan:.3g}, mean {cmean.mean() if cmean.size else math.nan:.3g} "
        f"(relative to |Δv|). Cost per run: {evals.mean() if evals.size else math.nan:.0f} step evaluations of G "
        f"({grads.mean() if grads.size else math.nan:.0f} forward + backward, the rest forward only) and "
        f"{secs.mean() if secs.size else math.nan:.2f} s for N = {n_agents}; {cost}.\n",
        to_markdown(rows),
    ]


def _resimulation_section(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    return ["\n## Agreement on the re-simulation game (reference: `sampled_shapley_resimulation`)\n",
            f"Kendall τ and top-k Jaccard of each method against sampled Shapley on the re-simulation game "
            f"({rows[0]['permutations']} permutations); the noise ceiling is the agreement of two such runs with "
            f"different seeds (τ = {rows[0]['kendall_tau_ceiling']:.3f}, J = {rows[0]['jaccard_ceiling']:.3f}).\n",
            to_markdown(rows)]


def _judge_section(result: StudyResult, rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    j = next(r["judge"] for r in result.records if r.get("judge"))
    who = ("the offline **heuristic stand-in** (a deterministic rule, not an LLM: candidates ranked by their "
           "normalised footprint Σ_d (z − z⁰)/max|z − z⁰|)" if j["judge"] == "heuristic"
           else f"the LLM `{j['judge']}` through the OpenAI-compatible backend (responses cached)")
    return ["\n## LLM-as-judge (`llm_judge`)\n",
            f"Judge: {who}. It sees the macro curve up to t* and, for each candidate, its features before t*, "
            f"after t* and under the baseline action, and names the {j['k']} agents most responsible for the rise "
            f"of f (candidates: {j['rule']}). It returns a ranking, not values: its magnitude columns and Kendall τ "
            f"are undefined (–); the table gives its top-{j['top_k']} overlap with each method (reply entries "
            f"dropped as invalid, mean per run: {rows[0]['invalid']:.2g}; ranks filled from the candidate order: "
            f"{rows[0]['filled']:.2g}).\n",
            to_markdown(rows)]


def write_report(result: StudyResult, out: Path, tables: dict[str, list[dict[str, Any]]], *, command: str,
                 seconds: float, description: str = "", baseline: str = "", plots: Sequence[Path] = ()) -> Path:
    """report.md: what ran, the headline table, the extended deletion table, ablations and plots."""
    recs = result.records
    gaps = [r["smoothing_gap"]["max_rel"] for r in recs]
    eff = [r["efficiency_gap"] for r in recs]
    parts = [f"# {result.scenario}: attribution and deletion faithfulness\n",
             f"{description}\n", f"Command: `{command}`  \nRuns: {len(recs)} ({result.resumed} resumed, "
             f"{result.computed} computed), wall time {seconds:.1f} s.  \n"
             f"Baseline action: {baseline}.  \n"
             f"t* per run: {[r['t_star'] for r in recs]}; K_del = {result.sizes.k_del}, "
             f"top-k = {result.sizes.top_k}.\n",
             "## Faithfulness (attributed C² indicator)\n", GAMES + "\n", headline_markdown(tables["faithfulness"]),
             "\n## Deletion: original indicator and magnitude ordering\n",
             "Columns `*_magnitude` rank agents by |φ| (largest effect either way first); the other columns rank by "
             "signed φ, as the headline table.\n",
             to_markdown(tables["faithfulness_extended"]),
             f"\nSmoothing gap max_t |f − f_orig|/|f_orig|: max over runs {max(gaps):.3g}; at t*, the surrogate's "
             f"and the original's attributions agree to Kendall τ = {_mean(recs, 't_star_kendall_tau'):.3f} and "
             f"top-k Jaccard = {_mean(recs, 't_star_top_k_jaccard'):.3f} (mean over runs). "
             f"Aumann–Shapley efficiency gap at t*: max {max(eff):.3g}.\n",
             *_action_section(result, tables.get("action_attribution", [])),
             *_resimulation_section(tables.get("resimulation_agreement", [])),
             *_judge_section(result, tables.get("judge_overlap", [])),
             "\n## Path ablation (straight vs random-permutation piecewise-linear)\n",
             to_markdown(tables["path_ablation"]), "\n## f-sensitivity\n", to_markdown(tables["f_sensitivity"]),
             "\n## Baseline ablation (agents ranked by |φ|)\n", to_markdown(tables["baseline_ablation"])]
    if plots:
        parts.append("\n## Plots\n")
        parts += [f"![{p.stem}]({p.name})\n" for p in plots]
    path = out / "report.md"
    write_text(path, "\n".join(parts))
    return path


def write_outputs(result: StudyResult, out: Path, *, command: str, seconds: float, description: str = "",
                  baseline: str = "", plots: bool = True) -> dict[str, Any]:
    """Tables, plots and the report for a finished study."""
    out = Path(out)
    tables = write_tables(result, out)
    pngs = write_plots(result, out) if plots else []
    report = write_report(result, out, tables, command=command, seconds=seconds, description=description,
                          baseline=baseline, plots=pngs)
    return {"tables": tables, "plots": pngs, "report": report}


__all__ = ["headline_markdown", "to_csv", "to_markdown", "write_outputs", "write_plots", "write_report",
           "write_tables"]
