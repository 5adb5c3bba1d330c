"""Building blocks shared by the report pages (:mod:`aumann.studies.pages`, :mod:`aumann.studies.crossscale.page`).

Reading a run directory's files with typed errors (:func:`read_json`, :func:`read_csv`), the "who"
table (:func:`who_table`: top agents by signed Φ_i, one agent per row, the id alone in its cell),
group shares R_G, concentration, generic tables with "mean ± std" cells (:func:`merged_table`), the
LLM-usage and wall-time parts of the cost section.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import PathEscapeError, ReportError
from aumann.io import read_csv_cell
from aumann.studies.charts import short_label
from aumann.studies.page import Card, Cell, KeyValues, Note, Table, Text, Verbatim, fmt, literal, seconds_text

# --------------------------------------------------------------------------- reading run directories


_ROOT: ContextVar[Path | None] = ContextVar("aumann_report_root", default=None)
#: largest table a report reads back (a run directory's CSVs are small; this bounds a planted one)
MAX_TABLE_BYTES = 256 * 2**20


@contextmanager
def reading_within(run_dir: str | Path) -> Iterator[None]:
    """Every file the report readers below open inside the block is confined to ``run_dir``
    (:func:`aumann.io.confine`: no ``..``, no symbolic link leading out of it)."""
    token = _ROOT.set(Path(run_dir))
    try:
        yield
    finally:
        _ROOT.reset(token)


def read_json(path: Path, what: str, schema: Any = None) -> dict[str, Any]:
    """A JSON object file of a run directory (manifest, summary, run record, cell), or :class:`ReportError`
    naming it: missing, unreadable, leading outside the run directory, over the size/depth limits, not JSON,
    not an object, or not fitting ``schema`` (:mod:`aumann.records`; default the rule all records share)."""
    from aumann.io import read_json as read_bounded
    from aumann.records import OutsideRecord, check

    if not path.is_file() and not path.is_symlink():
        raise ReportError(f"{what} {str(path)!r} is missing: not a finished run directory")
    try:
        data = read_bounded(path, error=ReportError, what=what, within=_ROOT.get(), object_only=True)
    except PathEscapeError as exc:
        raise ReportError(str(exc)) from exc
    return check(schema or OutsideRecord, data, error=ReportError, what=f"{what} {str(path)!r}")


def _number(text: str) -> Any:
    if text == "":
        return math.nan
    try:
        v = float(text)
    except ValueError:
        return read_csv_cell(text)  # a neutralised text cell ('=...) reads back as written
    return int(v) if v.is_integer() and "." not in text and "e" not in text.lower() else v


def read_csv(path: Path) -> list[dict[str, Any]]:
    """A CSV table (numbers parsed, empty cells NaN); ``[]`` when the file is absent or empty."""
    from aumann.io import open_read

    if not path.is_file() and not path.is_symlink():
        return []
    try:
        with open_read(path, within=_ROOT.get(), what="table", error=ReportError) as fh:
            raw = fh.read(MAX_TABLE_BYTES + 1)
        if len(raw) > MAX_TABLE_BYTES:
            raise ReportError(f"table {str(path)!r} is over {MAX_TABLE_BYTES:,} bytes; not one aumann wrote")
        text = raw.decode("utf-8")
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text, newline=""))]
    except PathEscapeError as exc:
        raise ReportError(str(exc)) from exc
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ReportError(f"table {str(path)!r} cannot be read ({type(exc).__name__}: {exc})") from exc


# --------------------------------------------------------------------------- shared pieces


def top_order(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest values, descending (ties: lower position first)."""
    from aumann.attribution.metrics import largest_first

    values = np.asarray(values, dtype=np.float64)
    k = min(int(k), values.shape[0])
    return largest_first(values, k) if k > 0 else np.zeros(0, dtype=np.intp)


def id_cell(v: Any) -> Cell:
    """An agent id as a table cell (and the top-driver card's text): shown shortened in the middle past
    :data:`~aumann.studies.charts.LABEL_CHARS` characters (an id of 10⁵ characters filled the page with one card),
    sorted by the whole id; the CSVs (``top_agents.csv``, the attribution file) keep every id whole."""
    v = v.item() if hasattr(v, "item") else v
    return Cell(short_label(v), sort=v if isinstance(v, int | float) else str(v), cls="id")


