"""The settings of an LLM backend, grouped by what they govern (each a small frozen value).

* :class:`Sampling` -- what a request asks the model for: ``temperature``, ``top_p``, the reply bound
  ``max_tokens`` (``None``: sized from the decision schema, see :func:`reply_bound`), a ``seed`` mixed
  into every decision's request seed, and a ``system_prompt`` that replaces the scenario's.
* :class:`RetryPolicy` -- how often and how long to retry (exponential backoff with jitter, the
  longest ``Retry-After`` honoured), and the *varied* retry of an invalid reply.
* :class:`Caps` -- the spend guard: requests, tokens, dollars.
* :class:`LLMSettings` -- the ``[llm]`` table of a scenario config (sampling plus the share of
  invalid decisions above which a run is marked unreliable); ``--temperature``, ``--top-p``,
  ``--max-tokens``, ``--llm-seed``, ``--system-prompt`` and ``--max-invalid-rate`` set its keys.

Every number is checked where the value is made: finite, in range, the right type; a bad one is a
:class:`~aumann.errors.ConfigError` naming the setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from aumann import configs
from aumann.errors import ConfigError

#: the largest reply bound a request may ask for (tokens); larger values are refused
MAX_REPLY_TOKENS = 32_768
#: the most seconds any LLM wait (timeout, backoff, Retry-After) may be set to: one day
MAX_SECONDS = 86_400.0


def _number(name: str, value: Any, *, lo: float, hi: float, lo_open: bool = False, integer: bool = False) -> Any:
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if ok and integer and value != int(value):
        ok = False
    if ok:
        ok = (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        kind = "an integer" if integer else "a finite number"
        rng = f"{'>' if lo_open else '>='} {lo:g} and <= {hi:g}"
        raise ConfigError(f"{name} must be {kind} {rng}; got {value!r}")
    return int(value) if integer else float(value)


@dataclass(frozen=True)
class Sampling:
    """What each request asks the model for (see the module docstring)."""

    temperature: float = 0.0
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    system_prompt: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperature", _number("temperature", self.temperature, lo=0, hi=2))
        if self.top_p is not None:
            object.__setattr__(self, "top_p", _number("top_p", self.top_p, lo=0, hi=1, lo_open=True))
        if self.max_tokens is not None:
            object.__setattr__(self, "max_tokens", _number("max_tokens", self.max_tokens, lo=1, hi=MAX_REPLY_TOKENS,
                                                           integer=True))
        if self.seed is not None:
            object.__setattr__(self, "seed", _number("seed", self.seed, lo=0, hi=2**63 - 1, integer=True))
        if self.system_prompt is not None and (not isinstance(self.system_prompt, str) or len(self.system_prompt)
                                               > 100_000):
            raise ConfigError(f"system_prompt must be a string of at most 100,000 characters; "
                              f"got {type(self.system_prompt).__name__}")

    def key_parts(self) -> dict[str, Any]:
        """The parts of the cache key beyond the temperature (only those that differ from the defaults,
        so caches recorded before these settings existed keep their keys)."""
        out: dict[str, Any] = {}
        if self.top_p is not None:
            out["top_p"] = self.top_p
        if self.seed is not None:
            out["llm_seed"] = self.seed
        if self.system_prompt is not None:
            out["system_prompt"] = self.system_prompt
        return out


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of one decision: ``max_retries`` after the first attempt, ``backoff · 2^k`` seconds capped
    at ``backoff_max`` and scaled by a factor in [1 − jitter, 1], or the server's ``Retry-After`` when
    longer (up to ``retry_after_max``). An invalid reply is retried at ``vary_temperature`` (at least)
    with a repair message naming what was wrong, at most ``invalid_retries`` times."""

    max_retries: int = 3
    backoff: float = 0.5
    backoff_max: float = 8.0
    jitter: float = 0.5
    retry_after_max: float = 60.0
    invalid_retries: int = 1
    vary_temperature: float = 0.7

    def __post_init__(self) -> None:
        for name in ("max_retries", "invalid_retries"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100:
                raise ConfigError(f"{name} must be an int in [0, 100]; got {v!r}")
        for name in ("backoff", "backoff_max", "retry_after_max"):
            object.__setattr__(self, name, _number(name, getattr(self, name), lo=0, hi=MAX_SECONDS))
        object.__setattr__(self, "jitter", _number("jitter", self.jitter, lo=0, hi=1))
        object.__setattr__(self, "vary_temperature", _number("vary_temperature", self.vary_temperature, lo=0, hi=2))


@dataclass(frozen=True)
class Caps:
    """The spend guard: requests sent, tokens used, dollars spent (``None``: no cap)."""

    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, _number(name, v, lo=0, hi=2**53, integer=True))
        if self.max_cost is not None:
            object.__setattr__(self, "max_cost", _number("max_cost", self.max_cost, lo=0, hi=1e12))

    @property
    def active(self) -> bool:
        return self.max_calls is not None or self.max_tokens is not None or self.max_cost is not None


#: the ``[llm]`` keys that only an LLM request reads (:meth:`LLMSettings.sampling`; each is part of the response
#: cache's key): a scenario's offline policy sends no request, so under it they change nothing a run computes
#: (``max_invalid_rate`` is not among them: it judges a run's abstentions, which an offline policy may give too)
REQUEST_KEYS = ("temperature", "top_p", "max_tokens", "seed", "system_prompt")


class LLMSettings(configs.ConfigModel):
    """The ``[llm]`` table of a scenario config (see the module docstring)."""

    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1, le=MAX_REPLY_TOKENS)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    system_prompt: str | None = Field(None, max_length=100_000)
    max_invalid_rate: float = Field(0.2, ge=0.0, le=1.0)

    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.max_tokens, self.seed, self.system_prompt)


__all__ = ["MAX_REPLY_TOKENS", "MAX_SECONDS", "REQUEST_KEYS", "Caps", "LLMSettings", "RetryPolicy", "Sampling"]
