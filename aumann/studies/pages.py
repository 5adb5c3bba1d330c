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

import itertools
import math
import os
import re
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import AumannError, ReportError
from aumann.io import write_csv, write_text
from aumann.labels import lookalike_ids
from aumann.records import Manifest
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
    literal,
    render_html,
    render_markdown,
    seconds_text,
)
from aumann.studies.rundir import (
    FAITHFULNESS,
    REPORT_HTML,
    REPORT_MD,
    ROUNDED_VALUES_NOTE,
    RUNS,
    RunDir,
    rounded_values_words,
    transient_agents_words,
)
from aumann.studies.sections import (
    AT_T_STAR_NOTE,
    PAGE_TOP_MAX,
    calls_text,
    concentration_table,
    driver_card,
    efficiency_note,
    group_share_table,
    id_cell,
    llm_blocks,
    load_attribution,
    max_relative_gap,
    not_alive_note,
    pct_cell,
    pct_text,
    read_csv,
    read_json,
    reading_within,
    timing_table,
    top_order,
    top_shown,
    undefined_relative_note,
    who_table,
)
from aumann.studies.study_page import faithfulness_document
from aumann.tiers import TIER_LABELS

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
    with reading_within(d):  # one schema for manifests (aumann.records.Manifest), read inside the directory
        manifest = read_json(d / "manifest.json", "manifest", schema=Manifest)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("command"), str):
        raise ReportError(f"manifest {str(d / 'manifest.json')!r} has no command: not an aumann run directory")
    cmd = manifest["command"]
    if manifest.get("status") == "stopped":  # an LLM cap stopped `aumann run`: runs and tables may be another's
        raise ReportError(f"{str(d)!r} is not a finished run directory: {cmd!r} stopped before it finished "
                          f"({manifest.get('stopped_because') or 'no reason recorded'}); run it again (it resumes) "
                          "to finish it")
    declared = manifest.get("report_kind")
    if declared is not None and declared not in KINDS:
        raise ReportError(f"manifest {str(d / 'manifest.json')!r} declares report_kind {declared!r}; "
                          f"known kinds: {list(KINDS)}")
    if declared == "faithfulness" or (declared is None and cmd.startswith("aumann run")):
        kind, needs = "faithfulness", (RUNS, RunDir(d).table(FAITHFULNESS).name)
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


#: result files whose section of the page checks them itself, and says in its place that the file is not the run's
#: (the trace deletion study: :mod:`aumann.studies.trace_sections`)
_SAYS_ITSELF = ("deletion_masking.json",)


def check_recorded_tables(d: Path, manifest: dict[str, Any], *, every_result: bool = False) -> None:
    """Refuse a run directory whose tables (``*.csv``; with ``every_result``, every result file but the pages) are
    not the ones the run recorded writing (``outputs_sha256`` in its manifest): the page reads its numbers from
    them, so a table edited by hand was shown as the run's result (a deletion AUC of 9.73 where the run measured
    0.731), and a table removed by hand dropped its section without a word. A file the manifest records no
    checksum of (an older aumann) is read as it is."""
    from aumann.io import output_check

    ours = manifest.get("outputs_sha256")
    if not isinstance(ours, dict):
        return
    words = manifest.get("command").split(" ") if isinstance(manifest.get("command"), str) else []
    words = list(itertools.takewhile(lambda w: re.fullmatch(r"[a-z][a-z0-9-]*", w) is not None, words[:3]))
    again = " ".join(words) if len(words) >= 2 and words[0] == "aumann" else "aumann run"
    for name in sorted(n for n in ours if isinstance(n, str) and n not in (REPORT_HTML, REPORT_MD, *_SAYS_ITSELF)
                       and (every_result or n.endswith(".csv"))):
        check = output_check(d / name, within=d, recorded=ours)
        if check.state not in ("ours", "unrecorded"):
            what = "table" if name.endswith(".csv") else "result file"
            raise ReportError(f"{what} {str(d / name)!r} is not the one the run wrote: {check.reason} (manifest.json "
                              f"records its SHA-256); run the same `{again}` command with this --out again to "
                              "rewrite it")


