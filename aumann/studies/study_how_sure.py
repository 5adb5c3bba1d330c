"""The "How sure" section of the page of an ``aumann run`` directory: the stages that did not finish,
provenance and efficiency, the faithfulness tables and deletion curves, agreement with sampled Shapley
against its noise ceiling, every registered row's own part, the smoothing gap and the ablations."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from aumann.studies.action_sections import GAMES, table_columns_note
from aumann.studies.charts import Line
from aumann.studies.page import Cell, Details, Figure, KeyValues, Note, Table, Text, fmt, literal
from aumann.studies.rows import rows
from aumann.studies.rundir import (
    DELETION_CURVES,
    ROUNDED_VALUES_NOTE,
    dead_rows,
    failure_text,
    model_finished,
    model_finished_text,
    rounded_values,
    rounded_values_text,
    stage_failures,
    transient_agents,
    transient_agents_text,
    zero_delta_v,
    zero_delta_v_text,
)
from aumann.studies.sections import (
    above_ceiling,
    ceiling_explanation,
    efficiency_note,
    max_relative_gap,
    mean_std_cell,
    merged_table,
    read_csv,
    relative_gaps,
    undefined_relative_note,
)
from aumann.studies.study_page_data import StudyPage

_VARIANT_TITLES = {
    "deletion": "Deletion curves (attributed indicator, agents ranked by φ)",
    "original": "Deletion curves on the original (non-smooth) indicator",
    "magnitude": "Deletion curves, agents ranked by |φ|",
    "masking": "Deletion curves under the masking oracle",
    "original_masking": "Deletion curves, original indicator, masking oracle",
}

#: the column of each deletion-curve variant in the table of a study with K_del = 1 (:func:`_one_k_table`)
_VARIANT_COLUMNS = {
    "deletion": "re-simulation",
    "original": "re-simulation, original indicator",
    "magnitude": "re-simulation, ranked by |φ|",
    "masking": "masking",
    "original_masking": "masking, original indicator",
}


def _reference_line(page: StudyPage, study: dict[str, Any]) -> str:
    """Which estimator the agreement columns are measured against, and its median standard error."""
    ref = page.reference
    kind = ("sampled Shapley with the Aumann–Shapley control variate" if ref["method"] == "sampled_shapley_cv"
            else "sampled Shapley (plain permutation sampling)")
    ses = [float(se) for r in page.recs if isinstance(se := (r.get("reference") or {}).get("median_stderr"), float)
           and math.isfinite(se)]
    se = f", median standard error {fmt(sum(ses) / len(ses))} (mean over runs)" if ses else ""
    return (f"{ref['method']}: {kind}, {ref.get('permutations') or study.get('permutations', '?')} permutations, "
            f"{ref.get('game') or study.get('reference_game', 'masking')} game{se}")


def _ceiling_perm(page: StudyPage, study: dict[str, Any]) -> Any:
    return (page.reference.get("ceiling_permutations") or study.get("ceiling_permutations")
            or study.get("permutations", "?"))


def _reductions(page: StudyPage) -> list[tuple[str, str]]:
    """The scenario's ``[large]`` table when this run is at or above its threshold (MegaScale-Social: fewer
    orderings and permutations at scale), as one provenance line; none otherwise."""
    large, n = page.config.get("large"), page.ats[0].N if page.ats else 0
    if not isinstance(large, dict) or not isinstance(large.get("threshold"), int) or n < large["threshold"]:
        return []
    items = ", ".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in large.items()
                      if k != "threshold")
    return [("reduced at scale", f"N = {n:,} ≥ {large['threshold']:,}: the [large] table applies ({items}; "
                                 "an explicit smaller setting is kept; the effective values: manifest.json → config)")]


def _provenance(page: StudyPage) -> list[Any]:
    prov, study = dict(page.ats[0].provenance), page.config.get("study") or {}
    seeds, manifest = page.manifest.get("seeds") or {}, page.manifest
    out: list[Any] = [KeyValues([
        ("method", f"Aumann–Shapley ({'closed form' if prov.get('closed_form') else 'path integral'})"),
        ("K (quadrature points)", prov.get("steps")), ("rule", prov.get("rule")), ("power τ = u^p", prov.get("power")),
        ("baseline", f"{_baseline_text(prov.get('baseline'))} — each agent's features under the baseline action at "
                     "that step"),
        ("indicator", literal(prov.get("indicator"))), ("dtype", prov.get("dtype")),
        ("reference", _reference_line(page, study)),
        ("noise ceiling", f"a second run of the reference ({page.reference['method']}), {_ceiling_perm(page, study)} "
                          "permutations, independent seed"),
        ("seeds", f"root {seeds.get('root', page.config.get('seed'))}, {seeds.get('runs', len(page.recs))} run(s), "
                  f"{seeds.get('spawn', 'SeedSequence(root).spawn(runs)')}"),
        *_reductions(page), *_living(page), *_unseen(page), *_rounded(page),
        ("backend", manifest.get("backend", "offline")), ("git revision", manifest.get("git_revision")),
        ("aumann", (manifest.get("packages") or {}).get("aumann")),
    ], caption="Provenance")]
    eff_rows, undefined = [], 0
    for r, (att, rec) in enumerate(zip(page.ats, page.recs)):
        ts = int(rec["t_star"])
        worst_rel, left_out = max_relative_gap(att)
        undefined += left_out
        eff_rows.append([r, ts, float(att.delta_v[ts]), float(att.phi[ts].sum()), float(att.efficiency_gap[ts]),
                         float(relative_gaps(att)[ts]), float(att.max_efficiency_gap), worst_rel])
    out.append(Table(["run", "t*", "Δv(t*)", "Σ_i φ_i,t*", "|Σφ − Δv| at t*", "relative", "max over steps",
                      "max relative"], eff_rows, caption="Efficiency gap |Σ_i φ_i,t − Δv_t| (quadrature error)",
                     id="efficiency"))
    if undefined:
        out.append(undefined_relative_note(undefined))
    flagged = [r for r, att in enumerate(page.ats) if att.large_efficiency_gap().any()]
    if flagged:
        out.append(efficiency_note(max(float(page.ats[r].relative_efficiency_gap[page.ats[r].large_efficiency_gap()].max())
                                       for r in flagged),
                                   f"run(s) {', '.join(map(str, flagged))}"))
    out += _deaths_text(page)
    return out


def _living(page: StudyPage) -> list[tuple[str, str]]:
    """The provenance line of a run with births or deaths: which living set the baseline z⁰_t is evaluated over."""
    if not dead_rows(page.recs):
        return []
    return [("agents dead at a step", "the run's living at t, at both ends: f(z⁰_t) is evaluated over the agents "
             "alive in the run at t, so an agent that died during step t is out of f at both ends (φ = 0) and its "
             "death is not in Δv_t (baseline_alive = run; docs/baselines.md, \"Agents that die during a step\")")]


def _unseen(page: StudyPage) -> list[tuple[str, str]]:
    """The provenance line of runs with agents that no capture saw (born and removed within one step, or removed in
    the first step): counted, not recorded (the panel's ``meta["transient_agents"]``)."""
    runs = transient_agents(page.recs)
    if not runs:
        return []
    return [("agents present at no capture", "; ".join(transient_agents_text(d) for d in runs) + ". They have no "
             "row in the panel, so no φ, and f never saw them; by step: the panel's meta['transient_agents'] "
             "(panels/run-NNN.npz)")]


def _shown_name(name: str) -> str:
    return literal(repr(name))  # a feature's name as given ('a_b_c', '**x**'), not read as Markdown


def _rounded(page: StudyPage) -> list[tuple[str, str]]:
    """The provenance line of runs whose recorded integers float64 (an ``ArrayRecorder(dtype=float32)``'s
    features: float32) changed: counted, kept as the nearest value (the panel's ``meta["rounded_values"]``)."""
    runs = rounded_values(page.recs)
    if not runs:
        return []
    said = "; ".join(rounded_values_text(d, _shown_name) for d in runs)
    return [("integers rounded", f"{said}: {ROUNDED_VALUES_NOTE}; the panel's meta['rounded_values'] "
             "(panels/run-NNN.npz)")]


def _deaths_text(page: StudyPage) -> list[Any]:
    """Per run with deaths at t*: how many players died during that step, and the two v(∅) it separates — f(z⁰_t*)
    over the run's living (masking: Aumann–Shapley, the Shapley rows, the masking curve) and f with every player
    at the baseline action re-simulated (the re-simulation rows and curves, where the re-run decides who lives)."""
    parts = [f"run {d['run']}: {d['died_at_t_star']} died during step t*; f(z⁰_t*) over the run's living = "
             f"{fmt(d['f_baseline_t_star'])}, f with every player at the baseline action (re-simulated) = "
             + (fmt(d["f_all_at_baseline_action"]) if d.get("f_all_at_baseline_action") is not None
                else "undefined (no agent lives when every player takes the baseline action)")
             for d in dead_rows(page.recs) if d.get("died_at_t_star")]
    if not parts:
        return []
    return [Text("Agents that died during step t* are out of f at both ends of the masking game (the run's living "
                 "mask is applied to the baseline z⁰ too), so the masking rows do not count their deaths; the "
                 "re-simulation rows do (a re-run where the agents rest may keep them alive): " + "; ".join(parts)
                 + ".")]


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


def _baseline_text(label: Any) -> str:
    """The provenance's baseline label for a reader: an array baseline's label ``array(2, 2, 7)`` (its shape) reads
    "an array of shape (T, N, D) = (2, 2, 7)", not as a call."""
    text = str(label)
    shape = re.fullmatch(r"array\(([0-9, ]+)\)", text)
    if shape is None:
        return text
    dims = [d.strip() for d in shape.group(1).split(",") if d.strip()]
    names = {3: "(T, N, D)", 2: "(N, D)", 1: "(D,)"}.get(len(dims), "")
    value = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
    return f"an array of shape {names + ' = ' if names else ''}{value}"


def _faithfulness(page: StudyPage) -> list[Any]:
    out: list[Any] = ["Deletion faithfulness",
                      *[Note(zero_delta_v_text(d) + ".", "warn") for d in zero_delta_v(page.recs)],
                      *[Note(model_finished_text(d) + ".", "warn") for d in model_finished(page.recs)],
                      Text(GAMES), merged_table(page.faith, caption="faithfulness.csv", id="faithfulness")]
    ext = read_csv(page.d.table("faithfulness_extended"))
    if ext:
        out.append(Details("The original indicator and the |φ| ordering (faithfulness_extended.csv)",
                           [table_columns_note(),
                            merged_table(ext, caption="faithfulness_extended.csv", id="faithfulness-extended")]))
    groups = _curve_groups(page.arrs, page.methods or ["aumann_shapley", "sampled_shapley", "leave_one_out", "random"])
    if page.plots and groups and all(c.size == 1 for curves in groups.values() for c in curves.values()):
        out += _one_k_table(page, groups)  # K_del = 1: one point per method, which a plot drew on one spot
    elif page.plots and groups:
        figs, empty = [], []
        for variant, curves in groups.items():
            title = _VARIANT_TITLES.get(variant, f"Deletion curves ({variant.replace('_', ' ')})")
            if all(np.isnan(c).all() for c in curves.values()):  # nothing to draw: an empty frame with a legend
                empty.append(title)
                continue
            ser = [Line(m, list(range(1, len(c) + 1)), 100 * c, markers=True, dash=m == "random")
                   for m, c in curves.items()]
            figs.append(page.charts.lines(
                title, ser,
                xlabel="k (agents deleted at t*)", ylabel="drop (f − f_k)/f  [%]", integer_x=True,
                legend_at="outside", caption="Mean over runs.", synthetic=page.synthetic,
                md_ref=page.figure_ref(DELETION_CURVES) if variant == "deletion" else None))
        if figs:
            out.append(figs)
        if empty:
            out.append(Note(f"Not drawn, nothing to draw: {'; '.join(empty)}. The drop (f − f_k)/f is undefined "
                            "(–) at every k of every run (f(z_t*) = 0, or nothing to explain at t*); "
                            "faithfulness.csv shows – for these columns.", "skipped"))
    elif not page.plots:
        out.append(Note("Deletion-curve figures were left out (`--no-plots`).", "skipped"))
    return out


def _one_k_table(page: StudyPage, groups: dict[str, dict[str, np.ndarray]]) -> list[Any]:
    """The deletion "curves" of a study with K_del = 1 as a table: each is one point, the drop after deleting the top
    agent, and drawn as curves every method sat on one spot (the methods that rank the same top agent), hiding
    each other. One row per method, one column per variant; report.md links deletion_curves.png."""
    methods = list(dict.fromkeys(m for curves in groups.values() for m in curves))
    cols = list(groups)
    rows_ = [[m, *[float(100 * groups[v][m][0]) if m in groups[v] else None for v in cols]] for m in methods]
    heads = [_VARIANT_COLUMNS.get(v, v.replace("_", " ")) + " [%]" for v in cols]
    return [Table(["method", *heads], rows_, id="deletion-one-k",
                  caption="K_del = 1: each deletion curve is one point, the drop (f − f_1)/f (%) after deleting the "
                  "top agent at t* (by signed φ unless a column says |φ|; mean over runs), under each oracle, so it "
                  "is a table, not a figure: drawn, the methods that rank the same agent first sat on one spot"),
            Figure("Deletion curves (K_del = 1)", md_ref=page.figure_ref(DELETION_CURVES), md_only=True)]


def _agreement(page: StudyPage) -> list[Any]:
    faith = page.faith
    reference = page.reference["method"]
    out: list[Any] = [f"Agreement with sampled Shapley (reference: {reference})"]
    agree_cols = [c for c in ("kendall_tau", "jaccard_top10") if faith and c in faith[0]]
    agree_rows = [r for r in faith if any(isinstance(r.get(c), float) and math.isfinite(r[c]) for c in agree_cols)]
    if not agree_rows:
        return [*out, Note("No agreement columns in faithfulness.csv.", "skipped")]
    ceil = faith[0]
    rows_ = [[r["method"]] + [mean_std_cell(r.get(c), r.get(c + "_std")) for c in agree_cols] for r in agree_rows]
    rows_.append([Cell(f"noise ceiling (two runs of {reference})", cls=""),
                  *[ceil.get("kendall_tau_ceiling"), ceil.get("jaccard_ceiling")][: len(agree_cols)]])
    line = _reference_line(page, page.config.get("study") or {})
    out.append(Table(["method", *[f"{c} vs {reference}" for c in agree_cols]], rows_, id="agreement",
                     caption=f"Rank agreement with the reference, {line} "
                     "(mean ± std over runs; Kendall τ-b, ties counted as ties). The noise ceiling is how well two "
                     "independent runs of the reference agree."))
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


__all__ = ["failures_blocks", "how_sure_section"]
