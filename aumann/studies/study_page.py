"""The page of an ``aumann run`` directory, section by section, from the files alone.

:func:`faithfulness_document` reads the run directory once into a :class:`StudyPage` and builds each
registered :class:`ReportSection` from it: "Who drove it", "When did it turn", "How sure" (with a part
for every registered row that has one, :meth:`aumann.studies.rows.Row.section`, and the stages that did
not finish), "Scenario analysis" and "Cost". A report section of your own is one function of the
:class:`StudyPage` and one :func:`register_section` call::

    def spread(page):
        return [Text(f"{len(page.recs)} run(s); t* per run: {[r['t_star'] for r in page.recs]}")]

    register_section(ReportSection("spread", "Spread over runs", spread, lead="t* per run"))

A section that returns no blocks is left out of the page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import ConfigError, ReportError
from aumann.io import read_npz
from aumann.studies.action_sections import GAMES, table_columns_note
from aumann.studies.charts import Charts, Line, Point
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
    seconds_text,
)
from aumann.studies.rows import rows
from aumann.studies.rundir import (
    DELETION_CURVES,
    FAITHFULNESS,
    HEATMAP,
    MACRO_CURVE,
    RunDir,
    failure_text,
    stage_failures,
    with_timing,
)
from aumann.studies.sections import (
    above_ceiling,
    calls_text,
    ceiling_explanation,
    concentration_table,
    efficiency_note,
    group_share_table,
    id_cell,
    llm_blocks,
    load_attribution,
    merged_table,
    pct_text,
    read_csv,
    read_json,
    timing_table,
    top_order,
    who_table,
)

_VARIANT_TITLES = {
    "deletion": "Deletion curves (attributed indicator, agents ranked by φ)",
    "original": "Deletion curves on the original (non-smooth) indicator",
    "magnitude": "Deletion curves, agents ranked by |φ|",
    "masking": "Deletion curves under the masking oracle",
    "original_masking": "Deletion curves, original indicator, masking oracle",
}


@dataclass
class StudyPage:
    """Everything the page is built from, read once from the run directory ``d``."""

    d: RunDir
    manifest: dict[str, Any]
    charts: Charts
    top: int
    plots: bool
    recs: list[dict[str, Any]]  # run records, seconds back in place
    arrs: list[dict[str, np.ndarray]]  # run arrays
    ats: list[Any]  # Aumann–Shapley attributions (every step), per run
    refs: list[Any]  # sampled-Shapley attributions at t* (None where missing)
    panels: list[Any]  # run panels (None where missing)
    faith: list[dict[str, Any]]  # faithfulness.csv

    @classmethod
    def load(cls, d: Path, manifest: dict[str, Any], charts: Charts, *, top: int, plots: bool) -> StudyPage:
        from aumann.panel import Panel

        rd = RunDir(d)
        config = manifest.get("config") or {}
        n_runs = int(manifest.get("runs") or config.get("runs") or len(rd.finished_records()))
        recs, arrs = [], []
        for r in range(n_runs):
            rec = read_json(rd.record(r), "run record")
            if not rd.arrays(r).is_file():
                raise ReportError(f"run arrays {str(rd.arrays(r))!r} are missing: not a finished run directory")
            arrs.append(read_npz(rd.arrays(r), error=ReportError, what="run arrays")[0])
            recs.append(with_timing(rec, rd.read_timing(r)))  # the seconds live beside the record
        refs = [load_attribution(p) if (p := rd.attribution(r, "sampled_shapley")).is_file() else None
                for r in range(n_runs)]
        panels = [Panel.load(p) if (p := rd.panel(r)).is_file() else None for r in range(n_runs)]
        return cls(d=rd, manifest=manifest, charts=charts, top=top, plots=plots, recs=recs, arrs=arrs,
                   ats=[load_attribution(rd.attribution(r, "aumann_shapley")) for r in range(n_runs)], refs=refs,
                   panels=panels, faith=read_csv(rd.table(FAITHFULNESS)))

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest.get("config") or {}

    @property
    def synthetic(self) -> bool:
        return bool(self.manifest.get("synthetic", False))

    @property
    def methods(self) -> list[str]:
        return [str(r["method"]) for r in self.faith if "method" in r]

    def figure_ref(self, name: str) -> str | None:
        """``name`` for the Markdown twin when that PNG is in the run directory."""
        return name if self.d.figure(name).is_file() else None


@dataclass(frozen=True)
class ReportSection:
    """One section of the page: its anchor ``id``, ``title``, a one-line ``lead`` and ``build(page) -> blocks``."""

    id: str
    title: str
    build: Callable[[StudyPage], list[Any]]
    lead: str = ""


# ---------------------------------------------------------------------------------------------- who
def who_section(page: StudyPage) -> list[Any]:
    """The top agents by signed Φ_i per run, group shares (or concentration)."""
    k = page.top
    who: list[Any] = [Text(f"The {min(k, page.ats[0].N)} agents with the largest signed Φ_i = Σ_t φ_i,t "
                           "(Aumann–Shapley, every step, per-agent baseline-action baselines), per run; ties by agent "
                           "position. "
                           "`% of ΣΔv` is Φ_i / Σ_t Δv_t (whole run), `φ at t*` and `% of Δv(t*)` the agent's "
                           "attribution at the target step, `Shapley φ(t*)` the reference (sampled Shapley at t*) "
                           "with its Monte-Carlo standard error; the remaining columns are the agent's features at "
                           "t*.")]
    for r, (att, ref, panel, rec) in enumerate(zip(page.ats, page.refs, page.panels, page.recs)):
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
    return who


# ---------------------------------------------------------------------------------------------- when
def _macro_figures(page: StudyPage) -> list[Any]:
    charts, recs, arrs, a0 = page.charts, page.recs, page.arrs, page.ats[0]
    ts0, steps = int(recs[0]["t_star"]), list(range(a0.T))
    series, pts = [], []
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
                        f"(run 0: t* = {ts0}).", md_ref=page.figure_ref(MACRO_CURVE), synthetic=page.synthetic)
    phit = a0.by_step()
    fig2 = charts.lines("Φ_t = Σ_i φ_i,t per step (run 0)", [], xlabel="step t", ylabel="Φ_t",
                        bars=(steps, phit, "Φ_t"), points=[Point(ts0, float(phit[ts0]), "t*")],
                        caption="Each step's attribution total (= Δv_t = f(z_t) − f(z⁰_t) by efficiency), "
                        "with the agents' baseline-action state as baseline.", synthetic=page.synthetic)
    order = top_order(a0.by_agent(), page.top)
    ids = [str(a0.agent_ids[p].item() if hasattr(a0.agent_ids[p], "item") else a0.agent_ids[p]) for p in order]
    heat = charts.heatmap(
        f"φ_i,t of the top {len(order)} agents × steps (run 0)", a0.phi[:, order].T, ids, [str(s) for s in steps],
        xlabel="step t", ylabel="agent (by Φ_i, top first)", value_label="φ_i,t", vline=(ts0, "t*"),
        caption="Rows: the agents of run 0's who-table, in its order; red raises the indicator, blue lowers it. "
        "Hover for agent id, step and φ; drag to zoom." if charts.interactive else
        "Rows: the agents of run 0's who-table, in its order; red raises the indicator, blue lowers it.",
        md_ref=page.figure_ref(HEATMAP), synthetic=page.synthetic,
        extra={"Φ_i": np.repeat(a0.by_agent()[order][:, None], a0.T, axis=1)})
    return [[fig1, fig2], heat]


def when_section(page: StudyPage) -> list[Any]:
    """f over steps with t*, Φ_t, the agent × step heatmap, the per-step and per-run t* tables."""
    recs, arrs, a0 = page.recs, page.arrs, page.ats[0]
    ts0, steps = int(recs[0]["t_star"]), list(range(a0.T))
    when: list[Any] = _macro_figures(page) if page.plots else [
        Note("Figures were left out (`--no-plots`); the per-step table below has the numbers.", "skipped")]
    phit0 = a0.by_step()
    when.append(Details("Run 0 per step: f(z_t), f_original(z_t), Φ_t", [Table(
        ["step", "f(z_t)", "f_original(z_t)", "Φ_t", "Δv_t", "t*"],
        [[t, float(arrs[0]["f_values"][t]), float(arrs[0]["f_original_values"][t]), float(phit0[t]),
          float(a0.delta_v[t]), "◀ t*" if t == ts0 else ""] for t in steps], id="per-step-run-000")]))
    when.append(Table(["run", "t*", "f(z_t*)", "f_original(z_t*)", "Δv(t*)"],
                      [[r, int(rec["t_star"]), float(rec["f_t_star"]), float(rec["f_original_t_star"]),
                        float(rec["delta_v"])] for r, rec in enumerate(recs)], caption="Target step per run",
                      id="t-star"))
    return when


# ---------------------------------------------------------------------------------------------- how sure
def _provenance(page: StudyPage) -> list[Any]:
    prov, study = dict(page.ats[0].provenance), page.config.get("study") or {}
    seeds, manifest = page.manifest.get("seeds") or {}, page.manifest
    out: list[Any] = [KeyValues([
        ("method", f"Aumann–Shapley ({'closed form' if prov.get('closed_form') else 'path integral'})"),
        ("K (quadrature points)", prov.get("steps")), ("rule", prov.get("rule")), ("power τ = u^p", prov.get("power")),
        ("baseline", f"{prov.get('baseline')} — each agent's features under the baseline action at that step"),
        ("indicator", prov.get("indicator")), ("dtype", prov.get("dtype")),
        ("reference", f"sampled Shapley, {study.get('permutations', '?')} permutations, "
                      f"{study.get('reference_game', 'masking')} game"),
        ("noise ceiling", "a second sampled-Shapley run, "
                          f"{study.get('ceiling_permutations') or study.get('permutations', '?')} "
                          "permutations, independent seed"),
        ("seeds", f"root {seeds.get('root', page.config.get('seed'))}, {seeds.get('runs', len(page.recs))} run(s), "
                  f"{seeds.get('spawn', 'SeedSequence(root).spawn(runs)')}"),
        ("backend", manifest.get("backend", "offline")), ("git revision", manifest.get("git_revision")),
        ("aumann", (manifest.get("packages") or {}).get("aumann")),
    ], caption="Provenance")]
    eff_rows = []
    for r, (att, rec) in enumerate(zip(page.ats, page.recs)):
        ts = int(rec["t_star"])
        eff_rows.append([r, ts, float(att.delta_v[ts]), float(att.phi[ts].sum()), float(att.efficiency_gap[ts]),
                         float(att.relative_efficiency_gap[ts]), float(att.max_efficiency_gap),
                         float(att.relative_efficiency_gap.max())])
    out.append(Table(["run", "t*", "Δv(t*)", "Σ_i φ_i,t*", "|Σφ − Δv| at t*", "relative", "max over steps",
                      "max relative"], eff_rows, caption="Efficiency gap |Σ_i φ_i,t − Δv_t| (quadrature error)",
                     id="efficiency"))
    flagged = [r for r, att in enumerate(page.ats) if att.large_efficiency_gap().any()]
    if flagged:
        out.append(efficiency_note(max(float(page.ats[r].relative_efficiency_gap.max()) for r in flagged),
                                   f"run(s) {', '.join(map(str, flagged))}"))
    return out


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
        curves = [np.asarray(a[key], dtype=np.float64).reshape(-1) for a in arrays if key in a]
        if not curves or not max(c.size for c in curves):
            continue
        # runs with births and deaths have different K_del (their players differ): the mean over the runs
        # that reach each k
        stack = np.full((len(curves), max(c.size for c in curves)), np.nan)
        for r, c in enumerate(curves):
            stack[r, :c.size] = c
        seen = ~np.isnan(stack)
        out.setdefault(variant, {})[method] = np.where(seen.any(axis=0), np.nansum(stack, axis=0), np.nan) \
            / np.maximum(seen.sum(axis=0), 1)
    return out


def _faithfulness(page: StudyPage) -> list[Any]:
    out: list[Any] = ["Deletion faithfulness", Text(GAMES), merged_table(page.faith, caption="faithfulness.csv",
                                                                         id="faithfulness")]
    ext = read_csv(page.d.table("faithfulness_extended"))
    if ext:
        out.append(Details("The original indicator and the |φ| ordering (faithfulness_extended.csv)",
                           [table_columns_note(),
                            merged_table(ext, caption="faithfulness_extended.csv", id="faithfulness-extended")]))
    groups = _curve_groups(page.arrs, page.methods or ["aumann_shapley", "sampled_shapley", "leave_one_out", "random"])
    if page.plots and groups:
        figs = []
        for variant, curves in groups.items():
            ser = [Line(m, list(range(1, len(c) + 1)), 100 * c, markers=True, dash=m == "random")
                   for m, c in curves.items()]
            figs.append(page.charts.lines(
                _VARIANT_TITLES.get(variant, f"Deletion curves ({variant.replace('_', ' ')})"), ser,
                xlabel="k (agents deleted at t*)", ylabel="drop (f − f_k)/f  [%]", integer_x=True,
                legend_at="outside", caption="Mean over runs.", synthetic=page.synthetic,
                md_ref=page.figure_ref(DELETION_CURVES) if variant == "deletion" else None))
        out.append(figs)
    elif not page.plots:
        out.append(Note("Deletion-curve figures were left out (`--no-plots`).", "skipped"))
    return out


def _agreement(page: StudyPage) -> list[Any]:
    faith = page.faith
    out: list[Any] = ["Agreement with sampled Shapley"]
    agree_cols = [c for c in ("kendall_tau", "jaccard_top10") if faith and c in faith[0]]
    agree_rows = [r for r in faith if any(isinstance(r.get(c), float) and math.isfinite(r[c]) for c in agree_cols)]
    if not agree_rows:
        return [*out, Note("No agreement columns in faithfulness.csv.", "skipped")]
    ceil = faith[0]
    rows_ = [[r["method"]] + [Cell(f"{fmt(r[c])} ± {fmt(r.get(c + '_std'), 2)}", sort=r[c]) for c in agree_cols]
             for r in agree_rows]
    rows_.append([Cell("noise ceiling (two sampled-Shapley runs)", cls=""),
                  *[ceil.get("kendall_tau_ceiling"), ceil.get("jaccard_ceiling")][: len(agree_cols)]])
    out.append(Table(["method", *[f"{c} vs sampled Shapley" for c in agree_cols]], rows_, id="agreement",
                     caption="Rank agreement with the reference (mean ± std over runs; Kendall τ-b, ties counted "
                     "as ties). The noise ceiling is how well two independent sampled-Shapley runs agree."))
    above = [r["method"] for r in agree_rows if above_ceiling(r, ceil)]
    if above:
        out.append(Note(ceiling_explanation(above), "info"))
    return out


def _smoothing_and_ablations(page: StudyPage) -> list[Any]:
    recs, out = page.recs, ["Smoothing gap"]
    sg = [[r, rec["smoothing_gap"].get("max_abs"), rec["smoothing_gap"].get("max_rel"),
           rec["smoothing_gap"].get("t_star_abs"), rec["smoothing_gap"].get("t_star_kendall_tau"),
           rec["smoothing_gap"].get("t_star_top_k_jaccard")] for r, rec in enumerate(recs) if "smoothing_gap" in rec]
    if sg:
        out.append(Table(["run", "max_t |f − f_orig|", "max relative", "|f − f_orig| at t*",
                          "τ (surrogate vs original φ at t*)", "top-k Jaccard"],
                         [[x if x is not None else math.nan for x in row] for row in sg], id="smoothing-gap",
                         caption="The attributed C² surrogate against the original indicator"))
        notes = {rec["smoothing_gap"].get("note") for rec in recs if rec.get("smoothing_gap", {}).get("note")}
        out += [Text(str(n)) for n in sorted(notes)]
        skipped = sum(int(rec.get("smoothing_gap", {}).get("rel_skipped_steps") or 0) for rec in recs)
        if skipped:
            out.append(Note(f"max relative leaves out {skipped} step(s) where the original indicator is 0 (to 1e-9 "
                            "of its scale): a relative gap is undefined there; max_t |f − f_orig| covers them.",
                            "info"))
    else:
        out.append(Note("The smoothing gap was not recorded.", "skipped"))
    out.append("Ablations")
    if not any("ablations" in rec for rec in recs):
        out.append(Note("Ablations were skipped (`--no-ablations`): no path, f-sensitivity or baseline ablation "
                        "tables.", "skipped"))
        return out
    for name, title in (("path_ablation", "Path ablation: straight vs random-permutation piecewise-linear path"),
                        ("f_sensitivity", "f-sensitivity"),
                        ("baseline_ablation", "Baseline ablation (agents ranked by |φ|)")):
        rows_ = read_csv(page.d.table(name))
        out.append(merged_table(rows_, caption=f"{title} ({name}.csv)", id=name) if rows_ else
                   Note(f"{name}.csv is empty.", "skipped"))
    return out


def failures_blocks(page: StudyPage) -> list[Any]:
    """The stages that did not finish, one line each (e.g. "ablation zero-baseline skipped: IndicatorError …")."""
    fails = stage_failures(page.recs)
    if not fails:
        return []
    return ["Stages that did not finish",
            Text("These optional stages failed (the rest of each run was kept; `aumann run --strict` stops at the "
                 "first failure instead):"),
            *[Note(f"Run {f['run']}: {failure_text(f)}", "skipped") for f in fails]]


def how_sure_section(page: StudyPage) -> list[Any]:
    """Provenance, efficiency, the faithfulness tables and curves, agreement, every row's own part, the
    smoothing gap, the ablations and the stages that did not finish."""
    sure = [*failures_blocks(page), *_provenance(page), *_faithfulness(page), *_agreement(page)]
    for row in rows():
        if row.title:
            sure += [row.title, *row.section(page.d.root, page.recs)]
    return sure + _smoothing_and_ablations(page)


# ---------------------------------------------------------------------------------------------- analysis, cost
def analysis_section(page: StudyPage) -> list[Any]:
    """The scenario analysis' tables (``manifest["analysis_tables"]``) and its decision policy."""
    analysis: list[Any] = []
    notes = sorted({str(rec["analysis"].get("policy")) for rec in page.recs
                    if isinstance(rec.get("analysis"), dict) and rec["analysis"].get("policy")})
    if notes:
        analysis.append(Text(f"Decisions: **{'; '.join(notes)}**."))
    for name in page.manifest.get("analysis_tables") or []:
        rows_ = read_csv(page.d.table(name))
        analysis.append(merged_table(rows_, caption=f"{name.replace('_', ' ')} ({name}.csv)", id=f"analysis-{name}",
                                     drop=()) if rows_ else Note(f"{name}.csv is empty.", "skipped"))
    return analysis


