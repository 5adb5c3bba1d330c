"""The optional profile snapshot CSV: ``did, followers_count[, created_at, handle]``.

Rows whose ``did`` is not a DID (``did:<method>:<id>``) or whose ``followers_count`` is not a whole,
non-negative number of at most 10¹² (``counts.MAX_COUNT``), and rows with fewer fields than the header (or, among
the rows DuckDB sniffs, more), are skipped and counted (``invalid_rows``); a DID
listed twice keeps its row with the most followers (``duplicate_dids``); an unparseable ``created_at`` (or
one outside the years 1678-2262) reads as unknown (``unparseable_created_at``). The table ``prof`` is left in
the DuckDB connection.
"""

from __future__ import annotations

import os
from pathlib import Path

from aumann.data.bluesky import ingest_sql as sql
from aumann.data.bluesky.counts import MAX_COUNT
from aumann.data.bluesky.ingest_report import IngestReport
from aumann.errors import IngestError
from aumann.io import duckdb_file_name

_VALID = sql.PROFILE_VALID.format(max_count=MAX_COUNT)


def _csv_problem(exc: Exception) -> str:
    """DuckDB's account of a CSV it could not read, without the row it quotes (``Original Line: did:plc:...,alice``:
    a real user's DID and handle in an error message, i.e. on stderr and in logs) and without its sniffer dump."""
    text = str(exc).split("\n\n", 1)[0]
    kept = [line for line in text.splitlines() if not line.startswith("Original Line:")]
    return " ".join(kept)[:200]


def _fields_ok(cols: list[str]) -> str:
    """SQL true for a row with as many fields as the header. DuckDB pads a short row with NULLs (and, where a row
    it sniffs is longer than the header, adds columns ``column<i>`` after the header's): a NULL in a header column
    is a missing field, a value in an added column a field too many (an empty one, as a trailing comma on every
    line leaves, is none)."""
    n = len(cols)
    while n > 2 and cols[n - 1] == f"column{n - 1}":
        n -= 1

    def q(c: str) -> str:
        return '"' + c.replace('"', '""') + '"'

    tests = [f"{q(c)} IS NOT NULL" for c in cols[:n]] + [f"coalesce({q(c)}, '') = ''" for c in cols[n:]]
    return "(" + " AND ".join(tests) + ")"


def load_profiles(con, path: str | os.PathLike[str], report: IngestReport) -> None:
    """Load the snapshot into table ``prof`` of ``con`` and record its statistics in ``report``."""
    p = Path(path)
    if not p.is_file():
        raise IngestError(f"profile snapshot {str(p)!r} does not exist or is not a file")
    import duckdb

    try:
        cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {sql.PROFILES_CSV}",
                                          [duckdb_file_name(p)]).fetchall()]
    except duckdb.Error as exc:
        raise IngestError(f"cannot read profile snapshot {str(p)!r} as CSV: {_csv_problem(exc)}") from exc
    missing = [c for c in ("did", "followers_count") if c not in cols]
    if missing:
        raise IngestError(f"profile snapshot {str(p)!r} lacks columns {missing}; it has {cols} "
                          "(needs did, followers_count; optional created_at, handle)")
    try:
        con.execute(sql.PROFILES.format(
            created="trim(created_at)" if "created_at" in cols else "NULL::VARCHAR",
            handle="nullif(trim(handle), '')" if "handle" in cols else "NULL::VARCHAR",
            fields_ok=_fields_ok(cols)), [duckdb_file_name(p)])
        con.execute(sql.PROFILES_CLEAN.format(valid=_VALID, created_at=sql.CREATED_AT))
    except duckdb.Error as exc:
        raise IngestError(f"cannot read profile snapshot {str(p)!r} as a UTF-8 CSV: {_csv_problem(exc)}") from exc
    rows, valid, bad_dates = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE {_VALID}), "
        "count(*) FILTER (WHERE created_raw IS NOT NULL AND created_raw <> '' "
        f"AND {sql.CREATED_AT} IS NULL) FROM prof_raw").fetchone()
    uniq = con.execute("SELECT count(*) FROM prof").fetchone()[0]
    report.profiles = {"rows": int(rows), "invalid_rows": int(rows - valid), "duplicate_dids": int(valid - uniq),
                       "unparseable_created_at": int(bad_dates)}


__all__ = ["load_profiles"]
