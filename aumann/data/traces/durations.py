"""Parquet durations (pandas ``timedelta64``, polars ``Duration``) as the numbers they mean: pyarrow writes the counts
of the duration's unit as INT64 with the unit in its Arrow schema only, which DuckDB does not read. Shared by the
long-table reader (the step and numeric fields) and edge files (their ``since``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aumann.data.traces.events import split_path
from aumann.errors import TraceSchemaError

#: seconds per unit of an Arrow duration (and of the spec's ``[step] unit``)
_SECONDS = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def duration_scales(files: list[Path], want: dict[str, str], *, binned: bool, unit: str,
                    steps: frozenset[str] = frozenset({"step"}),
                    what: str = "step field") -> dict[str, tuple[int, int]]:
    """{selected key: (multiplier, divisor)} for the spec's fields that Parquet ``files`` hold as Arrow durations
    (pandas ``timedelta64``, polars ``Duration``). Parquet has no duration type: pyarrow writes the counts of the
    duration's unit as INT64 and the unit in its Arrow schema, which DuckDB does not read: one second was the step (or
    the amount) 1,000,000 (microseconds) or 10⁹ (nanoseconds), silently. A numeric field's duration is read in
    seconds; the step field's, which is a time since some origin, not an integer step, only binned (``[step] bin``),
    in the spec's ``unit``. A field that is a duration in one file and not in another, or in another unit, is
    refused: no one scale reads all of them. A step or numeric field holding pandas Periods (stored as ordinals) is
    refused.

    ``binned`` / ``unit``: the spec's ``[step]`` (``step.binned``, ``step.unit``); ``steps``: the keys of ``want`` that
    are times like the step (an edge file's ``since``), named ``what`` in the errors; the keys ``agent``, ``action``,
    ``source``, ``target`` and ``w...`` (ids and labels) are passed over."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    found: dict[str, dict[str, str | None]] = {}
    for f in files:
        try:
            schema = pq.read_schema(f)
        except Exception:  # pyarrow cannot read a schema DuckDB read: DuckDB's types stand
            return {}
        for k, path in want.items():
            if k in ("agent", "action", "source", "target") or (k.startswith("w") and k[1:].isdigit()):
                continue
            t: Any = schema
            fld: Any = None
            for part in split_path(path):
                i = t.get_field_index(part) if isinstance(t, pa.Schema | pa.StructType) else -1
                if i < 0:
                    t = None
                    break
                fld = t.field(i)
                t = fld.type
            if t is not None and extension_name(fld) == "pandas.period":
                # a pandas Period is stored as its ordinal (days, months ... since 1970) with the frequency in the
                # Arrow schema only: binned with --bin 1d, the days 2026-04-20 … 23 were the seconds 20563 … 20566,
                # one bin at 1970-01-01; unbinned, the steps 20563 …
                named = what if k in steps else "field"
                raise TraceSchemaError(f"{named} {path!r} of {str(f)!r} holds pandas Periods, which Parquet stores as "
                                       "their ordinals (counts of the period since 1970, the frequency in the Arrow "
                                       "schema only) and DuckDB reads as plain integers: write their start times "
                                       "instead (df[col] = df[col].dt.start_time)")
            found.setdefault(k, {})[str(f)] = t.unit if t is not None and pa.types.is_duration(t) else None
    out: dict[str, tuple[int, int]] = {}
    for k, units in found.items():
        kinds = set(units.values())
        if kinds == {None}:
            continue
        field_path = want[k]
        if len(kinds) > 1:
            shown = ", ".join(f"{Path(f).name}: {'duration[' + u + ']' if u else 'no duration'}"
                              for f, u in list(units.items())[:5])
            raise TraceSchemaError(f"field {field_path!r} is a Parquet duration of more than one unit, or a duration "
                                   f"in some files and not in others ({shown}): write it with one type in every file")
        held = kinds.pop()
        assert held is not None
        if k in steps:
            if not binned:
                raise TraceSchemaError(f"{what} {field_path!r} holds durations (a Parquet duration[{held}], pandas "
                                       "timedelta64), not integer steps: bin them into steps with --bin 1h (or [step] "
                                       "bin = '1h', or a number of seconds such as bin = 3600, in the spec)")
            target = _SECONDS[unit]
        else:
            target = 1
        num, den = target, _SECONDS[held]
        out[k] = (num // den, 1) if num % den == 0 else (1, den // num)
    return out


def extension_name(fld: Any) -> str | None:
    """The Arrow extension type a Parquet column was written as (``pandas.period``): its type's name where the
    extension is registered in this process, else its field's metadata."""
    name = getattr(fld.type, "extension_name", None)
    if name is None and fld.metadata:
        raw = fld.metadata.get(b"ARROW:extension:name")
        name = raw.decode("utf-8", "replace") if raw is not None else None
    return name


def scaled(sql: str, scale: tuple[int, int] | None) -> str:
    """``sql`` times ``scale``'s multiplier over its divisor (a DOUBLE where it divides), or as it is."""
    if scale is None:
        return sql
    num, den = scale
    if den == 1:
        return sql if num == 1 else f"({sql} * {num})"
    return f"(CAST({sql} AS DOUBLE) / {den})"


__all__ = ["duration_scales", "extension_name", "scaled"]
