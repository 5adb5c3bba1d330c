"""``report.html`` and ``report.md`` of a finished run directory, built from its files alone.

:func:`render_report` reads a run directory written by ``aumann run`` (the faithfulness study),
``aumann attribute`` / ``aumann demo --out`` (one attribution of a panel) or ``aumann bluesky study``
(the cross-scale study) and writes the two reports atomically; nothing is recomputed (attributions,
deletion curves, tables and timings are read back), so ``aumann report RUN_DIR`` rewrites them at
any time. Every page has the same four sections:

* **Who drove it** — the top agents by signed Φ_i = Σ_t φ_{i,t} of the Aumann–Shapley attribution
  (descending; ties by agent position), per run: agent id, Φ_i, share of Σ_t Δv_t, φ at t*, the
  sampled-Shapley value ± its standard error where the run has one, the agent's features at t* and
  its groups; the group shares R_G;
* **When did it turn** — f(z_t) with the target step t* marked, Φ_t = Σ_i φ_{i,t} per step, and the
  agent × step heatmap of the top agents;
* **How sure** — efficiency gaps, provenance (K, quadrature rule, baseline, seeds), the faithfulness
  tables exactly as the run wrote them (every column and row, mean ± std merged) with the deletion
  curves, agreement with sampled Shapley against its noise ceiling, the smoothing gap, the ablations;
* **Cost** — LLM calls, cache hits, tokens and estimated cost (``manifest.json`` → ``llm_usage``;
  an offline run says so: 0 calls, 0 tokens, $0), and wall time per stage.

A part that did not run says so in one line; a page showing SYNTHETIC data carries a banner.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import AumannError, ReportError
from aumann.io import write_csv, write_text
from aumann.records import Manifest, RunRecord
from aumann.studies.action_sections import (
    GAMES,
    action_blocks,
    cost_rows,
    judge_blocks,
    resimulation_blocks,
    table_columns_note,
)
from aumann.studies.charts import Charts, Line, Point
from aumann.studies.faithfulness import read_timing, with_timing
from aumann.studies.page import (
    Card,
    Cards,
    Cell,
    Details,
    Document,
    KeyValues,
    Note,
    Section,
    Table,
    Text,
    fmt,
    render_html,
    render_markdown,
    seconds_text,
)
from aumann.studies.sections import (
    calls_text,
    concentration_table,
    group_share_table,
    id_cell,
    llm_blocks,
    load_arrays,
    load_attribution,
    load_panel,
    merged_table,
    pct_cell,
    pct_text,
    read_csv,
    read_json,
    reading_within,
    timing_table,
    top_order,
    who_table,
)

#: how many agents the "who" tables and the heatmap show by default
TOP_AGENTS = 20
#: rows written to ``top_agents.csv`` by ``aumann attribute`` / ``aumann demo``
TOP_AGENTS_CSV = 100
KINDS = ("faithfulness", "attribute", "crossscale")

def run_kind(run_dir: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """(kind, manifest) of a finished run directory; :class:`ReportError` for anything else."""
    d = Path(run_dir)
    if not d.exists():
        raise ReportError(f"run directory {str(d)!r} does not exist")
    if not d.is_dir():
        raise ReportError(f"{str(d)!r} is not a directory; aumann report takes a run directory")
    if not (d / "manifest.json").is_file():
        raise ReportError(f"{str(d)!r} is not a finished run directory: it has no manifest.json (written when "
                          "`aumann run`, `aumann attribute`, `aumann demo --out` or `aumann bluesky study` finishes)")
    with reading_within(d):
        manifest = read_json(d / "manifest.json", "manifest", schema=Manifest)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("command"), str):
        raise ReportError(f"manifest {str(d / 'manifest.json')!r} has no command: not an aumann run directory")
    cmd = manifest["command"]
    declared = manifest.get("report_kind")
    if declared is not None and declared not in KINDS:
        raise ReportError(f"manifest {str(d / 'manifest.json')!r} declares report_kind {declared!r}; "
                          f"known kinds: {list(KINDS)}")
    if declared == "faithfulness" or (declared is None and cmd.startswith("aumann run")):
        kind, needs = "faithfulness", ("runs", "faithfulness.csv")
    elif declared == "attribute" or (declared is None and cmd.startswith(("aumann attribute", "aumann demo"))):
        kind, needs = "attribute", ("attribution.npz", "summary.json")
    elif declared == "crossscale" or (declared is None and cmd.startswith("aumann bluesky study")):
        kind, needs = "crossscale", ("summary.json",)  # no cells/ when every topic was skipped
    else:
        raise ReportError(f"{str(d)!r} was written by {cmd!r}, which has no report; aumann report reads the "
                          "run directories of `aumann run`, `aumann attribute`, `aumann demo --out` and "
                          "`aumann bluesky study`")
    for name in needs:
        if not (d / name).exists():
            raise ReportError(f"{str(d)!r} ({cmd!r}) lacks {name!r}: the run did not finish or files were removed")
    return kind, manifest


def _document(kind: str, d: Path, manifest: dict[str, Any], charts: Charts, *, top: int, plots: bool) -> Document:
    if kind == "faithfulness":
        return faithfulness_document(d, manifest, charts, top=top, plots=plots)
    if kind == "attribute":
        return attribute_document(d, manifest, charts, top=top, plots=plots)
    from aumann.studies.crossscale.page import crossscale_document

    return crossscale_document(d, manifest, charts, top=top, plots=plots)


def render_report(run_dir: str | os.PathLike[str], *, interactive: bool | None = None, top: int = TOP_AGENTS,
                  plots: bool = True) -> dict[str, Path]:
    """Write ``report.html`` and ``report.md`` of a finished run directory (nothing is recomputed).

    Args:
        run_dir: a directory written by ``aumann run``, ``aumann attribute``, ``aumann demo --out`` or
            ``aumann bluesky study``.
        interactive: Bokeh figures (``None``: when the ``aumann[report]`` extra is installed), else PNG.
        top: agents shown in the "who" tables and the heatmap.
        plots: ``False`` leaves the figures out (each says so in one line).

    Returns:
        ``{"html": path, "md": path}``.

    Raises:
        ReportError: not a finished run directory, or one whose files cannot be read.
    """
    if top < 1:
        raise ReportError(f"top must be ≥ 1; got {top}")
    d = Path(run_dir)
    kind, manifest = run_kind(d)
    charts = Charts(interactive=interactive)
    try:
        with reading_within(d):  # every file read below stays inside the run directory
            doc = _document(kind, d, manifest, charts, top=top, plots=plots)
    except ReportError:
        raise
    except AumannError as exc:
        raise ReportError(f"{str(d)!r}: a result file cannot be read: {type(exc).__name__}: {exc}") from exc
    except (KeyError, IndexError, ValueError, TypeError, AttributeError, OverflowError) as exc:
        raise ReportError(f"{str(d)!r}: result files are incomplete or from another version "
                          f"({type(exc).__name__}: {exc})") from exc
    doc.head = charts.head()
    doc.meta = [*doc.meta, ("figures", charts.mode if plots else "left out")]
    return {"html": write_text(d / "report.html", render_html(doc)), "md": write_text(d / "report.md",
                                                                                          render_markdown(doc))}


def _curve_groups(arrays: Sequence[dict[str, np.ndarray]], methods: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """{variant: {method: mean curve over runs}} from the ``curve_<variant>_<method>`` arrays of every run."""
    known = sorted(set(methods), key=len, reverse=True)
    out: dict[str, dict[str, np.ndarray]] = {}
    keys = [k for k in arrays[0] if k.startswith("curve_")] if arrays else []
    for key in keys:
        rest = key[len("curve_"):]
        method = next((m for m in known if rest == m or rest.endswith("_" + m)), None)
        if method is None:
            continue
        variant = rest[: -len(method)].rstrip("_") or "deletion"
        try:
            stack = np.array([np.asarray(a[key], dtype=np.float64) for a in arrays if key in a])
        except ValueError:  # runs of different lengths: not averageable
            continue
        if stack.ndim == 2 and stack.size:
            out.setdefault(variant, {})[method] = np.nanmean(stack, axis=0)
    return out


_VARIANT_TITLES = {
    "deletion": "Deletion curves (attributed indicator, agents ranked by φ)",
    "original": "Deletion curves on the original (non-smooth) indicator",
    "magnitude": "Deletion curves, agents ranked by |φ|",
    "masking": "Deletion curves under the masking oracle",
    "original_masking": "Deletion curves, original indicator, masking oracle",
}

# --------------------------------------------------------------------------- aumann run


def _load_runs(d: Path, n_runs: int) -> tuple[list[dict[str, Any]], list[dict[str, np.ndarray]]]:
    recs, arrs = [], []
    for r in range(n_runs):
        rec = read_json(d / "runs" / f"run-{r:03d}.json", "run record", schema=RunRecord)
        npz = d / "runs" / f"run-{r:03d}.npz"
        if not npz.is_file():
            raise ReportError(f"run arrays {str(npz)!r} are missing: not a finished run directory")
        arrs.append(load_arrays(npz, "run arrays"))
        if not int(rec["t_star"]) < len(arrs[-1].get("f_values", ())):  # (t_star ≥ 0 is the schema's)
            raise ReportError(f"run record {str(d / 'runs' / f'run-{r:03d}.json')!r}: t_star = {rec['t_star']} is not "
                              "a step of the run (damaged)")
        recs.append(with_timing(rec, read_timing(d, r)))  # the seconds live beside the record
    return recs, arrs


def faithfulness_document(d: Path, manifest: dict[str, Any], charts: Charts, *, top: int = TOP_AGENTS,
                          plots: bool = True) -> Document:
    """The page of an ``aumann run`` directory."""
    config = manifest.get("config") or {}
    scenario = manifest.get("scenario") or (read_csv(d / "faithfulness.csv") or [{}])[0].get("scenario", "?")
    n_runs = int(manifest.get("runs") or config.get("runs") or len(list((d / "runs").glob("run-*.json"))))
    recs, arrs = _load_runs(d, n_runs)
    faith = read_csv(d / "faithfulness.csv")
    methods = [str(r["method"]) for r in faith if "method" in r]
    synthetic = bool(manifest.get("synthetic", False))
    k = top
    ats = [load_attribution(d / "attributions" / f"run-{r:03d}-aumann_shapley.npz") for r in range(n_runs)]
    refs = []
    for r in range(n_runs):
        p = d / "attributions" / f"run-{r:03d}-sampled_shapley.npz"
        refs.append(load_attribution(p) if p.is_file() else None)
    panels = []
    for r in range(n_runs):
        p = d / "panels" / f"run-{r:03d}.npz"
        panels.append(load_panel(p) if p.is_file() else None)

    # ---------------------------------------------------------------- who
    who: list[Any] = [Text(f"The {min(k, ats[0].N)} agents with the largest signed Φ_i = Σ_t φ_i,t (Aumann–Shapley, "
                           "every step, per-agent baseline-action baselines), per run; ties by agent position. "
                           "`% of ΣΔv` is Φ_i / Σ_t Δv_t (whole run), `φ at t*` and `% of Δv(t*)` the agent's "
                           "attribution at the target step, `Shapley φ(t*)` the reference (sampled Shapley at t*) "
                           "with its Monte-Carlo standard error; the remaining columns are the agent's features at "
                           "t*.")]
    for r, (att, ref, panel, rec) in enumerate(zip(ats, refs, panels, recs)):
        ts = int(rec["t_star"])
        feats = ({f: panel.values[ts, :, j] for j, f in enumerate(panel.features)} if panel is not None else None)
        blocks: list[Any] = [who_table(att, k=k, t_star=ts, features=feats, reference=ref, id=f"who-run-{r:03d}",
                                       caption=f"Run {r}: top agents by Φ_i (t* = step {ts})")]
        if panel is None:
            blocks.append(Note(f"panels/run-{r:03d}.npz is missing: features at t* are not shown.", "skipped"))
        blocks += group_share_table(att, caption=f"Run {r}: group shares", id=f"groups-run-{r:03d}")
        if not att.groups:
            blocks.append(concentration_table(att.by_agent(), float(att.delta_v.sum()),
                                              id=f"concentration-run-{r:03d}"))
        who.append(Details(f"Run {r} (t* = {ts}, Δv(t*) = {fmt(rec['delta_v'])})", blocks, open=r == 0))

    # ---------------------------------------------------------------- when
    when: list[Any] = []
    a0, rec0 = ats[0], recs[0]
    ts0 = int(rec0["t_star"])
    T = a0.T
    steps = list(range(T))
    if plots:
        series = []
        pts = []
        for r, (rec, arr) in enumerate(zip(recs, arrs)):
            series.append(Line(f"run {r}", steps, np.asarray(arr["f_values"]), width=2.2 if r == 0 else 1.2,
                               alpha=1.0 if r == 0 else 0.55, legend=len(recs) <= 10))
            pts.append(Point(int(rec["t_star"]), float(rec["f_t_star"]), "t*" if r == 0 or len(recs) <= 3 else "",
                             color="#111111" if r == 0 else "#555555"))
        series.append(Line("run 0, original indicator", steps, np.asarray(arrs[0]["f_original_values"]), dash=True,
                           color="#444444", width=1.2))
        fig1 = charts.lines("Macro indicator f(z_t), target step t* marked", series, xlabel="step t", ylabel="f(z_t)",
                            points=pts, caption=f"Solid: the attributed C² surrogate, one line per run; dashed: the "
                            "original indicator of run 0. ● marks t* = argmax over t ≥ ⌈T/2⌉ of f "
                            f"(run 0: t* = {ts0}).",
                            md_ref="macro_curve.png" if (d / "macro_curve.png").is_file() else None,
                            synthetic=synthetic)
        phit = a0.by_step()
        fig2 = charts.lines("Φ_t = Σ_i φ_i,t per step (run 0)", [], xlabel="step t", ylabel="Φ_t",
                            bars=(steps, phit, "Φ_t"), points=[Point(ts0, float(phit[ts0]), "t*")],
                            caption="Each step's attribution total (= Δv_t = f(z_t) − f(z⁰_t) by efficiency), "
                            "with the agents' baseline-action state as baseline.", synthetic=synthetic)
        when.append([fig1, fig2])
        order = top_order(a0.by_agent(), k)
        ids = [str(a0.agent_ids[p].item() if hasattr(a0.agent_ids[p], "item") else a0.agent_ids[p]) for p in order]
        when.append(charts.heatmap(
            f"φ_i,t of the top {len(order)} agents × steps (run 0)", a0.phi[:, order].T, ids, [str(s) for s in steps],
            xlabel="step t", ylabel="agent (by Φ_i, top first)", value_label="φ_i,t", vline=(ts0, "t*"),
            caption="Rows: the agents of run 0's who-table, in its order; red raises the indicator, blue lowers it. "
            "Hover for agent id, step and φ; drag to zoom." if charts.interactive else
            "Rows: the agents of run 0's who-table, in its order; red raises the indicator, blue lowers it.",
            md_ref="attribution_heatmap.png" if (d / "attribution_heatmap.png").is_file() else None,
            synthetic=synthetic, extra={"Φ_i": np.repeat(a0.by_agent()[order][:, None], T, axis=1)}))
    else:
        when.append(Note("Figures were left out (`--no-plots`); the per-step table below has the numbers.", "skipped"))
    phit0 = a0.by_step()
    when.append(Details("Run 0 per step: f(z_t), f_original(z_t), Φ_t", [Table(
        ["step", "f(z_t)", "f_original(z_t)", "Φ_t", "Δv_t", "t*"],
        [[t, float(arrs[0]["f_values"][t]), float(arrs[0]["f_original_values"][t]), float(phit0[t]),
          float(a0.delta_v[t]), "◀ t*" if t == ts0 else ""] for t in steps], id="per-step-run-000")]))
    when.append(Table(["run", "t*", "f(z_t*)", "f_original(z_t*)", "Δv(t*)"],
                      [[r, int(rec["t_star"]), float(rec["f_t_star"]), float(rec["f_original_t_star"]),
                        float(rec["delta_v"])] for r, rec in enumerate(recs)], caption="Target step per run",
                      id="t-star"))

    # ---------------------------------------------------------------- how sure
    sure: list[Any] = []
    prov = dict(a0.provenance)
    study = config.get("study") or {}
    seeds = manifest.get("seeds") or {}
    sure.append(KeyValues([
        ("method", f"Aumann–Shapley ({'closed form' if prov.get('closed_form') else 'path integral'})"),
        ("K (quadrature points)", prov.get("steps")), ("rule", prov.get("rule")), ("power τ = u^p", prov.get("power")),
        ("baseline", f"{prov.get('baseline')} — each agent's features under the baseline action at that step"),
        ("indicator", prov.get("indicator")), ("dtype", prov.get("dtype")),
        ("reference", f"sampled Shapley, {study.get('permutations', '?')} permutations, "
                      f"{study.get('reference_game', 'masking')} game"),
        ("noise ceiling", "a second sampled-Shapley run, "
                          f"{study.get('ceiling_permutations') or study.get('permutations', '?')} "
                          "permutations, independent seed"),
        ("seeds", f"root {seeds.get('root', config.get('seed'))}, {seeds.get('runs', n_runs)} run(s), "
                  f"{seeds.get('spawn', 'SeedSequence(root).spawn(runs)')}"),
        ("backend", manifest.get("backend", "offline")), ("git revision", manifest.get("git_revision")),
        ("aumann", (manifest.get("packages") or {}).get("aumann")),
    ], caption="Provenance"))
    eff_rows = []
    for r, (att, rec) in enumerate(zip(ats, recs)):
        ts = int(rec["t_star"])
        eff_rows.append([r, ts, float(att.delta_v[ts]), float(att.phi[ts].sum()), float(att.efficiency_gap[ts]),
                         float(att.relative_efficiency_gap[ts]), float(att.max_efficiency_gap),
                         float(att.relative_efficiency_gap.max())])
    sure.append(Table(["run", "t*", "Δv(t*)", "Σ_i φ_i,t*", "|Σφ − Δv| at t*", "relative", "max over steps",
                       "max relative"], eff_rows, caption="Efficiency gap |Σ_i φ_i,t − Δv_t| (quadrature error)",
                      id="efficiency"))
    sure.append("Deletion faithfulness")
    sure.append(Text(GAMES))
    sure.append(merged_table(faith, caption="faithfulness.csv", id="faithfulness"))
    ext = read_csv(d / "faithfulness_extended.csv")
    if ext:
        sure.append(Details("The original indicator and the |φ| ordering (faithfulness_extended.csv)",
                            [table_columns_note(),
                             merged_table(ext, caption="faithfulness_extended.csv", id="faithfulness-extended")]))
    groups = _curve_groups(arrs, methods or ["aumann_shapley", "sampled_shapley", "leave_one_out", "random"])
    if plots and groups:
        figs = []
        for variant, curves in groups.items():
            ser = [Line(m, list(range(1, len(c) + 1)), 100 * c, markers=True, dash=m == "random")
                   for m, c in curves.items()]
            figs.append(charts.lines(_VARIANT_TITLES.get(variant, f"Deletion curves ({variant.replace('_', ' ')})"),
                                     ser, xlabel="k (agents deleted at t*)", ylabel="drop (f − f_k)/f  [%]",
                                     integer_x=True, legend_at="outside",
                                     caption="Mean over runs.", synthetic=synthetic,
                                     md_ref="deletion_curves.png" if variant == "deletion" and
                                     (d / "deletion_curves.png").is_file() else None))
        sure.append(figs)
    elif not plots:
        sure.append(Note("Deletion-curve figures were left out (`--no-plots`).", "skipped"))
    sure.append("Agreement with sampled Shapley")
    agree_cols = [c for c in ("kendall_tau", "jaccard_top10") if faith and c in faith[0]]
    agree_rows = [r for r in faith if any(isinstance(r.get(c), float) and math.isfinite(r[c]) for c in agree_cols)]
    if agree_rows:
        ceil = faith[0]
        rows = []
        for r in agree_rows:
            rows.append([r["method"]] + [Cell(f"{fmt(r[c])} ± {fmt(r.get(c + '_std'), 2)}", sort=r[c])
                                         for c in agree_cols])
        rows.append([Cell("noise ceiling (two sampled-Shapley runs)", cls=""),
                     *[ceil.get("kendall_tau_ceiling"), ceil.get("jaccard_ceiling")][: len(agree_cols)]])
        sure.append(Table(["method", *[f"{c} vs sampled Shapley" for c in agree_cols]], rows, id="agreement",
                          caption="Rank agreement with the reference (mean ± std over runs). The noise ceiling is "
                          "how well two independent sampled-Shapley runs agree: no method can be expected to do "
                          "better."))
    else:
        sure.append(Note("No agreement columns in faithfulness.csv.", "skipped"))
    sure.append("Action attribution through the simulator")
    sure += action_blocks(d, recs)
    sure.append("Agreement on the re-simulation game")
    sure += resimulation_blocks(d)
    sure.append("LLM-as-judge")
    sure += judge_blocks(d, recs)
    sure.append("Smoothing gap")
    sg = [[r, rec["smoothing_gap"].get("max_abs"), rec["smoothing_gap"].get("max_rel"),
           rec["smoothing_gap"].get("t_star_abs"), rec["smoothing_gap"].get("t_star_kendall_tau"),
           rec["smoothing_gap"].get("t_star_top_k_jaccard")] for r, rec in enumerate(recs) if "smoothing_gap" in rec]
    if sg:
        sure.append(Table(["run", "max_t |f − f_orig|", "max relative", "|f − f_orig| at t*",
                           "τ (surrogate vs original φ at t*)", "top-k Jaccard"],
                          [[x if x is not None else math.nan for x in row] for row in sg], id="smoothing-gap",
                          caption="The attributed C² surrogate against the original indicator"))
        notes = {rec["smoothing_gap"].get("note") for rec in recs if rec.get("smoothing_gap", {}).get("note")}
        sure += [Text(str(n)) for n in sorted(notes)]
    else:
        sure.append(Note("The smoothing gap was not recorded.", "skipped"))
    sure.append("Ablations")
    if not any("ablations" in rec for rec in recs):
        sure.append(Note("Ablations were skipped (`--no-ablations`): no path, f-sensitivity or baseline ablation "
                         "tables.", "skipped"))
    else:
        for name, title in (("path_ablation", "Path ablation: straight vs random-permutation piecewise-linear path"),
                            ("f_sensitivity", "f-sensitivity"),
                            ("baseline_ablation", "Baseline ablation (agents ranked by |φ|)")):
            rows = read_csv(d / f"{name}.csv")
            sure.append(merged_table(rows, caption=f"{title} ({name}.csv)", id=name) if rows else
                        Note(f"{name}.csv is empty.", "skipped"))

    # ---------------------------------------------------------------- the scenario's own analysis
    analysis: list[Any] = []
    notes = sorted({str(rec["analysis"].get("policy")) for rec in recs
                    if isinstance(rec.get("analysis"), dict) and rec["analysis"].get("policy")})
    if notes:
        analysis.append(Text(f"Decisions: **{'; '.join(notes)}**."))
    for name in manifest.get("analysis_tables") or []:
        rows = read_csv(d / f"{name}.csv")
        analysis.append(merged_table(rows, caption=f"{name.replace('_', ' ')} ({name}.csv)", id=f"analysis-{name}",
                                     drop=()) if rows else Note(f"{name}.csv is empty.", "skipped"))

    # ---------------------------------------------------------------- cost
    llm, llm_card = llm_blocks(manifest, offline_reason="Every decision came from the scenario's deterministic "
                               "offline policy; no server was contacted.")
    n_evals = [ref.n_evals for ref in refs if ref is not None and ref.n_evals]
    forks = [rec.get("forks") for rec in recs if isinstance(rec.get("forks"), int | float)]
    comp = [("runs computed / resumed", f"{manifest.get('computed_runs', '?')} / {manifest.get('resumed_runs', '?')}"),
            ("evaluations of v for sampled Shapley (per run)", fmt(float(np.mean(n_evals))) if n_evals else "–"),
            ("deletion forks (per run)", fmt(float(np.mean(forks))) if forks else "–"), *cost_rows(recs)]
    failed = manifest.get("failed_checks") or []
    if failed:  # finished runs found on disk that did not verify (truncated, incomplete, edited): recomputed
        comp.append(("runs recomputed after a failed resume check",
                     f"{len(failed)}: " + "; ".join(f"{f.get('file')} ({f.get('reason')})" for f in failed)))
    resumed = int(manifest.get("resumed_runs") or 0)
    cost: list[Any] = [*llm, *timing_table(manifest.get("stage_seconds"), manifest.get("seconds"), note=(
        f"{resumed} run(s) were read back from an earlier invocation; their compute time is not in this table."
        if resumed else "")), KeyValues(comp, caption="Work done")]

    # ---------------------------------------------------------------- cards + document
    phi0 = a0.by_agent()
    best = int(top_order(phi0, 1)[0])
    tot0 = float(a0.delta_v.sum())
    row = {r["method"]: r for r in faith}
    ours = row.get("aumann_shapley", {})
    rnd = row.get("random", {})
    cards = [Card("Top driver (run 0)", f"agent {id_cell(a0.agent_ids[best]).text}",
                  f"Φ = {fmt(float(phi0[best]))}" + (f", {pct_text(phi0[best] / tot0)} of Σ_t Δv_t" if tot0 else "")),
             Card("When (run 0)", f"t* = {ts0}", f"f(z_t*) = {fmt(float(rec0['f_t_star']))}; Φ_t* = "
                  f"{fmt(float(a0.by_step()[ts0]))}")]
    if "kendall_tau" in ours:
        cards.append(Card("τ vs sampled Shapley", fmt(ours["kendall_tau"], 3),
                          f"noise ceiling {fmt(ours.get('kendall_tau_ceiling'), 3)}"))
    if "deletion_auc" in ours:
        cards.append(Card("Deletion AUC", fmt(ours["deletion_auc"], 3),
                          f"random orderings: {fmt(rnd.get('deletion_auc'), 3)}"))
    cards.append(Card("Efficiency gap", fmt(max(float(a.max_efficiency_gap) for a in ats), 2),
                      "max |Σφ − Δv| over runs and steps"))
    cards.append(Card("Cost", llm_card, f"{calls_text(manifest)} · wall {seconds_text(manifest.get('seconds'))}"))
    n_agents, n_steps = ats[0].N, ats[0].T
    sections = [
        Section("cards", "At a glance", [Cards(cards)]),
        Section("who", "Who drove it", who, lead="top agents by Φ_i, per run"),
        Section("when", "When did it turn", when, lead="f(z_t), Φ_t and the agent × step attribution"),
        Section("how-sure", "How sure", sure, lead="efficiency, provenance, faithfulness, agreement, smoothing"),
        *([Section("analysis", "Scenario analysis", analysis, lead="the scenario's own tables beside the study")]
          if analysis else []),
        Section("cost", "Cost", cost, lead="LLM usage and wall time"),
    ]
    desc = manifest.get("description") or ""
    return Document(
        title=f"{scenario}: who drove it, and when",
        subtitle=(desc + " " if desc else "") + f"N = {n_agents:,} agents, T = {n_steps} steps, {n_runs} run(s).",
        sections=sections, synthetic=synthetic,
        meta=[("command", f"`{manifest.get('command')}`"), ("created", manifest.get("created")),
              ("baseline action", manifest.get("baseline_description") or "–"),
              *([("decisions", manifest["policy"])] if manifest.get("policy") else [])])


# --------------------------------------------------------------------------- aumann attribute / demo


def attribute_t_star(att: Any) -> int:
    """t* of a one-panel attribution: the step with the largest Δv_t = f(z_t) − f(z⁰_t) (first on ties)."""
    return int(np.argmax(np.asarray(att.delta_v, dtype=np.float64)))


def top_agents_rows(att: Any, panel: Any, *, k: int = TOP_AGENTS_CSV) -> list[dict[str, Any]]:
    """Rows of ``top_agents.csv``: the top-k agents by Φ_i with their features at t* and their groups."""
    ts = attribute_t_star(att)
    phi_i = att.by_agent()
    total = float(att.delta_v.sum())
    rows = []
    for rank, pos in enumerate(top_order(phi_i, k), start=1):
        aid = att.agent_ids[pos]
        row: dict[str, Any] = {"rank": rank, "position": int(pos), "agent": aid.item() if hasattr(aid, "item") else aid,
                               "Phi": float(phi_i[pos]), "share": float(phi_i[pos] / total) if total else math.nan,
                               "t_star": int(ts), "phi_t_star": float(att.phi[ts, pos])}
        if att.stderr is not None:
            row["stderr_t_star"] = float(np.asarray(att.stderr)[ts, pos])
        for j, f in enumerate(panel.features):
            row[f"z_{f}"] = float(panel.values[ts, pos, j])
        for g, labels in att.groups.items():
            v = np.asarray(labels)[pos]
            row[f"group_{g}"] = v.item() if hasattr(v, "item") else v
        rows.append(row)
    return rows


def attribute_document(d: Path, manifest: dict[str, Any], charts: Charts, *, top: int = TOP_AGENTS,
                       plots: bool = True) -> Document:
    """The page of an ``aumann attribute`` (or ``aumann demo --out``) directory."""
    att = load_attribution(d / "attribution.npz")
    summary = read_json(d / "summary.json", "summary")
    panel_meta = manifest.get("panel_meta") or {}
    synthetic = bool(summary.get("synthetic") or panel_meta.get("synthetic"))
    demo = str(manifest.get("command", "")).startswith("aumann demo")
    ts = attribute_t_star(att)
    prov = dict(att.provenance)
    top_rows = read_csv(d / "top_agents.csv")
    phi_i = att.by_agent()
    total = float(att.delta_v.sum())
    k = min(top, att.N)
    steps_lbl = [str(s.item() if hasattr(s, "item") else s) for s in att.steps]

    # ---------------------------------------------------------------- who
    feats: dict[str, np.ndarray] | None = None
    if top_rows:
        by_pos = {int(r["position"]): r for r in top_rows}
        names = [c[2:] for c in top_rows[0] if c.startswith("z_")]
        order = top_order(phi_i, k)
        if all(int(p) in by_pos for p in order):
            feats = {f: np.full(att.N, np.nan) for f in names}
            for p in order:
                for f in names:
                    feats[f][p] = by_pos[int(p)][f"z_{f}"]
    who: list[Any] = [Text(f"The {k} agents with the largest signed Φ_i = Σ_t φ_i,t over the {att.T} step(s), ties "
                           f"by agent position; t* = step {steps_lbl[ts]} (the step with the largest Δv_t). "
                           "`% of ΣΔv` is Φ_i / Σ_t Δv_t; `φ at t*` and `% of Δv(t*)` the attribution at t*; the "
                           "feature columns hold the agent's features at t*.")]
    who.append(who_table(att, k=k, t_star=ts, features=feats, id="who-run-000",
                         caption=f"Top agents by Φ_i ({att.method}, indicator {prov.get('indicator')})"))
    if att.stderr is None:
        who.append(Text("Aumann–Shapley is deterministic (closed form or quadrature): it has no standard error; the "
                        "efficiency gap under *How sure* bounds its numerical error."))
    if feats is None:
        who.append(Note("top_agents.csv is missing or does not cover these agents: features at t* are not shown.",
                        "skipped"))
    who += group_share_table(att, caption="Group shares", id="groups-run-000")
    if not att.groups:
        who.append(concentration_table(phi_i, total, id="concentration-run-000"))
    if demo and summary.get("rows"):
        rows = [[r["indicator"], r["method"], *[pct_cell(r["shares"].get(g)) for g in ("top", "mid", "tail")],
                 r.get("max_efficiency_gap"), Cell(seconds_text(r.get("seconds")), sort=r.get("seconds"))]
                for r in summary["rows"]]
        who.append(Table(["indicator", "method", "R_top (1 %)", "R_mid (9 %)", "R_tail (90 %)", "max |Σφ − Δv|",
                          "time"], rows, caption="The demo's indicators: tier shares R_G over the whole window",
                         id="demo-tiers"))

    # ---------------------------------------------------------------- when
    when: list[Any] = []
    x = list(range(att.T))
    if plots and att.T > 1:
        base_same = np.allclose(att.f_baseline, att.f_baseline[0])
        ser = [Line("f(z_t)", x, att.f_values, width=2.2, markers=att.T <= 40)]
        if not base_same:
            ser.append(Line("f(z⁰_t) (baseline)", x, att.f_baseline, dash=True, color="#444444"))
        f1 = charts.lines("Macro indicator f(z_t), t* marked", ser, xlabel="step", ylabel="f(z_t)",
                          points=[Point(ts, float(att.f_values[ts]), "t*")], xlabels=steps_lbl, synthetic=synthetic,
                          caption=f"t* = step {steps_lbl[ts]}: the largest Δv_t = f(z_t) − f(z⁰_t)"
                          + (f"; f(z⁰) = {fmt(float(att.f_baseline[0]))} at every step." if base_same else "."))
        f2 = charts.lines("Φ_t = Σ_i φ_i,t per step", [], xlabel="step", ylabel="Φ_t", bars=(x, att.by_step(), "Φ_t"),
                          points=[Point(ts, float(att.by_step()[ts]), "t*")], xlabels=steps_lbl, synthetic=synthetic,
                          caption="Each step's attribution total (= Δv_t by efficiency).")
        when.append([f1, f2])
        order = top_order(phi_i, k)
        ids = [id_cell(att.agent_ids[p]).text for p in order]
        when.append(charts.heatmap(f"φ_i,t of the top {len(order)} agents × steps", att.phi[:, order].T, ids, steps_lbl,
                                   xlabel="step", ylabel="agent (by Φ_i, top first)", value_label="φ_i,t",
                                   vline=(ts, "t*"), synthetic=synthetic,
                                   caption="Rows: the agents of the who-table, in its order. Hover for agent id and φ."
                                   if charts.interactive else "Rows: the agents of the who-table, in its order.",
                                   extra={"Φ_i": np.repeat(phi_i[order][:, None], att.T, axis=1)}))
    elif not plots:
        when.append(Note("Figures were left out (`--no-plots`); the per-step table below has the numbers.", "skipped"))
    else:
        when.append(Note("One step only: there is no curve over time (t* is that step).", "skipped"))
    when.append(Details("Per step: f(z_t), f(z⁰_t), Φ_t, Δv_t", [Table(
        ["step", "f(z_t)", "f(z⁰_t)", "Φ_t", "Δv_t", "t*"],
        [[Cell(steps_lbl[t], sort=t), float(att.f_values[t]), float(att.f_baseline[t]), float(att.by_step()[t]),
          float(att.delta_v[t]), "◀ t*" if t == ts else ""] for t in range(att.T)], id="per-step-run-000",
        md_max_rows=60)], open=att.T <= 15))

    # ---------------------------------------------------------------- how sure
    sure: list[Any] = [KeyValues([
        ("method", f"{att.method} ({'closed form' if prov.get('closed_form') else 'path integral'})"),
        ("indicator", prov.get("indicator")), ("K (quadrature points)", prov.get("steps")), ("rule", prov.get("rule")),
        ("power τ = u^p", prov.get("power")), ("baseline", prov.get("baseline")), ("seed", prov.get("seed")),
        ("dtype", prov.get("dtype")), ("panel", f"T = {att.T}, N = {att.N:,}, D = {len(att.features)} "
                                                 f"({', '.join(att.features)})"),
        ("source", summary.get("panel") or panel_meta.get("generator") or "–"),
        ("git revision", manifest.get("git_revision")), ("aumann", (manifest.get("packages") or {}).get("aumann")),
    ], caption="Provenance")]
    gap = att.efficiency_gap
    sure.append(Table(["max |Σφ − Δv|", "at step", "max relative", "at t*", "satisfies efficiency"],
                      [[float(gap.max()), Cell(steps_lbl[int(np.argmax(gap))], sort=int(np.argmax(gap))),
                        float(att.relative_efficiency_gap.max()), float(gap[ts]), att.satisfies_efficiency]],
                      caption="Efficiency gap |Σ_i φ_i,t − Δv_t|", id="efficiency"))
    sure.append(Note("No deletion-faithfulness check, sampled-Shapley agreement or noise ceiling here: "
                     "`aumann attribute` attributes a saved panel without a simulator to delete agents in "
                     "(`aumann run SCENARIO` runs those checks).", "skipped"))
    sure.append(Note("No smoothing gap: the indicator is attributed as given (no surrogate).", "skipped"))

    # ---------------------------------------------------------------- cost
    llm, llm_card = llm_blocks(manifest, offline_reason="No agent decided anything here: a saved panel was "
                               "attributed.")
    stage = manifest.get("stage_seconds")
    total_s = manifest.get("seconds") or summary.get("seconds")
    cost: list[Any] = [*llm, *timing_table(stage, total_s)]

    best = int(top_order(phi_i, 1)[0])
    cards = [Card("Top driver", f"agent {id_cell(att.agent_ids[best]).text}",
                  f"Φ = {fmt(float(phi_i[best]))}"
                  + (f", {pct_text(phi_i[best] / total)} of Σ_t Δv_t" if total else "")),
             Card("When", f"t* = {steps_lbl[ts]}", f"Δv(t*) = {fmt(float(att.delta_v[ts]))}"),
             Card("Efficiency gap", fmt(float(att.max_efficiency_gap), 2), "max |Σφ − Δv| over steps"),
             Card("Cost", llm_card, f"{calls_text(manifest)} · wall {seconds_text(total_s)}")]
    if att.groups and total:
        g0 = next(iter(att.groups))
        sh = att.group_shares(g0)
        lead = max(sh, key=lambda key: sh[key])
        cards.insert(1, Card(f"Largest {g0} share", f"{lead}: {pct_text(sh[lead])}",
                             f"of Σ_t Δv_t; {int(np.sum(np.asarray(att.groups[g0]) == lead)):,} agents"))
    what = "demo" if demo else "attribution"
    return Document(
        title=(f"aumann demo: synthetic heavy-tailed panel, {prov.get('indicator')}" if demo else
               f"Attribution of {prov.get('indicator')}: who drove it, and when"),
        subtitle=f"{what.capitalize()} of a panel of N = {att.N:,} agents × T = {att.T} step(s) × "
                 f"D = {len(att.features)} feature(s).",
        sections=[Section("cards", "At a glance", [Cards(cards)]),
                  Section("who", "Who drove it", who, lead="top agents by Φ_i"),
                  Section("when", "When did it turn", when, lead="f(z_t), Φ_t, agent × step"),
                  Section("how-sure", "How sure", sure, lead="efficiency and provenance"),
                  Section("cost", "Cost", cost, lead="LLM usage and wall time")],
        synthetic=synthetic,
        synthetic_note=("SYNTHETIC panel — generated by aumann (not observed data); tiers and shares describe the "
                        "generator." if synthetic else Document.synthetic_note),
        meta=[("command", f"`{manifest.get('command')}`"), ("created", manifest.get("created"))])


def write_top_agents(out: Path, att: Any, panel: Any, *, k: int = TOP_AGENTS_CSV) -> Path:
    """``top_agents.csv``: the top-k agents by Φ_i, their share, φ at t*, features at t* and groups."""
    rows = top_agents_rows(att, panel, k=k)
    cols = list(rows[0]) if rows else ["rank", "position", "agent", "Phi", "share", "t_star", "phi_t_star"]
    return write_csv(out / "top_agents.csv", rows, cols)  # plain numbers (numpy scalars too), missing = empty


__all__ = ["KINDS", "TOP_AGENTS", "TOP_AGENTS_CSV", "attribute_document", "attribute_t_star", "faithfulness_document",
           "render_report", "run_kind", "top_agents_rows", "write_top_agents"]