def cost_section(page: StudyPage) -> list[Any]:
    """LLM usage, wall time per stage and the work done (evaluations, forks, each row's own cost)."""
    manifest, recs = page.manifest, page.recs
    llm, _ = llm_blocks(manifest, offline_reason="Every decision came from the scenario's deterministic "
                        "offline policy; no server was contacted.")
    n_evals = [ref.n_evals for ref in page.refs if ref is not None and ref.n_evals]
    forks = [rec.get("forks") for rec in recs if isinstance(rec.get("forks"), int | float)]
    comp = [("runs computed / resumed", f"{manifest.get('computed_runs', '?')} / {manifest.get('resumed_runs', '?')}"),
            ("evaluations of v for sampled Shapley (per run)", fmt(float(np.mean(n_evals))) if n_evals else "–"),
            ("deletion forks (per run)", fmt(float(np.mean(forks))) if forks else "–")]
    for row in rows():
        comp += row.cost_rows(recs)
    failed = manifest.get("failed_checks") or []
    if failed:  # finished runs found on disk that did not verify (truncated, incomplete, edited): recomputed
        comp.append(("runs recomputed after a failed resume check",
                     f"{len(failed)}: " + "; ".join(f"{f.get('file')} ({f.get('reason')})" for f in failed)))
    resumed = int(manifest.get("resumed_runs") or 0)
    return [*llm, *timing_table(manifest.get("stage_seconds"), manifest.get("seconds"), note=(
        f"{resumed} run(s) were read back from an earlier invocation; their compute time is not in this table."
        if resumed else "")), KeyValues(comp, caption="Work done")]