def signed_cell(v: float, scale: float) -> Cell:
    return Cell(fmt(float(v)), sort=float(v), bar=(float(v) / scale) if scale > 0 else None)


def pct_cell(v: float | None) -> Cell:
    if v is None or not math.isfinite(v):
        return Cell("–", sort=None)
    return Cell(pct_text(v), sort=float(v))


def driver_card(title: str, agent_ids: Sequence[Any], phi: np.ndarray, total: float) -> Card:
    """The "top driver" card: the agent with the largest signed Φ_i, its Φ and its share of Σ_t Δv_t. When every
    Φ_i is 0 (nothing changed, e.g. every agent abstained) no agent drove anything, and the card says so."""
    phi = np.asarray(phi, dtype=np.float64)
    if not np.any(phi):
        return Card(title, "none", f"every Φ_i = 0 (Σ_t Δv_t = {fmt(float(total))})")
    best = int(top_order(phi, 1)[0])
    return Card(title, Verbatim(f"agent {id_cell(agent_ids[best]).text}"),
                f"Φ = {fmt(float(phi[best]))}" + (f", {pct_text(phi[best] / total)} of Σ_t Δv_t" if total else ""))


def pct_text(v: float) -> str:
    """A share as a percentage: one decimal, or two significant digits below 0.1 % (N = 10⁶ agents)."""
    p = 100 * float(v)
    text = f"{p:.1f}%" if abs(p) >= 0.1 or p == 0 else f"{p:.2g}%"
    return text.replace("-", "−")