def build_document(run_dir: str | os.PathLike[str], *, interactive: bool | None = None, top: int = TOP_AGENTS,
                   plots: bool = True, parts: Any = None, verify_tables: bool = False) -> Document:
    """The page of a finished run directory (what :func:`render_report` writes), built from its files alone.

    ``parts`` (:class:`aumann.studies.report.ReportParts`: the report stage of ``aumann run``): a section of a
    faithfulness page that fails is recorded there and a note stands in its place, instead of failing the page.
    ``verify_tables``: a faithfulness directory's tables must be those its manifest records writing
    (:func:`check_recorded_tables`; :func:`render_report`, which reads a finished directory, asks for it).

    Raises:
        ReportError: not a finished run directory, or one whose files cannot be read.
    """
    if top < 1:
        raise ReportError(f"top must be ≥ 1; got {top}")
    d = Path(run_dir)
    kind, manifest = run_kind(d)
    if verify_tables:  # (the study's own report stage runs before its manifest is written)
        with reading_within(d):
            check_recorded_tables(d, manifest, every_result=kind != "faithfulness")
    charts = Charts(interactive=interactive)
    try:
        with reading_within(d):  # every file read below stays inside the run directory
            if kind == "faithfulness":
                doc = faithfulness_document(d, manifest, charts, top=top, plots=plots, parts=parts)
            elif kind == "attribute":
                doc = attribute_document(d, manifest, charts, top=top, plots=plots)
            else:
                from aumann.studies.crossscale.page import crossscale_document

                doc = crossscale_document(d, manifest, charts, top=top, plots=plots)
    except ReportError:
        raise
    except AumannError as exc:
        if getattr(exc, "failed_stage", None) is not None:  # a recorded part of the report stage, under strict
            raise
        raise ReportError(f"{str(d)!r}: a result file cannot be read: {type(exc).__name__}: {exc}") from exc
    except (KeyError, IndexError, ValueError, TypeError, AttributeError, OverflowError) as exc:
        raise ReportError(f"{str(d)!r}: result files are incomplete or from another version "
                          f"({type(exc).__name__}: {exc})") from exc
    doc.head = charts.head()
    doc.meta = [*doc.meta, ("figures", charts.mode if plots else "left out")]
    return doc


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
    from aumann.io import check_outputs, file_digests, journaled, output_lock, settle_journal
    from aumann.manifest import record_outputs

    d = Path(run_dir)
    # one writer per folder, from the read of the run to the manifest's record of the pages (re-entrant: `aumann
    # report`, or the study writing its pages, holds it already); a missing folder is not made: build_document
    # refuses it
    with output_lock(d, command="aumann.studies.pages.render_report (a Python call)") if d.is_dir() else nullcontext():
        doc = build_document(d, interactive=interactive, top=top, plots=plots, verify_tables=True)
        # a page of your own of that name is never replaced; what aumann wrote (recorded with its SHA-256) is
        check_outputs(d, ["report.html", "report.md"])
        with journaled(d):
            paths = {"html": write_text(d / "report.html", render_html(doc)),
                     "md": write_text(d / "report.md", render_markdown(doc))}
        record_outputs(d, file_digests(d, ["report.html", "report.md"]))  # so the next run may replace them
        settle_journal(d)
    return paths


def unfinish(run_dir: str | os.PathLike[str]) -> None:
    """Remove ``manifest.json``, ``report.html`` and ``report.md`` of ``run_dir`` before a command rewrites its
    results: the manifest marks a finished run directory (written last), so a command interrupted while writing
    leaves a folder :func:`run_kind` refuses, not the new results beside the earlier manifest, summary and page
    (``aumann report`` drew the new attribution with the earlier run's features at t*, command and trace).
    Only where ``manifest.json`` says an aumann command wrote the folder: a folder of your own keeps its files."""
    from aumann.io import check_outputs, read_json, remove_stale

    d = Path(run_dir)
    try:
        earlier = read_json(d / "manifest.json", error=ReportError, what="manifest", within=d)
    except (AumannError, OSError):  # none, damaged, or a link leading out: not ours to remove
        return
    if not isinstance(earlier, dict) or not str(earlier.get("command", "")).startswith("aumann "):
        return
    check_outputs(d, ["report.html", "report.md"])  # a page of your own put there since is kept (and refused)
    for name in ("manifest.json", "report.html", "report.md"):
        remove_stale(d / name, within=d)