def _cards(page: StudyPage) -> list[Card]:
    a0, rec0, manifest = page.ats[0], page.recs[0], page.manifest
    ts0, phi0 = int(rec0["t_star"]), a0.by_agent()
    best, tot0 = int(top_order(phi0, 1)[0]), float(a0.delta_v.sum())
    row = {r["method"]: r for r in page.faith}
    ours, rnd = row.get("aumann_shapley", {}), row.get("random", {})
    cards = [Card("Top driver (run 0)", f"agent {id_cell(a0.agent_ids[best]).text}",
                  f"Φ = {fmt(float(phi0[best]))}" + (f", {pct_text(phi0[best] / tot0)} of Σ_t Δv_t" if tot0 else "")),
             Card("When (run 0)", f"t* = {ts0}", f"f(z_t*) = {fmt(float(rec0['f_t_star']))}; Φ_t* = "
                  f"{fmt(float(a0.by_step()[ts0]))}")]
    if "kendall_tau" in ours:
        over = above_ceiling(ours, ours, cols=("kendall_tau",))
        cards.append(Card("τ vs sampled Shapley", fmt(ours["kendall_tau"], 3),
                          f"noise ceiling {fmt(ours.get('kendall_tau_ceiling'), 3)}"
                          + (" (above it: see How sure)" if over else "")))
    if "deletion_auc" in ours:
        cards.append(Card("Deletion AUC", fmt(ours["deletion_auc"], 3),
                          f"random orderings: {fmt(rnd.get('deletion_auc'), 3)}"))
    cards.append(Card("Efficiency gap", fmt(max(float(a.max_efficiency_gap) for a in page.ats), 2),
                      "max |Σφ − Δv| over runs and steps"))
    _, llm_card = llm_blocks(manifest, offline_reason="")
    cards.append(Card("Cost", llm_card, f"{calls_text(manifest)} · wall {seconds_text(manifest.get('seconds'))}"))
    return cards