def mean_std_cell(v: Any, s: Any) -> Cell:
    """One "mean ± std" cell: "–" alone where the mean is undefined (NaN or missing: a ranking-only method's
    Kendall τ), the mean alone where the std is."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return Cell("–", sort=None)
    sd = "" if s is None or (isinstance(s, float) and math.isnan(s)) else f" ± {fmt(s, 2)}"
    return Cell(f"{fmt(v)}{sd}", sort=float(v))


def merged_table(rows: Sequence[dict[str, Any]], *, caption: str = "", drop: Sequence[str] = ("scenario",),
                 id: str = "") -> Table:
    """Every column of ``rows``; a column ``c`` with a ``c_std`` companion becomes one "mean ± std" cell."""
    cols = list(rows[0].keys()) if rows else []
    cols = [c for c in cols if not (c in drop and len({str(r.get(c)) for r in rows}) == 1)]
    shown = [c for c in cols if not (c.endswith("_std") and c[:-4] in cols)]
    out = []
    for r in rows:
        line = []
        for c in shown:
            v = r.get(c)
            if f"{c}_std" in cols and isinstance(v, int | float):
                line.append(mean_std_cell(v, r.get(f"{c}_std")))
            else:
                line.append(v)
        out.append(line)
    return Table([c if f"{c}_std" not in cols else f"{c} (mean ± std)" for c in shown], out, caption=caption, id=id)


def _usage_label(key: str) -> str:
    """An ``llm_usage`` key as a label: ``latency_p50_s`` → "latency p50" (its value is shown with its own unit,
    "420 ms"; the key's "_s" read as "latency p50 s: 420 ms"), ``cost_usd`` → "cost" (shown as "$0.5678")."""
    for suffix in ("_s", "_usd"):
        if key.endswith(suffix) and key.startswith(("latency", "cost")):
            key = key[: -len(suffix)]
    return key.replace("_", " ")


def _offline_policy_decided(manifest: dict[str, Any]) -> bool:
    """Whether the run of ``manifest`` had its decisions made by the offline policy: ``backend`` is ``"offline"``
    (or missing), or ``llm`` is what ``aumann run`` records when no LLM backend was built -- also under a registered
    backend whose factory returned ``None`` (:func:`~aumann.simulators.llm.registry.offline_policy_decides`; its
    ``backend`` is the name given, and its report said "0 LLM request(s) sent ... backend `nothing`")."""
    backend = str(manifest.get("backend", "offline"))
    llm = manifest.get("llm")
    return backend in ("offline", "None", "") or (isinstance(llm, dict) and llm.get("backend") == "offline")


def llm_blocks(manifest: dict[str, Any], *, offline_reason: str) -> tuple[list[Any], str]:
    """Blocks for the LLM part of the cost section, and the card text."""
    usage = manifest.get("llm_usage")
    backend = str(manifest.get("backend", "offline"))
    offline = _offline_policy_decided(manifest)
    if isinstance(usage, dict) and usage:
        calls = int(usage.get("calls", 0) or 0) + int(usage.get("fork_calls", 0) or 0)
        cost = usage.get("cost_usd")
        toks = int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("completion_tokens", 0) or 0)
        cost_txt = f"${float(cost):,.4f}" if isinstance(cost, int | float) else "unknown (no price for this model)"
        items = [(_usage_label(k), (f"${float(v):,.4f}" if k == "cost_usd" and isinstance(v, int | float) else
                                    (seconds_text(v) if k.startswith("latency") and isinstance(v, int | float)
                                     else v))) for k, v in usage.items()]
        table = KeyValues(items, caption="LLM usage (manifest.json → llm_usage)")
        if offline and calls == 0:
            decisions = int(usage.get("decisions", 0) or 0) + int(usage.get("fork_decisions", 0) or 0)
            hits = int(usage.get("cache_hits", 0) or 0)  # an offline scenario may memoise identical requests
            served = f" {hits:,} of them were served from a cache of identical earlier requests." if hits else ""
            return [Text(f"**Offline: 0 LLM calls, {hits:,} cache hits, {toks:,} tokens, estimated cost $0.00.** "
                         f"{offline_reason} The offline policy made {decisions:,} decision(s) in Python.{served}"),
                    table], "offline · $0"
        text = (f"{calls:,} LLM request(s) sent ({int(usage.get('cache_hits', 0) or 0):,} decisions served from the "
                f"response cache), {toks:,} tokens, estimated cost {cost_txt}; backend `{backend}`.")
        info = manifest.get("llm") if isinstance(manifest.get("llm"), dict) else {}
        if info.get("model"):
            endpoints = ", ".join(str(e) for e in info.get("endpoints") or [])
            text += (f" Model `{info['model']}`" + (f" at {endpoints}" if endpoints else "")
                     + (f"; structured output `{info['structured_output']}`" if info.get("structured_output") else "")
                     + (f"; concurrency {info['concurrency']}" if info.get("concurrency") else "") + ".")
        if info.get("price_note"):
            text += f" Cost: {info['price_note']}."
        if info.get("invocations"):
            text += (f" Totals over {int(info['invocations'])} invocation(s) in this run directory (a resumed run adds "
                     "to what earlier ones spent; see `llm-usage.json`).")
        blocks, card = reliability_blocks(manifest)
        return [*blocks, Text(text), table], card or f"{calls:,} calls · " \
            f"{cost_txt if isinstance(cost, int | float) else '$?'}"
    if not offline:
        return [Note(f"LLM usage was not recorded for backend `{backend}` (no `llm_usage` in manifest.json).",
                     "warn")], "not recorded"
    return [Text(f"**Offline: 0 LLM calls, 0 cache hits, 0 tokens, estimated cost $0.00.** {offline_reason}")], \
        "offline · $0"


def abstention_text(described: Any) -> str:
    """What an abstention did in the run (the scenario's ``abstention_description``, in ``llm_reliability``)."""
    if isinstance(described, str) and described.strip():
        return described.strip()
    return ("what the scenario's code does with a decision that came back as MalformedResponseError; the scenario "
            "gave no abstention_description")


def reliability_blocks(manifest: dict[str, Any]) -> tuple[list[Any], str]:
    """The invalid-decision account of an LLM run (``manifest.json`` → ``llm_reliability``): a line, and a
    warning marking the run unreliable when the share of abstentions passed the configured threshold."""
    rel = manifest.get("llm_reliability")
    if not isinstance(rel, dict):
        return [], ""
    bad = int(rel.get("invalid_decisions", 0) or 0)
    total = int(rel.get("decisions_asked", 0) or 0)
    rate = float(rel.get("invalid_rate", 0.0) or 0.0)
    limit = float(rel.get("max_invalid_rate", 0.2) or 0.0)
    what = abstention_text(rel.get("abstention"))
    line = (f"Invalid decisions: {bad:,} of {total:,} ({rate:.1%}) had no usable reply after a varied retry and were "
            f"recorded as abstentions ({what}); the replies are kept (`aumann llm show RUN_DIR --invalid`).")
    if rel.get("unreliable"):
        return [Note(f"UNRELIABLE RUN: {rate:.1%} of the LLM decisions were invalid, above the threshold "
                     f"{limit:.0%} (llm.max_invalid_rate): the attribution describes the run these abstentions "
                     f"made. " + line, "warn")], f"UNRELIABLE · {rate:.0%} invalid"
    return [Text(line)], ""