# --------------------------------------------------------------------------- aumann attribute / demo


def attribute_t_star(att: Any) -> int:
    """t* of a one-panel attribution: the step with the largest Δv_t = f(z_t) − f(z⁰_t) (first on ties)."""
    return int(np.argmax(np.asarray(att.delta_v, dtype=np.float64)))


def top_agents_rows(att: Any, panel: Any, *, k: int = TOP_AGENTS_CSV) -> list[dict[str, Any]]:
    """Rows of ``top_agents.csv``: the top-k agents by Φ_i with their features at t* and their groups.

    ``alive_t_star`` (the last column) says whether the agent is alive at t* (the panel's alive mask; ``True``
    without one). For an agent that is not, its features ``z_*`` are empty cells (the recorder's fill, not measured),
    and so are ``phi_t_star`` and ``stderr_t_star`` where its φ is 0, as a dead row's is: a 0 in the file read as a
    measured zero."""
    ts = attribute_t_star(att)
    phi_i = att.by_agent()
    total = float(att.delta_v.sum())
    alive = np.ones(att.N, dtype=bool) if getattr(panel, "alive", None) is None else np.asarray(panel.alive[ts],
                                                                                                  dtype=bool)
    rows = []
    for rank, pos in enumerate(top_order(phi_i, k), start=1):
        aid = att.agent_ids[pos]
        here = bool(alive[pos])
        phi_t = float(att.phi[ts, pos])
        measured = here or (math.isfinite(phi_t) and phi_t != 0)  # a dead row's φ is 0; one that is not was computed
        row: dict[str, Any] = {"rank": rank, "position": int(pos), "agent": aid.item() if hasattr(aid, "item") else aid,
                               "Phi": float(phi_i[pos]), "share": float(phi_i[pos] / total) if total else math.nan,
                               "t_star": int(ts), "phi_t_star": phi_t if measured else None}
        if att.stderr is not None:
            row["stderr_t_star"] = float(np.asarray(att.stderr)[ts, pos]) if measured else None
        for j, f in enumerate(panel.features):
            row[f"z_{f}"] = float(panel.values[ts, pos, j]) if here else None
        for g, labels in att.groups.items():
            v = np.asarray(labels)[pos]
            row[f"group_{g}"] = v.item() if hasattr(v, "item") else v
        row["alive_t_star"] = here
        rows.append(row)
    return rows


def not_alive_rows(att: Any, panel: Any, *, k: int = PAGE_TOP_MAX) -> list[dict[str, Any]] | None:
    """``summary.json``'s ``not_alive``: the agents among the top ``k`` by Φ_i (every agent a page can show) that are
    not alive at some step, each as ``{"position", "steps"}`` (step positions), so that the page's heatmap draws
    those cells as "not alive" rather than as a living agent's φ = 0; ``None`` for a panel without an alive mask."""
    if getattr(panel, "alive", None) is None:
        return None
    alive = np.asarray(panel.alive, dtype=bool)
    return [{"position": int(p), "steps": np.flatnonzero(~alive[:, p]).tolist()}
            for p in top_order(att.by_agent(), k) if not alive[:, p].all()]