# ---------------------------------------------------------------------------------------------- registry + page
_SECTIONS: list[ReportSection] = [
    ReportSection("who", "Who drove it", who_section, lead="top agents by Φ_i, per run"),
    ReportSection("when", "When did it turn", when_section, lead="f(z_t), Φ_t and the agent × step attribution"),
    ReportSection("how-sure", "How sure", how_sure_section,
                  lead="efficiency, provenance, faithfulness, agreement, smoothing"),
    ReportSection("analysis", "Scenario analysis", analysis_section,
                  lead="the scenario's own tables beside the study"),
    ReportSection("cost", "Cost", cost_section, lead="LLM usage and wall time"),
]


def register_section(section: ReportSection, *, before: str | None = "cost") -> ReportSection:
    """Add a section to the page of every ``aumann run`` directory (before the section ``before``, default
    "Cost"; ``None``: last); registering an id again replaces that section."""
    if not isinstance(section, ReportSection) or not section.id or not callable(section.build):
        raise ConfigError(f"register_section needs a ReportSection(id, title, build); got {section!r}")
    ids = [s.id for s in _SECTIONS]
    if section.id in ids:
        _SECTIONS[ids.index(section.id)] = section
    else:
        _SECTIONS.insert(ids.index(before) if before in ids else len(_SECTIONS), section)
    return section


