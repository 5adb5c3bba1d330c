"""The study's last stage, ``report``: the run directory's tables (CSV + Markdown), plots (PNG,
:mod:`aumann.studies.figures`) and pages.

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
  ``deletion_curves.png`` (mean normalised drop vs k per method, re-simulation and masking oracles):
  :mod:`aumann.studies.figures`;
* ``manifest.json`` (config, seeds, versions, wall time per stage), then ``report.html`` (one
  self-contained page: who, when, how sure, cost) and its plain-text twin ``report.md``
  (:mod:`aumann.studies.pages`).

The tables are required; each figure, each page and each section of the page is an optional part of the
report stage (:class:`ReportParts`): one that fails is recorded — ``manifest.json`` → ``report_failures``
and ``stages["report"]``, and a list at the top of ``report.md`` — and the rest is written (``strict``:
the first failure stops the study).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aumann.errors import StudyError
from aumann.io import (
    OUTPUTS_COMPLETE,
    check_outputs,
    check_stale,
    csv_text,
    journaled,
    recorded_outputs,
    remove_stale,
    settle_journal,
    write_text,
)
from aumann.studies.figures import FIGURES, write_plots
from aumann.studies.rows import REFERENCE_CV, rows
from aumann.studies.rundir import (
    REPORT_HTML,
    REPORT_MD,
    RunDir,
    StudyResult,
    dead_rows,
    failure_text,
    model_finished,
    rounded_values,
    transient_agents,
    zero_delta_v,
    zero_delta_v_text,
)
from aumann.studies.tables import (
    FAITHFULNESS_COLUMNS,
    extended_table,
    extra_columns,
    faithfulness_table,
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
    return csv_text(cols, ([r.get(c) for c in cols] for r in rows))


def to_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A GitHub Markdown table of ``rows``."""
    cols = list(columns or (rows[0].keys() if rows else []))
    if not cols:
        return "_(empty)_\n"
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def headline_markdown(rows: Sequence[dict[str, Any]], reference: str = REFERENCE_CV) -> str:
    """The paper-style table: mean ± std, "= ref" for the reference row (``reference``: the row named by
    :func:`~aumann.studies.rows.reference_row`), "–" where undefined."""
    out = ["| Method | Deletion AUC (re-sim) | Drop@5 % (re-sim) | Deletion AUC (masking) | Drop@5 % (masking) | "
           "τ vs Shapley | J_top vs Shapley |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = r["method"] == reference

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
        def one(v: Any) -> str:  # "–" where undefined (every φ tied, e.g. an indicator that never moved), as above
            return f"{v:.3f}" if isinstance(v, int | float) and math.isfinite(v) else "–"

        out.append(f"\nReference: {reference}. Noise ceiling (two runs of the reference, different seeds): "
                   f"τ = {one(ceil['kendall_tau_ceiling'])}, J = {one(ceil['jaccard_ceiling'])}.")
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
    """Write every table as CSV and Markdown (the study's, then the scenario analysis'); return them by name.

    An optional table this study has no rows for is removed when an earlier ``aumann run`` recorded writing it
    (:func:`written_tables`; the earlier manifest's ``outputs_sha256``): a file of your own of that name (or one
    changed since) is kept and is an :class:`~aumann.errors.OutputError` naming it (checked before any goes), since
    it would pass for this study's table."""
    tables, optional = study_tables(result)
    analysis = analysis_tables(result)
    clash = sorted(set(analysis) & set(tables))
    if clash:  # a scenario analysis' table would be written over the study's own (add_table refuses these names)
        raise StudyError(f"the scenario analysis' table(s) {clash} have the name of the study's own table(s); the "
                         "study's would be overwritten: rename them")
    tables.update(analysis)
    rundir = RunDir(out)
    rec = recorded_outputs(out, command="aumann run")
    stale = [rundir.table(name, ext) for name, rows_ in tables.items() if name in optional and not rows_
             for ext in ("csv", "md")]
    # a file of your own with the name of a table this run writes is not replaced (checked before any is written)
    check_outputs(out, [f"{name}.{ext}" for name, rows_ in tables.items() if name not in optional or rows_
                        for ext in ("csv", "md")], recorded=rec)
    for path in stale:  # not this study's: an earlier invocation's file would pass for it
        check_stale(path, within=out, recorded=rec.digests)
    for path in stale:
        remove_stale(path, within=out)  # each checked above
    for name, rows_ in tables.items():
        if name in optional and not rows_:
            continue
        cols = (*FAITHFULNESS_COLUMNS, *extra_columns(result)) if name == "faithfulness" else _columns(rows_)
        write_text(rundir.table(name), to_csv(rows_, cols))
        write_text(rundir.table(name, "md"), to_markdown(rows_, cols))
    return tables


#: the run directory's figures and pages: written (or removed) under the rule of the tables
def report_files(plots: bool = True) -> list[str]:
    """The figures and pages of ``aumann run``'s report stage (``plots``: whether figures are drawn; they are
    checked either way, since a run without them removes an earlier run's)."""
    return [*(name for name, _ in FIGURES), REPORT_HTML, REPORT_MD]


def check_report_files(out: Path, *, plots: bool = True) -> None:
    """Refuse, before the study starts, a file of your own (or a link or directory) in ``out`` with the name of a
    figure, page or headline table that ``aumann run`` writes: only a file an earlier ``aumann run`` recorded
    writing there (its manifest's or journal's ``outputs_sha256``) is replaced or removed."""
    always = [f"{name}.{ext}" for name in ("faithfulness", "faithfulness_extended") for ext in ("csv", "md")]
    check_outputs(out, [*always, *report_files(plots), "manifest.json"],
                  recorded=recorded_outputs(out, command="aumann run"), commands=("aumann run",))


def written_tables(out: Path, tables: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """``{file: SHA-256}`` of the table files in ``out`` (what the manifest records as this run's, so that a later
    run removes only these)."""
    from aumann.io import file_digests

    names = [f"{name}.{ext}" for name in tables for ext in ("csv", "md")]
    return file_digests(out, [n for n in names if (out / n).is_file() and not (out / n).is_symlink()])


def _present(out: Path, names: Sequence[str]) -> dict[str, str]:
    """``{name: SHA-256}`` of those of ``names`` that are files in ``out`` (what this run wrote there)."""
    from aumann.io import file_digests

    return file_digests(out, [n for n in names if (out / n).is_file() and not (out / n).is_symlink()])


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



@dataclass
class ReportParts:
    """The optional parts of the study's last stage, ``report``: each figure, each page of the report and each
    section of the page. A part that fails is recorded (``failures``: ``{"stage": "report: <part>", "status":
    "failed", "error", "message"}``, the form of :func:`~aumann.studies.rundir.stage_failures`' entries) and the
    stage goes on; with ``strict`` the first failure stops the study (a :class:`StudyError` naming it)."""

    strict: bool = False
    failures: list[dict[str, Any]] = field(default_factory=list)

    def attempt(self, part: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or ``None`` when it failed (recorded)."""
        try:
            return fn()
        except Exception as exc:
            if getattr(exc, "failed_stage", None) is not None:  # a part inside this one already stopped (strict)
                raise
            self.failures.append({"stage": f"{REPORT_STAGE}: {part}", "status": "failed", "error": type(exc).__name__,
                                  "message": " ".join(str(exc).split())[:500]})
            if self.strict:
                err = StudyError(f"stage {REPORT_STAGE!r} failed: {part}: {type(exc).__name__}: {exc}")
                err.failed_stage = REPORT_STAGE
                raise err from exc
            return None


REPORT_STAGE = "report"
"""The study's last stage: figures and pages (optional parts; the tables before them are required)."""


def write_pages(out: Path, parts: ReportParts, *, interactive: bool | None = None,
                plots: bool = True) -> dict[str, Path | None]:
    """``report.html`` and ``report.md`` as optional parts of the report stage: a section that fails is left out
    (a note says so), a page that fails is not written; ``report.md`` lists every part that did not finish.
    When the page cannot be built at all, a short ``report.md`` says so and why."""
    from aumann.studies.page import render_html, render_markdown
    from aumann.studies.pages import build_document
    from aumann.studies.study_page import report_failures_section

    doc = parts.attempt("pages (report.html, report.md)", lambda: build_document(
        out, interactive=interactive, plots=plots, parts=parts))
    if doc is None:
        html = None
        md = parts.attempt("page report.md", lambda: write_text(out / REPORT_MD, unbuilt_report(out, parts.failures)))
    else:
        html = parts.attempt("page report.html", lambda: write_text(out / REPORT_HTML, render_html(doc)))
        report_failures_section(doc, parts.failures)  # the page's list again, with what rendering the HTML added
        md = parts.attempt("page report.md", lambda: write_text(out / REPORT_MD, render_markdown(doc)))
    for name, written in ((REPORT_HTML, html), (REPORT_MD, md)):
        if written is None:  # an earlier invocation's page would pass for this one's
            remove_stale(out / name, within=out)
    return {"html": html, "md": md}


def unbuilt_report(out: Path, failures: Sequence[dict[str, Any]]) -> str:
    """The ``report.md`` of a run directory whose page could not be built: what failed, and where the results are.
    The folder's name is shown literally (:func:`~aumann.studies.page.md_literal`), the failures escaped."""
    from aumann.studies.page import md_code, md_escape, md_literal

    lines = [f"# {md_literal(out.name)}: the report could not be built", "",
             "The study finished: its run records (`runs/`) and tables (`faithfulness.csv`, ...) are in this "
             "directory. These parts of the report stage did not finish:", ""]
    lines += [f"* {md_escape(failure_text(f))}" for f in failures]
    lines += ["", f"{md_code(f'aumann report {out}')} builds the report again from the files."]
    return "\n".join(lines) + "\n"


def write_outputs(result: StudyResult, out: Path, *, command: str, seconds: float, description: str = "",
                  baseline: str = "", plots: bool = True, config: dict[str, Any] | None = None, seeds: Any = None,
                  extra: dict[str, Any] | None = None, interactive: bool | None = None,
                  strict: bool | None = None) -> dict[str, Any]:
    """The study's last stage, ``report``: tables, PNG plots, ``manifest.json`` and the reports (``report.html``,
    ``report.md``) of a finished study.

    The tables are written first (a failure there stops the study, like a required stage's); each figure and
    each page (and each section of the page) is then an optional part: one that fails is recorded — in
    ``manifest.json`` (``report_failures``; ``stages["report"]``) and in ``report.md`` — and the rest goes on.
    ``strict`` (``None``: the config's ``study.strict``) makes the first failure fatal (a :class:`StudyError`).

    The manifest marks the directory finished (``report_kind = "faithfulness"``) and records the
    wall time per stage (``extra["stage_seconds"]`` plus "tables and plots" measured here); the
    reports are then built from the directory alone (:func:`aumann.studies.pages.render_report`), so
    ``aumann report`` rewrites them identically later.
    """
    out = Path(out)
    if strict is None:
        strict = bool(((config or {}).get("study") or {}).get("strict", False))
    parts = ReportParts(strict=strict)
    t0 = time.perf_counter()
    with journaled(out):  # each output recorded before it is in place: interrupted, the next run knows it as ours
        return _write_outputs(result, out, parts, t0, command=command, seconds=seconds, description=description,
                              baseline=baseline, plots=plots, config=config, seeds=seeds, extra=extra,
                              interactive=interactive)


def _write_outputs(result: StudyResult, out: Path, parts: ReportParts, t0: float, *, command: str, seconds: float,
                   description: str, baseline: str, plots: bool, config: dict[str, Any] | None, seeds: Any,
                   extra: dict[str, Any] | None, interactive: bool | None) -> dict[str, Any]:
    from aumann.manifest import record_outputs, write_manifest

    # figures and pages are replaced or removed only when an earlier aumann run recorded writing them, like tables
    check_outputs(out, [*report_files(plots), "manifest.json"], recorded=recorded_outputs(out, command="aumann run"),
                  commands=("aumann run",))  # (another command's folder: refused, as check_report_files does)
    for page in (REPORT_HTML, REPORT_MD):  # an earlier invocation's page, were this stage interrupted, would pass
        remove_stale(out / page, within=out)  # for one of the tables and manifest written below (checked above)
    tables = write_tables(result, out)
    outputs = written_tables(out, tables)
    pngs = write_plots(result, out, parts=parts) if plots else []
    if not plots:  # an earlier invocation's figures would be linked from report.md as this one's
        for name, _ in FIGURES:
            remove_stale(RunDir(out).figure(name), within=out)  # (checked above)
    outputs.update(_present(out, [name for name, _ in FIGURES]))
    extra = dict(extra or {})
    stages = dict(extra.pop("stage_seconds", None) or {})
    stages["tables and plots"] = time.perf_counter() - t0
    own = study_tables(result)[0]
    summary = stage_summary(result.records)
    digests = {rec.get("digest") for rec in result.records}
    # what the runs computed: the report refuses runs of another config left by a later invocation that did not finish
    digest = {"config_digest": digests.pop()} if len(digests) == 1 and None not in digests else {}
    # runs whose deletion forks were evaluated in full, not from the pooled sums, and why (absent when none)
    fallbacks = {"pooled_fallbacks": result.pooled_fallbacks()} if result.pooled_fallbacks() else {}
    # runs whose control-variate row had no control (an indicator without a gradient), and why (absent when none)
    if result.control_fallbacks():
        fallbacks["control_fallbacks"] = result.control_fallbacks()
    # runs with births or deaths: the living set z⁰_t* was evaluated over, per run (absent when nobody dies)
    if dead_rows(result.records):
        fallbacks["dead_rows"] = dead_rows(result.records)
    # runs whose model set running = False and was stepped on; runs with Δv = 0 at t* (absent when none)
    if model_finished(result.records):
        fallbacks["model_finished"] = model_finished(result.records)
    if transient_agents(result.records):  # agents present at no capture (no row, no φ), per run (absent when none)
        fallbacks["transient_agents"] = transient_agents(result.records)
    if rounded_values(result.records):  # recorded integers float64 (float32) changed, per run (absent when none)
        fallbacks["rounded_values"] = rounded_values(result.records)
    if zero_delta_v(result.records):
        fallbacks["zero_delta_v"] = [{**d, "why": zero_delta_v_text(d)} for d in zero_delta_v(result.records)]

    def manifest() -> None:
        outputs.update(_present(out, [REPORT_HTML, REPORT_MD]))
        write_manifest(out, command, config, seeds=seeds, extra={OUTPUTS_COMPLETE: True,
            "analysis_tables": [k for k in tables if k not in own],
            "stages": {**summary, REPORT_STAGE: {"failed" if parts.failures else "ok": 1}},
            "stage_failures": result.stage_failures(), "report_failures": list(parts.failures),
            "report_kind": "faithfulness", "scenario": result.scenario, "description": description,
            "baseline_description": baseline, "seconds": seconds + stages["tables and plots"],
            "stage_seconds": stages, "resumed_runs": result.resumed, "computed_runs": result.computed,
            "runs": len(result.records), "plots": plots, "outputs_sha256": outputs, **digest, **fallbacks,
            **extra})

    manifest()
    before = len(parts.failures)
    reports = write_pages(out, parts, interactive=interactive, plots=plots)
    if len(parts.failures) != before:  # a section or page failed: the manifest says so too
        manifest()
    else:  # the pages' SHA-256 (the rest of the manifest, which the pages show, stays as they show it)
        record_outputs(out, _present(out, [REPORT_HTML, REPORT_MD]))
    settle_journal(out)
    return {"tables": tables, "plots": pngs, "report": reports["md"], "html": reports["html"],
            "failures": list(parts.failures)}


__all__ = [
    "REPORT_STAGE",
    "ReportParts",
    "check_report_files",
    "headline_markdown",
    "report_files",
    "stage_summary",
    "study_tables",
    "to_csv",
    "to_markdown",
    "unbuilt_report",
    "write_outputs",
    "write_pages",
    "write_plots",
    "write_tables",
]
