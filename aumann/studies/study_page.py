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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import ConfigError
from aumann.studies.charts import Charts
from aumann.studies.named import NamedList
from aumann.studies.page import (
    Card,
    Cards,
    Document,
    KeyValues,
    Note,
    Section,
    Text,
    check_blocks,
    fmt,
    literal,
    seconds_text,
)
from aumann.studies.rows import rows
from aumann.studies.rundir import control_fallbacks, failure_text, pooled_fallbacks
from aumann.studies.sections import (
    above_ceiling,
    calls_text,
    driver_card,
    llm_blocks,
    merged_table,
    read_csv,
    timing_table,
)
from aumann.studies.study_how_sure import failures_blocks, how_sure_section
from aumann.studies.study_page_data import StudyPage
from aumann.studies.study_who_when import when_section, who_section


@dataclass(frozen=True)
class ReportSection:
    """One section of the page: its anchor ``id``, ``title``, a one-line ``lead`` and ``build(page) -> blocks``."""

    id: str
    title: str
    build: Callable[[StudyPage], list[Any]]
    lead: str = ""


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
            (f"evaluations of v for the reference, {page.reference['method']} (per run)",
             fmt(float(np.mean(n_evals))) if n_evals else "–"),
            ("deletion forks (per run)", fmt(float(np.mean(forks))) if forks else "–")]
    for row in rows():
        comp += row.cost_rows(recs)
    for f in control_fallbacks(recs):
        comp.append((f"run {f['run']}: sampled Shapley with the control variate ran without it", f["reason"]))
    full = pooled_fallbacks(recs)
    if full:  # the forks' values are f itself, each fork evaluated over every agent: say why the sums were not used
        comp.append(("deletion forks evaluated in full, not from the pooled sums",
                     "; ".join(f"run {f['run']}: {f['reason']}" for f in full)))
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
    tot0 = float(a0.delta_v.sum())
    row = {r["method"]: r for r in page.faith}
    ours, rnd = row.get("aumann_shapley", {}), row.get("random", {})
    cards = [driver_card("Top driver (run 0)", a0.agent_ids, phi0, tot0),
             Card("When (run 0)", f"t* = {ts0}", f"f(z_t*) = {fmt(float(rec0['f_t_star']))}; Φ_t* = "
                  f"{fmt(float(a0.by_step()[ts0]))}")]
    if "kendall_tau" in ours:
        over = above_ceiling(ours, ours, cols=("kendall_tau",))
        cards.append(Card("τ vs sampled Shapley", fmt(ours["kendall_tau"], 3),
                          f"reference {page.reference['method']}; noise ceiling "
                          f"{fmt(ours.get('kendall_tau_ceiling'), 3)}"
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
_SECTIONS: NamedList[ReportSection] = NamedList([
    ReportSection("who", "Who drove it", who_section, lead="top agents by Φ_i, per run"),
    ReportSection("when", "When did it turn", when_section, lead="f(z_t), Φ_t and the agent × step attribution"),
    ReportSection("how-sure", "How sure", how_sure_section,
                  lead="efficiency, provenance, faithfulness, agreement, smoothing"),
    ReportSection("analysis", "Scenario analysis", analysis_section,
                  lead="the scenario's own tables beside the study"),
    ReportSection("cost", "Cost", cost_section, lead="LLM usage and wall time"),
], key="id")


def register_section(section: ReportSection, *, before: str | None = "cost") -> ReportSection:
    """Add a section to the page of every ``aumann run`` directory (before the section ``before``, default
    "Cost"; ``None``: last); registering an id again replaces that section."""
    if not isinstance(section, ReportSection) or not section.id or not callable(section.build):
        raise ConfigError(f"register_section needs a ReportSection(id, title, build); got {section!r}")
    if not _SECTIONS.replace(section):
        _SECTIONS.insert(_SECTIONS.position(before), section)
    return section


def unregister_section(section_id: str) -> None:
    """Remove a section by its id."""
    _SECTIONS.drop(section_id)


def sections() -> tuple[ReportSection, ...]:
    """The registered sections, in page order."""
    return tuple(_SECTIONS)


def report_failures(page: StudyPage, parts: Any = None) -> list[dict[str, Any]]:
    """The parts of the report stage that did not finish: this build's (``parts.failures``) and the figures the
    manifest records as failed whose PNG is still missing."""
    out = list(parts.failures) if parts is not None else []
    seen = {f.get("stage") for f in out}
    for f in page.manifest.get("report_failures") or []:
        stage = str(f.get("stage", "")) if isinstance(f, dict) else ""
        name = stage.removeprefix("report: figure ")
        if stage not in seen and name != stage and not page.d.figure(name).is_file():
            out.append(f)
    return out


def report_failures_section(doc: Document, failures: Sequence[dict[str, Any]]) -> None:
    """Put the list of report parts that did not finish right after the cards (replacing an earlier list)."""
    doc.sections[:] = [s for s in doc.sections if s.id != "report-failures"]
    if not failures:
        return
    blocks: list[Any] = [Text("These parts of the report stage failed; the run records and tables are complete "
                              "(`aumann run --strict` stops at the first failure instead):"),
                         *[Note(failure_text(f), "skipped") for f in failures]]
    at = 1 if doc.sections and doc.sections[0].id == "cards" else 0
    doc.sections.insert(at, Section("report-failures", "Report parts that did not finish", blocks,
                                    lead="figures, pages or sections"))


def _built(part: str, build: Callable[[StudyPage], list[Any]], page: StudyPage, parts: Any) -> list[Any]:
    """``build(page)``; with ``parts`` (the report stage) a failure is recorded and a note stands in its place."""
    def checked() -> list[Any]:
        return check_blocks(build(page), f"report {part}")

    if parts is None:
        return checked()
    before = len(parts.failures)
    blocks = parts.attempt(part, checked)
    if len(parts.failures) > before:
        return [Note(f"This part of the page could not be built: {failure_text(parts.failures[-1])}", "skipped")]
    return blocks


def faithfulness_document(d: Path, manifest: dict[str, Any], charts: Charts, *, top: int = 20,
                          plots: bool = True, parts: Any = None) -> Document:
    """The page of an ``aumann run`` directory: the cards, then every registered section that has blocks.

    ``parts`` (:class:`aumann.studies.report.ReportParts`, the report stage of ``aumann run``): a section that
    fails is recorded there and a note stands in its place; without, the failure propagates."""
    page = StudyPage.load(d, manifest, charts, top=top, plots=plots)
    scenario = manifest.get("scenario") or (page.faith or [{}])[0].get("scenario", "?")
    built = [Section("cards", "At a glance", _built("section cards", lambda p: [Cards(_cards(p))], page, parts))]
    for s in _SECTIONS:
        blocks = _built(f"section {s.id}", s.build, page, parts)
        if blocks:
            built.append(Section(s.id, s.title, blocks, lead=s.lead))
    desc = manifest.get("description") or ""
    doc = Document(
        title=f"{literal(scenario)}: who drove it, and when",
        subtitle=(literal(desc) + " " if desc else "") + f"N = {page.ats[0].N:,} agents, T = {page.ats[0].T} steps, "
                                                 f"{len(page.recs)} run(s).",
        sections=built, synthetic=page.synthetic,
        meta=[("command", f"`{literal(manifest.get('command'))}`"), ("created", manifest.get("created")),
              ("baseline action", literal(manifest.get("baseline_description") or "–")),
              *([("decisions", page.manifest["policy"])] if page.manifest.get("policy") else [])])
    report_failures_section(doc, report_failures(page, parts))
    return doc


__all__ = ["ReportSection", "StudyPage", "analysis_section", "cost_section", "failures_blocks",
           "faithfulness_document", "how_sure_section", "register_section", "report_failures",
           "report_failures_section", "sections", "unregister_section", "when_section", "who_section"]