def unregister_section(section_id: str) -> None:
    """Remove a section by its id."""
    _SECTIONS[:] = [s for s in _SECTIONS if s.id != section_id]


def sections() -> tuple[ReportSection, ...]:
    """The registered sections, in page order."""
    return tuple(_SECTIONS)


def faithfulness_document(d: Path, manifest: dict[str, Any], charts: Charts, *, top: int = 20,
                          plots: bool = True) -> Document:
    """The page of an ``aumann run`` directory: the cards, then every registered section that has blocks."""
    page = StudyPage.load(d, manifest, charts, top=top, plots=plots)
    scenario = manifest.get("scenario") or (page.faith or [{}])[0].get("scenario", "?")
    built = [Section("cards", "At a glance", [Cards(_cards(page))])]
    for s in _SECTIONS:
        blocks = s.build(page)
        if blocks:
            built.append(Section(s.id, s.title, blocks, lead=s.lead))
    desc = manifest.get("description") or ""
    return Document(
        title=f"{scenario}: who drove it, and when",
        subtitle=(desc + " " if desc else "") + f"N = {page.ats[0].N:,} agents, T = {page.ats[0].T} steps, "
                                                 f"{len(page.recs)} run(s).",
        sections=built, synthetic=page.synthetic,
        meta=[("command", f"`{manifest.get('command')}`"), ("created", manifest.get("created")),
              ("baseline action", manifest.get("baseline_description") or "–"),
              *([("decisions", manifest["policy"])] if manifest.get("policy") else [])])


__all__ = ["ReportSection", "StudyPage", "analysis_section", "cost_section", "failures_blocks",
           "faithfulness_document", "how_sure_section", "register_section", "sections", "unregister_section",
           "when_section", "who_section"]
