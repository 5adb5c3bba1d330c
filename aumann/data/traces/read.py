"""``read_trace``: an event log in, a :class:`~aumann.panel.Panel` and a report of what was read out."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aumann.checks import warn_rounded
from aumann.data.traces.builder import PanelBuilder
from aumann.data.traces.events import Tally, Validator
from aumann.data.traces.formats import detect_format, reader_class
from aumann.data.traces.privacy import pseudonymise
from aumann.data.traces.scope import check_scope, declared_keys
from aumann.data.traces.spec import TraceSpec, default_spec, load_spec
from aumann.errors import TraceError, TraceFormatError, TraceSpecError
from aumann.progress import progress_bar


@dataclass
class TraceReport:
    """What a read did: records read, events used, what was skipped (by reason, first locations) or
    filtered, the panel's size, and how fast."""

    format: str
    sources: list[str]
    spec: dict[str, Any]
    spec_source: str
    records: int = 0
    events: int = 0
    events_in_features: int = 0
    blank_lines: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_at: dict[str, list[str]] = field(default_factory=dict)
    filtered: dict[str, int] = field(default_factory=dict)
    missing_values: dict[str, int] = field(default_factory=dict)
    #: numeric fields no event used holds a value in (their sum / mean / last features are all 0)
    valueless_fields: list[str] = field(default_factory=list)
    agents: int = 0
    #: agent ids written both as a number and as text (1 and "1"), each read as one agent
    merged_ids: int = 0
    #: records whose agent id is a whole-valued float (1.0, an OASIS user_id stored as REAL), read as the integer id
    float_ids: int = 0
    #: records whose agent id is bytes that are no UTF-8 text (an OASIS BLOB user_id, a Parquet binary value): each
    #: such id an agent labelled by SQLite's literal of its bytes, X'FF01'
    blob_ids: int = 0
    #: records whose action is bytes that are no UTF-8 text (an OASIS BLOB action, a Parquet binary value): each such
    #: action labelled by SQLite's literal of its bytes, X'FF01' (a count_each feature's name too)
    blob_actions: int = 0
    #: per numeric field: values that are integers past ±2**53, which float64 (the panel's numbers) changed: kept as
    #: the nearest double (2**53 + 1 as 2**53), counted here and warned of (PrecisionLossWarning)
    rounded_values: dict[str, int] = field(default_factory=dict)
    #: per numeric field in ``rounded_values``: the largest magnitude among those integers
    rounded_largest: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    features: list[str] = field(default_factory=list)
    #: bad rows of exposure features' edge files / tables skipped under on_bad = "skip" (by reason, first locations)
    edges_skipped: dict[str, int] = field(default_factory=dict)
    edges_skipped_at: dict[str, list[str]] = field(default_factory=dict)
    #: per exposure feature: edge rows read, used, skipped, with an endpoint no agent has (unknown_endpoint), repeated
    edges: dict[str, dict[str, int]] = field(default_factory=dict)
    alive_fraction: float = 1.0
    bytes: int = 0
    seconds: float = 0.0

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    @property
    def n_edges_skipped(self) -> int:
        return sum(self.edges_skipped.values())

    @property
    def events_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["n_skipped"] = self.n_skipped
        d["n_edges_skipped"] = self.n_edges_skipped
        d["events_per_second"] = self.events_per_second
        return d

    def lines(self) -> list[str]:
        """A short human summary (the CLI prints it)."""
        out = [f"{self.format} trace: {self.records:,} record(s) read, {self.events:,} event(s) used, "
               f"{self.n_skipped:,} skipped, {sum(self.filtered.values()):,} filtered "
               f"({self.events_per_second:,.0f} records/s)",
               f"panel: {self.steps} step(s) × {self.agents:,} agent(s) × {len(self.features)} feature(s); "
               f"alive {100 * self.alive_fraction:.1f}% of agent-steps"]
        for reason, n in sorted(self.skipped.items(), key=lambda kv: -kv[1]):
            at = self.skipped_at.get(reason) or []
            out.append(f"  skipped {n:,}: {reason}" + (f" (first: {at[0]})" if at else ""))
        for reason, n in sorted(self.edges_skipped.items(), key=lambda kv: -kv[1]):
            at = self.edges_skipped_at.get(reason) or []
            out.append(f"  skipped {n:,} edge row(s): {reason}" + (f" (first: {at[0]})" if at else ""))
        for reason, n in sorted(self.filtered.items(), key=lambda kv: -kv[1]):
            out.append(f"  filtered {n:,}: {reason}")
        for f, n in sorted(self.missing_values.items()):
            out.append(f"  {n:,} event(s) without a value in field {f!r} (absent, null, NaN or empty text): they add "
                       "nothing to its features")
        for f in self.valueless_fields:
            used = [x.get("name") or x.get("kind") for x in self.spec.get("features", []) if x.get("field") == f]
            out.append(f"  field {f!r} holds no value in any of the {self.events:,} event(s): feature(s) {used} are 0 "
                       "throughout (is the field path right?)")
        if self.float_ids:
            out.append(f"  {self.float_ids:,} record(s) give the agent id as a whole-valued float (1.0): read as the "
                       "integer id (1)")
        if self.blob_ids:
            out.append(f"  {self.blob_ids:,} record(s) give the agent id as bytes that are not UTF-8 text (a BLOB or "
                       "binary value): each such id is an agent labelled by its bytes in hex, X'FF01'")
        if self.blob_actions:
            out.append(f"  {self.blob_actions:,} record(s) give the action as bytes that are not UTF-8 text (a BLOB or "
                       "binary value): each such action is labelled by its bytes in hex, X'FF01'")
        for f, n in sorted(self.rounded_values.items()):
            out.append(f"  {n:,} value(s) of field {f!r} are integers past ±2**53 that float64 cannot hold: read as "
                       f"the nearest double (the largest, {self.rounded_largest.get(f, 0):,}, lost its last digits)")
        if self.merged_ids:
            out.append(f"  {self.merged_ids:,} agent id(s) written both as a number and as text (1 and \"1\"): each "
                       "read as one agent")
        return out


