"""What a decision schema sends, built once per pydantic class (not once per decision).

:func:`schema_info` returns a cached :class:`SchemaInfo`: the model's JSON schema and its canonical
text (part of every cache key), the strict variant for ``response_format={"type": "json_schema",
"strict": true}`` (every object closed with ``additionalProperties: false``, every property required,
``default`` dropped, as OpenAI's strict mode requires; pydantic still validates the reply), the system
message that pastes the schema into the prompt for the ``json_object``/``none`` modes, and the
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
                    "json_object": {"type": "json_object"},
                },
                nullable_fields=tuple(n for n, f in schema.model_fields.items() if _allows_none(f.annotation)),
            )
            _infos[schema] = info
    return info


def coerced_away(raw: Any, obj: BaseModel, info: SchemaInfo) -> list[str]:
    """Fields the reply gave a value for that validation turned into ``None`` (a lossy reply)."""
    if not isinstance(raw, dict) or not info.nullable_fields:
        return []
    return [n for n in info.nullable_fields if raw.get(n) is not None and getattr(obj, n, None) is None]


__all__ = ["SchemaInfo", "coerced_away", "schema_info", "strict_json_schema"]
