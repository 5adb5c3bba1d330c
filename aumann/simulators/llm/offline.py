"""Offline deterministic policy backend: the embedded default, no server and no key.

``OfflineBackend(policy).decide(messages, schema, context=obs, seed=s)`` calls
``policy(obs, schema, rng)`` and validates the result as ``schema``. The ``rng`` is a fresh
``numpy.random.Generator``: ``default_rng(seed)`` when a seed is given, otherwise seeded by a
sha256 hash of (messages, context) -- never global state -- so equal inputs give equal decisions in
any process, in any order. Offline decisions are counted in ``usage.decisions`` (and
``fork_decisions`` inside a fork scope); ``usage.calls`` stays 0: nothing is sent anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from aumann.errors import LLMError
from aumann.simulators.llm.base import (
    Messages,
    PolicyError,
    Usage,
    check_messages,
    check_schema,
    stable_hash,
)

Policy = Callable[[Mapping[str, Any], type[BaseModel], np.random.Generator], BaseModel | Mapping[str, Any]]


class OfflineBackend:
    """A :class:`DecisionBackend` driven by a deterministic Python policy.

    Args:
        policy: ``policy(context, schema, rng) -> schema instance or dict``.
        name: a label for logs and provenance.

    Example:
        >>> from pydantic import BaseModel
        >>> class Work(BaseModel):
        ...     hours: float
        >>> b = OfflineBackend(lambda ctx, schema, rng: {"hours": 40 * ctx["propensity"]})
        >>> b.decide([{"role": "user", "content": "hours?"}], Work, context={"propensity": 0.5}).hours
        20.0
    """

    name = "offline"
    batch_protocol = 1  # decide_many(requests, return_exceptions=...) and decide(..., scope=...)

    def __init__(self, policy: Policy, *, name: str | None = None) -> None:
        if not callable(policy):
            raise PolicyError(f"OfflineBackend needs a callable policy(context, schema, rng); got {policy!r}")
        self.policy = policy
        if name is not None:
            self.name = name
        self.usage = Usage()

    def rng_for(
        self, messages: Messages, context: Mapping[str, Any] | None, seed: int | None
    ) -> np.random.Generator:
        """The generator a decision gets (exposed for tests and reproducibility checks)."""
        if seed is not None:
            return np.random.default_rng(seed)
        digest = stable_hash({"messages": messages, "context": context or {}})
        return np.random.default_rng(int(digest[:32], 16))

    def decide(
        self,
        messages: Messages,
        schema: type[BaseModel],
        *,
        context: Mapping[str, Any] | None = None,
        seed: int | None = None,
        scope: str | None = None,
    ) -> BaseModel:
        """Run the policy on ``context`` and return a validated ``schema`` instance (``scope`` is ignored).

        Raises:
            PolicyError: the policy's output does not validate against ``schema``.
        """
        messages = check_messages(messages)
        schema = check_schema(schema)
        out = self.policy(context or {}, schema, self.rng_for(messages, context, seed))
        try:
            if isinstance(out, schema):
                result = out
            elif isinstance(out, BaseModel):
                result = schema.model_validate(out.model_dump())
            else:
                result = schema.model_validate(out)
        except ValidationError as exc:
            self.usage.add(failures=1)
            raise PolicyError(
                f"offline policy {getattr(self.policy, '__name__', self.policy)!r} returned {out!r:.200} "
                f"which is not a valid {schema.__name__}: {exc.errors()[0].get('msg')} "
                f"(fields: {list(schema.model_fields)})"
            ) from None
        self.usage.add(decisions=1)
        return result

    def decide_many(self, requests: Sequence[Mapping[str, Any]], *,
                    return_exceptions: bool = False) -> list[BaseModel | BaseException]:
        """Decide a batch in order; each request is a dict of ``decide`` keyword arguments.

        With ``return_exceptions=True`` a failed decision is returned as its exception in place.
        """
        out: list[Any] = []
        for r in requests:
            try:
                out.append(self.decide(**r))
            except LLMError as exc:
                if not return_exceptions:
                    raise
                out.append(exc)
        return out

    def __deepcopy__(self, memo: dict) -> OfflineBackend:
        return self  # stateless apart from usage; forks share it

    def __repr__(self) -> str:
        return f"OfflineBackend(policy={getattr(self.policy, '__name__', self.policy)!r})"


__all__ = ["OfflineBackend", "Policy"]
