"""OTLP/JSON envelopes and the Python SDK's span lines, normalised into flat span records.

One decoded line of the OpenTelemetry protocol's JSON encoding (``{"resourceSpans": [{"resource": {"attributes":
[...]}, "scopeSpans": [{"scope", "spans": [...]}]}]}``, attributes as ``{"key", "value": {"stringValue" |
"intValue" | ...}}`` lists, ids in hex, times as decimal strings), or one ``ReadableSpan.to_json()`` line of the
Python SDK, becomes the flat span records the span reader (:mod:`aumann.data.traces.otel`) reads:
``resource/…``, ``scope/…``, ``trace_id``, ``span_id``, ``parent_span_id``, ``name``, ``kind``,
``start_time_unix_nano``, ``end_time_unix_nano``, ``status``, ``attributes/…``, ``events``. A part of the wrong JSON
type is a :class:`~aumann.errors.SpanShapeError`; a key given twice in an object the reader interprets is reported
(:func:`repeated_structure`, the ``twice`` lists of :func:`normalise`) so that the reader refuses, or skips and
counts, the record rather than keep json's last value. Reads nothing from disk.
"""

from __future__ import annotations

import re
from typing import Any

from aumann.data.traces.events import given_twice, keys_twice
from aumann.errors import SpanShapeError


def _jtype(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(v), "number")


