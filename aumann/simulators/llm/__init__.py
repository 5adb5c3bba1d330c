"""LLM decision backends: the interface agents use, an offline policy, an OpenAI-compatible client, a cache.

Public surface::

    from aumann.simulators.llm import DecisionBackend, OfflineBackend, OpenAIBackend, ResponseCache
    from aumann.simulators.llm import decide_all, Usage, load_prices
    from aumann.simulators.llm import LLMBackend, register_backend, backend_names, make_backend

An LLM backend is a small core (:mod:`.core`: one request to an OpenAI-compatible server) inside
composable layers (:mod:`.layers`: coalescing, response cache, dry run, retries, spend caps, rate
limits, adaptive concurrency), behind :class:`LLMBackend`; backends are registered by name
(:mod:`.registry`: ``offline``, ``openai``, ``local``).

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
from aumann.simulators.llm.options import BackendOptions
from aumann.simulators.llm.prices import Price, load_prices, price_for
from aumann.simulators.llm.registry import backend_names, make_backend, register_backend
from aumann.simulators.llm.settings import Caps, LLMSettings, RetryPolicy, Sampling
from aumann.simulators.llm.usage import MANIFEST_KEYS, load_ledger, save_ledger

if TYPE_CHECKING:
    from aumann.simulators.llm.backend import CallEstimate, LLMBackend, is_abstention
    from aumann.simulators.llm.openai_backend import OpenAIBackend

_LAZY = {"OpenAIBackend": "openai_backend", "CallEstimate": "backend", "LLMBackend": "backend",
         "is_abstention": "backend"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"aumann.simulators.llm.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'aumann.simulators.llm' has no attribute {name!r}")


__all__ = [
    "MANIFEST_KEYS",
    "BackendOptions",
    "BackendUnavailableError",
    "BudgetExceededError",
    "CacheMissError",
    "CachedResponse",
    "CallEstimate",
    "Caps",
    "DecisionBackend",
    "LLMAuthenticationError",
    "LLMBackend",
    "LLMRequestError",
    "LLMSettings",
    "MalformedResponseError",
    "Messages",
    "ModelNotFoundError",
    "OfflineBackend",
    "OpenAIBackend",
    "PolicyError",
    "Price",
    "ResponseCache",
    "RetryPolicy",
    "Sampling",
    "Usage",
    "backend_names",
    "decide_all",
    "is_abstention",
    "load_ledger",
    "load_prices",
    "make_backend",
    "parse_json_object",
    "price_for",
    "register_backend",
    "request_seed",
    "save_ledger",
]
