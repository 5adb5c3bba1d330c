"""The parts of an ``aumann attribute --trace`` page that a saved panel does not have.

* what was read: the format, files, records, events used, what was skipped (by reason, with the first
  locations) or filtered, the spec and the alive rule's effect;
* the deletion study, the masking game only, with the reason (a log cannot be re-simulated): the
  deletion curve of the Aumann–Shapley ordering against random orderings, ``deletion_auc`` and
  ``drop_at_k`` (``deletion_masking.json``);
* for real people, a note that agents are opaque indices with activity tiers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aumann.studies.charts import Charts, Line, short_label
from aumann.studies.page import Card, Details, KeyValues, Note, Table, Text, Verbatim, fmt, literal
from aumann.studies.rundir import stored_integer_text
from aumann.studies.sections import read_json


def trace_cards(d: Path, manifest: dict[str, Any]) -> list[Card]:
    dele = manifest.get("deletion")
    tr = manifest.get("trace") or {}
    cards = [Card("Trace", f"{tr.get('format', '?')}: {int(tr.get('records') or 0):,} records",
                  f"{int(tr.get('n_skipped') or 0):,} skipped · {int(tr.get('agents') or 0):,} agents × "
                  f"{int(tr.get('steps') or 0)} steps")]
    if dele:
        cards.append(Card("Deletion AUC (masking)", fmt(dele.get("deletion_auc"), 3),
                          f"random orderings: {fmt(dele.get('deletion_auc_random'), 3)}"))
    return cards


def trace_who_note(manifest: dict[str, Any]) -> list[Any]:
    if not manifest.get("real_people"):
        return []
    return [Note("This trace records real people: agents are opaque indices 0 … N−1 (real ids leave only with "
                 "`--export-identifiers`), grouped into activity tiers whose shares R_G are shown below.", "info")]


def _rounded_fields(tr: dict[str, Any]) -> list[tuple[str, str]]:
    """The line of a trace whose integer field values float64 changed (``trace_report.json``'s ``rounded_values``
    and ``rounded_largest``); none when it counted none."""
    counts, largest = tr.get("rounded_values"), tr.get("rounded_largest")
    if not isinstance(counts, dict):
        return []
    largest = largest if isinstance(largest, dict) else {}
    said = []
    for f, n in sorted(counts.items()):
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            big = stored_integer_text(largest.get(f))
            said.append(f"field {literal(repr(f))}: {n:,} value(s)" + (f", the largest {big}" if big else ""))
    if not said:
        return []
    return [("integers rounded", "; ".join(said) + ": integer values past ±2⁵³, which float64 cannot all hold, read as "
             "the nearest double (f and φ saw those) (trace_report.json, rounded_values)")]


def trace_rate(manifest: dict[str, Any]) -> list[Any]:
    """The "Cost" block of a trace run: how fast the trace was read (wall-clock, so not under "How sure", which
    holds only what the trace and the flags determine)."""
    tr = manifest.get("trace") or {}
    return [KeyValues([("read at", f"{float(tr.get('events_per_second') or 0):,.0f} records/s")],
                      caption="Reading the trace")]


def trace_blocks(d: Path, manifest: dict[str, Any], charts: Charts, *, plots: bool = True,
                 synthetic: bool = False) -> list[Any]:
    """The "How sure" blocks of a trace run: what was read, and the masking deletion study."""
    tr = manifest.get("trace") or {}
    blocks: list[Any] = []
    srcs = tr.get("sources") or []
    items: list[tuple[str, Any]] = [
        ("format", tr.get("format")), ("spec", literal(tr.get("spec_source"))),
        ("files", f"{len(srcs)}: {literal(srcs[0])}" + (" …" if len(srcs) > 1 else "") if srcs else "–"),
        ("records read", f"{int(tr.get('records') or 0):,}"),
        ("events used", f"{int(tr.get('events') or 0):,} ({int(tr.get('events_in_features') or 0):,} feed features)"),
        ("skipped", f"{int(tr.get('n_skipped') or 0):,}"
                    + (f" (and {int(tr['n_edges_skipped']):,} edge row(s))" if tr.get("n_edges_skipped") else "")),
        ("filtered", f"{sum((tr.get('filtered') or {}).values()):,}"),
        ("panel", f"{tr.get('steps')} steps × {int(tr.get('agents') or 0):,} agents × "
                  f"{len(tr.get('features') or [])} features"),
        ("alive", f"{100 * float(tr.get('alive_fraction') or 0):.1f}% of agent-steps")]  # its rate: trace_rate
    if tr.get("merged_ids"):
        items.insert(6, ("ids merged", f"{int(tr['merged_ids']):,} written both as a number and as text (1 and "
                                       "\"1\"), each read as one agent"))
    if tr.get("blob_ids"):
        items.insert(6, ("binary ids", f"{int(tr['blob_ids']):,} record(s) give the agent id as bytes that are not "
                                       "UTF-8 text: each such id is an agent labelled by its bytes in hex, X'FF01'"))
    if tr.get("blob_actions"):
        items.insert(6, ("binary actions", f"{int(tr['blob_actions']):,} record(s) give the action as bytes that are "
                                           "not UTF-8 text: each such action is labelled by its bytes in hex, X'FF01'"))
    items += _rounded_fields(tr)
    blocks.append(KeyValues(items, caption="What the trace held"))
    rows = [["skipped", literal(r), n, literal("; ".join((tr.get("skipped_at") or {}).get(r, [])[:3]))]
            for r, n in sorted((tr.get("skipped") or {}).items(), key=lambda kv: -kv[1])]
    rows += [["skipped edge row", literal(r), n, literal("; ".join((tr.get("edges_skipped_at") or {}).get(r, [])[:3]))]
             for r, n in sorted((tr.get("edges_skipped") or {}).items(), key=lambda kv: -kv[1])]
    rows += [["filtered", literal(r), n, ""]  # ('<field> not in where': a column name of the user's file)
             for r, n in sorted((tr.get("filtered") or {}).items(), key=lambda kv: -kv[1])]
    rows += [["missing value", literal(f), n, ""] for f, n in sorted((tr.get("missing_values") or {}).items())]
    if rows:
        blocks.append(Table(["", "reason", "records", "first locations"], rows, caption="Records not used as read",
                            id="trace-skips"))
    else:
        blocks.append(Note("Every record was used: nothing skipped, filtered or missing.", "info"))
    for f in tr.get("valueless_fields") or []:
        blocks.append(Note(f"Field `{literal(f)}` holds no value in any event used: the features built from it are 0 "
                           "throughout (is the field path right?).", "warn"))
    dele_path = d / "deletion_masking.json"
    if not manifest.get("deletion"):  # this run recorded no deletion study: a file of that name is not its result
        blocks.append(Note("No deletion study (`--no-deletion`); a trace allows the masking game only: a log cannot "
                           "be re-simulated.", "skipped"))
        return blocks
    changed = _changed_since(d, manifest, "deletion_masking.json")
    if changed:
        blocks.append(Note(f"The deletion study of this run is not shown: {changed}.", "warn"))
        return blocks
    study = read_json(dele_path, "deletion study")
    ours, rnd = study.get("aumann_shapley") or {}, study.get("random") or {}
    blocks.append(Text(f"**Deletion: the masking game only.** {study.get('why', '')} At t* = step "
                       f"{study.get('step')} the top k of {study.get('living')} living agents by φ at t* are deleted "
                       f"for k = 1 … {study.get('k_del')}; random: the mean over {study.get('orderings')} random "
                       "orderings."))
    k = study.get("k_drop")
    blocks.append(Table(["ordering", "deletion_auc", f"drop_at_{k} (%)"],
                        [["Aumann–Shapley (φ at t*)", ours.get("deletion_auc"), ours.get("drop_at_k")],
                         ["random", rnd.get("deletion_auc"), rnd.get("drop_at_k")]],
                        caption=f"Masking deletion at t* (f = {fmt(study.get('f'))})", id="deletion-masking"))
    if plots and ours.get("relative_drop"):
        ks = list(range(1, len(ours["relative_drop"]) + 1))

        def ys(v: list[Any]) -> list[float]:
            return [float("nan") if x is None else float(x) for x in v]

        blocks.append(charts.lines("Masking deletion curve at t*", [
            Line("Aumann–Shapley", ks, ys(ours["relative_drop"]), width=2.2, markers=len(ks) <= 40),
            Line("random", ks, ys(rnd.get("relative_drop") or []), dash=True, color="#444444")],
            xlabel="agents deleted (k)", ylabel="(f − f_k) / f", integer_x=True, synthetic=synthetic,
            caption="Relative drop of the indicator at t* as the top-k agents' recorded features are masked to the "
                    "baseline (higher and earlier: the ranking found the agents that carry f)."))
    deleted = ours.get("deleted") or []
    if deleted:
        blocks.append(Details("Agents deleted, in order", [Text(Verbatim(", ".join(short_label(x) for x in deleted[:50])
                                                                         + (" …" if len(deleted) > 50 else "")))]))
    return blocks


def _changed_since(d: Path, manifest: dict[str, Any], name: str) -> str | None:
    """Why the file ``name`` of ``d`` is not the one the run recorded writing (``outputs_sha256`` in its manifest:
    missing, or another file), else ``None`` (it is, or the manifest records no checksum of it):
    :func:`aumann.io.output_check`, the one answer to "did aumann write this file, unchanged?"."""
    from aumann.io import output_check

    ours = manifest.get("outputs_sha256")
    check = output_check(d / name, within=d, recorded=ours if isinstance(ours, dict) else {})
    if check.state in ("link", "directory"):
        return f"{name} is missing"
    return None if check.state in ("ours", "unrecorded") else check.reason


__all__ = ["trace_blocks", "trace_cards", "trace_rate", "trace_who_note"]
