"""What a decision schema sends, built once per pydantic class (not once per decision).

:func:`schema_info` returns a cached :class:`SchemaInfo`: the model's JSON schema and its canonical
text (part of every cache key), the strict variant for ``response_format={"type": "json_schema",
"strict": true}`` (every object closed with ``additionalProperties: false``, every property required,
``default`` dropped, as OpenAI's strict mode requires; pydantic still validates the reply),  the system
message that pastes the schema (kept for callers that ask for it), the short field instructions
(:func:`field_instructions`) that the ``none`` mode adds to the prompt, and the
optional fields whose coercion to ``None`` marks a lossy reply.
"""

from __future__ import annotations

import json
import re
import threading
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

_lock = threading.Lock()
_infos: dict[type, SchemaInfo] = {}


@dataclass(frozen=True)
class SchemaInfo:
    """Everything about one decision schema that requests need, computed once."""

    schema: type[BaseModel]
    name: str
    json_schema: dict[str, Any]
    canonical: str
    strict: dict[str, Any]
    system_message: dict[str, str]
    response_formats: dict[str, Any]
    nullable_fields: tuple[str, ...]
    prompt_message: dict[str, str] | None = None


def strict_json_schema(node: Any) -> Any:
    """A copy of a JSON schema fit for strict structured outputs (closed objects, all required)."""
    if isinstance(node, dict):
        out = {k: strict_json_schema(v) for k, v in node.items() if k != "default"}
        if out.get("type") == "object" and isinstance(out.get("properties"), dict):
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        return out
    if isinstance(node, list):
        return [strict_json_schema(v) for v in node]
    return node


def _allows_none(annotation: Any) -> bool:
    if annotation is None or annotation is type(None):
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_allows_none(a) for a in typing.get_args(annotation))
    return False


def _describe(node: Any, defs: dict[str, Any], depth: int = 0) -> str:
    if depth > 4 or not isinstance(node, dict):
        return "a value"
    if "$ref" in node:
        return _describe(defs.get(str(node["$ref"]).rsplit("/", 1)[-1], {}), defs, depth + 1)
    if isinstance(node.get("anyOf"), list):
        return " or ".join(_describe(o, defs, depth + 1) for o in node["anyOf"])
    if isinstance(node.get("enum"), list):
        return "one of " + ", ".join(json.dumps(v) for v in node["enum"])
    t = node.get("type")
    lo, hi = node.get("minimum", node.get("exclusiveMinimum")), node.get("maximum", node.get("exclusiveMaximum"))
    rng = f" from {lo} to {hi}" if lo is not None and hi is not None else ""
    if t == "array":
        return "a list of " + _describe(node.get("items", {}), defs, depth + 1)
    if t == "object":
        return "an object with " + ", ".join(f"{k!r} ({_describe(v, defs, depth + 1)})"
                                             for k, v in (node.get("properties") or {}).items())
    return {"boolean": "true or false", "integer": "an integer", "number": "a number", "string": "a string",
            "null": "null"}.get(str(t), "a value") + rng


def field_instructions(js: dict[str, Any]) -> str:
    """A short answer-format instruction for servers that do not constrain the output: the fields and their
    types in words -- never the JSON schema itself (small models copy a pasted schema back)."""
    defs = js.get("$defs", {}) if isinstance(js, dict) else {}
    props = js.get("properties") or {}
    need = set(js.get("required") or [])
    parts = [f'"{k}": {_describe(v, defs)}' + ("" if k in need else " (optional)") for k, v in props.items()]
    return "Reply with one JSON object only, no prose, with these keys: " + "; ".join(parts) + "."


def schema_info(schema: type[BaseModel]) -> SchemaInfo:
    """The cached :class:`SchemaInfo` of a pydantic model class."""
    info = _infos.get(schema)
    if info is not None:
        return info
    with _lock:
        info = _infos.get(schema)
        if info is None:
            js = schema.model_json_schema()
            name = re.sub(r"[^A-Za-z0-9_-]", "_", schema.__name__)[:64] or "decision"
            strict = strict_json_schema(js)
            info = SchemaInfo(
                schema=schema, name=name, json_schema=js,
                canonical=json.dumps(js, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
                strict=strict,
                system_message={"role": "system",
                                "content": "Reply with a single JSON object (no prose) that validates against this "
                                           "JSON schema: " + json.dumps(js, sort_keys=True)},
                response_formats={
                    "json_schema": {"type": "json_schema",
                                    "json_schema": {"name": name, "strict": True, "schema": strict}},
                    "json_object": {"type": "json_object", "schema": strict},
                },
                nullable_fields=tuple(n for n, f in schema.model_fields.items() if _allows_none(f.annotation)),
                prompt_message={"role": "system", "content": field_instructions(js)},
            )
            _infos[schema] = info
    return info


def coerced_away(raw: Any, obj: BaseModel, info: SchemaInfo) -> list[str]:
    """Fields the reply gave a value for that validation turned into ``None`` (a lossy reply)."""
    if not isinstance(raw, dict) or not info.nullable_fields:
        return []
    return [n for n in info.nullable_fields if raw.get(n) is not None and getattr(obj, n, None) is None]


__all__ = ["SchemaInfo", "coerced_away", "field_instructions", "schema_info", "strict_json_schema"]
