"""The run directory's tables (CSV + Markdown), plots (PNG, lazy matplotlib Agg) and report.

Files written by :func:`write_outputs`:

* ``faithfulness.csv`` / ``.md``: columns ``scenario, method, deletion_auc, drop_at_5, kendall_tau,
  jaccard_top10`` + ``*_std`` + ``kendall_tau_ceiling, jaccard_ceiling`` (rows ``aumann_shapley``,
  ``sampled_shapley``, ``leave_one_out``, ``random``; mean and std over runs);
* ``faithfulness_extended.csv`` / ``.md``: the original indicator's deletion metrics and the
  magnitude ordering beside the attributed indicator's;
* ``path_ablation``, ``f_sensitivity``, ``baseline_ablation`` (``.csv`` / ``.md``);
* ``macro_curve.png`` (f over steps per run, t* marked, original indicator dashed),
  ``attribution_heatmap.png`` (agent × step φ of run 0, the 30 agents with the largest Σ_t |φ|),
  ``deletion_curves.png`` (mean normalised drop vs k per method);
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

from aumann.io import atomic_path, csv_cell, write_text
from aumann.studies.faithfulness import ATTRIBUTED, FAITHFULNESS_COLUMNS, StudyResult
from aumann.studies.tables import extended_table, faithfulness_table, pair_table, path_table


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "–" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def to_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """CSV text of ``rows``: plain numbers (:func:`aumann.io.csv_cell`); NaN, inf and None are empty cells."""
    cols = list(columns or (rows[0].keys() if rows else []))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([csv_cell(r.get(c)) for c in cols])
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
    """The paper-style table: mean ± std, "= ref" for the reference row."""
    out = ["| Method | Deletion AUC | Drop@5 (%) | τ vs Shapley | J_top vs Shapley |", "|---|---|---|---|---|"]
    for r in rows:
        ref = r["method"] == "sampled_shapley"
        rnd = r["method"] == "random"

        def pm(c: str, r=r) -> str:
            return f"{r[c]:.3f} ± {r[c + '_std']:.3f}"

        tau = "= ref" if ref else ("–" if rnd else pm("kendall_tau"))
        jac = "= ref" if ref else ("–" if rnd else pm("jaccard_top10"))
        out.append(f"| {r['method']} | {pm('deletion_auc')} | {r['drop_at_5']:.1f} ± {r['drop_at_5_std']:.1f} | "
                   f"{tau} | {jac} |")
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
        "path_ablation": path_table(result.scenario, result.records),
        "f_sensitivity": pair_table(result.scenario, result.records, "f_sensitivity"),
        "baseline_ablation": pair_table(result.scenario, result.records, "baseline"),
    }
    for name, rows in tables.items():
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

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in (*ATTRIBUTED, "random"):
        curves = np.array([a[f"curve_{name}"] for a in result.arrays])
        k = np.arange(1, curves.shape[1] + 1)
        ax.plot(k, 100 * curves.mean(axis=0), marker=".", label=name)
    ax.set(xlabel="k (agents at the baseline action at t*)", ylabel="drop (f − f_k)/f  [%]",
           title=f"{result.scenario}: deletion curves (mean over runs)")
    ax.legend(fontsize=8)
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
             *([f"**Resume check:** {len(result.failed_checks)} finished run(s) found on disk failed verification "
                "and were recomputed: " + "; ".join(f"`{f['file']}` ({f['reason']})" for f in result.failed_checks)
                + ".\n"] if result.failed_checks else []),
             "## Faithfulness (attributed C² indicator)\n", headline_markdown(tables["faithfulness"]),
             "\n## Deletion: original indicator and magnitude ordering\n",
             to_markdown(tables["faithfulness_extended"]),
             f"\nSmoothing gap max_t |f − f_orig|/|f_orig|: max over runs {max(gaps):.3g}; at t*, the surrogate's "
             f"and the original's attributions agree to Kendall τ = {_mean(recs, 't_star_kendall_tau'):.3f} and "
             f"top-k Jaccard = {_mean(recs, 't_star_top_k_jaccard'):.3f} (mean over runs). "
             f"Aumann–Shapley efficiency gap at t*: max {max(eff):.3g}.\n",
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