def calls_text(manifest: dict[str, Any]) -> str:
    usage = manifest.get("llm_usage")
    if isinstance(usage, dict) and usage:
        return f"{int(usage.get('prompt_tokens', 0) or 0) + int(usage.get('completion_tokens', 0) or 0):,} tokens"
    return "0 LLM calls"


def timing_table(stages: dict[str, float] | None, total: float | None, *, note: str = "") -> list[Any]:
    blocks: list[Any] = []
    if stages:
        tot = float(total) if total else sum(stages.values())
        rows = [[name, Cell(seconds_text(s), sort=s), pct_cell(s / tot if tot > 0 else None)]
                for name, s in stages.items()]
        rows.append(["total (wall)", Cell(seconds_text(tot), sort=tot), pct_cell(1.0)])
        blocks.append(Table(["stage", "wall time", "share"], rows, caption="Wall time per stage", id="stage-times"))
        if sum(stages.values()) > 1.01 * tot > 0:
            blocks.append(Note("Some stages ran at the same time (runs computed on an executor's workers at once, "
                               "each stage's time summed over them; the study's optional stages and the scenario's "
                               "analysis in lanes on two cores), so their times overlap and the shares add up "
                               "to more than the whole."))
    elif total is not None:
        blocks.append(Note(f"Total wall time {seconds_text(float(total))}; per-stage times were not recorded by the "
                           "version that wrote this run directory."))
    else:
        blocks.append(Note("Wall times were not recorded by the version that wrote this run directory."))
    if note:
        blocks.append(Text(note))
    return blocks


def group_share_table(att: Any, *, caption: str, id: str = "") -> list[Any]:
    """R_G for every group of an attribution (whole run), or a line saying why there is none."""
    if not att.groups:
        return [Note("This run records no agent groups (tiers), so there are no group shares R_G; the concentration "
                     "table shows how much of Σ_t Δv_t the top agents carry instead.", "skipped")]
    if float(att.delta_v.sum()) == 0:
        return [Note("Σ_t Δv_t = 0: group shares R_G are undefined (nothing to normalise by).", "skipped")]
    out: list[Any] = []
    for g in att.groups:
        shares = att.group_shares(g)
        _, counts_ = np.unique(np.asarray(att.groups[g]), return_counts=True)
        counts = dict(zip(shares, counts_.tolist(), strict=True))  # both in np.unique's order
        keys = list(shares)
        if len(keys) > PAGE_TOP_MAX:  # one group per agent: the page lists the largest |R_G|, every share stays
            pos = {k: i for i, k in enumerate(keys)}
            keys = sorted(sorted(keys, key=lambda k: -abs(shares[k]))[:PAGE_TOP_MAX], key=pos.__getitem__)
            out.append(Note(f"Group `{g}` has {len(shares):,} labels; the table lists the {PAGE_TOP_MAX:,} with the "
                            "largest |R_G| (Attribution.group_shares gives them all).", "skipped"))
        rows = [[Cell(str(k), sort=str(k), cls="id"), counts[k], pct_cell(counts[k] / att.N), pct_cell(shares[k])]
                for k in keys]
        out.append(Table([literal(g), "agents", "share of agents", "R_G (share of Σ_t Δv_t)"], rows,
                         caption=f"{caption}: group `{literal(g)}`", id=f"{id}-{g}" if id else ""))
    return out


