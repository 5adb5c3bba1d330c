"""The reader protocol and registry: one small class per trace format, registered by name.

A reader knows how to find records in its format and hands their raw field values to the shared
:class:`~aumann.data.traces.events.Validator` in runs of ``spec.batch_size``; it never builds features
itself, so every format obeys the same spec in the same way. Register your own with
:func:`register_format` (a class with ``name``, ``sniff`` and ``batches``; ``edges`` if exposure
features can find edges in it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from aumann.data.traces.duck import refuse_utf16
from aumann.data.traces.events import EventBatch, RawRecords, Tally, Validator
from aumann.data.traces.spec import EdgesSpec, TraceSpec
from aumann.errors import TraceError, TraceFormatError, TraceSchemaError


class TraceReader:
    """Base of the format readers (see the module docstring)."""

    name: ClassVar[str] = ""
    #: what a record is called in messages: "line", "row", "entry"
    unit: ClassVar[str] = "record"
    #: the format-specific spec keys this reader reads (:data:`aumann.data.traces.scope.FORMAT_KEYS`: ``"table"``,
    #: ``"csv"``, ``"step.inherit"``, ``"features.edges.table"``, ``"action.match"``); a spec giving another is refused
    #: before the read. ``None`` (a reader that does not say, e.g. one registered before readers declared them): every
    #: such key reaches it, as before
    spec_keys: ClassVar[frozenset[str] | None] = None

    @classmethod
    def sniff(cls, path: Path) -> bool:
        """Whether ``path`` looks like this format (cheap: a few bytes or one line)."""
        return False

    def __init__(self, path: Path, spec: TraceSpec) -> None:
        self.path = path
        self.spec = spec
        self.sources: list[str] = [str(path)]
        self.bytes = 0
        #: progress: units of work in all (rows, bytes; 0 = unknown) and done so far (readers update both)
        self.total = 0
        self.done = 0
        #: bad edge rows skipped under on_bad = "skip" (by reason, first locations): the report's edges_skipped
        self.edge_tally = Tally()

    def batches(self, validator: Validator) -> Iterator[EventBatch]:
        raise NotImplementedError

    def edges(self, edges: EdgesSpec, ids: dict[Any, int], coder: Any) -> tuple[np.ndarray, np.ndarray,
                                                                                 np.ndarray | None, dict[str, int]]:
        """(source positions, target positions, since steps or None, counts) of an exposure feature's edges."""
        if edges.path is None:
            raise TraceSchemaError(f"{self.name} traces hold no edge table {edges.table!r}: give [features.edges] "
                                   "path = 'edges.csv' (source, target and optionally since columns)")
        from aumann.data.traces.edgefile import read_edge_file

        return read_edge_file(Path(edges.path), edges, ids, coder, spec=self.spec, tally=self.edge_tally)


def batched(records: Iterator[tuple[Any, ...]], raw_factory: Callable[[], RawRecords],
            validator: Validator, size: int) -> Iterator[EventBatch]:
    """Group ``(loc, agent, step, action, {field: v}, {where: v})`` tuples into validated batches."""
    raw = raw_factory()
    fields = validator.fields
    wheres = list(validator.where)
    for loc, agent, step, action, vals, wh in records:
        raw.loc.append(loc)
        raw.agent.append(agent)
        raw.step.append(step)
        raw.action.append(action)
        for f in fields:
            raw.values.setdefault(f, []).append(vals[f])
        for w in wheres:
            raw.where.setdefault(w, []).append(wh[w])
        if len(raw.loc) >= size:
            _fill(raw, fields, wheres)
            b = validator.to_batch(raw)
            if b is not None:
                yield b
            raw = raw_factory()
    if raw.loc:
        _fill(raw, fields, wheres)
        b = validator.to_batch(raw)
        if b is not None:
            yield b


def _fill(raw: RawRecords, fields: list[str], wheres: list[str]) -> None:
    for f in fields:
        raw.values.setdefault(f, [])
    for w in wheres:
        raw.where.setdefault(w, [])


def refuse_damaged_gzip(path: Path, head: int = 1 << 16) -> None:
    """Refuse a gzipped file whose first ``head`` bytes do not decompress (not gzip, a damaged header or deflate
    data, cut short within them), naming it: detection read such a file as no span line and, by its name, took it
    for a long table (``cannot be read`` then became "format 'table' has no default spec"). Damage further in is
    named by the reader, at the line it reaches."""
    import gzip
    import zlib

    if not path.name.lower().endswith(".gz"):
        return
    try:
        with gzip.open(path, "rb") as fh:
            fh.read(head)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceFormatError(f"{str(path)!r} is a damaged or truncated gzip file: {exc}") from exc
    except OSError:  # cannot be opened: said elsewhere
        return


_FORMATS: dict[str, type[TraceReader]] = {}


def registered() -> dict[str, type[TraceReader]]:
    """The registered readers by name (the built-ins load through :mod:`aumann.data.traces.formats`)."""
    return _FORMATS


def register_format(cls: type[TraceReader], *, overwrite: bool = False) -> type[TraceReader]:
    """Register a reader class under ``cls.name`` (usable as a decorator)."""
    if not cls.name:
        raise TraceError(f"reader {cls.__name__} has no name")
    if cls.name in _FORMATS and not overwrite:
        raise TraceError(f"trace format {cls.name!r} is already registered (overwrite=True replaces it)")
    _FORMATS[cls.name] = cls
    return cls


__all__ = ["TraceReader", "batched", "refuse_damaged_gzip", "refuse_utf16", "register_format", "registered"]
