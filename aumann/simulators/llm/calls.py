"""What travels through the layers of an LLM backend: a prepared decision, one attempt of it, an answer.

* :class:`Decision` -- one decision a caller asked for, prepared once: its messages, schema, request
  seed, scope and content address (``key``, the response cache's key).
* :class:`Call` -- one pass of a decision through the layer stack: the attempt number, the variation
  of a retry (temperature, repair message), the timeout scale.
* :class:`Answer` -- what came back: the reply text, the server's token counts (already checked, see
  :mod:`aumann.simulators.llm.records`), the latency, where it came from (``server``, ``cache``,
  ``joined``, ``memory``, ``dry_run``) and, for a reply that stayed invalid, why.

:func:`check_reply` validates a reply against the decision schema: JSON (never ``eval``), the
schema's required fields, no field coerced away, and no *schema echo* (a reply that repeats the JSON
schema -- ``{"properties": ..., "type": "object"}`` -- is refused even where it would validate).
:func:`reply_bound` sizes a reply's token bound from the schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from aumann.errors import Retryable
from aumann.simulators.llm.base import Messages, parse_json_object
from aumann.simulators.llm.schemas import SchemaInfo, coerced_away

#: keys that mark a JSON schema (an echo of the one we sent) rather than an answer
_SCHEMA_KEYS = frozenset({"properties", "$defs", "$schema", "required", "additionalProperties"})


@dataclass(slots=True)
class Decision:
    """One prepared decision (see the module docstring)."""

    index: int
    messages: Messages
    schema: type[BaseModel]
    info: SchemaInfo
    context: Any
    seed: int | None
    scope: str | None
    key: str
    chars: int


@dataclass(slots=True)
class Call:
    """One pass of a :class:`Decision` through the layers (see the module docstring)."""

    decision: Decision
    attempt: int = 0
    repair: str | None = None
    temperature: float | None = None  # None: the sampling temperature
    timeout_scale: float = 1.0
    mode: str | None = None  # the structured-output mode the core used (set by the core)
    fork: bool = False


@dataclass(slots=True)
class Answer:
    """What a layer returns (see the module docstring)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0
    source: str = "server"
    invalid: str | None = None  # why the reply is not a valid decision (an abstention), else None
    meta: dict[str, Any] = field(default_factory=dict)


def schema_echo(raw: Any, info: SchemaInfo) -> bool:
    """Whether a parsed reply repeats a JSON schema instead of answering it."""
    if not isinstance(raw, dict):
        return False
    fields = set(info.schema.model_fields)
    marks = (set(raw) & _SCHEMA_KEYS) - fields
    if marks:
        return True
    return raw.get("type") == "object" and "type" not in fields and isinstance(raw.get("title", ""), str) and (
        "title" in raw or "description" in raw)


def check_reply(text: str | None, info: SchemaInfo) -> BaseModel:
    """The reply as a validated decision, else :class:`~aumann.errors.Retryable` ``("malformed", why)``."""
    try:
        raw = parse_json_object(text)
    except ValueError as exc:
        raise Retryable("malformed", str(exc)) from None
    if schema_echo(raw, info):
        raise Retryable("malformed", f"reply repeats the JSON schema of {info.schema.__name__} instead of answering "
                                     f"it: {json.dumps(raw)[:120]}")
    try:
        obj = info.schema.model_validate(raw)
    except ValidationError as exc:
        errs = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(reply)'}: {e['msg']}" for e in exc.errors()[:3])
        raise Retryable("malformed", f"reply fails {info.schema.__name__}: {errs}") from None
    lost = coerced_away(raw, obj, info)
    if lost:
        shown = {k: raw[k] for k in lost}
        raise Retryable("malformed", f"reply fails {info.schema.__name__}: field(s) {lost} coerced away (the reply "
                                     f"gave {json.dumps(shown)[:120]}, validation kept None)")
    return obj


def _chars(node: Any, defs: dict[str, Any], depth: int = 0) -> int:
    """The longest JSON text a value of this schema node plausibly takes (characters)."""
    if depth > 8 or not isinstance(node, dict):
        return 64
    if "$ref" in node:
        return _chars(defs.get(str(node["$ref"]).rsplit("/", 1)[-1], {}), defs, depth + 1)
    for k in ("anyOf", "oneOf", "allOf"):
        if isinstance(node.get(k), list) and node[k]:
            return max(_chars(o, defs, depth + 1) for o in node[k])
    if "enum" in node and isinstance(node["enum"], list) and node["enum"]:
        return max(len(json.dumps(v)) for v in node["enum"])
    t = node.get("type")
    if t == "object":
        props = node.get("properties") or {}
        return 2 + sum(len(k) + 5 + _chars(v, defs, depth + 1) for k, v in props.items())
    if t == "array":
        n = node.get("maxItems")
        n = int(n) if isinstance(n, int) and 0 <= n <= 1000 else 12
        return 2 + n * (2 + _chars(node.get("items", {}), defs, depth + 1))
    if t == "boolean":
        return 5
    if t == "integer":
        return 12
    if t == "number":
        return 20
    if t == "string":
        n = node.get("maxLength")
        return 2 + (int(n) if isinstance(n, int) and 0 <= n <= 100_000 else 400)
    if t == "null":
        return 4
    return 64


def reply_bound(info: SchemaInfo) -> int:
    """A reply's token bound sized from its schema: the longest plausible JSON answer, about 3 characters a
    token, plus room for whitespace and a fence (at least 32, at most 4096 tokens)."""
    js = info.json_schema
    chars = _chars(js, js.get("$defs", {}) if isinstance(js, dict) else {})
    return int(min(4096, max(32, chars // 3 + 24)))


__all__ = ["Answer", "Call", "Decision", "check_reply", "reply_bound", "schema_echo"]
