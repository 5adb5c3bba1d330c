"""Edges of exposure features: endpoints mapped to panel positions, and bad edge rows refused or skipped and counted.

An edge row is *bad* where a node (event) record with the same fault is: an endpoint that is no usable agent id
(null, an empty field, ``true``/``false``, NaN, an infinity, a list or an object), a ``since`` that is no step or
timestamp (or out of range), and, in a file, a line that does not parse (:mod:`aumann.data.traces.edgefile`). Under
``on_bad = "error"`` the first is refused naming its line or row (:class:`~aumann.errors.TraceRecordError`); under
``on_bad = "skip"`` each is skipped and counted by reason with its first locations (:class:`EdgeRows`), reported as
``edges_skipped`` beside the records' ``skipped``. An endpoint that is a good id of no agent (one that never acted)
is not bad: the edge is dropped and counted as ``unknown_endpoint``, as a filtered record is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from aumann.data.traces.events import _DECIMAL_COMMA, KEEP_LOCATIONS, Tally
from aumann.data.traces.idtext import _FLOAT_TEXT as _NUMBER_TEXT
from aumann.data.traces.idtext import _number_ids, id_text
from aumann.errors import TraceRecordError

#: what an error adds: how to read on past such rows
_SKIP_HINT = "on_bad = 'skip' in the spec skips and counts such edge rows"


class EdgeRows:
    """Bad edge rows under the spec's ``on_bad``: refused naming the first (``"error"``), or skipped and counted in
    ``tally`` by reason with the first :data:`~aumann.data.traces.events.KEEP_LOCATIONS` locations (``"skip"``).
    ``locate(i)``: the place of the ``i``-th row handed over (``links.csv line 5``, ``db table 'follow' row 4``),
    which the error and the report name."""

    def __init__(self, on_bad: str, tally: Tally, locate: Callable[[int], str]) -> None:
        self.on_bad, self.tally, self.locate = on_bad, tally, locate

    def refuse(self, bad: np.ndarray, why: str, said: Callable[[int], str] | None = None) -> np.ndarray:
        """Apply ``on_bad`` to the rows in ``bad`` (``said(i)``: the error's words for row ``i``, default ``why``);
        returns the rows kept (``~bad``)."""
        if not bad.any():
            return ~bad
        at = np.flatnonzero(bad)
        if self.on_bad == "error":
            i = int(at[0])
            raise TraceRecordError(f"{self.locate(i)}: {said(i) if said else why} ({at.size:,} such edge "
                                   f"row(s); {_SKIP_HINT})")
        self.tally.skip(why, [self.locate(int(i)) for i in at[:KEEP_LOCATIONS]], n=int(at.size))
        return ~bad

    def count(self, bad: np.ndarray, why: str) -> np.ndarray:
        """Skip and count the rows in ``bad`` under ``why`` whatever ``on_bad`` says (rows that were dropped and
        counted before under another name, which no setting refused); returns the rows kept (``~bad``)."""
        if bad.any():
            at = np.flatnonzero(bad)
            self.tally.skip(why, [self.locate(int(i)) for i in at[:KEEP_LOCATIONS]], n=int(at.size))
        return ~bad


def edge_positions(source: Sequence[Any], target: Sequence[Any], since: Sequence[Any] | None, ids: dict[Any, int],
                   coder: Any, what: str, *, csv: bool = False, rows: EdgeRows | None = None,
                   fields: tuple[str, str, str | None] = ("source", "target", "since"),
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, int]]:
    """Map edge endpoints to panel positions; edges with an endpoint that never acted are dropped (counted as
    ``unknown_endpoint``), and an edge (source, target) listed more than once is kept once, from its earliest
    ``since`` (the others counted as ``duplicate``). Bad rows (an endpoint that is no usable id, a ``since`` that is
    no step) go to ``rows`` (default: refused, named ``what edge N``); ``fields``: the edge spec's source, target
    and since fields, named in the reasons.

    An endpoint reaches the agent whose id it is by the rule of agent ids: the id's label in the panel (``1`` and
    ``"1"`` are one agent; ``"01"``, ``" 1"`` and ``"+1"`` are ids of their own, as text is as written; a whole-valued
    float is the integer; ``true``, NaN and infinities are no id). ``csv``: the endpoints come from a CSV file, which
    has no types, so they were read as text: one that spells a number as a CSV agent column of numbers reads it
    (``1.0``, ``1e0``: no space, leading zero or plus) reaches the agent of that number where no agent has the text
    itself as its id (the event table's column of numbers read ``1.0`` as the id ``1``)."""
    if rows is None:
        rows = EdgeRows("error", Tally(), lambda i: f"{what} edge {i + 1}")
    keyed = {_label(k): v for k, v in ids.items()}
    keyed.pop(None, None)

    def find(v: Any) -> int:
        label = _label(v)
        if label is None:
            return -2  # no usable id: a bad row
        at = keyed.get(label, -1)
        if at < 0 and isinstance(v, bytes | bytearray):
            return -3  # bytes that are no UTF-8 text (a Parquet binary column) of no agent: not an id, a bad row
        if at < 0 and csv and isinstance(v, str) and _NUMBER_TEXT.fullmatch(v):
            n = _number_ids([v])[0]
            if not isinstance(n, str):
                at = keyed.get(_label(n), -1)
        return at

    n = len(source)
    s = np.fromiter((find(v) for v in source), dtype=np.int64, count=n)
    t = np.fromiter((find(v) for v in target), dtype=np.int64, count=n)
    bad: list[tuple[np.ndarray, str, Callable[[int], str] | None]] = [
        (s == -2, f"no usable agent id in edge field {fields[0]!r}", None),
        (t == -2, f"no usable agent id in edge field {fields[1]!r}", None)]
    steps = miss = None
    if since is not None:
        steps, miss, sbad, far, time_far = coder.code(since if isinstance(since, np.ndarray) else list(since))

        def said(i: int, far: np.ndarray = far, time_far: np.ndarray = time_far) -> str:
            v = since[i]
            shown = str(v) if isinstance(v, np.datetime64) else repr(v)
            why = ("is out of range (beyond ±2⁵³ steps)" if far[i] else
                   "is out of range (a year after 9999)" if time_far[i] else "is not a step/timestamp")
            if csv and isinstance(v, str) and _DECIMAL_COMMA.fullmatch(v):  # a European CSV edge file's 0,5
                why += (": it looks like a number with a decimal comma (1,5); a CSV edge file reads such numbers "
                        "with [features.edges.csv] decimal_separator = ','")
            return f"since = {shown} {why}"

        bad.append((sbad, f"edge field {fields[2]!r} is not a step/timestamp, or out of range", said))
    keep = np.ones(n, dtype=bool)
    for mask, why, say in sorted((b for b in bad if b[0].any()), key=lambda b: int(np.argmax(b[0]))):
        keep &= rows.refuse(mask & keep, why, say)  # under 'error': the first bad row of the file is named
    # an endpoint of bytes that are no UTF-8 text (a Parquet BYTE_ARRAY column without the UTF-8 annotation; UTF-8
    # bytes were read as their text) and no agent's id was counted as an unknown_endpoint, a good id of an agent that
    # never acted; it is a value of the wrong type, as OASIS says of such a BLOB: skipped and counted by its reason
    # (under either on_bad, as the unknown endpoint it was counted as was)
    for k, code in enumerate((s, t)):
        keep &= rows.count((code == -3) & keep, f"edge field {fields[k]!r} holds bytes that are not UTF-8 text, where "
                                               "an agent id belongs (no agent has them as its id)")
    ok = keep & (s >= 0) & (t >= 0)
    info = {"edges": n, "used": int(ok.sum()), "unknown_endpoint": int((keep & ~ok).sum()),
            "skipped": int((~keep).sum())}
    st = None
    if steps is not None and miss is not None:
        info["no_since"] = int((miss & ok).sum())
        steps = np.where(miss, np.iinfo(np.int64).min // 2, steps)  # an edge without a time: always there
        st = steps[ok]
    s, t = s[ok], t[ok]
    # an edge listed twice (a follow logged again, an edge list with repeats) is one edge, from its earliest since:
    # exposure sums over the agent's targets, and a repeated row counted the target's activity twice
    order = np.lexsort((st, t, s)) if st is not None else np.lexsort((t, s))
    first = np.ones(s.size, dtype=bool)
    first[1:] = (s[order][1:] != s[order][:-1]) | (t[order][1:] != t[order][:-1])
    kept = np.sort(order[first])
    info["duplicate"] = int(s.size - kept.size)
    return s[kept], t[kept], None if st is None else st[kept], info


def _label(v: Any) -> str | None:
    """An agent id's label in the panel (the builder's: its text, a whole-valued float the integer's); ``None`` for
    what is no id (``None``, a boolean, NaN, an infinity, empty text, a list or an object). Two ids with one label
    are one agent (``1`` and ``"1"``); text is as written (``"01"`` and ``" 1"`` are not ``1``)."""
    t = type(v)
    if t is int:  # the common cases first: this runs twice per edge
        return str(v)
    if t is str:
        return v or None
    if v is None or isinstance(v, bool | np.bool_ | list | dict):
        return None
    if isinstance(v, np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        if not math.isfinite(v):
            return None
        return str(int(v)) if float(v).is_integer() else str(float(v))
    return id_text(v)


__all__ = ["EdgeRows", "edge_positions"]