def _not_alive_mask(summary: dict[str, Any], order: np.ndarray, T: int) -> np.ndarray | None:
    """(rows × steps) True where the agent of row ``order[r]`` is not alive, from ``summary.json``'s ``not_alive``
    (:func:`not_alive_rows`); ``None`` where the run recorded none (no alive mask, or an older aumann)."""
    rows = summary.get("not_alive")
    if not isinstance(rows, list):
        return None
    where = {int(p): r for r, p in enumerate(order)}
    dead = np.zeros((len(order), T), dtype=bool)
    for row in rows:
        try:
            r = where.get(int(row["position"]))
            steps = np.asarray(row.get("steps") or [], dtype=np.int64).reshape(-1)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise ReportError(f"summary.json: not_alive holds {str(row)[:80]!r}, not {{\"position\": int, \"steps\": "
                              "[int, ...]} (damaged or edited); run the command again to rewrite it") from exc
        if r is not None:
            dead[r, steps[(steps >= 0) & (steps < T)]] = True
    return dead


def _alive_at(summary: dict[str, Any], att: Any, *, k: int, t_star: int) -> np.ndarray | None:
    """Which agents are alive at t* (N,), as far as the who-table's top ``k`` go, from ``summary.json``'s
    ``not_alive``; ``None`` where the run recorded none (every agent alive, or an older aumann)."""
    order = top_order(att.by_agent(), k)
    dead = _not_alive_mask(summary, order, att.T)
    if dead is None:
        return None
    alive = np.ones(att.N, dtype=bool)
    alive[order] = ~dead[:, t_star]
    return alive


def _top_features(att: Any, top_rows: list[dict[str, Any]], k: int) -> dict[str, np.ndarray] | None:
    """The top agents' features at t* from ``top_agents.csv`` (``None`` when it does not cover them)."""
    if not top_rows:
        return None
    by_pos = {int(r["position"]): r for r in top_rows}
    names = [c[2:] for c in top_rows[0] if c.startswith("z_")]
    order = top_order(att.by_agent(), k)
    if not all(int(p) in by_pos for p in order):
        return None
    feats = {f: np.full(att.N, np.nan) for f in names}
    for p in order:
        for f in names:
            feats[f][p] = by_pos[int(p)][f"z_{f}"]
    return feats


def lookalike_note(ids: Any) -> Note | None:
    """A note naming agent ids that are separate agents but print alike (:func:`aumann.panel.lookalike_ids`)."""
    count, groups = lookalike_ids(np.asarray(ids))
    if not count:
        return None
    shown = "; ".join(" and ".join(ascii(v) if len(v) <= 60 else ascii(v[:57]) + "..." for v in g) for g in groups)
    more = f" (first {len(groups)})" if count > len(groups) else ""
    return Note(f"{count:,} group(s) of agent ids look alike but are different agents here (ids are compared "
                f"exactly; these differ only in Unicode normalisation, NFC/NFD, in invisible characters such as a "
                f"zero-width space, or in whitespace){more}: {shown}. If they are one agent in your data, normalise "
                "the ids before attributing.", "warn")


def _method_seed(prov: dict[str, Any], manifest: dict[str, Any]) -> Any:
    """The provenance's seed row: the method's seed where it sampled; else what is true — it drew nothing (the closed
    form and the quadrature are deterministic), with the seed that generated the panel where one did (``aumann
    demo``: the row read "seed –" beside a source line "seed 0")."""
    if prov.get("seed") is not None:
        return prov["seed"]
    how = "closed form" if prov.get("closed_form") else "deterministic quadrature"
    panel_seed = (manifest.get("seeds") or {}).get("seed") if isinstance(manifest.get("seeds"), dict) else None
    data = f"; the panel was generated with seed {fmt(panel_seed)}" if panel_seed is not None else ""
    return f"— ({how}: no sampling{data})"


def _path_only(prov: dict[str, Any], key: str) -> Any:
    """A setting of the path integral (K, the power τ = u^p): "— (closed form: no quadrature)" where the closed form
    computed the attribution (the demo's provenance read "K (quadrature points): –", as if a value were missing)."""
    if prov.get(key) is None and prov.get("closed_form"):
        return "— (closed form: no quadrature)"
    return prov.get(key)


def _agents(k: int) -> str:
    """"1 agent", "5 agents" (a one-agent panel's page read "The 1 agents with the largest …")."""
    return f"{k:,} agent" if k == 1 else f"{k:,} agents"


