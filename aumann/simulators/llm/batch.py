"""Batches of decisions for any backend: :func:`decide_all`.

Scenario steps gather the decisions that do not depend on each other and hand them over at once;
a step whose decisions depend on each other is a sequence of such batches. :func:`decide_all` uses
the backend's ``decide_many`` when it speaks the batch protocol (the built-in backends: concurrent
requests, one cache query and one cache commit per batch, results in request order) and falls back
to one ``decide`` call per request for any other :class:`DecisionBackend`. Each request is a dict of
``decide`` keyword arguments: ``messages``, ``schema`` and optionally ``context``, ``seed`` and
``scope`` (a label that becomes part of the cache key; dropped for backends that do not take it).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from aumann.errors import LLMError


def _takes_scope(backend: Any) -> bool:
    try:
        params = inspect.signature(backend.decide).parameters
    except (TypeError, ValueError):
        return False
    return "scope" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def decide_all(backend: Any, requests: Sequence[Mapping[str, Any]], *, return_exceptions: bool = False) -> list[Any]:
    """Decide every request with ``backend``; results (or exceptions) in request order.

    Args:
        backend: a DecisionBackend.
        requests: dicts of ``decide`` keyword arguments.
        return_exceptions: return an :class:`~aumann.errors.LLMError` in place of a failed decision
            instead of raising the first one.
    """
    reqs = [dict(r) for r in requests]
    if not reqs:
        return []
    if getattr(backend, "batch_protocol", 0) >= 1:
        return list(backend.decide_many(reqs, return_exceptions=return_exceptions))
    if hasattr(backend, "decide_many") and not hasattr(backend, "decide"):  # a batch-only backend
        try:
            takes = "return_exceptions" in inspect.signature(backend.decide_many).parameters
        except (TypeError, ValueError):
            takes = False
        if takes:
            return list(backend.decide_many(reqs, return_exceptions=return_exceptions))
        return list(backend.decide_many(reqs))
    scoped = _takes_scope(backend)
    out: list[Any] = []
    for r in reqs:
        if not scoped:
            r.pop("scope", None)
        messages, schema = r.pop("messages"), r.pop("schema")
        try:
            out.append(backend.decide(messages, schema, **r))
        except LLMError as exc:
            if not return_exceptions:
                raise
            out.append(exc)
    return out


__all__ = ["decide_all"]
