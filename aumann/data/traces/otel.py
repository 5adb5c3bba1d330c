"""OpenTelemetry spans as JSON lines: one file, or a directory of shards, streamed line by line.

Three line shapes are read and normalised into one flat span record
(``resource/…``, ``scope/…``, ``trace_id``, ``span_id``, ``parent_span_id``, ``name``, ``kind``,
``start_time_unix_nano``, ``end_time_unix_nano``, ``duration_ns``, ``status/code``, ``attributes/…``):

* **AgentSociety 2** (``agentsociety2/trace/sharded_writer.py``, ``JsonlTraceWriter.end_span``, package
  agentsociety2 2.9.2): one span per line, ``{"resource": {"service.name", "agent.id"}, "scope",
  "trace_id", "span_id", "parent_span_id", "name", "kind", "start_time_unix_nano",
  "end_time_unix_nano", "status": {"code", "message"}, "attributes": {...}, "events"}``, sharded over
  at most 256 files ``<run>/trace/trace_<trace_id[:2]>.jsonl`` (``ShardedAppendSink``);
* **OTLP/JSON** (the OpenTelemetry protocol's JSON encoding, as the Collector's file exporter writes
  it): one ``{"resourceSpans": [{"resource": {"attributes": [...]}, "scopeSpans": [{"scope", "spans":
  [...]}]}]}`` per line, attributes as ``{"key", "value": {"stringValue" | "intValue" | ...}}`` lists,
  ids in hex, times as decimal strings;
* **the Python SDK's** ``ReadableSpan.to_json(indent=None)``: ``{"name", "context": {"trace_id",
  "span_id"}, "parent_id", "start_time", "end_time", "attributes", "resource": {"attributes"}}``.

Lines are decoded one at a time (memory: one line plus the spans awaiting their trace's step under
``step.inherit = "trace"``); a line that is not JSON is refused naming its file and line number (or,
with ``on_bad = "skip"``, counted). Gzipped files (``.gz``) are read as they stream. The OTLP/JSON and SDK shapes
are turned into flat span records by :mod:`aumann.data.traces.otlp`; this module reads the files and the lines.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from aumann import bounded
from aumann.data.traces.base import TraceReader, refuse_utf16, register_format
from aumann.data.traces.duck import check_gzip
from aumann.data.traces.encoding import NOT_UTF8, not_utf8, undecoded_at
from aumann.data.traces.events import (
    KEEP_LOCATIONS,
    MISSING,
    EventBatch,
    RawRecords,
    Validator,
    get_path,
    keyed_pairs,
    repeated_key,
    repeated_key_reason,
    repeated_path,
    split_path,
)
from aumann.data.traces.otlp import Twice, normalise, repeated_structure
from aumann.errors import SpanShapeError, TraceFormatError, TraceRecordError, TraceSpecError

_SPAN_KEYS = ("span_id", "spanId", "resourceSpans", "trace_id", "traceId", "context")
_EXT = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
MAX_LINE = 64 * 2**20
#: the reason a line of the OTLP or SDK shape whose parts have the wrong JSON type is skipped and counted
_BAD_SHAPE = "line is not an OpenTelemetry span line (a part of the wrong JSON type)"
#: the reason an OTLP envelope line that holds no span (``{"resourceSpans": []}``, or only empty ``spans`` lists) is
#: skipped and counted, whatever ``on_bad`` says (it is no bad record: it holds nothing to read)
EMPTY_ENVELOPE = "an OTLP envelope holding no spans"
#: added to a bad line's message when it holds a bare carriage return (lines end at \n only)
_BARE_CR_HINT = (" (it holds a bare carriage return: lines end at \\n, so a \\r between two records, old Mac line "
                 "endings, makes them one line)")


def span_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.lower().endswith(_EXT))
        gone = [p for p in files if p.is_symlink() and not p.exists()]
        if gone:  # a shard linked from a folder since removed: left out without a word, its spans lost
            raise TraceFormatError(f"{str(gone[0])!r} is a link to {str(gone[0].readlink())!r}, which does not exist "
                                   f"({len(gone)} such shard(s) in {str(path)!r})")
        return [p for p in files if p.is_file()]
    return [path] if path.is_file() else []


def _open(p: Path):
    """Text lines (UTF-8; an undecodable byte becomes a lone surrogate, so that the reader refuses such a line as not
    UTF-8 text, or skips and counts it: as U+FFFD, which ``errors="replace"`` made it, the line read as JSON, and two
    agents ``José`` and ``Josè`` of a Latin-1 file were one agent ``Jos�``; a leading byte-order mark, which Windows
    tools write, is dropped: it made line 1 bad JSON and the file undetectable).

    A line ends at ``\n`` (``\r\n`` too: the ``\r`` is JSON whitespace), as DuckDB's JSON lines reader ends it for
    long tables: a bare ``\r`` is part of its line. Python's universal newlines split a line at a bare ``\r``, so a
    span file with old Mac line endings read as records the table reader refused as one bad line, and a ``\r``
    inside a value made two bad lines, the lines after it misnumbered."""
    if p.name.lower().endswith(".gz"):
        return gzip.open(p, "rt", encoding="utf-8-sig", errors="surrogateescape", newline="\n")
    return open(p, encoding="utf-8-sig", errors="surrogateescape", newline="\n")


def _first_line(p: Path) -> str:
    """The first line of ``p`` that is not blank, cut at :data:`MAX_LINE` characters: only so much is read (a file
    of one 300 MB line, iterated line by line, held all of it, twice over, to detect its format)."""
    try:
        with _open(p) as fh:
            while line := fh.readline(MAX_LINE + 1):
                if line.strip():
                    return line[:MAX_LINE]
    except (OSError, EOFError, zlib.error):
        return ""
    return ""


def _pretty_printed(p: Path, spans_only: bool = False, head: int = 1 << 20) -> bool:
    """Whether ``p`` starts with a JSON value written over several lines (its first line that is not blank is ``{``
    or ``[`` alone: OpenTelemetry's ConsoleSpanExporter writes ``span.to_json()``, indented, one after another).
    Every line of such a file was "not a JSON object", and detection took it for a long table. ``spans_only``: and
    its first value, decoded from the first ``head`` characters, looks like a span."""
    if _first_line(p).strip() not in ("{", "["):
        return False
    if not spans_only:
        return True
    try:
        with _open(p) as fh:
            text = fh.read(head).lstrip()
        value, _ = json.JSONDecoder().raw_decode(text)
    except (OSError, EOFError, zlib.error, ValueError):
        return False
    first = value[0] if isinstance(value, list) and value else value
    return isinstance(first, dict) and looks_like_span(json.dumps(first))


def _loads(line: str | bytes, keyed: bool = False) -> Any:
    """One JSON line through the bounded reader (a line nested 100,000 deep is a bad line, not a RecursionError);
    ``ValueError`` for anything that is not JSON within the limits. ``keyed``: each object remembers the keys it
    gives more than once (:func:`~aumann.data.traces.events.keyed_pairs`)."""
    return bounded.loads_json(line, what="the line", error=ValueError,
                              object_pairs_hook=keyed_pairs if keyed else None)


def looks_like_span(line: str | bytes) -> bool:
    try:
        rec = _loads(line)
    except ValueError:
        return False
    return isinstance(rec, dict) and any(k in rec for k in _SPAN_KEYS) and ("name" in rec or "resourceSpans" in rec)


#: the filter reason of a span read before (the same ids and the same content)
DUPLICATE_SPAN = "duplicate span: the same span (trace_id, span_id and content) was read before (a log shipped twice?)"
#: the skip reason of a span that reuses the ids of one read before with other content
CONFLICTING_SPAN = ("conflicting span: the trace_id and span_id of a span read before, with other content (two runs' "
                    "logs in one folder, or a writer that reuses span ids?): the first is kept")


def _id_text(v: Any) -> str | None:
    """An id as text that two ids share only where they are equal (``1`` and ``1.0`` too), tagged by its kind:
    Python's hash of a number is the number modulo 2⁶¹ - 1 (-1 and -2 hash alike), so span ids -1 and -2, or 1 and
    2⁶¹, were one span; ``None`` for a list or an object."""
    if v is None:
        return "z"
    if isinstance(v, bool):
        return "b1" if v else "b0"
    if isinstance(v, int):
        return f"n{v}"
    if isinstance(v, float):
        return f"n{int(v)}" if v.is_integer() else f"f{v!r}"
    if isinstance(v, str):
        return "s" + v
    return None


def _digest(text: str) -> int:
    """A 64-bit digest of ``text`` as a signed int64: BLAKE2b without a key, the same in every process (Python's
    ``hash`` of a text is keyed per process by ``PYTHONHASHSEED``, so which two spans collided, and so which span was
    dropped as a copy of another, changed from run to run). A lone surrogate (a JSON ``"\\ud800"``) is encoded as
    is."""
    raw = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(raw, "little", signed=True)


def _span_ident(span: dict[str, Any]) -> int | None:
    """A 64-bit digest of a span's identity (trace_id, span_id); ``None`` without a usable span_id."""
    sid = span.get("span_id")
    if sid is None or sid == "":
        return None
    tid, sid = _id_text(span.get("trace_id")), _id_text(sid)
    if tid is None or sid is None:  # an id that is a list or an object
        return None
    return _digest(f"{len(tid)}:{tid}{sid}")  # (the length first: ("ab", "c") and ("a", "bc") are two identities)


def _span_content(span: dict[str, Any], line: str, envelope: bool) -> int:
    """A 64-bit digest of what a span holds: its line (less the line end) where the line is the span, the span as
    normalised (keys sorted) where the line is an OTLP envelope of several."""
    if not envelope:
        return _digest(line.rstrip("\r\n"))
    return _digest(json.dumps(span, sort_keys=True, default=repr))


class _SeenSpans:
    """The identities of the spans read so far with the content of the first of each, as sorted int64 runs (16
    bytes a span, merged like a binary counter: a Python dict of them took about 100), so that a span read again
    (a log shipped twice, a shard copied) is counted once and a span reusing another's ids with other content is
    told apart. Two spans' 64-bit digests collide with odds of about n² / 2⁶⁵ (10⁻⁶ at 10⁷ spans); the digests
    are the same in every process (:func:`_digest`), so a read is the same whatever ``PYTHONHASHSEED`` is."""

    FIRST, DUPLICATE, CONFLICTING = 0, 1, 2

    def __init__(self) -> None:
        self.runs: list[tuple[np.ndarray, np.ndarray]] = []

    def check(self, idents: list[int | None], contents: list[int]) -> np.ndarray:
        """Per span (in log order): FIRST of its identity (``None``: no identity, always first), DUPLICATE of the
        first (the same content) or CONFLICTING with it (other content); records the first ones."""
        n = len(idents)
        status = np.zeros(n, dtype=np.int8)
        has = [i for i, k in enumerate(idents) if k is not None]
        if not has:
            return status
        h = np.fromiter((idents[i] for i in has), dtype=np.int64, count=len(has))
        c = np.fromiter((contents[i] for i in has), dtype=np.int64, count=len(has))
        uniq, first_at, inv = np.unique(h, return_index=True, return_inverse=True)
        ref = c[first_at]
        known = np.zeros(uniq.size, dtype=bool)
        for run_h, run_c in self.runs:
            i = np.searchsorted(run_h, uniq).clip(0, run_h.size - 1)
            hit = run_h[i] == uniq
            ref[hit] = run_c[i[hit]]
            known |= hit
        st = np.where(c == ref[inv.reshape(-1)], self.DUPLICATE, self.CONFLICTING).astype(np.int8)
        new = first_at[~known]
        st[new] = self.FIRST
        status[np.asarray(has)] = st
        if new.size:
            self.runs.append((uniq[~known], c[new]))
            while len(self.runs) > 1 and self.runs[-2][0].size <= 2 * self.runs[-1][0].size:
                (h2, c2), (h1, c1) = self.runs.pop(), self.runs.pop()
                hh, cc = np.concatenate([h1, h2]), np.concatenate([c1, c2])
                order = np.argsort(hh, kind="stable")
                self.runs.append((hh[order], cc[order]))
        return status


def _first_place(files: list[Path], ident: int) -> tuple[str, Any, Any]:
    """(where, trace_id, span_id) of the first span of identity ``ident`` in ``files`` (read again: the reader keeps
    16 bytes a span, not its place; only a refusal looks)."""
    for f in files:
        with _open(f) as fh:
            for n, line in enumerate(fh, 1):
                if len(line) > MAX_LINE or not line.strip():
                    continue
                try:
                    rec = _loads(line)
                    spans = normalise(rec) if isinstance(rec, dict) else []
                except (ValueError, SpanShapeError):
                    continue
                for span in spans:
                    if _span_ident(span) == ident:
                        return f"{f} line {n}", span.get("trace_id"), span.get("span_id")
    return "an earlier line", None, None


@register_format
class OtelReader(TraceReader):
    """OpenTelemetry JSONL spans (see the module docstring)."""

    name = "otel"
    unit = "line"
    spec_keys = frozenset({"step.inherit"})

    @classmethod
    def sniff(cls, path: Path) -> bool:
        # the first file holding a line: a shard that is empty (AgentSociety 2 creates a shard before its first
        # append; a run stopped early leaves it so) made a directory of spans be detected as a long table, and
        # `aumann attribute --trace run/trace` said a table needs --spec
        for f in span_files(path):
            line = _first_line(f)
            if line:
                return looks_like_span(line) or _pretty_printed(f, spans_only=True)
        return False

    def batches(self, validator: Validator) -> Iterator[EventBatch]:
        spec = self.spec
        files = span_files(self.path)
        if not files:
            raise TraceFormatError(f"no span files (*.jsonl) at {str(self.path)!r}")
        self.sources = [str(f) for f in files]
        self.bytes = self.total = sum(f.stat().st_size for f in files)
        for f in validator.fields:
            if f.startswith("len:"):
                raise TraceSpecError(f"field {f!r}: len: applies to Concordia logs only")
        p_agent, p_step = split_path(spec.agent.field), split_path(spec.step.field)
        p_action = split_path(spec.action.field) if spec.action is not None else None
        p_fields = [(f, split_path(f)) for f in validator.fields]
        p_where = [(w, split_path(w)) for w in validator.where]
        inherit = spec.step.inherit == "trace"
        trace_step: dict[Any, Any] = {}
        pending: dict[Any, list[tuple[Any, ...]]] = {}
        tally = validator.tally
        size = spec.batch_size

        # under inherit, a span waiting for its trace's step is handed over when the step span comes, after spans
        # that follow it in the log: each record carries its place (file, line), so that `last` keeps log order
        file_no = {str(f): i for i, f in enumerate(files)}

        def fresh(src: str) -> RawRecords:
            return RawRecords(src, self.unit, values={f: [] for f, _ in p_fields}, where={w: [] for w, _ in p_where},
                              order=[] if inherit else None)

        seen = _SeenSpans()
        batch = validator.to_batch

        def settle(fpath: Path, raw: RawRecords, chunk: list[tuple[Any, ...]]) -> Iterator[EventBatch]:
            """Place the spans of ``chunk`` (``(item, trace_id, identity, content)``, in log order) that are not a
            span read before: a copy (the same ids and content) is dropped and counted as filtered; a span reusing the
            ids of one read before with other content is refused naming both lines (after the spans before it are
            validated, so that a bad record on an earlier line is named first), or skipped and counted (the first
            kept)."""
            status = seen.check([c[2] for c in chunk], [c[3] for c in chunk])
            if not status.any():
                yield from place(fpath, raw, chunk)
                return
            tally.filter(DUPLICATE_SPAN, int((status == _SeenSpans.DUPLICATE).sum()))
            clash = np.flatnonzero(status == _SeenSpans.CONFLICTING).tolist()
            if clash and spec.on_bad == "error":
                yield from place(fpath, raw, [c for c, st in zip(chunk[:clash[0]], status.tolist())
                                              if st == _SeenSpans.FIRST])
                batch(raw)  # raises for a bad record before the clash
                first, tid, sid = _first_place(files, chunk[clash[0]][2])
                raise TraceRecordError(
                    f"{fpath} line {chunk[clash[0]][0][0]}: a span with the trace_id {tid!r} and span_id {sid!r} of "
                    f"the span at {first}, with other content: which one is meant is ambiguous (two runs' logs in one "
                    "folder, or a writer that reuses span ids?) (on_bad = 'skip' in the spec keeps the first and "
                    "skips and counts the others)")
            tally.skip(CONFLICTING_SPAN, [f"{fpath} line {chunk[i][0][0]}" for i in clash[:KEEP_LOCATIONS]],
                       n=len(clash))
            yield from place(fpath, raw, [c for c, st in zip(chunk, status.tolist()) if st == _SeenSpans.FIRST])

        def push(raw: RawRecords, item: tuple[Any, ...]) -> None:
            loc, agent, step, action, vals, whs = item
            raw.loc.append(loc)
            if raw.order is not None:
                raw.order.append(float(file_no[raw.source] * 2**32 + loc))
            raw.agent.append(agent)
            raw.step.append(step)
            raw.action.append(action)
            for (f, _), v in zip(p_fields, vals):
                raw.values[f].append(v)
            for (w, _), v in zip(p_where, whs):
                raw.where[w].append(v)

        def getter(p: tuple[str, ...]):
            if p == ("duration_ns",):
                def duration(span: dict[str, Any]) -> Any:
                    s, e = span.get("start_time_unix_nano"), span.get("end_time_unix_nano")
                    return e - s if isinstance(s, int) and isinstance(e, int) else MISSING
                return duration
            if len(p) == 1:
                k0 = p[0]
                return lambda span: span.get(k0, MISSING)
            if len(p) == 2:
                k0, k1 = p

                def two(span: dict[str, Any]) -> Any:
                    d = span.get(k0)
                    return d.get(k1, MISSING) if isinstance(d, dict) else MISSING
                return two
            return lambda span: get_path(span, p)

        # a key the spec reads given twice in one object: refused as the table reader refuses it (DuckDB read the
        # first value, json the last)
        read_paths = [p_agent, p_step, *([p_action] if p_action else []), *(p for _, p in p_fields),
                      *(p for _, p in p_where), *([("trace_id",)] if inherit else [])]
        if ("duration_ns",) in read_paths:
            read_paths += [("start_time_unix_nano",), ("end_time_unix_nano",)]
        # a line where a key the spec reads is written more often (its text counted, in C) than the decoded record
        # holds it at its top two levels may give it twice in one object: only such a line is decoded again, with a
        # hook that marks repeated keys (decoding every line with it cost a third more)
        # the span ids as well: a flat line giving span_id twice was one span or another by json's last value
        flat_paths = [*read_paths, *(p for p in [("trace_id",), ("span_id",)] if p not in read_paths)]
        quoted = [(k, sorted({json.dumps(k), json.dumps(k, ensure_ascii=False)}))
                  for k in sorted({k for p in flat_paths for k in p})]

        def may_repeat(line: str, rec: dict[str, Any]) -> bool:
            # first, all keys at once: a line holds at least one colon per key written (a colon inside a text adds
            # one), so as many colons as the record holds keys at its top two levels rules out a key given twice and
            # any key deeper down (counting '":' missed a key written '"agent.id"  :', with more than one space)
            if line.count(":") == len(rec) + sum([len(v) for v in rec.values() if type(v) is dict]):
                return False
            if "\\u" in line:  # a key may be written with escapes ("agent\\u002eid"), which its text below misses
                return True
            for k, forms in quoted:
                n = line.count(forms[0]) if len(forms) == 1 else sum(line.count(f) for f in forms)
                if n > 1 and (k in rec) + sum(1 for v in rec.values() if isinstance(v, dict) and k in v) < n:
                    return True
            return False

        def repeated(path: str, fpath: Path, lineno: int) -> None:
            """A record giving the key at ``path`` twice: refused, or skipped and counted (flat lines and OTLP attribute
            lists alike, in the table reader's words)."""
            why = repeated_key_reason(path)
            if spec.on_bad == "error":
                raise TraceRecordError(f"{fpath} line {lineno}: {why} (on_bad = 'skip' in the spec skips and counts "
                                       "such records)")
            tally.skip(why, [f"{fpath} line {lineno}"])

        g_agent, g_step = getter(p_agent), getter(p_step)
        g_action = getter(p_action) if p_action is not None else (lambda span: None)
        g_fields = [getter(p) for _, p in p_fields]
        g_where = [getter(p) for _, p in p_where]

        def place(fpath: Path, raw: RawRecords, spans: list[tuple[Any, ...]]) -> Iterator[EventBatch]:
            """Push ``spans`` (read from ``fpath``, in log order) into ``raw``; under inherit, a span without a step
            waits for its trace's step, and the spans waiting for a step that comes are pushed (a batch of their own
            where they came from another file)."""
            for item, tid, _, _ in spans:
                if inherit:
                    step = item[2]
                    if step is MISSING or step is None:
                        known = trace_step.get(tid, MISSING) if tid is not None else MISSING
                        if known is MISSING:
                            if tid is None:
                                tally.skip(f"no step: the span has no {spec.step.field!r} and no trace_id",
                                           [f"{fpath} line {item[0]}"])
                            else:
                                pending.setdefault(tid, []).append((str(fpath), item))
                            continue
                        item = (*item[:2], known, *item[3:])
                    elif tid is not None and tid not in trace_step:
                        trace_step[tid] = step
                        for src, waiting in pending.pop(tid, []):
                            w = (*waiting[:2], step, *waiting[3:])
                            if src == str(fpath):
                                push(raw, w)
                            else:
                                r2 = fresh(src)
                                push(r2, w)
                                b2 = batch(r2)
                                if b2 is not None:
                                    yield b2
                push(raw, item)

        for fpath in files:
            refuse_utf16(fpath)
            check_gzip([fpath], damaged=False)  # a newline bomb is refused before a Python loop meets its every line
            if _pretty_printed(fpath):
                raise TraceFormatError(f"{fpath} holds pretty-printed JSON (a JSON value over several lines, as "
                                       "OpenTelemetry's ConsoleSpanExporter writes spans: span.to_json() indents "
                                       "them), and span files hold one JSON object per line: export with "
                                       "ConsoleSpanExporter(out=..., formatter=lambda s: s.to_json(indent=None) + "
                                       "'\\n'), or rewrite the file one object per line")
            raw = fresh(str(fpath))
            try:
                fh = _open(fpath)
            except OSError as exc:
                raise TraceFormatError(f"cannot open {str(fpath)!r}: {exc}") from exc
            chunk: list[tuple[Any, ...]] = []  # spans read, not yet told apart from those read before
            with fh:
                lineno = 0
                while True:
                    try:
                        line = fh.readline(MAX_LINE + 1)
                    except (OSError, EOFError, zlib.error) as exc:  # a truncated or damaged gzip stream
                        raise TraceFormatError(f"{fpath} line {lineno + 1}: cannot read on: {exc}") from exc
                    if not line:
                        break
                    lineno += 1
                    self.done += len(line)
                    if len(line) > MAX_LINE:  # not held in memory: refused, or skipped (read on to its end)
                        msg = f"{fpath} line {lineno}: longer than {MAX_LINE >> 20} MiB"
                        if spec.on_bad == "error":
                            raise TraceFormatError(msg + " (on_bad = 'skip' skips and counts such lines)")
                        while not line.endswith("\n"):
                            line = fh.readline(1 << 20)
                            if not line:
                                break
                            self.done += len(line)
                        tally.records += 1
                        tally.skip(f"line longer than {MAX_LINE >> 20} MiB", [f"{fpath} line {lineno}"])
                        continue
                    if not line.strip():
                        tally.blank_lines += 1
                        continue
                    tally.records += 1
                    byte = undecoded_at(line)
                    if byte is not None:  # a line that is no UTF-8 text (a Latin-1 file): said so, as the table says
                        if spec.on_bad == "error":
                            raise TraceFormatError(f"{fpath} line {lineno}: {not_utf8(byte, 'the line')} (on_bad = "
                                                   "'skip' counts such lines)")
                        tally.skip(NOT_UTF8, [f"{fpath} line {lineno}"])
                        continue
                    # an OTLP envelope or an SDK span line is decoded marking the keys its objects give twice (the
                    # hook costs a few per cent of such a read); a flat line only where it may give one (below)
                    keyed = '"resourceSpans"' in line or '"context"' in line
                    try:
                        rec = _loads(line, keyed)
                        if not isinstance(rec, dict):
                            raise ValueError(f"a JSON {type(rec).__name__}, not an object")
                    except ValueError as exc:
                        msg = f"{fpath} line {lineno}: not a JSON object ({str(exc)[:120]})" + _BARE_CR_HINT * (
                            "\r" in line.rstrip("\r\n"))
                        if spec.on_bad == "error":
                            raise TraceFormatError(msg + " (on_bad = 'skip' counts such lines)") from None
                        tally.skip("line is not a JSON object", [f"{fpath} line {lineno}"])
                        continue
                    envelope = "resourceSpans" in rec
                    shaped = envelope or ("context" in rec and "span_id" not in rec)  # (else a flat line)
                    if shaped:
                        if not keyed:  # a key name written with escapes ("\u0072esourceSpans")
                            rec = _loads(line, True)
                        at = repeated_structure(rec)
                        if at is not None:  # above the spans (a "spans" list given twice): the line is one bad record
                            repeated(at, fpath, lineno)
                            continue
                    elif may_repeat(line, rec):
                        at = repeated_key(line, flat_paths)
                        if at is not None:
                            repeated(at, fpath, lineno)
                            continue
                    twice: list[list[Twice]] | None = [] if envelope else None
                    try:
                        spans = normalise(rec, twice) if shaped else (rec,)
                    except SpanShapeError as exc:
                        msg = f"{fpath} line {lineno}: not an OpenTelemetry span line ({exc})"
                        if spec.on_bad == "error":
                            raise TraceFormatError(msg + " (on_bad = 'skip' counts such lines)") from None
                        tally.skip(_BAD_SHAPE, [f"{fpath} line {lineno}"])
                        continue
                    if envelope and not spans:  # read, counted as a record, and used for nothing: said so
                        tally.skip(EMPTY_ENVELOPE, [f"{fpath} line {lineno}"])
                        continue
                    for k, span in enumerate(spans):
                        if twice and twice[k]:  # a span object, or an attribute list giving a key the spec reads, twice
                            rep = next((d if isinstance(d, str) else "/".join(d) for d in twice[k]
                                        if isinstance(d, str) or any(p[:len(d)] == d for p in read_paths)), None)
                            if rep is not None:
                                repeated(rep, fpath, lineno)
                                continue
                        elif shaped and not envelope:  # an SDK line's attributes, resource attributes, status
                            rep = repeated_path(span, read_paths)
                            if rep is not None:
                                repeated(rep, fpath, lineno)
                                continue
                        tid = span.get("trace_id")
                        if inherit and tid is not None and not isinstance(tid, str | int | float):  # ([] or {})
                            msg = f"{fpath} line {lineno}: trace_id is a JSON {type(tid).__name__}, not an id"
                            if spec.on_bad == "error":
                                raise TraceFormatError(msg + " (on_bad = 'skip' counts such spans)")
                            tally.skip("trace_id is not an id", [f"{fpath} line {lineno}"])
                            continue
                        item = (lineno, g_agent(span), g_step(span), g_action(span), [g(span) for g in g_fields],
                                [g(span) for g in g_where])
                        chunk.append((item, tid, _span_ident(span), _span_content(span, line, envelope)))
                    if len(chunk) >= size:
                        yield from settle(fpath, raw, chunk)
                        chunk = []
                    if len(raw.loc) >= size:
                        b = batch(raw)
                        if b is not None:
                            yield b
                        raw = fresh(str(fpath))
            yield from settle(fpath, raw, chunk)
            b = batch(raw)
            if b is not None:
                yield b
        if pending:
            n = sum(len(v) for v in pending.values())
            locs = [f"{src} line {it[0]}" for v in list(pending.values())[:5] for src, it in v[:1]]
            tally.skip(f"no step: neither the span nor any span of its trace has {spec.step.field!r}", locs, n=n)


__all__ = ["OtelReader", "normalise", "span_files"]