def concentration_table(phi_i: np.ndarray, total: float, *, id: str = "") -> Table:
    """Share of Σ_t Δv_t carried by the top 1, 10 agents and the top 1 %, 10 % of agents by Φ_i."""
    order = np.argsort(-phi_i, kind="stable")
    n = phi_i.shape[0]
    rows = []
    for label, k in (("top 1 agent", 1), ("top 10 agents", 10), ("top 1 % of agents", max(1, n // 100)),
                     ("top 10 % of agents", max(1, n // 10))):
        k = min(k, n)
        s = float(phi_i[order[:k]].sum())
        rows.append([label, k, fmt(s), pct_cell(s / total if total else None)])
    return Table(["agents by Φ_i", "count", "Σ Φ_i", "share of Σ_t Δv_t"], rows, id=id,
                 caption="How concentrated the attribution is")


#: what a who-table shows at t* for an agent that is not alive then (dead, or not yet born), in place of a number
NOT_ALIVE_TEXT = "not alive"


def not_alive_cell() -> Cell:
    """A table cell of an agent that is not alive at that step: "not alive" (muted), never a 0 that reads as a
    measured zero; sorted after every number."""
    return Cell(NOT_ALIVE_TEXT, cls="na")


#: what the who-tables' intro says about the cells at t* of an agent that is not alive then, and about a living 0
AT_T_STAR_NOTE = ("An agent not alive at t* (dead, or not yet born: the panel's alive mask) is ranked by what it did "
                  "while alive; its cells at t* read \"not alive\". A 0 of an agent alive at t* is its computed φ: its "
                  "action at t* moved the indicator by nothing.")


def not_alive_note(att: Any, alive: np.ndarray | None, *, k: int, t_star: str) -> Note | None:
    """How many of the top ``k`` agents by Φ_i are not alive at t* (``alive``: (N,) at t*), or ``None`` for none."""
    if alive is None:
        return None
    order = top_order(att.by_agent(), k)
    gone = int((~np.asarray(alive, dtype=bool)[order]).sum())
    if not gone:
        return None
    return Note(f"{gone} of these {order.size} agents are not alive at t* = step {t_star}: their cells at t* read "
                "\"not alive\" (a dead row's φ is 0 and its features are the recorder's fill: neither is measured); "
                "their Φ_i is what they did while alive.", "info")


def _at_t(phi: float, not_alive: bool, shown: Any = None) -> Any:
    """A who-table cell at t* judged by the agent's φ there: "not alive" for an agent not alive whose φ is 0 (a
    dead row's), else ``shown`` (default: ``phi`` itself)."""
    if not_alive and not (math.isfinite(phi) and phi != 0):
        return not_alive_cell()
    return phi if shown is None else shown


def who_table(att: Any, *, k: int, t_star: int, features: dict[str, np.ndarray] | None,
              reference: Any = None, reference_label: str = "Shapley", id: str = "",
              caption: str = "", alive: np.ndarray | None = None) -> Table:
    """Top-k agents by signed Φ_i of ``att`` (an Attribution over all steps), one agent per row.

    Columns: rank, agent (the id alone), Φ_i = Σ_t φ_i,t, Φ_i / Σ_t Δv_t, φ_i,t*, φ_i,t* / Δv_t*, the
    reference's φ at t* (± its standard error), the features at t* (by name), the groups.

    ``alive`` (N,): which agents are alive at t* (``None``: all). An agent that is not is still ranked by its Φ_i
    (what it did while alive), but its cells at t* read "not alive": its features (the recorder's fill) always, its
    φ, share, reference value and standard error where its φ (its reference value) is 0, as a dead row's is — a
    value that is not 0 was computed (e.g. the re-simulation reference of an agent that died during step t*) and
    is shown.
    """
    phi_i = att.by_agent()
    total = float(att.delta_v.sum())
    dv_t = float(att.delta_v[t_star])
    order = top_order(phi_i, k)
    scale = float(np.abs(phi_i[order]).max()) if order.size else 0.0
    gone = np.zeros(att.N, dtype=bool) if alive is None else ~np.asarray(alive, dtype=bool)
    cols = ["rank", "agent", "Φ_i", "% of ΣΔv", "φ at t*", "% of Δv(t*)"]
    if reference is not None:
        cols.append(f"{reference_label} φ(t*)")
        if reference.stderr is not None:
            cols.append("± stderr")
    feats = list(features or {})
    cols += [literal(f) for f in feats]  # names the user chose: shown as they are, never as the page's markup
    groups = list(att.groups)
    cols += [literal(g) for g in groups]
    rows = []
    for rank, pos in enumerate(order, start=1):
        na = bool(gone[pos])
        phi_t = float(att.phi[t_star, pos])
        row: list[Any] = [rank, id_cell(att.agent_ids[pos]), signed_cell(phi_i[pos], scale),
                          pct_cell(phi_i[pos] / total if total else None), _at_t(phi_t, na),
                          _at_t(phi_t, na, pct_cell(phi_t / dv_t if dv_t else None))]
        if reference is not None:
            ref_t = float(reference.phi[0, pos])
            row.append(_at_t(ref_t, na))
            if reference.stderr is not None:
                row.append(_at_t(ref_t, na, float(np.asarray(reference.stderr)[0, pos])))
        # a dead row's features are the recorder's fill, whatever their value
        row += [not_alive_cell() if na else float(features[f][pos]) for f in feats]  # type: ignore[index]
        row += [Cell(literal(np.asarray(att.groups[g])[pos]), sort=str(np.asarray(att.groups[g])[pos])) for g in groups]
        rows.append(row)
    return Table(cols, rows, caption=caption, id=id)


def load_attribution(path: Path) -> Any:
    from aumann.attribution import Attribution

    if not path.is_file() and not path.is_symlink():
        raise ReportError(f"attribution file {str(path)!r} is missing: not a finished run directory")
    try:
        return Attribution.load(path, within=_ROOT.get())
    except PathEscapeError as exc:
        raise ReportError(str(exc)) from exc


def load_panel(path: Path) -> Any:
    """A panel file of the run directory (confined like the readers above)."""
    from aumann.panel import Panel

    try:
        return Panel.load(path, within=_ROOT.get())
    except PathEscapeError as exc:
        raise ReportError(str(exc)) from exc


def load_panel_step(path: Path, t: int) -> dict[str, np.ndarray]:
    """The features at step ``t`` of a panel file of the run directory, {name: (N,)}, without loading the
    panel (confined like the readers above)."""
    from aumann.panel import Panel

    try:
        return Panel.load_step(path, t, within=_ROOT.get())
    except PathEscapeError as exc:
        raise ReportError(str(exc)) from exc


def load_panel_alive(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The alive mask (T, N) of a panel file of the run directory, read alone (not the values; confined like the
    readers above); ``None`` when the panel has none (every agent alive throughout). A mask that is not bool of the
    attribution's ``shape`` is the file's damage: :class:`ReportError` naming it."""
    from aumann.io import read_npz

    try:
        data = read_npz(path, error=ReportError, what="panel file", within=_ROOT.get(), keys=("alive",))[0]
    except PathEscapeError as exc:
        raise ReportError(str(exc)) from exc
    alive = data.get("alive")
    if alive is None:
        return None
    if alive.dtype != np.bool_ or alive.shape != tuple(shape):
        raise ReportError(f"panel file {str(path)!r}: its alive mask is {alive.dtype} {alive.shape}, not bool of the "
                          f"attribution's (T, N) = {tuple(shape)} (damaged)")
    return alive


class _AllBut(frozenset):
    """Every member name but these (``read_npz(keys=...)`` asks only ``name in keys``)."""

    def __contains__(self, key: object) -> bool:
        return not frozenset.__contains__(self, key)


def load_arrays(path: Path, what: str, *, skip: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` of the run directory (confined like the readers above), but the members ``skip``
    (never decompressed: e.g. φ over every step, which the page reads from the attribution file)."""
    from aumann.io import read_npz

    try:
        return read_npz(path, error=ReportError, what=what, within=_ROOT.get(),
                        keys=_AllBut(skip) if skip else None)[0]
    except PathEscapeError as exc:
        raise ReportError(str(exc)) from exc





def above_ceiling(row: dict[str, Any], ceil: dict[str, Any],
                  cols: tuple[str, ...] = ("kendall_tau", "jaccard_top10")) -> bool:
    """Whether a method's agreement exceeds the noise ceiling it is shown against."""
    for c in cols:
        a, b = row.get(c), ceil.get("kendall_tau_ceiling" if c == "kendall_tau" else "jaccard_ceiling")
        if isinstance(a, int | float) and isinstance(b, int | float) and math.isfinite(a) and math.isfinite(b) \
                and a > b:
            return True
    return False


def ceiling_explanation(methods: list[str]) -> str:
    """Why an agreement can exceed the noise ceiling (shown whenever one does)."""
    return (f"{', '.join(methods)} agree(s) with the reference better than the noise ceiling. The ceiling is the "
            "agreement of two noisy sampled-Shapley runs with each other; an exact (noise-free) method is compared "
            "with one noisy run only, so it can land above it — most where agents are tied or nearly tied in truth "
            "(sampling noise orders them at random in each run, while an exact method keeps them tied, which τ-b "
            "does not count against it). Read the ceiling as the reference's own repeatability, not as a bound.")


#: a step's Δv within this share of |f| (or |f⁰|) is round-off: a gap relative to it is undefined
_DELTA_V_ROUNDOFF = 1e-9


def relative_gaps(att: Any) -> np.ndarray:
    """(T,) the efficiency gap relative to |Δv|, NaN at the steps where Δv is 0 or round-off (within 1e-9 of |f|):
    :attr:`Attribution.relative_efficiency_gap` divides by ``max(|Δv|, tiny)`` there, so a gap of round-off size
    at a step where f did not change read 4.4e+307 on a page."""
    dv = np.abs(np.asarray(att.delta_v, dtype=np.float64))
    scale = np.maximum(np.abs(np.asarray(att.f_values, dtype=np.float64)),
                       np.abs(np.asarray(att.f_baseline, dtype=np.float64)))
    defined = (dv > 0) & (dv > _DELTA_V_ROUNDOFF * scale)
    return np.where(defined, np.asarray(att.relative_efficiency_gap, dtype=np.float64), np.nan)


def max_relative_gap(att: Any) -> tuple[float, int]:
    """(the largest :func:`relative_gaps` over the steps where it is defined, NaN when at none; how many steps were
    left out)."""
    rel = relative_gaps(att)
    undefined = int(np.isnan(rel).sum())
    return (float(np.nanmax(rel)) if undefined < rel.size else math.nan), undefined


def undefined_relative_note(steps: int) -> Note:
    """The page's note that "max relative" leaves out ``steps`` steps where Δv is 0 or round-off."""
    return Note(f"max relative leaves out {steps:,} step(s) where Δv is 0 or round-off (within 1e-9 of |f|): a gap "
                "relative to it is undefined there; the absolute gap covers them.", "info")


def efficiency_note(worst: float, where: str) -> Note:
    """The report's flag for an efficiency gap over the warning share of |Δv|."""
    from aumann.attribution.result import EFFICIENCY_WARN_SHARE

    return Note(f"**Efficiency gap flag**: in {where}, Σ_i φ misses Δv by up to {100 * worst:.3g} % of |Δv| (over "
                f"{100 * EFFICIENCY_WARN_SHARE:g} %): the attribution does not account for the whole change. Raise "
                "the quadrature points K (or use adaptive tol=), or check the indicator for kinks on the path.", "warn")


def top_clamped(top: int, agents: int) -> str:
    """The note of a page asked for more top agents (``aumann report --top``) than its run has."""
    return f"Asked for the top {top:,} agents (--top); the run has {agents:,}, so all {agents:,} are shown."


#: the most agents a page lists (who-tables, heatmap): ``--top 1000000`` on a 10⁶-agent run built a page of hundreds
#: of megabytes that no browser opens; every agent's φ stays in the run's attribution files (``.npz``)
PAGE_TOP_MAX = 1000


def top_shown(top: int, agents: int) -> tuple[int, str | None]:
    """(how many agents a page shows for ``--top top`` of a run of ``agents``, the note saying so when that is
    fewer than asked: all of them (:func:`top_clamped`), or :data:`PAGE_TOP_MAX`)."""
    k = min(top, agents, PAGE_TOP_MAX)
    if k == top:
        return k, None
    if k == agents:
        return k, top_clamped(top, agents)
    return k, (f"Asked for the top {top:,} agents (--top); a page lists at most {PAGE_TOP_MAX:,} (a larger one is "
               f"too big to open), so the top {k:,} of the run's {agents:,} are shown; every agent's φ is in the "
               "run's attribution file (.npz).")


__all__ = [
    "AT_T_STAR_NOTE",
    "NOT_ALIVE_TEXT",
    "PAGE_TOP_MAX",
    "above_ceiling",
    "calls_text",
    "ceiling_explanation",
    "concentration_table",
    "driver_card",
    "efficiency_note",
    "group_share_table",
    "id_cell",
    "llm_blocks",
    "load_arrays",
    "load_attribution",
    "load_panel",
    "load_panel_alive",
    "merged_table",
    "not_alive_cell",
    "not_alive_note",
    "pct_cell",
    "pct_text",
    "read_csv",
    "read_json",
    "reading_within",
    "reliability_blocks",
    "signed_cell",
    "timing_table",
    "top_clamped",
    "top_order",
    "top_shown",
    "who_table",
]