def _obj(v: Any, what: str) -> dict[str, Any]:
    """``v`` where an object belongs (``None``: empty); else :class:`SpanShapeError`."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise SpanShapeError(f"{what} is a JSON {_jtype(v)}, not an object")
    return v


def _arr(v: Any, what: str) -> list[Any]:
    """``v`` where an array belongs (``None``: empty); else :class:`SpanShapeError`."""
    if v is None:
        return []
    if not isinstance(v, list):
        raise SpanShapeError(f"{what} is a JSON {_jtype(v)}, not an array")
    return v


#: the keys the reader interprets in each object of an OTLP envelope and of an SDK span line: one of them given twice
#: in one object is ambiguous (json keeps the last value: a first ``spans`` list, and every span in it, was dropped
#: without a word), so the record is refused, or skipped and counted, as a flat line giving a key twice is
_RS_KEYS = ("resource", "scopeSpans", "instrumentationLibrarySpans")
_SS_KEYS = ("scope", "instrumentationLibrary", "spans")
_SPAN_OBJ_KEYS = ("traceId", "spanId", "parentSpanId", "name", "kind", "startTimeUnixNano", "endTimeUnixNano",
                  "status", "attributes", "events")
_VALUE_KEYS = ("stringValue", "boolValue", "doubleValue", "intValue", "arrayValue", "kvlistValue")
_SDK_KEYS = ("name", "context", "parent_id", "kind", "start_time", "end_time", "status", "attributes", "events",
             "resource")

#: an OTLP intValue as the protocol's JSON encoding writes it (int() also took ' 1', '1_0' and '١', and cut 1.5 to 1:
#: the agent ' 1' of a stringValue was the agent 1 of an intValue, and an amount of 1.5 was 1)
_INT64_TEXT = re.compile(r"[-+]?[0-9]+")

#: an entry of a span's ``twice`` list: a field path (a tuple), a repeat that makes the span bad where the spec reads
#: that path or below it; or a path as text, a repeat that makes the span bad whatever the spec reads
Twice = tuple[str, ...] | str


def repeated_structure(rec: dict[str, Any]) -> str | None:
    """The path (``resourceSpans/scopeSpans/spans``) of a key that an object of an OTLP envelope above its spans,
    or of an SDK span line, gives twice among the keys the reader interprets; ``None`` where none does (``rec``
    decoded with :func:`~aumann.data.traces.events.keyed_pairs`). Such a line is one bad record: which of the
    values is meant is ambiguous, and json kept the last (the spans of a first ``spans`` list were lost)."""
    if "resourceSpans" in rec:
        if given_twice(rec, ("resourceSpans",)):
            return "resourceSpans"
        rss = rec.get("resourceSpans")
        for rs in rss if isinstance(rss, list) else ():
            k = given_twice(rs, _RS_KEYS)
            if k is not None:
                return f"resourceSpans/{k}"
            if not isinstance(rs, dict):
                continue  # (refused as a part of the wrong JSON type)
            if given_twice(rs.get("resource"), ("attributes",)):
                return "resourceSpans/resource/attributes"
            name = "scopeSpans" if rs.get("scopeSpans") else "instrumentationLibrarySpans"
            sss = rs.get(name)
            for ss in sss if isinstance(sss, list) else ():
                k = given_twice(ss, _SS_KEYS)
                if k is not None:
                    return f"resourceSpans/{name}/{k}"
        return None
    k = given_twice(rec, _SDK_KEYS)
    if k is not None:
        return k
    k = given_twice(rec.get("context"), ("trace_id", "span_id"))
    if k is not None:
        return f"context/{k}"
    return "resource/attributes" if given_twice(rec.get("resource"), ("attributes",)) else None


def _otlp_value(v: Any, at: tuple[str, ...] = (), twice: list[Twice] | None = None) -> Any:
    if not isinstance(v, dict):
        return v
    if twice is not None and given_twice(v, _VALUE_KEYS):  # {"stringValue": "a", "stringValue": "b"}
        twice.append(at)
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    if "intValue" in v:  # an int64 in decimal (JSON text, or a JSON integer); anything else as written
        iv = v["intValue"]
        if (isinstance(iv, str) and _INT64_TEXT.fullmatch(iv)) or (isinstance(iv, int) and not isinstance(iv, bool)):
            return int(iv)
        return iv
    if "arrayValue" in v:
        arr = _obj(v["arrayValue"], "an arrayValue")
        if twice is not None and given_twice(arr, ("values",)):
            twice.append(at)
        return [_otlp_value(x) for x in _arr(arr.get("values"), "arrayValue values")]
    if "kvlistValue" in v:
        kvl = _obj(v["kvlistValue"], "a kvlistValue")
        if twice is not None and given_twice(kvl, ("values",)):
            twice.append(at)
        return _otlp_attrs(kvl.get("values"), "kvlistValue values", at, twice)
    return None


def _otlp_attrs(items: Any, what: str = "attributes", at: tuple[str, ...] = (),
                twice: list[Twice] | None = None, shown: str = "attributes") -> dict[str, Any]:
    """An OTLP attribute list (``[{"key", "value"}]``) as a dict. A key the list gives more than once (the last
    value is kept) is added to ``twice`` as its path (``at`` + key: ``("resource", "agent.id")``), nested
    ``kvlistValue`` lists included, so that a span whose spec reads such a key is refused as a JSON object giving a
    key twice is; so is an attribute whose value object gives its value twice. An attribute object giving ``key``
    twice (which attribute it is is ambiguous) is added as text, ``shown`` + ``/key``: a bad span whatever the spec
    reads."""
    if isinstance(items, dict):  # (attributes as an object, not a list)
        if twice is not None:
            twice.extend((*at, k) for k in sorted(keys_twice(items)))
        return items
    out: dict[str, Any] = {}
    for kv in _arr(items, what):
        kv = _obj(kv, "an attribute")
        if twice is not None and type(kv) is not dict:  # (a plain dict: no key given twice)
            k = given_twice(kv, ("key", "value"))
            if k == "key":
                twice.append(f"{shown}/key")
            elif k == "value" and "key" in kv:
                twice.append((*at, str(kv["key"])))
        if "key" in kv:
            key = str(kv["key"])
            if key in out and twice is not None:
                twice.append((*at, key))
            out[key] = _otlp_value(kv.get("value"), (*at, key), twice)
    return out


def _int(v: Any) -> Any:
    try:
        return int(v)
    except (TypeError, ValueError):
        return v


def normalise(rec: dict[str, Any], twice: list[list[Twice]] | None = None) -> list[dict[str, Any]]:
    """The flat span records of one decoded line (several for an OTLP envelope). With ``twice``, one list per span
    is appended to it: the paths of the keys an OTLP attribute list of the span (its own, or its resource's) gives
    more than once (``("resource", "agent.id")``), and, as text, those of keys the span object itself gives twice
    (``"resourceSpans/scopeSpans/spans/spanId"``; ``rec`` decoded with
    :func:`~aumann.data.traces.events.keyed_pairs`; the objects above the spans: :func:`repeated_structure`).

    Raises:
        SpanShapeError: a part of the line has the wrong JSON type (``resourceSpans`` or ``spans`` not an array, a
            resource, scope span or span not an object, ...): every ``.get`` on it raised AttributeError, and a
            span that was not an object, or ``spans`` that was not an array, was dropped without a count.
    """
    if "resourceSpans" in rec:
        out = []
        for rs in _arr(rec.get("resourceSpans"), "resourceSpans"):
            rs = _obj(rs, "a resourceSpans entry")
            res_twice: list[Twice] = []
            res = _otlp_attrs(_obj(rs.get("resource"), "a resource").get("attributes"), "attributes", ("resource",),
                              res_twice, "resourceSpans/resource/attributes")
            scopes = rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans")
            for ss in _arr(scopes, "scopeSpans"):
                ss = _obj(ss, "a scopeSpans entry")
                scope = ss.get("scope") or ss.get("instrumentationLibrary") or {}
                scope_twice: list[Twice] = [("scope", k) for k in sorted(keys_twice(scope))]
                for sp in _arr(ss.get("spans"), "spans"):
                    sp = _obj(sp, "a span")
                    start, end = _int(sp.get("startTimeUnixNano")), _int(sp.get("endTimeUnixNano"))
                    sp_twice = res_twice + scope_twice
                    status = sp.get("status") or {}
                    if twice is not None and type(sp) is not dict:
                        k = given_twice(sp, _SPAN_OBJ_KEYS)
                        if k is not None:
                            sp_twice.append(f"resourceSpans/scopeSpans/spans/{k}")
                    if type(status) is not dict:  # status/code given twice
                        sp_twice += [("status", k) for k in sorted(keys_twice(status))]
                    attrs = _otlp_attrs(sp.get("attributes"), "attributes", ("attributes",), sp_twice,
                                        "resourceSpans/scopeSpans/spans/attributes")
                    if twice is not None:
                        twice.append(sp_twice)
                    out.append({
                        "resource": res, "scope": scope, "trace_id": sp.get("traceId"), "span_id": sp.get("spanId"),
                        "parent_span_id": sp.get("parentSpanId") or None, "name": sp.get("name"),
                        "kind": sp.get("kind"), "start_time_unix_nano": start, "end_time_unix_nano": end,
                        "status": status, "attributes": attrs,
                        "events": sp.get("events") or []})
        return out
    if "context" in rec and "span_id" not in rec:  # the Python SDK's ReadableSpan.to_json()
        ctx = _obj(rec.get("context"), "context")
        if twice is not None:
            twice.append([])
        res = rec.get("resource") or {}
        return [{"resource": res.get("attributes", {}) if isinstance(res, dict) else {},
                 "trace_id": ctx.get("trace_id"), "span_id": ctx.get("span_id"),
                 "parent_span_id": rec.get("parent_id"), "name": rec.get("name"), "kind": rec.get("kind"),
                 "start_time": rec.get("start_time"), "end_time": rec.get("end_time"),
                 "status": rec.get("status") or {}, "attributes": rec.get("attributes") or {},
                 "events": rec.get("events") or []}]
    if twice is not None:
        twice.append([])
    return [rec]


__all__ = ["Twice", "normalise", "repeated_structure"]