@dataclass
class TraceRead:
    """The panel built from a trace and the report of the read; for a trace of real people (``real_people =
    true``) the panel is keyed by opaque indices and ``identifiers`` holds the index → id mapping, which only an
    explicit export should write (``aumann attribute --export-identifiers``)."""

    panel: Any
    report: TraceReport
    identifiers: list[dict[str, Any]] | None = None


def resolve_spec(path: str | os.PathLike[str], spec: Any = None, *, format: str | None = None,
                 bin: str | None = None, on_bad: str | None = None,
                 real_people: bool | None = None) -> tuple[str, TraceSpec, str]:
    """(format, spec, where the spec came from) for a trace: the given spec, else the format's default.

    ``bin`` / ``on_bad`` / ``real_people`` override the spec's ``step.bin`` / ``on_bad`` / ``real_people`` (the CLI's
    ``--bin`` / ``--skip-bad`` / ``--real-people``).
    """
    if spec is not None:
        sp = load_spec(spec)
        source = str(spec) if isinstance(spec, str | os.PathLike) else "given"
    else:
        sp, source = None, "default"
    fmt = format or (sp.format if sp is not None else None) or detect_format(path)
    reader_class(fmt)  # unknown names fail here
    if sp is None:
        sp = default_spec(fmt)
        source = f"default ({fmt})"
    elif sp.format is not None and sp.format != fmt:
        raise TraceSpecError(f"the spec is for format {sp.format!r} but the trace was read as {fmt!r}")
    if bin is not None or on_bad is not None or real_people is not None:
        data = sp.model_dump()
        if bin is not None:
            data["step"]["bin"] = bin
        if on_bad is not None:
            data["on_bad"] = on_bad
        if real_people is not None:
            data["real_people"] = real_people
        sp = TraceSpec.model_validate(data)
    check_scope(sp, fmt, declared_keys(reader_class(fmt)))  # a key this format would not read: refused, not ignored
    return fmt, sp, source


