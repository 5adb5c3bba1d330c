"""Which spec keys reach the trace at hand: a key that would change nothing for its format is refused, by name.

A spec is validated once for its shape (:mod:`aumann.data.traces.spec`: unknown keys, inconsistent features). Some
keys are only read by one format's reader or only in one mode, and elsewhere were accepted and silently ignored: a
top-level ``[csv] decimal_separator = ","`` in an OASIS, OpenTelemetry or Concordia spec (the user believed it
applied), ``table`` outside OASIS, ``[step] inherit = "trace"`` outside OpenTelemetry, ``[step] unit`` / ``origin``
without ``bin``, ``[features.edges] table`` outside OASIS (refused only after the whole trace was read), ``[action]
match`` outside Concordia (no other reader classified its actions: they were counted as written). Each is a
:class:`~aumann.errors.TraceSpecError` here, naming the key, the format and what to write instead, before any record
is read. A key holding its default value is never refused (stating the default changes nothing, and means nothing
else).

A reader declares the format-specific keys it reads in :attr:`~aumann.data.traces.base.TraceReader.spec_keys` (a
reader of your own that reads ``spec.table`` lists ``"table"``); one that declares none (``None``, the default) is
handed every such key unchecked, as before.
"""

from __future__ import annotations

from collections.abc import Iterator

from aumann.data.traces.spec import CsvSpec, TraceSpec
from aumann.errors import TraceSpecError

#: the format-specific keys, and what each is for (said in the error)
FORMAT_KEYS: dict[str, str] = {
    "table": "names the table of an OASIS SQLite database the events are read from",
    "csv": "describes a CSV long table's layout (format = 'table')",
    "step.inherit": "gives an OpenTelemetry span without the step field the step of its trace",
    "features.edges.table": "names an edge table of the OASIS SQLite database",
    "action.match": "classifies a Concordia log's free-text actions by regular expression",
}

#: what to write instead, per key
_INSTEAD: dict[str, str] = {
    "table": "remove it (a long table is chosen by the trace's path: --trace FILE, a directory or a glob)",
    "csv": "remove [csv]: this format's numbers carry a decimal point and its records have no header line (a CSV "
           "edge file's layout is [features.edges.csv])",
    "step.inherit": "remove it: every record of this format needs its own step field",
    "features.edges.table": "give the edges as a file: [features.edges] path = 'edges.csv' (source, target and "
                            "optionally since columns)",
    "action.match": "this format's actions are compared as written: remove match, and list them in [action] "
                    "include / a feature's actions, or write the labels into the action field",
}


def _given(spec: TraceSpec) -> Iterator[tuple[str, str]]:
    """(key, how it was given) of each format-specific key of ``spec`` that holds more than its default."""
    if spec.table is not None:
        yield "table", f"table = {spec.table!r}"
    if spec.csv != CsvSpec():
        shown = ", ".join(f"{k} = {v!r}" for k, v in spec.csv.model_dump().items() if v != getattr(CsvSpec(), k))
        yield "csv", f"[csv] {shown}"
    if spec.action is not None and spec.action.match:
        yield "action.match", f"[action] match = {spec.action.match!r}"
    if spec.step.inherit != "none":
        yield "step.inherit", f"[step] inherit = {spec.step.inherit!r}"
    for f in spec.features:
        if f.edges is not None and f.edges.table is not None:
            yield "features.edges.table", f"feature {f.label()!r}: [features.edges] table = {f.edges.table!r}"


def declared_keys(reader: type) -> frozenset[str]:
    """The format-specific keys a reader class reads: its ``spec_keys``, or every key when it declares none (a
    reader of your own registered without ``spec_keys`` is handed the spec as before, unchecked)."""
    keys = getattr(reader, "spec_keys", None)
    return frozenset(FORMAT_KEYS) if keys is None else frozenset(keys)


def check_scope(spec: TraceSpec, fmt: str, reads: frozenset[str]) -> None:
    """Refuse a key of ``spec`` that would have no effect on a trace of format ``fmt``, whose reader reads the
    format-specific keys ``reads`` (:data:`FORMAT_KEYS`).

    Raises:
        TraceSpecError: naming the key, the format and what to do instead.
    """
    for key, shown in _given(spec):
        if key not in reads:
            raise TraceSpecError(f"{shown}: this key {FORMAT_KEYS[key]}, and a {fmt!r} trace is read without it "
                                 f"(it would change nothing): {_INSTEAD[key]}")
    st = spec.step
    if st.bin is None:
        for key, default in (("unit", "s"), ("origin", None)):
            v = getattr(st, key)
            if v != default:
                raise TraceSpecError(f"[step] {key} = {v!r}: {key} applies to timestamps binned into steps ([step] "
                                     f"bin = '1h', or --bin), and without bin the step field holds integer steps, "
                                     f"which {key} does not change ({fmt!r} trace): add bin, or remove {key}")
    elif st.unit != "s" and not isinstance(st.bin, str) and "csv" not in reads:
        # a numeric bin bins numbers in their own units; unit only scales a Parquet duration column of a long table
        raise TraceSpecError(f"[step] unit = {st.unit!r} with a numeric bin ({st.bin!r}): a numeric bin counts the "
                             f"step field's own units, and unit changes nothing for a {fmt!r} trace (it scales a "
                             "long table's Parquet durations only): give bin as a duration (bin = '1h' with unit = "
                             "'ms' bins epoch milliseconds into hours), or remove unit")


__all__ = ["FORMAT_KEYS", "check_scope", "declared_keys"]
