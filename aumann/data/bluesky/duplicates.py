"""Replayed lines of one file: the extra copies of its valid lines' keys (:mod:`.ingest`, rule 3), per
``(kind, collection, operation)``.

The keys (8 bytes per valid line) are sorted in numpy, and equal neighbours are the extra copies; only the few
repeated keys go back to DuckDB, which names their groups. numpy's vectorised sort orders the 300 MB benchmark's
640k keys in ~5 ms of one core; reading them, sorting them and naming the 389 repeated ones' groups takes 21 ms wall
(27 CPU-ms), where DuckDB's hash aggregate over every key (``ingest_sql.DUPLICATES``) took 35 ms (64 CPU-ms) on two
threads (medians of 11 alternating runs, load ~4). A file with more valid lines than :data:`SORTED_KEYS_MAX`
is still grouped by DuckDB: its aggregate spills to ``temp_directory`` under ``memory_limit``, keys held in numpy
would not.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from aumann.data.bluesky import ingest_sql as sql

#: the most valid lines whose keys are sorted in numpy (32 MiB of keys); a larger file's are grouped by DuckDB
SORTED_KEYS_MAX = 1 << 22

#: a line's group in the report: ``(kind, collection, operation)`` (collection and operation are None off commits)
Group = tuple[str, str | None, str | None]


def duplicates_by_group(con: Any, valid: int) -> dict[Group, int]:
    """The extra copies of the keys in table ``ev`` (``valid`` valid lines) per group, for the groups that have some."""
    if valid < 2:
        return {}
    if valid > SORTED_KEYS_MAX:
        rows = con.execute(sql.DUPLICATES).fetchall()
    else:
        keys = con.sql(sql.VALID_KEYS).fetchnumpy()["key"]
        keys.sort()
        repeated = keys[1:][keys[1:] == keys[:-1]]  # one entry per extra copy of a key
        if not len(repeated):
            return {}
        con.register("repeated_keys", pd.DataFrame({"key": repeated}))
        try:
            rows = con.execute(sql.DUPLICATES_OF_REPEATED).fetchall()
        finally:
            con.unregister("repeated_keys")
    return {(kind, coll, op): int(n) for kind, coll, op, n in rows}


__all__ = ["SORTED_KEYS_MAX", "duplicates_by_group"]
