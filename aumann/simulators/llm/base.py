"""The decision interface agents depend on, its errors, usage accounting and JSON parsing.

Agents call ``backend.decide(messages, schema, context=..., seed=...)`` and get back a validated
instance of the pydantic model ``schema``; they never import ``openai``. Two backends implement it:
:class:`~aumann.simulators.llm.OfflineBackend` (a deterministic policy, the default, no server) and
:class:`~aumann.simulators.llm.OpenAIBackend` (any OpenAI-compatible server, with a response cache).

Error tree (all :class:`aumann.errors.LLMError`):

* LLMAuthenticationError -- the server rejected the key (401/403); raised once, never retried
* ModelNotFoundError     -- the server does not know the model or path (404); raised once
* LLMRequestError        -- another non-retryable rejection (400, 422, ...)
* BackendUnavailableError -- 429/5xx/connection errors/timeouts persisted through all retries
* MalformedResponseError -- the reply was not JSON or failed the schema after all retries
* BudgetExceededError    -- a call or token cap would be exceeded (cost guard)
* CacheMissError         -- replay mode and the request is not in the cache
* PolicyError            -- an offline policy returned something that is not a valid ``schema``
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel

from aumann.errors import (  # noqa: F401 - re-exported by aumann.simulators.llm
    BackendUnavailableError,
    BudgetExceededError,
    CacheMissError,
    LLMAuthenticationError,
    LLMError,
    LLMRequestError,
    MalformedResponseError,
    ModelNotFoundError,
    PolicyError,
)
from aumann.simulators.llm.usage import Usage

Messages = list[dict[str, str]]


@runtime_checkable
class DecisionBackend(Protocol):
    """What agents depend on: structured decisions validated by a pydantic model."""

    def decide(
        self,
        messages: Messages,
        schema: type[BaseModel],
        *,
        context: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> BaseModel:
        """Return an instance of ``schema`` for the OpenAI-style chat ``messages``.

        ``context`` is the structured observation an offline policy reads; ``seed`` makes the
        decision reproducible (passed to the server as the request seed). Backends may also offer
        ``decide_many(requests)`` for batches (see :func:`aumann.simulators.llm.decide_all`) and
        accept ``scope=...`` (a label that becomes part of the cache key).
        """
        ...


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, BaseModel):
        return _jsonable(obj.model_dump(mode="json"))
    if isinstance(obj, float) and not np.isfinite(obj):
        return repr(obj)
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    return repr(obj)


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, numpy converted) used for hashing and cache keys."""
    return json.dumps(_jsonable(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def stable_hash(obj: Any) -> str:
    """sha256 hex digest of :func:`canonical_json` -- stable across processes and runs."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def request_seed(root_seed: int, *keys: Any) -> int:
    """A stable 31-bit request seed for one decision, e.g. ``request_seed(run_seed, agent_id, step)``.

    Derived by hashing, so it is the same in every process and independent of call order; pass it
    as ``decide(..., seed=...)`` so that offline policies and servers see a per-decision seed.

    Example:
        >>> request_seed(7, 3, 10) == request_seed(7, 3, 10) != request_seed(7, 4, 10)
        True
    """
    return int(stable_hash({"root": root_seed, "keys": list(keys)})[:8], 16) & 0x7FFFFFFF


def check_messages(messages: Any) -> Messages:
    """Validate OpenAI-style chat messages: a non-empty list of {"role", "content"} string dicts."""
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise LLMRequestError(
            "messages must be a non-empty list of {'role': ..., 'content': ...} dicts; "
            f"got {messages!r:.80}"
        )
    out: Messages = []
    for k, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(
            m.get("content"), str
        ):
            raise LLMRequestError(f"message {k} must be a dict with str 'role' and 'content'; got {m!r:.80}")
        out.append(dict(m))
    return out


def check_schema(schema: Any) -> type[BaseModel]:
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise LLMRequestError(f"schema must be a pydantic BaseModel subclass; got {schema!r}")
    return schema


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def parse_json_object(text: str | None) -> Any:
    """Parse a model reply into JSON with the bounded reader :func:`aumann.bounded.loads_json` (size and
    depth limits; NaN/Infinity refused; never ``eval``).

    Accepts bare JSON, a ```json fenced block, or prose around one ``{...}`` object.

    Raises:
        ValueError: no JSON object could be parsed.
    """
    if text is None:
        raise ValueError("empty reply (no content)")
    from aumann import bounded

    s = text.strip()
    m = _FENCE.search(s)
    if m:
        s = m.group(1).strip()
    try:
        return bounded.loads_json(s, what="the model's reply", error=ValueError, allow_nan=False)
    except ValueError as first:
        i, j = s.find("{"), s.rfind("}")
        if i == -1 or j <= i or "nests" in str(first) or "limit" in str(first):
            raise ValueError(f"reply is not JSON ({str(first)[:100]}): {text[:120]!r}") from None
        try:
            return bounded.loads_json(s[i : j + 1], what="the model's reply", error=ValueError, allow_nan=False)
        except ValueError as exc:
            raise ValueError(f"reply is not JSON ({str(exc)[:100]}): {text[:120]!r}") from None


__all__ = [
    "BackendUnavailableError",
    "BudgetExceededError",
    "CacheMissError",
    "DecisionBackend",
    "LLMAuthenticationError",
    "LLMRequestError",
    "MalformedResponseError",
    "Messages",
    "ModelNotFoundError",
    "PolicyError",
    "Usage",
    "canonical_json",
    "check_messages",
    "parse_json_object",
    "request_seed",
    "stable_hash",
]
