"""The cross-scale study's page (``report.html`` / ``report.md`` of ``aumann bluesky study``).

Built from the study directory alone (``summary.json``, ``cells/*/FULL.json``, the grid cells,
``tables/*.csv``, ``manifest.json``): who drove each topic in tiers (R_G on the full panel, the
biased small panel against it) and, for SYNTHETIC panels or ``--export-per-user`` studies, the top
users by Φ_i keyed by their opaque index; when (Φ_t per day with the peak day t*, the
follower-percentile × day heatmap, the top users × days); how sure (efficiency gaps, provenance, ε,
the residual law, every study table); cost (no LLM; wall time per stage).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aumann.data.bluesky.counts import FEATURES, TIER_LABELS
from aumann.errors import ReportError, UnsafeNameError
from aumann.io import child_path, partial_write
from aumann.studies.charts import Charts, Line, Point
from aumann.studies.page import (
    Card,
    Cards,
    Cell,
    Details,
    Document,
    Figure,
    KeyValues,
    Note,
    Section,
    Table,
    Text,
    fmt,
    literal,
    seconds_text,
)
from aumann.studies.sections import (
    PAGE_TOP_MAX,
    id_cell,
    llm_blocks,
    mean_std_cell,
    merged_table,
    pct_cell,
    read_csv,
    read_json,
    signed_cell,
    timing_table,
)

#: what each feature of the Bluesky panel is (:mod:`aumann.data.bluesky.counts`, whose panel names them a, b, c), as
#: the who-table's columns name them: "a at t*" meant nothing to a reader
FEATURE_NAMES = dict(zip(FEATURES, ("log(1 + followers)", "log(1 + topic posts)", "log(1 + replies received)"),
                         strict=True))

_TABLE_TITLES = {
    "flip-main": "R_top at the headline N per protocol vs FULL (flip-main)",
    "flip-app-cross-f": "Three-tier shares, BIAS_v vs FULL, every indicator (flip-app-cross-f)",
    "theorem-test": "ε of the best scalar rescaling at the headline N (theorem-test)",
    "theorem-test-all": "ε for every cell (theorem-test-all)",
    "residual-law": "Exact residual law for f_var (residual-law)",
    "numbers-app": "Tier shares by N (numbers-app)",
    "topics-jaccard": "Top-10 Jaccard of the small panel vs the full panel (topics-jaccard)",
    "strategies": "Dose-response (strategies)",
    "kol-anchors": "Alternative elite anchors (kol-anchors)",
    "peak-days": "Peak day and its tier shares (peak-days)",
    "cross-day-stability": "Per-day R_top, averaged across days (cross-day-stability)",
}


#: the keys every ``aumann bluesky study`` writes in summary.json and the page needs
_SUMMARY_KEYS = ("synthetic", "data", "users", "topics")


def _cells(d: Path, summary: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    fulls: dict[str, dict[str, Any]] = {}
    grid: list[dict[str, Any]] = []
    topics = summary.get("topics", [])
    if not isinstance(topics, list):
        raise ReportError(f"summary {str(d / 'summary.json')!r}: 'topics' must be a list of topic names; "
                          f"got {type(topics).__name__}")
    for topic in topics:
        if topic in (summary.get("topics_skipped") or {}):
            continue
        try:  # a topic names a folder of cells/: never a path that leads out of the run directory
            folder = child_path(d, "cells", topic, what="topic")
        except UnsafeNameError as exc:
            raise ReportError(f"summary {str(d / 'summary.json')!r}: {exc}") from exc
        fulls[topic] = read_json(folder / "FULL.json", "FULL cell")
        for p in _grid_cells(folder, summary):
            grid.append(read_json(p, "grid cell"))
    return fulls, grid


def _grid_cells(folder: Path, summary: dict[str, Any]) -> list[Path]:
    """The grid cells of one topic that this study computed: ``<protocol>__<size>.json`` for the protocols and sizes
    its summary lists. Every ``*__*.json`` there was read: the cells an earlier study left in the folder (other
    sizes, other counts: ``aumann bluesky study`` run again with fewer sizes) were drawn on this study's page, and a
    temporary file of a killed write counted its cell twice. (A summary without the lists, an older one: the
    folder's cells, but for temporary files.)"""
    protocols, sizes = summary.get("protocols"), summary.get("sizes")
    if not (isinstance(protocols, list) and isinstance(sizes, list)
            and all(isinstance(p, str) for p in protocols) and all(isinstance(n, int) for n in sizes)):
        return sorted(q for q in folder.glob("*__*.json") if not partial_write(q.name))
    names = sorted(f"{protocol}__{size}.json" for protocol in protocols if protocol != "FULL" for size in sizes)
    try:
        return [child_path(folder, name, what="study cell name") for name in names]
    except UnsafeNameError as exc:
        raise ReportError(f"summary {str(folder.parent.parent / 'summary.json')!r}: {exc}") from exc


def _seed_mean(cell: dict[str, Any] | None, ind: str, tier: str) -> tuple[float, float]:
    if cell is None:
        return math.nan, math.nan
    vals = [r["ind"][ind]["R"][tier] for r in cell["seeds"] if "R" in r["ind"].get(ind, {})]
    if not vals:
        return math.nan, math.nan
    return float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0


@dataclass
class _StudyDir:
    """Everything the page is built from, read once from the study directory ``d``."""

    d: Path
    manifest: dict[str, Any]
    charts: Charts
    top: int
    plots: bool
    summary: dict[str, Any]
    synthetic: bool
    fulls: dict[str, dict[str, Any]]  # the FULL cell of every topic that was not skipped
    grid: list[dict[str, Any]]  # every grid cell
    inds: list[str]
    head_n: int  # the headline N
    users: Any

    @classmethod
    def load(cls, d: Path, manifest: dict[str, Any], charts: Charts, *, top: int, plots: bool) -> _StudyDir:
        summary = read_json(d / "summary.json", "summary")
        # every study writes these: a summary without them (emptied to {}, replaced) drew a page of no topics that
        # called a SYNTHETIC panel's study "ingested" data, exit 0
        lacks = [k for k in _SUMMARY_KEYS if not isinstance(summary, dict) or k not in summary]
        if lacks:
            raise ReportError(f"summary {str(d / 'summary.json')!r} lacks {lacks} (emptied, replaced or damaged); run "
                              "the same `aumann bluesky study` command with this --out again to rewrite it (finished "
                              "cells are reused)")
        # SYNTHETIC if anything the study recorded says so (the manifest too): the marker is never lost
        synthetic = bool(summary.get("synthetic")) or bool(manifest.get("synthetic"))
        fulls, grid = _cells(d, summary)
        return cls(d=d, manifest=manifest, charts=charts, top=top, plots=plots, summary=summary, synthetic=synthetic,
                   fulls=fulls, grid=grid, inds=list(summary.get("indicators") or ["lin", "heat", "var", "gini"]),
                   head_n=int((manifest.get("config") or {}).get("headline_size") or 100), users=summary.get("users"))

    @property
    def topics(self) -> list[str]:
        return list(self.fulls)

    def cell(self, topic: str, protocol: str, size: int) -> dict[str, Any] | None:
        return next((c for c in self.grid if c["topic"] == topic and c["protocol"] == protocol and c["size"] == size),
                    None)

    def figure(self, name: str) -> str | None:
        """``figures/<name>`` for the Markdown twin when the study wrote that PNG."""
        return f"figures/{name}" if (self.d / "figures" / name).is_file() else None


# ---------------------------------------------------------------------------------------------- who
def _tier_shares(s: _StudyDir) -> Table:
    rows = []
    for t in s.topics:
        for ind, it in s.fulls[t]["ind"].items():
            rows.append([t, ind, *[pct_cell(it["R"].get(k)) for k in TIER_LABELS],
                         *[pct_cell(v) for v in it.get("anchors", {}).values()]])
    anchor_names = list(next(iter(s.fulls.values()))["ind"][s.inds[0]].get("anchors", {})) if s.fulls else []
    return Table(["topic", "indicator", "R_top (1 %)", "R_mid (9 %)", "R_tail (90 %)",
                  *[f"top 1 % by {a}" for a in anchor_names]], rows, id="tier-shares",
                 caption="Group shares R_G on the full panel")


def _teaser(s: _StudyDir) -> list[Any]:
    """R_top of f_heat on the full panel against the BIAS_v and RAND panels at the headline N."""
    series: dict[str, list[float]] = {"FULL": [], "BIAS_v": [], "RAND": []}
    errs: dict[str, list[float]] = {"FULL": [], "BIAS_v": [], "RAND": []}
    missing: dict[str, list[str]] = {"degenerate": [], "not run": []}  # bars that have no value, and why
    for t in s.topics:
        series["FULL"].append(100 * s.fulls[t]["ind"]["heat"]["R"]["top"])
        errs["FULL"].append(0.0)
        for proto, key in (("BIAS_visibility", "BIAS_v"), ("RAND", "RAND")):
            cell = s.cell(t, proto, s.head_n)
            m, sd = _seed_mean(cell, "heat", "top")
            series[key].append(100 * m)
            errs[key].append(100 * sd if math.isfinite(sd) else 0.0)
            if math.isnan(m):
                missing["not run" if cell is None else "degenerate"].append(f"{t} · {key}")
    series = {k: v for k, v in series.items() if not all(math.isnan(x) for x in v)}
    if not s.plots:
        return []
    gaps = "".join(f" No bar for {', '.join(bars)}: {why}." for bars, why in (
        (missing["degenerate"], "no seed's sub-panel had activity on the topic (Δv = 0: excluded, counted "
                                "under How sure)"),
        (missing["not run"], "that cell was not in the study's grid")) if bars)
    return [s.charts.grouped_bars(
        "R_top (f_heat): the full panel against small panels", s.topics, series, ylabel="R_top (%)",
        # no md_ref: figures/teaser.png is another figure (the first topic's three tier shares), not this one
        errors={k: v for k, v in errs.items() if k in series}, synthetic=s.synthetic,
        caption=f"FULL: the whole panel; BIAS_v and RAND: sub-panels of N = {s.head_n} users drawn by the "
        "BIAS_visibility and RAND protocols (mean ± std over seeds). A biased small panel credits the top "
        f"tier with far more than the full panel does; a random one does not.{gaps}")]


def _top_users(s: _StudyDir) -> list[Any]:
    """Per topic, the top users by Φ_i (opaque indices; SYNTHETIC panels or ``--export-per-user`` only)."""
    out: list[Any] = ["Top users by Φ_i"]
    for i, t in enumerate(s.topics):
        ta = s.fulls[t].get("top_agents")
        if not ta:
            continue
        rows_t = ta["rows"][:min(s.top, PAGE_TOP_MAX)]
        scale = max((abs(r["Phi"]) for r in rows_t), default=0.0)
        feats = list(ta.get("features") or [])
        tab_rows = [[rank, id_cell(r["user"]), signed_cell(r["Phi"], scale), pct_cell(r.get("share")),
                     Cell(r["tier"], sort=r["tier"]), r["followers"], r["posts"], r["replies"],
                     *[float(x) for x in r.get("features_at_peak", [])]]
                    for rank, r in enumerate(rows_t, start=1)]
        peak = s.fulls[t].get("daily", {}).get("peak_day", "?")
        out.append(Details(f"{literal(t)}: top {len(rows_t)} users (peak day t* = {peak})", [Table(
            ["rank", "user", "Φ_i", "% of ΣΔv", "tier", "followers", "topic posts", "replies received",
             *[f"{FEATURE_NAMES.get(f, f)} at t*" for f in feats]], tab_rows, id=f"who-{t}",
            caption=f"{literal(t)}: users by Φ_i = Σ_t φ_i,t of f_heat on the per-day panel (user = opaque index in "
                    "the counts; no DIDs or handles); the last columns are the panel's features on the peak day t* "
                    "(topic posts and replies received that day)")], open=i == 0))
    if len(out) == 1:
        out.append(Note("Per-user rows are not in this study's cells: for real data the study writes aggregates only "
                        "(privacy by default, Appendix I); `--export-per-user` keeps the top users by opaque index. "
                        "SYNTHETIC panels always keep them.", "skipped"))
    return out


def _who(s: _StudyDir) -> list[Any]:
    """Tier shares on the full panel, the small panels against it, the top users."""
    who: list[Any] = [Text("Tiers by followers over the full panel: **top** 1 %, **mid** the next 9 %, **tail** the "
                           "bottom 90 %. R_G is a tier's share of the attribution Σ_{i∈G} φ_i / Δv over the whole "
                           "window (net shares for var and gini). Full panel, every indicator:"), _tier_shares(s)]
    if "heat" in s.inds and s.topics:
        who += _teaser(s)
    flip = read_csv(s.d / "tables" / "flip-main.csv")
    if flip:
        who.append(Details("flip-main: R_top per protocol, topic and indicator vs FULL",
                           [merged_table(flip, caption="tables/flip-main.csv", drop=("synthetic",), id="flip-main")]))
    return who + _top_users(s)


# ---------------------------------------------------------------------------------------------- when
def _day_figures(s: _StudyDir, i: int, t: str, daily: dict[str, Any], short: list[str]) -> list[Any]:
    """Φ_t per day, the top users × days and the follower-percentile × day heatmap of topic ``t``."""
    phit, p = np.asarray(daily["Phi_t"], dtype=float), int(daily["peak_index"])
    line = Line("Φ_t = f(z_t) − f(0)", list(range(len(short))), phit, markers=True, width=2)
    figs = [s.charts.lines(f"{t}: Φ_t per day (f_heat, full panel)", [line],
                           xlabel="day", ylabel="Φ_t", points=[Point(p, float(phit[p]), "t*")], xlabels=short,
                           synthetic=s.synthetic, caption=f"t* = {daily['peak_day']}, the peak day (argmax Φ_t); "
                           "with the zero baseline Φ_t = f(z_t).")]
    ta = s.fulls[t].get("top_agents")
    if ta:
        rows_t = ta["rows"][:min(s.top, PAGE_TOP_MAX)]
        mat = np.array([r["phi_t"] for r in rows_t], dtype=float)
        figs.append(s.charts.heatmap(f"{t}: φ_i,t of the top {len(rows_t)} users × days", mat,
                                     [str(r["user"]) for r in rows_t], short, xlabel="day",
                                     ylabel="user (by Φ_i, top first)", value_label="φ_i,t", vline=(p, "t*"),
                                     synthetic=s.synthetic, row_title="user",
                                     caption="Rows: the who-table's users, in its order."))
    m = np.asarray(daily["heatmap_M"], dtype=float).T  # (bins, days)
    labels = [f"{b}–{b + 1} %" for b in range(m.shape[0])]
    return [figs, s.charts.heatmap(
        f"{t}: |M(t, p)| by follower-percentile bin × day (log10)", m, labels, short, xlabel="day",
        ylabel="follower percentile (top first)", value_label="M(t, p)", diverging=False, log=True,
        vline=(p, "t*"), hlines=(1, 10), synthetic=s.synthetic, row_title="bin",
        # no md_ref: figures/heatmap.png holds every topic's panel, not this topic's (linked once: _all_topics)
        caption="M(t, p) = Σ over the users of percentile bin p of φ_i,t (f_heat, full panel); dashed lines at "
        "the tier boundaries (1 %, 10 %); light grey: M(t, p) = 0 (no attribution in that bin that day, no log10)."
        if (m == 0).any() else "M(t, p) = Σ over the users of percentile bin p of φ_i,t (f_heat, full panel); dashed "
        "lines at the tier boundaries (1 %, 10 %).")]


def _all_topics(s: _StudyDir) -> list[Any]:
    """The line naming ``figures/heatmap.png``, which draws every topic's M(t, p) side by side (report.md links it
    under that title: it was linked as the first topic's figure, "mythos: |M(t, p)| …")."""
    ref = s.figure("heatmap.png")
    if ref is None or not s.topics:
        return []
    title = "Every topic: log10 |M(t, p)| by follower-percentile bin × day, side by side"
    return [Text(f"`{ref}` beside this page draws every topic's |M(t, p)| side by side"
                 f" ({literal(', '.join(s.topics))}); each topic's is below, under its name."),
            Figure(title, md_ref=ref, synthetic=s.synthetic, md_only=True)]


def _when(s: _StudyDir) -> list[Any]:
    """Per topic: the day figures (unless left out) and the per-day table, the peak day t* marked."""
    when: list[Any] = []
    if not s.plots:
        when.append(Note("Figures were left out (`--no-plots`); the per-day table below has the numbers.", "skipped"))
    else:
        when += _all_topics(s)
    for i, t in enumerate(s.topics):
        daily = s.fulls[t].get("daily")
        if not daily:
            when.append(Note(f"{literal(t)}: no per-day attribution in the FULL cell.", "skipped"))
            continue
        days = list(daily["days"])
        phit, p = np.asarray(daily["Phi_t"], dtype=float), int(daily["peak_index"])
        short = [x[5:] if len(x) == 10 else x for x in days]
        blocks: list[Any] = _day_figures(s, i, t, daily, short) if s.plots else []
        blocks.append(Details(f"{literal(t)}: per day", [Table(
            ["day", "Φ_t", *[f"R_{k}" for k in TIER_LABELS], "t*"],
            [[Cell(day, sort=j), float(phit[j]), *[pct_cell(daily["tier_shares"][k][j]) for k in TIER_LABELS],
              "◀ t*" if j == p else ""] for j, day in enumerate(days)], id=f"per-day-{t}")]))
        when.append(Details(f"{literal(t)} (peak day t* = {daily['peak_day']})", blocks, open=i == 0))
    return when


# ---------------------------------------------------------------------------------------------- how sure
def _provenance(s: _StudyDir) -> KeyValues:
    summary, manifest, cfg = s.summary, s.manifest, s.manifest.get("config") or {}
    return KeyValues([
        ("method", "Aumann–Shapley, closed forms at the zero baseline (exact; no quadrature, no sampling)"),
        ("indicators", ", ".join(s.inds)), ("protocols", ", ".join(summary.get("protocols") or [])),
        ("sizes", f"{', '.join(str(x) for x in summary.get('sizes') or [])} and the full panel"
                  + (f" (skipped, reaching the population: {summary.get('sizes_skipped')})"
                     if summary.get("sizes_skipped") else "")),
        ("seeds", ", ".join(str(x) for x in summary.get("seeds") or [])),
        ("pool fraction / K min", f"{cfg.get('pool_fraction')} / {cfg.get('k_min')}"),
        ("headline N", s.head_n), ("data", summary.get("data")), ("users", s.users),
        ("counts", f"{literal(manifest.get('counts_dir'))} (fingerprint {manifest.get('counts_fingerprint')})"),
        ("git revision", manifest.get("git_revision")), ("aumann", (manifest.get("packages") or {}).get("aumann")),
    ], caption="Provenance")


def _efficiency(s: _StudyDir) -> Table:
    eff_rows = []
    for t in s.topics:
        f = s.fulls[t]
        seeds_gap = [it.get("efficiency_gap", 0.0) for c in s.grid if c["topic"] == t for r in c["seeds"]
                     for it in r["ind"].values() if isinstance(it, dict) and "efficiency_gap" in it]
        eff_rows.append([t, max(float(it.get("efficiency_gap", 0.0)) for it in f["ind"].values()),
                         float(f.get("daily", {}).get("efficiency_gap", math.nan)),
                         max(seeds_gap) if seeds_gap else math.nan, len(seeds_gap)])
    return Table(["topic", "full panel (max over indicators)", "per-day panel (f_heat)", "sub-panels (max)",
                  "sub-panel runs"], eff_rows, caption="Efficiency gap |Σ_i φ_i − Δv|", id="efficiency")


def _checks(s: _StudyDir) -> KeyValues:
    summary = s.summary
    eps = summary.get("epsilon") or {}
    return KeyValues([
        ("BIAS_v R_top above FULL (flip cells)", summary.get("flip_cells_positive")),
        ("BIAS_v mean shift of R_top (pp)", summary.get("bias_v_mean_shift_pp")),
        ("RAND mean shift of R_top (pp)", summary.get("rand_mean_shift_pp")),
        *[(f"ε at N = {s.head_n}, BIAS_v, {k}", v) for k, v in eps.items()],
        ("residual law: max |ε_var − ε_law|", summary.get("residual_law_max_deviation")),
        ("degenerate runs (Δv = 0, excluded and counted)", summary.get("degenerate_runs")),
        ("topics skipped", ", ".join(f"{literal(k)}: {literal(v)}"
                                     for k, v in (summary.get("topics_skipped") or {}).items()) or "none"),
        ("cells (skipped on resume)", f"{summary.get('cells')} ({summary.get('cells_skipped_on_resume')})")],
        caption="The study's checks (summary.json)")


def _study_tables(s: _StudyDir) -> list[Any]:
    """The study's tables (``tables/<name>.csv`` of a table it writes), never another file of ``tables/``: a CSV of
    yours there was drawn as one more study table."""
    from aumann.studies.crossscale.tables import TABLES

    tables = []
    for p in sorted(q for q in (s.d / "tables").glob("*.csv") if not partial_write(q.name) and q.stem in TABLES):
        rows_p = read_csv(p)
        if rows_p:
            tables.append(Details(_TABLE_TITLES.get(p.stem, p.stem),
                                  [merged_table(rows_p, caption=f"tables/{p.name}", drop=("synthetic",),
                                                id=f"table-{p.stem}")]))
    return ["Study tables", *tables] if tables else []


def _how_sure(s: _StudyDir) -> list[Any]:
    """Provenance, efficiency gaps, the study's checks, what this study has no use for, every table, DeepSet."""
    sure: list[Any] = [_provenance(s), _efficiency(s), _checks(s)]
    sure.append(Note("No deletion-faithfulness check, sampled-Shapley agreement or noise ceiling in this study: "
                     "the indicators are attributed exactly (closed forms), and there is no simulator to delete "
                     "users in.", "skipped"))
    sure.append(Note("No smoothing gap: lin, heat, var and gini are attributed as defined, with no C² surrogate.",
                     "skipped"))
    sure += _study_tables(s)
    ds = s.summary.get("deepset")
    if isinstance(ds, dict):
        sure.append(Details("Learned DeepSet indicator (--deepset)", _deepset(ds)))
    else:
        sure.append(Note("The learned DeepSet indicator was not run (`--deepset` not given).", "skipped"))
    return sure


def _deepset(ds: dict[str, Any]) -> list[Any]:
    """The DeepSet's tier shares and ε per panel as a table (deepset.md's), the rest as labelled values: nested
    settings and training figures one per line ("training · heldout_r2 · random"), not as JSON text."""
    items: list[tuple[str, Any]] = []

    def flat(label: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                flat(f"{label} · {k}", x)
        elif isinstance(v, list):
            items.append((label, ", ".join(fmt(x) for x in v)))
        else:
            items.append((label, v))

    for k, v in ds.items():
        if k != "table":
            flat(str(k), v)
    blocks: list[Any] = []
    table = ds.get("table")
    if isinstance(table, dict) and table:
        rows = []
        for name, r in table.items():
            r = r if isinstance(r, dict) else {}
            shares = r.get("R") if isinstance(r.get("R"), dict) else {}
            std = r.get("R_std") if isinstance(r.get("R_std"), dict) else {}
            rows.append([name, *[mean_std_cell(shares.get(t), std.get(t)) for t in TIER_LABELS],
                         mean_std_cell(r.get("eps"), r.get("eps_std")), r.get("degenerate_seeds")])
        blocks.append(Table(["panel", *[f"R_{t} (%)" for t in TIER_LABELS], "ε", "degenerate seeds"], rows,
                            id="deepset", caption=f"DeepSet on {literal(ds.get('topic'))}: tier shares (%) and ε, "
                            "mean ± std over seeds (deepset/deepset.md)"))
    return [*blocks, KeyValues(items)]


# ---------------------------------------------------------------------------------------------- cost, cards
def _cost(s: _StudyDir) -> list[Any]:
    llm, _ = llm_blocks(s.manifest, offline_reason="The cross-scale study attributes recorded counts; no "
                        "language model is involved.")
    timings = s.summary.get("timings") or {}  # (a study written before the seconds moved to the manifest: there)
    stages = s.manifest.get("stage_seconds") or timings.get("stage_seconds")
    out = [*llm, *timing_table(stages, s.manifest.get("seconds") or timings.get("total_seconds"), note=(
        f"{timings.get('cells_computed', '?')} cell(s) computed in this invocation; "
        f"{s.summary.get('cells_skipped_on_resume', 0)} read back from an earlier one."))]
    deepset = s.manifest.get("deepset_seconds")  # the DeepSet's wall clock: the manifest's, not summary.json's
    if isinstance(deepset, dict) and deepset:
        out.append(Details("Learned DeepSet indicator: wall time (--deepset)", [KeyValues(list(deepset.items()))]))
    return out


def _cards(s: _StudyDir) -> list[Card]:
    summary, topics = s.summary, s.topics
    eps = summary.get("epsilon") or {}
    cards = [Card("Data", "SYNTHETIC" if s.synthetic else "ingested", f"{fmt(s.users)} users, {len(topics)} topic(s)")]
    if summary.get("flip_cells_positive") is not None:
        cards.append(Card("Flip (BIAS_v R_top > FULL)", str(summary["flip_cells_positive"]),
                          f"mean shift {fmt(summary.get('bias_v_mean_shift_pp'), 3)} pp"))
    if "heat" in eps:
        cards.append(Card(f"ε (heat, N = {s.head_n})", fmt(eps["heat"], 3), "best-scalar rescaling residual"))
    if summary.get("residual_law_max_deviation") is not None:
        cards.append(Card("Residual law", fmt(summary["residual_law_max_deviation"], 2), "max |ε_var − ε_law|"))
    if topics and "daily" in s.fulls[topics[0]]:
        cards.append(Card(f"When ({literal(topics[0])})", f"t* = {s.fulls[topics[0]]['daily']['peak_day']}",
                          "peak day of Φ_t"))
    _, llm_card = llm_blocks(s.manifest, offline_reason="")
    total = s.manifest.get("seconds") or (summary.get("timings") or {}).get("total_seconds")
    cards.append(Card("Cost", llm_card, f"0 LLM calls · wall {seconds_text(total)}"))
    return cards


def crossscale_document(d: Path, manifest: dict[str, Any], charts: Charts, *, top: int = 20,
                        plots: bool = True) -> Document:
    """The page of an ``aumann bluesky study`` directory."""
    s = _StudyDir.load(d, manifest, charts, top=top, plots=plots)
    who, when, sure, cost = _who(s), _when(s), _how_sure(s), _cost(s)  # in this order: figures are numbered
    summary = s.summary
    return Document(
        title="Bluesky cross-scale study: who drove each topic, and when",
        subtitle=f"{summary.get('data')}: {fmt(s.users)} users, topics {', '.join(s.topics)}; sub-panels of "
                 f"{', '.join(str(x) for x in summary.get('sizes') or [])} users under "
                 f"{len(summary.get('protocols') or [])} sampling protocols × {len(summary.get('seeds') or [])} seeds.",
        sections=[Section("cards", "At a glance", [Cards(_cards(s))]),
                  Section("who", "Who drove it", who, lead="tiers, small panels vs full, top users"),
                  Section("when", "When did it turn", when, lead="Φ_t per day, percentile × day, users × day"),
                  Section("how-sure", "How sure", sure, lead="efficiency, provenance, ε, residual law, tables"),
                  Section("cost", "Cost", cost, lead="LLM usage and wall time")],
        synthetic=s.synthetic,
        synthetic_note="SYNTHETIC panel — generated by `aumann bluesky synth`, not real Bluesky data.",
        meta=[("command", f"`{literal(manifest.get('command'))}`"), ("created", manifest.get("created"))])


__all__ = ["crossscale_document"]
