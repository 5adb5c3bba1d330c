"""The first two sections of the page of an ``aumann run`` directory: "Who drove it" (the top agents by
signed Φ_i per run, group shares or concentration) and "When did it turn" (f over steps with t*, Φ_t, the
agent × step heatmap, the per-step and per-run t* tables)."""

from __future__ import annotations

from typing import Any

import numpy as np

from aumann.studies.charts import Line, Point, t_star_label
from aumann.studies.page import Details, Note, Table, Text, fmt
from aumann.studies.rundir import HEATMAP, MACRO_CURVE
from aumann.studies.sections import (
    AT_T_STAR_NOTE,
    concentration_table,
    group_share_table,
    load_panel_alive,
    not_alive_note,
    top_order,
    top_shown,
    who_table,
)
from aumann.studies.study_page_data import StudyPage


def who_section(page: StudyPage) -> list[Any]:
    """The top agents by signed Φ_i per run, group shares (or concentration)."""
    k, note = top_shown(page.top, page.ats[0].N)
    who: list[Any] = [Text(f"The {min(k, page.ats[0].N)} agents with the largest signed Φ_i = Σ_t φ_i,t, the sum "
                           "over every step of the run (Aumann–Shapley, per-agent baseline-action baselines), per "
                           "run; ranked by Φ_i, not by φ at t*; ties by agent position. "
                           "`% of ΣΔv` is Φ_i / Σ_t Δv_t (whole run), `φ at t*` and `% of Δv(t*)` the agent's "
                           "attribution at the target step, `Shapley φ(t*)` the reference (sampled Shapley at t*) "
                           "with its Monte-Carlo standard error; the remaining columns are the agent's features at "
                           f"t*. {AT_T_STAR_NOTE}")]
    alive_t = page.alive_t_star or [None] * len(page.ats)
    for r, (att, ref, feats, rec, alive) in enumerate(zip(page.ats, page.refs, page.features_t_star, page.recs,
                                                            alive_t)):
        ts = int(rec["t_star"])
        blocks: list[Any] = [who_table(att, k=k, t_star=ts, features=feats, reference=ref, id=f"who-run-{r:03d}",
                                       caption=f"Run {r}: top agents ranked by Φ_i = Σ_t φ_i,t over all {att.T} "
                                       f"steps (t* = step {ts})", alive=alive)]
        gone = not_alive_note(att, alive, k=k, t_star=str(ts))
        if gone is not None:
            blocks.append(gone)
        if feats is None:
            blocks.append(Note(f"panels/run-{r:03d}.npz is missing: features at t* are not shown.", "skipped"))
        blocks += group_share_table(att, caption=f"Run {r}: group shares", id=f"groups-run-{r:03d}")
        if not att.groups:
            blocks.append(concentration_table(att.by_agent(), float(att.delta_v.sum()),
                                              id=f"concentration-run-{r:03d}"))
        who.append(Details(f"Run {r} (t* = {ts}, Δv(t*) = {fmt(rec['delta_v'])})", blocks, open=r == 0))
    if note is not None:
        who.insert(1, Note(note, "info"))
    return who


def _macro_figures(page: StudyPage) -> list[Any]:
    charts, recs, arrs, a0 = page.charts, page.recs, page.arrs, page.ats[0]
    ts0, steps = int(recs[0]["t_star"]), list(range(a0.T))
    series, pts = [], []
    for r, (rec, arr) in enumerate(zip(recs, arrs)):
        series.append(Line(f"run {r}", steps, np.asarray(arr["f_values"]), width=2.2 if r == 0 else 1.2,
                           alpha=1.0 if r == 0 else 0.55, legend=len(recs) <= 10))
        pts.append(Point(int(rec["t_star"]), float(rec["f_t_star"]), t_star_label(r, len(recs)),
                         color="#111111" if r == 0 else "#555555"))
    series.append(Line("run 0, original indicator", steps, np.asarray(arrs[0]["f_original_values"]), dash=True,
                       color="#444444", width=1.2))
    fig1 = charts.lines("Macro indicator f(z_t), target step t* marked", series, xlabel="step t", ylabel="f(z_t)",
                        points=pts, integer_x=True, caption="Solid: the attributed C² surrogate, one line per run; "
                        "dashed: the original indicator of run 0. ● marks t* = argmax over t ≥ ⌈T/2⌉ of f "
                        f"(run 0: t* = {ts0}).", md_ref=page.figure_ref(MACRO_CURVE), synthetic=page.synthetic)
    phit = a0.by_step()
    fig2 = charts.lines("Φ_t = Σ_i φ_i,t per step (run 0)", [], xlabel="step t", ylabel="Φ_t",
                        bars=(steps, phit, "Φ_t"), points=[Point(ts0, float(phit[ts0]), "t*")],
                        caption="Each step's attribution total (= Δv_t = f(z_t) − f(z⁰_t) by efficiency), "
                        "with the agents' baseline-action state as baseline.", synthetic=page.synthetic)
    order = top_order(a0.by_agent(), top_shown(page.top, a0.N)[0])
    ids = [str(a0.agent_ids[p].item() if hasattr(a0.agent_ids[p], "item") else a0.agent_ids[p]) for p in order]
    alive = load_panel_alive(page.d.panel(0), a0.phi.shape) if page.d.panel(0).is_file() else None
    dead = None if alive is None else ~alive[:, order].T
    gone = "" if dead is None or not dead.any() else " Hatched grey: the agent is not alive at that step (φ = 0)."
    heat = charts.heatmap(
        f"φ_i,t of the top {len(order)} agents × steps (run 0)", a0.phi[:, order].T, ids, [str(s) for s in steps],
        xlabel="step t", ylabel="agent (by Φ_i, top first)", value_label="φ_i,t", vline=(ts0, "t*"),
        caption="Rows: the agents of run 0's who-table, in its order; red raises the indicator, blue lowers it. "
        "Hover for agent id, step and φ; drag to zoom." + gone if charts.interactive else
        "Rows: the agents of run 0's who-table, in its order; red raises the indicator, blue lowers it." + gone,
        md_ref=page.figure_ref(HEATMAP), synthetic=page.synthetic,
        extra={"Φ_i": np.repeat(a0.by_agent()[order][:, None], a0.T, axis=1)}, not_alive=dead)
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


__all__ = ["when_section", "who_section"]
