"""The format registry with the built-in readers loaded: look a reader up by name, or detect a trace's format."""

from __future__ import annotations

import os
from pathlib import Path

from aumann.data.traces import concordia, oasis, otel, table  # noqa: F401  (each registers its reader)
from aumann.data.traces.base import TraceReader, refuse_damaged_gzip, refuse_utf16, registered

_FORMATS = registered()


def reader_class(name: str) -> type[TraceReader]:
    from aumann.errors import TraceSpecError

    try:
        return _FORMATS[name]
    except KeyError:
        raise TraceSpecError(f"unknown trace format {name!r}; known formats: {sorted(_FORMATS)}") from None


def format_names() -> list[str]:
    return sorted(_FORMATS)


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of ``path`` (first registered reader whose ``sniff`` says yes; built-ins in the order
    oasis, otel, concordia, table).

    Raises:
        TraceFormatError: nothing recognises it (the message says what was looked at).
    """
    from aumann.errors import TraceFormatError

    p = Path(path)
    if not p.exists():
        raise TraceFormatError(f"trace {str(p)!r} does not exist")
    if p.is_file():  # an unreadable file fails every sniff, and was 'cannot tell the format' or a 'table'
        try:
            open(p, "rb").close()
        except OSError as exc:
            raise TraceFormatError(f"trace {str(p)!r} cannot be read: {exc.strerror or exc}") from exc
        refuse_utf16(p)  # else detected by its name as a long table, and refused as one that needs a spec
    for name, cls in sorted(_FORMATS.items(), key=lambda kv: kv[0] == "table"):  # the catch-all last
        if name == "table":  # before the catch-all guesses by the names: a gzipped file no other sniff could read
            for f in [p] if p.is_file() else sorted(p.iterdir()) if p.is_dir() else []:
                if f.is_file() and not f.name.startswith(("_", ".")):
                    refuse_damaged_gzip(f)  # (a span file damaged at its start was read as a long table)
        if cls.sniff(p):
            return name
    if p.is_dir():
        _refuse_run_folder(p)
    raise TraceFormatError(f"cannot tell the format of {str(p)!r}: not an SQLite database with a trace table "
                           "(OASIS), OpenTelemetry JSONL spans, a Concordia structured log (JSON with 'entries'), "
                           "nor a CSV/Parquet/JSONL table; name it with format = '...' in a spec")


def _refuse_run_folder(p: Path) -> None:
    """Name what to pass for an AgentSociety 2 run folder (``trace/`` span shards beside ``replay/`` tables): the
    folder holds two traces of different kinds (who generated the activity: the spans; the environment's states:
    each replay table), so it is not read as either; 'cannot tell the format' said nothing of them."""
    from aumann.errors import TraceFormatError

    spans = p / "trace"
    if not (spans.is_dir() and _FORMATS["otel"].sniff(spans)):
        return
    replay = p / "replay"
    tables = sorted({f.name.split(".")[0] for f in replay.iterdir() if f.is_file() and not f.name.startswith(("_", "."))
                     and f.name.lower().endswith((".jsonl", ".jsonl.gz"))}) if replay.is_dir() else []
    also = (f"; its replay tables ({', '.join(tables[:5])}{', ...' if len(tables) > 5 else ''}) are long tables: "
            f"--trace '{replay / tables[0]}.*.jsonl' (quoted) with a --spec naming their columns (docs/traces.md, "
            "AgentSociety 2)") if tables else ""
    raise TraceFormatError(f"{str(p)!r} is an AgentSociety 2 run folder, not one trace: its spans are in "
                           f"{str(spans)!r} (--trace {spans}){also}")


__all__ = ["detect_format", "format_names", "reader_class"]