def _attribute_who(att: Any, summary: dict[str, Any], top_rows: list[dict[str, Any]], *, k: int, t_star: int,
                   steps_lbl: list[str], demo: bool, top: int) -> list[Any]:
    """The "who" section of an ``aumann attribute`` page."""
    phi_i, total, prov = att.by_agent(), float(att.delta_v.sum()), dict(att.provenance)
    feats = _top_features(att, top_rows, k)
    alive = _alive_at(summary, att, k=k, t_star=t_star)
    who: list[Any] = [Text(f"The {_agents(k)} with the largest signed Φ_i = Σ_t φ_i,t, the sum over the {att.T} "
                           "step(s), ranked by Φ_i (not by φ at t*), ties by agent position; t* = step "
                           f"{literal(steps_lbl[t_star])} (the step with the largest Δv_t). "
                           "`% of ΣΔv` is Φ_i / Σ_t Δv_t; `φ at t*` and `% of Δv(t*)` the attribution at t*; the "
                           f"feature columns hold the agent's features at t*. {AT_T_STAR_NOTE}")]
    who.append(who_table(att, k=k, t_star=t_star, features=feats, id="who-run-000", alive=alive,
                         caption=f"Top agents ranked by Φ_i = Σ_t φ_i,t over all {att.T} step(s) ({att.method}, "
                         f"indicator {literal(prov.get('indicator'))})"))
    gone = not_alive_note(att, alive, k=k, t_star=literal(steps_lbl[t_star]))
    if gone is not None:
        who.append(gone)
    note = top_shown(top, att.N)[1]
    if note is not None:
        who.append(Note(note, "info"))
    alike = lookalike_note(att.agent_ids)
    if alike is not None:
        who.append(alike)
    if att.stderr is None:
        who.append(Text("Aumann–Shapley is deterministic (closed form or quadrature): it has no standard error; the "
                        "efficiency gap under **How sure** bounds its numerical error."))
    if feats is None:
        who.append(Note("top_agents.csv is missing or does not cover these agents: features at t* are not shown.",
                        "skipped"))
    who += group_share_table(att, caption="Group shares", id="groups-run-000")
    if not att.groups:
        who.append(concentration_table(phi_i, total, id="concentration-run-000"))
    if demo and summary.get("rows"):
        rows = [[r["indicator"], r["method"], *[pct_cell(r["shares"].get(g)) for g in TIER_LABELS],
                 r.get("max_efficiency_gap")] for r in summary["rows"]]
        who.append(Table(["indicator", "method", "R_top (1 %)", "R_mid (9 %)", "R_tail (90 %)", "max |Σφ − Δv|"],
                         rows, caption="The demo's indicators: tier shares R_G over the whole window (the time "
                         "each took: under Cost)", id="demo-tiers"))
    return who


def _unseen_agents(panel_meta: dict[str, Any]) -> list[tuple[str, str]]:
    """The provenance line of a panel with agents present at no capture (born and removed within one step, or
    removed in the first), as ``aumann run``'s report has it; none when the panel counted none."""
    d = panel_meta.get("transient_agents")
    if not isinstance(d, dict) or not d.get("total"):
        return []
    return [("agents present at no capture", f"{transient_agents_words(d)}. They have no row in the panel, so no φ, "
             "and f never saw them; by step: the panel's meta['transient_agents'] (manifest.json, panel_meta)")]


