"""Concordia (google-deepmind/concordia): the structured simulation log, streamed with ijson.

Format (``concordia/utils/structured_logging.py`` at google-deepmind/concordia 513c3d6,
``SimulationLog.to_dict`` / ``to_json``; ``examples/games/run.py`` writes it to
``simulation_log_<game>_<scenario>.json``)::

    {"content_store": {"<16 hex>": "<text>", ...},
     "entries": [{"step", "timestamp", "entity_name", "component_name", "entry_type", "summary",
                  "deduplicated_data": {...}}, ...],
     "entity_memories": {...}, "game_master_memories": [...]}

``Simulation.play`` builds it with ``SimulationLog.from_raw_log``: each step's acting entity gives an
entry with ``component_name = "entity_action"``, ``entry_type = "entity"``, ``entity_name`` the
entity and ``deduplicated_data = {"key": "Entity [<name>]", "value": <the entity's last log: one dict
per component, the action in "__act__"/"Value">}``; the game master gives ``component_name =
"game_master"`` entries. Strings of 50 characters or more are stored once in ``content_store`` and
replaced by ``{"_ref": id}``.

The document is streamed (ijson): the content store, when the spec needs texts (a ``len:`` field or
``[action] match``), is reduced on the fly to each text's length and matched label, never kept; then
the entries are read one at a time. A refused entry is named by its position (``entry N``, 1-based).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from aumann import io as aio
from aumann.data.traces.base import TraceReader, refuse_utf16, register_format
from aumann.data.traces.duck import check_gzip
from aumann.data.traces.encoding import file_invalid_at, not_utf8
from aumann.data.traces.events import MISSING, EventBatch, RawRecords, Validator, get_path, split_path
from aumann.errors import OptionalDependencyError, TraceFormatError, TraceSchemaError, TraceSpecError

OTHER = "other"

#: nesting levels a log may reach (the document, entries, an entry, its deduplicated_data, ... are a handful):
#: ijson keeps one path prefix per open level, so its memory grows with the square of the depth (a 40 KB
#: log nested 20,000 deep took 1 GB; 200,000 deep, 400 KB, was killed for memory). 512 levels cost < 1 MB.
MAX_DEPTH = 512

class _Nesting:
    """A binary file whose bytes are checked, as ijson reads them, for JSON nested deeper than ``limit``: the
    strings are cut out (escapes, then quotes, followed across chunk boundaries) and the brackets left are counted.
    Raises :class:`~aumann.errors.TraceFormatError` from ``read`` at the chunk that goes too deep."""

    def __init__(self, fh: Any, path: Path, limit: int = MAX_DEPTH) -> None:
        self.fh, self.path, self.limit = fh, path, limit
        self.depth, self.offset = 0, 0
        self.in_str = self.esc = False
        self.carry = b""

    def read(self, n: int = -1) -> bytes:
        """The next bytes for ijson, with Python's non-finite JSON numbers outside strings rewritten: ``NaN`` (what
        ``json.dumps`` writes for a float NaN) as ``null``, a missing value as in every other reader; ``Infinity``
        and ``-Infinity`` as text, which a numeric field refuses as not a finite number. ijson's parser took a bare
        ``NaN`` for the end of the document: the whole log was refused as "ends early (a truncated log?)"."""
        if n == 0:  # ijson's probe
            return b""
        data = self.carry + self.fh.read(n)
        self.carry = b""
        while data:
            cut = _TOKEN_START.search(data, max(0, len(data) - 9))  # a token the next read may finish: held back
            if cut is None:
                break
            more = self.fh.read(n if n and n > 0 else 1 << 16)
            if not more:
                break
            if cut.start() > 0:
                data, self.carry = data[:cut.start()], data[cut.start():] + more
                break
            data += more
        if data:
            data = self._scan(data)
        return data

    def tell(self) -> int:
        return self.fh.tell()

    def _scan(self, data: bytes) -> bytes:
        orig, start_in_str = data, self.in_str
        # escapes first (C-speed replaces): a pair of backslashes, then an escaped quote, become plain bytes, so every
        # quote left opens or closes a string; a backslash left at the very end escapes the next chunk's first byte
        if self.esc:
            data, self.esc = b"_" + data[1:], False
        data = data.replace(b"\\\\", b"__")
        if data.endswith(b"\\"):
            data, self.esc = data[:-1] + b"_", True
        parts = data.replace(b'\\"', b"__").split(b'"')
        rest = b"".join(parts[1::2] if self.in_str else parts[0::2])  # the bytes outside strings
        self.in_str ^= (len(parts) - 1) % 2 == 1
        opens = rest.count(b"[") + rest.count(b"{")
        closes = rest.count(b"]") + rest.count(b"}")
        if self.depth + opens > self.limit:  # could go too deep within the chunk: follow it bracket by bracket
            b = np.frombuffer(rest, dtype=np.uint8)
            step = ((b == 0x5B) | (b == 0x7B)).astype(np.int64) - ((b == 0x5D) | (b == 0x7D))
            if (self.depth + np.cumsum(step)).max() > self.limit:
                raise TraceFormatError(f"{self.path}: JSON nested more than {self.limit} levels deep (in the "
                                       f"{len(data):,} bytes from byte {self.offset:,}): not a Concordia log (ijson's "
                                       "memory grows with the square of the depth)")
        self.depth += opens - closes
        self.offset += len(orig)
        if b"N" not in rest and b"I" not in rest:  # outside strings, valid JSON has no capital letter but these
            return orig
        out, at, inside = [], 0, start_in_str
        for part in parts:
            end = at + len(part)
            out.append(orig[at:end] if inside else _NONFINITE.sub(_finite_token, orig[at:end]))
            at, inside = end + 1, not inside
        return b'"'.join(out)


#: Python's non-finite JSON numbers (outside strings); a chunk's last bytes that may be (part of) one are held back
#: for the next read (up to 9 of them: -Infinity), so that no token is cut in two
_NONFINITE = re.compile(rb"-?(?:NaN|Infinity)")
_TOKEN_START = re.compile(rb"[-NaInfity]{1,9}\Z")


def _finite_token(m: re.Match[bytes]) -> bytes:
    return b"null" if m.group().endswith(b"NaN") else b'"' + m.group() + b'"'


def _ijson():
    try:
        import ijson
    except ImportError as exc:  # a core dependency; only a broken install lacks it
        raise OptionalDependencyError("reading Concordia logs needs ijson: pip install ijson") from exc
    return ijson


_GZIP = b"\x1f\x8b"


def _gzipped(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == _GZIP
    except OSError:
        return False


def _head(path: Path, n: int = 1 << 16) -> bytes:
    import gzip
    import zlib

    try:
        with _open_log(path) as fh:
            return fh.read(n)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
        return b""


def _open_log(path: Path) -> Any:
    """The log opened for ijson, decompressed where it is gzipped (``log.json.gz``: it was detected as a JSON lines
    table, and as a Concordia log ijson read its compressed bytes, "invalid char in json text"), past a leading UTF-8
    byte-order mark (which Windows tools write; ijson took it for 'invalid char in json text' and the format was not
    detected)."""
    import gzip

    fh: Any = open(path, "rb")
    if fh.read(2) == _GZIP:
        fh.seek(0)
        fh = gzip.GzipFile(fileobj=fh, mode="rb")
    else:
        fh.seek(0)
    if fh.read(len(aio.BOM)) != aio.BOM:
        fh.seek(0)
    return fh


@register_format
class ConcordiaReader(TraceReader):
    """A Concordia structured log (see the module docstring)."""

    name = "concordia"
    unit = "entry"
    spec_keys = frozenset({"action.match"})

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if not path.is_file():
            return False
        head = _head(path).lstrip()
        return head.startswith(b"{") and (b'"content_store"' in head or b'"entries"' in head) and \
            b'"span_id"' not in head

    def _texts(self, ijson: Any, labels: list[tuple[str, re.Pattern[str]]]) -> dict[str, tuple[int, str]]:
        """{content id: (length, action label)} from one streamed pass over ``content_store``."""
        out: dict[str, tuple[int, str]] = {}
        key = None
        try:
            with _open_log(self.path) as source:
                for prefix, event, value in ijson.parse(_Nesting(source, self.path)):
                    if prefix == "content_store" and event == "map_key":
                        key = value
                    elif prefix == "content_store" and event == "end_map":
                        break
                    elif key is not None and prefix == f"content_store.{key}" and event == "string":
                        label = next((lab for lab, rx in labels if rx.search(value)), OTHER) if labels else OTHER
                        out[key] = (len(value), label)
                        key = None
        except ijson.common.IncompleteJSONError as exc:
            self._not_utf8(exc, "in content_store")
            raise TraceFormatError(f"{self.path}: the JSON ends early or is malformed in content_store: {exc} "
                                   "(a truncated log?)") from exc
        except ijson.common.JSONError as exc:
            raise TraceFormatError(f"{self.path}: not valid JSON in content_store: {exc}") from exc
        return out

    def _not_utf8(self, exc: Exception, where: str) -> None:
        """Raise the error that names a log that is not UTF-8 text where ijson's parser stopped at invalid UTF-8 (it
        said "the JSON ends early ... (a truncated log?)" of a Latin-1 log)."""
        if "invalid bytes in UTF8" not in str(exc):
            return
        raise TraceFormatError(f"{self.path}: {not_utf8(file_invalid_at(self.path))} ({where})") from exc

    def batches(self, validator: Validator) -> Iterator[EventBatch]:
        ijson = _ijson()
        spec = self.spec
        if not self.path.is_file():  # a folder was said not to exist
            raise TraceFormatError(f"Concordia log {str(self.path)!r} " + ("does not exist" if not self.path.exists()
                                   else "is not a file (a Concordia log is one JSON document)"))
        refuse_utf16(self.path)
        self.bytes = self.total = self.path.stat().st_size
        if _gzipped(self.path):  # damage (its CRC) and newline bombs named before ijson reads it, as for span shards
            check_gzip([self.path])
            self.total = 0  # progress counts decompressed bytes: the size on disk is no total of them
        labels = [(lab, re.compile(rx)) for lab, rx in (spec.action.match.items() if spec.action else [])]
        fields = [(f, f.startswith("len:"), split_path(f.removeprefix("len:"))) for f in validator.fields]
        need_texts = bool(labels) or any(is_len for _, is_len, _ in fields)
        texts = self._texts(ijson, labels) if need_texts else {}
        p_agent, p_step = split_path(spec.agent.field), split_path(spec.step.field)
        p_action = split_path(spec.action.field) if spec.action else None
        p_where = [(w, split_path(w)) for w in validator.where]
        tally = validator.tally

        def text_of(v: Any, want: str, where: str) -> Any:
            if isinstance(v, dict) and set(v) == {"_ref"}:
                if not need_texts:
                    raise TraceSpecError(f"{where} holds long texts, which Concordia stores by reference: classify "
                                         "them with [action] match = {label = 'regex', ...}")
                got = texts.get(str(v["_ref"]))
                if got is None:
                    return None  # a reference the content store lacks: counted as a missing value
                return got[0] if want == "len" else got[1]
            if want == "len":
                return len(v) if isinstance(v, str) else MISSING
            if labels and isinstance(v, str):
                return next((lab for lab, rx in labels if rx.search(v)), OTHER)
            return v

        def fresh() -> RawRecords:
            return RawRecords(str(self.path), self.unit, values={f: [] for f, _, _ in fields},
                              where={w: [] for w, _ in p_where})

        raw = fresh()
        n = 0
        try:
            with _open_log(self.path) as source:
                fh = _Nesting(source, self.path)
                for entry in ijson.items(fh, "entries.item", use_float=True):
                    n += 1
                    tally.records += 1
                    if not isinstance(entry, dict):
                        msg = f"{self.path} entry {n}: not an object"
                        if spec.on_bad == "error":
                            raise TraceFormatError(msg)
                        tally.skip("entry is not an object", [msg])
                        continue
                    raw.loc.append(n)
                    raw.agent.append(get_path(entry, p_agent))
                    raw.step.append(get_path(entry, p_step))
                    raw.action.append(None if p_action is None else
                                      text_of(get_path(entry, p_action), "label", spec.action.field))
                    for f, is_len, p in fields:
                        v = get_path(entry, p)
                        raw.values[f].append(text_of(v, "len", f) if is_len else v)
                    for w, p in p_where:
                        raw.where[w].append(get_path(entry, p))
                    if len(raw.loc) >= spec.batch_size:
                        self.done = fh.tell()
                        b = validator.to_batch(raw)
                        if b is not None:
                            yield b
                        raw = fresh()
        except ijson.common.IncompleteJSONError as exc:
            self._not_utf8(exc, f"after entry {n}")
            raise TraceFormatError(f"{self.path}: the JSON ends early after entry {n}: {exc} (a truncated log?)") \
                from exc
        except ijson.common.JSONError as exc:
            raise TraceFormatError(f"{self.path}: not valid JSON after entry {n}: {exc}") from exc
        b = validator.to_batch(raw)
        if b is not None:
            yield b
        if n == 0:
            keys = self._keys(ijson)
            if "entries" in keys:  # "has no entries" beside a key list holding 'entries' said nothing
                raise TraceSchemaError(f"{self.path}: 'entries' holds no entry: it is {self._entries_kind(ijson)} "
                                       "(SimulationLog.to_json writes a list of entry objects)")
            raise TraceSchemaError(f"{self.path} has no entries: not a Concordia structured log (SimulationLog.to_json "
                                   f"writes {{'content_store', 'entries', ...}}); top-level keys: {keys}")

    def _entries_kind(self, ijson: Any) -> str:
        """What the top-level 'entries' holds, in words (an empty array, an object, a string ...)."""
        kinds = {"start_array": "an empty array", "start_map": "a JSON object", "string": "a string",
                 "number": "a number", "boolean": "true/false", "null": "null"}
        try:
            with _open_log(self.path) as source:
                for prefix, event, _ in ijson.parse(_Nesting(source, self.path)):
                    if prefix == "entries" and event != "map_key":
                        return kinds.get(event, event)
        except ijson.common.JSONError:
            pass
        return "unreadable"

    def _keys(self, ijson: Any) -> list[str]:
        keys: list[str] = []
        try:
            with _open_log(self.path) as source:
                for prefix, event, value in ijson.parse(_Nesting(source, self.path)):
                    if prefix == "" and event == "map_key":
                        keys.append(value)
        except ijson.common.JSONError:
            pass
        return keys


__all__ = ["ConcordiaReader"]
