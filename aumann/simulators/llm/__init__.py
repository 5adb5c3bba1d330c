"""LLM decision backends: the interface agents use, an offline policy, an OpenAI-compatible client, a cache.

Public surface::

    from aumann.simulators.llm import DecisionBackend, OfflineBackend, OpenAIBackend, ResponseCache
    from aumann.simulators.llm import decide_all, Usage, load_prices

Scenario steps hand independent decisions over in batches (:func:`decide_all`); see
``docs/simulators.md`` for the request path (concurrency, rate limits, endpoints, structured
outputs, usage and cost).

``OpenAIBackend`` (and with it ``openai``) is imported on first use, so agents and offline runs never
import the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aumann.simulators.llm.base import (
    BackendUnavailableError,
    BudgetExceededError,
    CacheMissError,
    DecisionBackend,
    LLMAuthenticationError,
    LLMRequestError,
    MalformedResponseError,
    Messages,
    ModelNotFoundError,
    PolicyError,
    Usage,
    parse_json_object,
    request_seed,
)
from aumann.simulators.llm.batch import decide_all
from aumann.simulators.llm.cache import CachedResponse, ResponseCache
from aumann.simulators.llm.offline import OfflineBackend
from aumann.simulators.llm.prices import Price, load_prices, price_for
from aumann.simulators.llm.usage import MANIFEST_KEYS, load_ledger, save_ledger

if TYPE_CHECKING:
    from aumann.simulators.llm.openai_backend import CallEstimate, OpenAIBackend


def __getattr__(name: str) -> Any:
    if name in ("OpenAIBackend", "CallEstimate"):
        from aumann.simulators.llm import openai_backend

        return getattr(openai_backend, name)
    raise AttributeError(f"module 'aumann.simulators.llm' has no attribute {name!r}")


__all__ = [
    "MANIFEST_KEYS",
    "BackendUnavailableError",
    "BudgetExceededError",
    "CacheMissError",
    "CachedResponse",
    "CallEstimate",
    "DecisionBackend",
    "LLMAuthenticationError",
    "LLMRequestError",
    "MalformedResponseError",
    "Messages",
    "ModelNotFoundError",
    "OfflineBackend",
    "OpenAIBackend",
    "PolicyError",
    "Price",
    "ResponseCache",
    "Usage",
    "decide_all",
    "load_ledger",
    "load_prices",
    "parse_json_object",
    "price_for",
    "request_seed",
    "save_ledger",
]