def _rounded_integers(panel_meta: dict[str, Any]) -> list[tuple[str, str]]:
    """The provenance line of a panel whose recorder counted integers its float64 (float32) changed, as ``aumann
    run``'s report has it; none when it counted none."""
    words = rounded_values_words(panel_meta.get("rounded_values"), lambda n: literal(repr(n)))
    if not words:
        return []
    return [("integers rounded", f"{words}: {ROUNDED_VALUES_NOTE}; the panel's meta['rounded_values'] "
             "(manifest.json, panel_meta)")]


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
    k = top_shown(top, att.N)[0]
    steps_lbl = [str(s.item() if hasattr(s, "item") else s) for s in att.steps]

    who = _attribute_who(att, summary, top_rows, k=k, t_star=ts, steps_lbl=steps_lbl, demo=demo, top=top)

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
                          caption=f"t* = step {literal(steps_lbl[ts])}: the largest Δv_t = f(z_t) − f(z⁰_t)"
                          + (f"; f(z⁰) = {fmt(float(att.f_baseline[0]))} at every step." if base_same else "."))
        f2 = charts.lines("Φ_t = Σ_i φ_i,t per step", [], xlabel="step", ylabel="Φ_t", bars=(x, att.by_step(), "Φ_t"),
                          points=[Point(ts, float(att.by_step()[ts]), "t*")], xlabels=steps_lbl, synthetic=synthetic,
                          caption="Each step's attribution total (= Δv_t by efficiency).")
        when.append([f1, f2])
        order = top_order(phi_i, k)
        ids = [id_cell(att.agent_ids[p]).text for p in order]
        dead = _not_alive_mask(summary, order, att.T)
        gone = "" if dead is None or not dead.any() else " Hatched grey: the agent is not alive at that step (φ = 0)."
        when.append(charts.heatmap(f"φ_i,t of the top {_agents(len(order))} × steps", att.phi[:, order].T, ids,
                                   steps_lbl,
                                   xlabel="step", ylabel="agent (by Φ_i, top first)", value_label="φ_i,t",
                                   vline=(ts, "t*"), synthetic=synthetic,
                                   caption="Rows: the agents of the who-table, in its order. Hover for agent id and φ."
                                   + gone if charts.interactive else "Rows: the agents of the who-table, in its order."
                                   + gone,
                                   extra={"Φ_i": np.repeat(phi_i[order][:, None], att.T, axis=1)}, not_alive=dead))
    elif not plots:
        when.append(Note("Figures were left out (`--no-plots`); the per-step table below has the numbers.", "skipped"))
    else:
        when.append(Note("One step only: there is no curve over time (t* is that step).", "skipped"))
    when.append(Details("Per step: f(z_t), f(z⁰_t), Φ_t, Δv_t", [Table(
        ["step", "f(z_t)", "f(z⁰_t)", "Φ_t", "Δv_t", "t*"],
        [[Cell(literal(steps_lbl[t]), sort=t), float(att.f_values[t]), float(att.f_baseline[t]),
          float(att.by_step()[t]), float(att.delta_v[t]), "◀ t*" if t == ts else ""] for t in range(att.T)],
        id="per-step-run-000", md_max_rows=60)], open=att.T <= 15))

    # ---------------------------------------------------------------- how sure
    sure: list[Any] = [KeyValues([
        ("method", f"{att.method} ({'closed form' if prov.get('closed_form') else 'path integral'})"),
        ("indicator", literal(prov.get("indicator"))), ("K (quadrature points)", _path_only(prov, "steps")),
        ("rule", prov.get("rule")),
        ("power τ = u^p", _path_only(prov, "power")), ("baseline", prov.get("baseline")),
        ("seed", _method_seed(prov, manifest)),
        ("dtype", prov.get("dtype")), ("panel", f"T = {att.T}, N = {att.N:,}, D = {len(att.features)} "
                                                 f"({literal(', '.join(att.features))})"),
        ("source", literal(summary.get("panel") or panel_meta.get("generator") or "–")),
        *_unseen_agents(panel_meta), *_rounded_integers(panel_meta),
        ("git revision", manifest.get("git_revision")), ("aumann", (manifest.get("packages") or {}).get("aumann")),
    ], caption="Provenance")]
    gap = att.efficiency_gap
    worst_rel, undefined = max_relative_gap(att)
    sure.append(Table(["max |Σφ − Δv|", "at step", "max relative", "at t*", "satisfies efficiency"],
                      [[float(gap.max()), Cell(literal(steps_lbl[int(np.argmax(gap))]), sort=int(np.argmax(gap))),
                        worst_rel, float(gap[ts]), att.satisfies_efficiency]],
                      caption="Efficiency gap |Σ_i φ_i,t − Δv_t|", id="efficiency"))
    if undefined:
        sure.append(undefined_relative_note(undefined))
    if att.large_efficiency_gap().any():
        sure.append(efficiency_note(float(att.relative_efficiency_gap[att.large_efficiency_gap()].max()),
                                    "this attribution"))
    if manifest.get("trace"):  # an event log of another simulator: what was read, and the masking game only
        from aumann.studies.trace_sections import trace_blocks, trace_cards, trace_who_note

        sure += trace_blocks(d, manifest, charts, plots=plots, synthetic=synthetic)
        who[1:1] = trace_who_note(manifest)
    else:
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
    if manifest.get("trace"):  # wall-clock, like the rest of this section: differs between two runs of one command
        from aumann.studies.trace_sections import trace_rate

        cost += trace_rate(manifest)

    cards = [driver_card("Top driver", att.agent_ids, phi_i, total),
             Card("When", f"t* = {literal(steps_lbl[ts])}", f"Δv(t*) = {fmt(float(att.delta_v[ts]))}"),
             Card("Efficiency gap", fmt(float(att.max_efficiency_gap), 2), "max |Σφ − Δv| over steps"),
             Card("Cost", llm_card, f"{calls_text(manifest)} · wall {seconds_text(total_s)}")]
    if manifest.get("trace"):
        cards[2:2] = trace_cards(d, manifest)
    if att.groups and total:
        g0 = next(iter(att.groups))
        sh = att.group_shares(g0)
        lead = max(sh, key=lambda key: sh[key])
        cards.insert(1, Card(f"Largest {literal(g0)} share", f"{literal(lead)}: {pct_text(sh[lead])}",
                             f"of Σ_t Δv_t; {int(np.sum(np.asarray(att.groups[g0]) == lead)):,} agents"))
    what = "demo" if demo else "attribution"
    panel_words = "a panel"
    if manifest.get("trace"):
        panel_words = f"a {(manifest.get('trace') or {}).get('format')} trace read into a panel"
    return Document(
        title=(f"aumann demo: synthetic heavy-tailed panel, {literal(prov.get('indicator'))}" if demo else
               f"Attribution of {literal(prov.get('indicator'))}: who drove it, and when"),
        subtitle=f"{what.capitalize()} of {panel_words} of N = {_agents(att.N)} × T = {att.T} step(s) × "
                 f"D = {len(att.features)} feature(s).",
        sections=[Section("cards", "At a glance", [Cards(cards)]),
                  Section("who", "Who drove it", who, lead="top agents by Φ_i"),
                  Section("when", "When did it turn", when, lead="f(z_t), Φ_t, agent × step"),
                  Section("how-sure", "How sure", sure, lead="efficiency and provenance"),
                  Section("cost", "Cost", cost, lead="LLM usage and wall time")],
        synthetic=synthetic,
        synthetic_note=("SYNTHETIC panel — generated by aumann (not observed data); tiers and shares describe the "
                        "generator." if synthetic else Document.synthetic_note),
        meta=[("command", f"`{literal(manifest.get('command'))}`"), ("created", manifest.get("created"))])


def write_top_agents(out: Path, att: Any, panel: Any, *, k: int = TOP_AGENTS_CSV) -> Path:
    """``top_agents.csv``: the top-k agents by Φ_i, their share, φ at t*, features at t* and groups."""
    rows = top_agents_rows(att, panel, k=k)
    cols = list(rows[0]) if rows else ["rank", "position", "agent", "Phi", "share", "t_star", "phi_t_star",
                                       "alive_t_star"]
    return write_csv(out / "top_agents.csv", rows, cols)  # plain numbers (numpy scalars too), missing = empty


__all__ = ["KINDS", "TOP_AGENTS", "TOP_AGENTS_CSV", "attribute_document", "attribute_t_star", "build_document",
           "faithfulness_document", "not_alive_rows", "render_report", "run_kind", "top_agents_rows", "unfinish",
           "write_top_agents"]