def read_trace(path: str | os.PathLike[str], spec: Any = None, *, format: str | None = None,
               bin: str | None = None, on_bad: str | None = None, real_people: bool | None = None,
               progress: bool = False) -> TraceRead:
    """Read an event log into a panel by a spec.

    Args:
        path: an OASIS SQLite database, an OpenTelemetry JSONL file or directory of shards, a Concordia
            structured log (JSON), or a CSV/Parquet/JSONL long table (file, directory or glob).
        spec: a :class:`TraceSpec`, a dict, or a TOML file; default: the detected format's built-in spec
            (``configs/traces/<format>.toml``; long tables have none).
        format: the format's name (default: the spec's, else detected).
        bin: override ``step.bin`` (e.g. ``"1h"``: bin timestamps into hours).
        on_bad: override ``on_bad`` (``"error"`` or ``"skip"``).
        real_people: override ``real_people`` (``True``: the log records real people; the CLI's ``--real-people``):
            the panel is keyed by opaque indices, and no error message shows an id.
        progress: show a progress bar on stderr (rows of a database, bytes of span files and logs).

    Returns:
        :class:`TraceRead` with ``panel`` (steps × agents × features, ``alive`` for agents that have not
        appeared yet or have left) and ``report`` (:class:`TraceReport`). With ``real_people = true`` in the
        spec the panel's agents are opaque indices 0 … N−1 with activity tiers (group ``tier``) and
        ``identifiers`` maps the indices to the trace's ids (docs/traces.md, "Real people").

    Raises:
        TraceFormatError: the trace cannot be read (names the file and line/row).
        TraceSchemaError: it lacks the table/columns/fields the spec names.
        TraceRecordError: a record with a missing or unusable field under ``on_bad = "error"``.
        TraceSpecError: an invalid spec.
        TraceError: nothing usable, or limits (max_agents, max_steps, max_cells) exceeded.
    """
    t0 = time.perf_counter()
    p = Path(path)
    if p.exists() and not (p.is_file() or p.is_dir()):  # a FIFO hung, /dev/zero was "empty" or "does not exist"
        raise TraceFormatError(f"{str(p)!r} is not a regular file or a directory (a pipe, socket or device): a "
                               "trace is read from a file, a directory of files or a glob")
    fmt, sp, source = resolve_spec(p, spec, format=format, bin=bin, on_bad=on_bad, real_people=real_people)
    reader = reader_class(fmt)(p, sp)
    tally = Tally()
    validator = Validator(sp, tally)
    builder = PanelBuilder(sp)
    bar, shown = None, 0
    try:
        for batch in reader.batches(validator):
            builder.add(batch)
            if progress and bar is None and reader.total > 0:
                bar = progress_bar(True, reader.total, f"read {fmt} trace", minimum=1)
            if bar is not None:
                bar.advance(reader.done - shown)
                shown = reader.done
    except OSError as exc:  # a file that cannot be opened or read on (permissions, an I/O error): a bare OSError
        raise TraceFormatError(f"{str(exc.filename or p)!r} cannot be read: {exc.strerror or exc}") from exc
    finally:
        if bar is not None:
            bar.stop()
    report = TraceReport(format=fmt, sources=reader.sources, spec=sp.model_dump(mode="json"), spec_source=source)
    _copy_tally(report, tally)
    report.events = builder.events
    report.events_in_features = builder.used
    report.bytes = reader.bytes
    if builder.events == 0:
        detail = "; ".join(report.lines()[2:]) or "the trace holds no records"
        raise TraceError(f"{str(p)!r}: no usable events ({tally.records:,} record(s) read): {detail}")
    report.valueless_fields = [f for f, n in builder.valued.items() if n == 0]
    meta = {"source": "trace", "trace_format": fmt, "trace": str(p), "spec_source": source, "synthetic": False,
            "real_people": sp.real_people}
    panel = builder.finish(edges=reader.edges, meta=meta)
    report.edges_skipped = dict(reader.edge_tally.skipped)
    report.edges_skipped_at = {k: list(v) for k, v in reader.edge_tally.skipped_at.items()}
    report.edges = dict(panel.meta.get("edges") or {})
    report.merged_ids = builder.merged_ids
    report.agents, report.steps, report.features = panel.N, panel.T, list(panel.features)
    report.alive_fraction = 1.0 if panel.alive is None else float(panel.alive.mean())
    report.seconds = time.perf_counter() - t0
    warn_rounded([(f"field {f!r}", n, report.rounded_largest[f]) for f, n in sorted(report.rounded_values.items())])
    if sp.real_people:
        panel, mapping = pseudonymise(panel)
        return TraceRead(panel, report, mapping)
    return TraceRead(panel, report)


def _copy_tally(report: TraceReport, tally: Tally) -> None:
    report.records = tally.records
    report.blank_lines = tally.blank_lines
    report.float_ids = tally.float_ids
    report.blob_ids = tally.blob_ids
    report.blob_actions = tally.blob_actions
    report.rounded_values = dict(tally.rounded)
    report.rounded_largest = dict(tally.rounded_largest)
    report.skipped = dict(tally.skipped)
    report.skipped_at = {k: list(v) for k, v in tally.skipped_at.items()}
    report.filtered = dict(tally.filtered)
    report.missing_values = dict(tally.missing_values)


__all__ = ["TraceRead", "TraceReport", "read_trace", "resolve_spec"]
