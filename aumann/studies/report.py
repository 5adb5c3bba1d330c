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
  ``attribution_heatmap.png`` (agent × step φ of run 0, the 20 agents with the largest signed
  Φ_i = Σ_t φ_{i,t}, top first: the agents of the report's who-table),
  ``deletion_curves.png`` (mean normalised drop vs k per method, re-simulation and masking oracles);
* ``manifest.json`` (config, seeds, versions, wall time per stage), then ``report.html`` (one
  self-contained page: who, when, how sure, cost) and its plain-text twin ``report.md``
  (:mod:`aumann.studies.pages`).
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import StudyError
from aumann.io import atomic_path, csv_cell, read_npz, write_text
from aumann.studies.rows import rows
from aumann.studies.rundir import DELETION_CURVES, HEATMAP, MACRO_CURVE, RunDir, StudyResult
from aumann.studies.tables import (
    FAITHFULNESS_COLUMNS,
    extended_table,
    extra_columns,
    faithfulness_table,
    methods_of,
    pair_table,
    path_table,
)


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


def study_tables(result: StudyResult) -> tuple[dict[str, list[dict[str, Any]]], set[str]]:
    """The study's own tables by name — the headline and extended tables, each registered row's
    (:meth:`Row.tables <aumann.studies.rows.Row.tables>`), the ablations' — and which of them are written
    only when they have rows (the rows' own)."""
    tables = {"faithfulness": faithfulness_table(result), "faithfulness_extended": extended_table(result)}
    optional: set[str] = set()
    for row in rows():
        own = row.tables(result)
        optional |= set(own)
        tables.update(own)
    tables.update({"path_ablation": path_table(result.scenario, result.records),
                   "f_sensitivity": pair_table(result.scenario, result.records, "f_sensitivity"),
                   "baseline_ablation": pair_table(result.scenario, result.records, "baseline")})
    return tables, optional


def write_tables(result: StudyResult, out: Path) -> dict[str, list[dict[str, Any]]]:
    """Write every table as CSV and Markdown (the study's, then the scenario analysis'); return them by name."""
    tables, optional = study_tables(result)
    tables.update(analysis_tables(result))
    rundir = RunDir(out)
    for name, rows_ in tables.items():
        if name in optional and not rows_:
            continue
        cols = (*FAITHFULNESS_COLUMNS, *extra_columns(result)) if name == "faithfulness" else _columns(rows_)
        write_text(rundir.table(name), to_csv(rows_, cols))
        write_text(rundir.table(name, "md"), to_markdown(rows_, cols))
    return tables


def _columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    return cols


def analysis_tables(result: StudyResult) -> dict[str, list[dict[str, Any]]]:
    """The scenario analysis' tables (``rec["analysis"]["tables"]``) of every run, with a ``run`` column;
    each is written as ``<name>.csv`` / ``.md`` (names must not clash with the study's own tables)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rec in result.records:
        for name, rows_ in (rec.get("analysis") or {}).get("tables", {}).items():
            out.setdefault(name, []).extend({"run": rec.get("run", 0), **r} for r in rows_)
    return {k: [{c: (math.nan if v is None else v) for c, v in r.items()} for r in rows_] for k, rows_ in out.items()}


def stage_summary(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """How many runs each stage ended how: ``{stage: {"ok": n, "failed": n, "skipped": n, "pending": n}}``."""
    out: dict[str, dict[str, int]] = {}
    for rec in records:
        for name, st in (rec.get("stages") or {}).items():
            status = st.get("status", "?") if isinstance(st, dict) else "?"
            counts = out.setdefault(name, {})
            counts[status] = counts.get(status, 0) + 1
    return out


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
    paths.append(RunDir(out).figure(MACRO_CURVE))
    with atomic_path(paths[-1]) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)

    phi = np.asarray(result.arrays[0]["phi_all"])  # (T, N)
    top = np.argsort(-phi.sum(axis=0), kind="stable")[: min(20, phi.shape[1])]  # the who-table's agents
    fig, ax = plt.subplots(figsize=(8, 5))
    lim = float(np.abs(phi[:, top]).max()) or 1.0
    im = ax.imshow(phi[:, top].T, aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
    ax.axvline(result.records[0]["t_star"], color="k", lw=1)
    ids = _agent_ids(result, phi.shape[1])
    ax.set(xlabel="step t", ylabel="agent (by Φ_i, top first)", yticks=range(len(top)),
           yticklabels=[str(ids[i]) for i in top],
           title=f"{result.scenario}: Aumann–Shapley φ (run 0; line = t*)")
    ax.tick_params(axis="y", labelsize=6)
    fig.colorbar(im, ax=ax, label="φ_{i,t}")
    fig.tight_layout()
    paths.append(RunDir(out).figure(HEATMAP))
    with atomic_path(paths[-1]) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, what in ((axes[0], "curve", "re-simulation"), (axes[1], "curve_masking", "masking")):
        for name in methods_of(result):
            arrs = [a[f"{key}_{name}"] for a in result.arrays if f"{key}_{name}" in a]
            if not arrs:
                continue
            # runs with births and deaths have different K_del (their players differ): the mean over the runs
            # that reach each k
            kmax = max(len(a) for a in arrs)
            curves = np.full((len(arrs), kmax), np.nan)
            for r, a in enumerate(arrs):
                curves[r, :len(a)] = a
            k = np.arange(1, kmax + 1)
            ax.plot(k, 100 * np.nanmean(curves, axis=0), marker=".", label=name)
        ax.set(xlabel="k (agents deleted at t*)", title=f"{what} oracle")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("drop (f − f_k)/f  [%]")
    fig.suptitle(f"{result.scenario}: deletion curves (mean over runs; agents ranked by signed φ)")
    fig.tight_layout()
    paths.append(RunDir(out).figure(DELETION_CURVES))
    with atomic_path(paths[-1]) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return paths


def _agent_ids(result: StudyResult, n: int) -> list[Any]:
    """Run 0's agent ids (from its panel, or its saved attribution on resume); positions as a last resort."""
    panel = result.panels[0] if result.panels else None
    if panel is not None:
        return [i.item() if hasattr(i, "item") else i for i in panel.agent_ids]
    path = RunDir(result.out_dir).attribution(0, "aumann_shapley") if result.out_dir is not None else None
    if path is not None and path.is_file():
        try:
            ids = read_npz(path, error=StudyError, what="attribution file")[0].get("agent_ids")
        except StudyError:
            ids = None  # a damaged file: fall back to positions (the heatmap labels only)
        if ids is not None and len(ids) == n:
            return [i.item() for i in ids]
    return list(range(n))


def write_outputs(result: StudyResult, out: Path, *, command: str, seconds: float, description: str = "",
                  baseline: str = "", plots: bool = True, config: dict[str, Any] | None = None, seeds: Any = None,
                  extra: dict[str, Any] | None = None, interactive: bool | None = None) -> dict[str, Any]:
    """Tables, PNG plots, ``manifest.json`` and the reports (``report.html``, ``report.md``) of a finished study.

    The manifest marks the directory finished (``report_kind = "faithfulness"``) and records the
    wall time per stage (``extra["stage_seconds"]`` plus "tables and plots" measured here); the
    reports are then built from the directory alone (:func:`aumann.studies.pages.render_report`), so
    ``aumann report`` rewrites them identically later.
    """
    from aumann.manifest import write_manifest
    from aumann.studies.pages import render_report

    out = Path(out)
    t0 = time.perf_counter()
    tables = write_tables(result, out)
    pngs = write_plots(result, out) if plots else []
    extra = dict(extra or {})
    stages = dict(extra.pop("stage_seconds", None) or {})
    stages["tables and plots"] = time.perf_counter() - t0
    own = study_tables(result)[0]
    write_manifest(out, command, config, seeds=seeds, extra={
        "analysis_tables": [k for k in tables if k not in own],
        "stages": stage_summary(result.records), "stage_failures": result.stage_failures(),
        "report_kind": "faithfulness", "scenario": result.scenario, "description": description,
        "baseline_description": baseline, "seconds": seconds + stages["tables and plots"],
        "stage_seconds": stages, "resumed_runs": result.resumed, "computed_runs": result.computed,
        "runs": len(result.records), "plots": plots, **extra})
    reports = render_report(out, interactive=interactive, plots=plots)
    return {"tables": tables, "plots": pngs, "report": reports["md"], "html": reports["html"]}


__all__ = ["headline_markdown", "stage_summary", "study_tables", "to_csv", "to_markdown", "write_outputs",
           "write_plots", "write_tables"]
