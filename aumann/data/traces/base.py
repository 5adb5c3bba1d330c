"""The reader protocol and registry: one small class per trace format, registered by name.

A reader knows how to find records in its format and hands their raw field values to the shared
:class:`~aumann.data.traces.events.Validator` in runs of ``spec.batch_size``; it never builds features
itself, so every format obeys the same spec in the same way. Register your own with
:func:`register_format` (a class with ``name``, ``sniff`` and ``batches``; ``edges`` if exposure
features can find edges in it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from aumann.data.traces.events import EventBatch, RawRecords, Validator
from aumann.data.traces.spec import EdgesSpec, TraceSpec
from aumann.errors import TraceError, TraceSchemaError


class TraceReader:
    """Base of the format readers (see the module docstring)."""

    name: ClassVar[str] = ""
    #: what a record is called in messages: "line", "row", "entry"
    unit: ClassVar[str] = "record"

    @classmethod
    def sniff(cls, path: Path) -> bool:
        """Whether ``path`` looks like this format (cheap: a few bytes or one line)."""
        return False

    def __init__(self, path: Path, spec: TraceSpec) -> None:
        self.path = path
        self.spec = spec
        self.sources: list[str] = [str(path)]
        self.bytes = 0

    def batches(self, validator: Validator) -> Iterator[EventBatch]:
        raise NotImplementedError

    def edges(self, edges: EdgesSpec, ids: dict[Any, int], coder: Any) -> tuple[np.ndarray, np.ndarray,
                                                                                 np.ndarray | None, dict[str, int]]:
        """(source positions, target positions, since steps or None, counts) of an exposure feature's edges."""
        if edges.path is None:
            raise TraceSchemaError(f"{self.name} traces hold no edge table {edges.table!r}: give [features.edges] "
                                   "path = 'edges.csv' (source, target and optionally since columns)")
        from aumann.data.traces.table import read_edge_file

        return read_edge_file(Path(edges.path), edges, ids, coder)


def split_path(path: str) -> tuple[str, ...]:
    return tuple(path.split("/"))


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


_FORMATS: dict[str, type[TraceReader]] = {}


def register_format(cls: type[TraceReader], *, overwrite: bool = False) -> type[TraceReader]:
    """Register a reader class under ``cls.name`` (usable as a decorator)."""
    if not cls.name:
        raise TraceError(f"reader {cls.__name__} has no name")
    if cls.name in _FORMATS and not overwrite:
        raise TraceError(f"trace format {cls.name!r} is already registered (overwrite=True replaces it)")
    _FORMATS[cls.name] = cls
    return cls


def reader_class(name: str) -> type[TraceReader]:
    from aumann.errors import TraceSpecError

    _load_builtins()
    try:
        return _FORMATS[name]
    except KeyError:
        raise TraceSpecError(f"unknown trace format {name!r}; known formats: {sorted(_FORMATS)}") from None


def format_names() -> list[str]:
    _load_builtins()
    return sorted(_FORMATS)


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of ``path`` (first registered reader whose ``sniff`` says yes; built-ins in the order
    oasis, otel, concordia, table).

    Raises:
        TraceFormatError: nothing recognises it (the message says what was looked at).
    """
    from aumann.errors import TraceFormatError

    _load_builtins()
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(f"trace {str(p)!r} does not exist")
    for name, cls in sorted(_FORMATS.items(), key=lambda kv: kv[0] == "table"):  # the catch-all last
        if cls.sniff(p):
            return name
    raise TraceFormatError(f"cannot tell the format of {str(p)!r}: not an SQLite database with a trace table "
                           "(OASIS), OpenTelemetry JSONL spans, a Concordia structured log (JSON with 'entries'), "
                           "nor a CSV/Parquet/JSONL table; name it with format = '...' in a spec")


def _load_builtins() -> None:
    if not _FORMATS:
        from aumann.data.traces import concordia, oasis, otel, table  # noqa: F401  (each registers itself)


__all__ = ["TraceReader", "batched", "detect_format", "format_names", "reader_class", "register_format", "split_path"]
