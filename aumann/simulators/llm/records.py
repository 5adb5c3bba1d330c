"""One schema for every record that reaches the LLM side from outside the process.

Each is a pydantic model with finite, ranged, typed fields, read through :mod:`aumann.bounded` (size
and depth limits before parsing):

* :class:`ServerUsage` / :func:`read_completion` -- a chat-completions reply body and its ``usage``.
  Token counts must be integers in [0, :data:`MAX_TOKENS_PER_REQUEST`]; ``"abc"``, ``1e400``, ``-5``,
  ``true`` or a count above what the request could have used are **refused and counted**
  (``Usage.bad_usage``), and the request is charged its upper bound instead -- what a server reports
  can never lower the spend that the caps see.
* :class:`CacheRow` -- a row of the response cache (text, token counts, the stored request).
* :class:`LedgerUsage` -- ``llm-usage.json``'s counters: non-negative integers (cost a finite
  non-negative number), latency bins bounded.
* :class:`PriceEntry` -- one model's price, USD per million tokens, in [0, :data:`MAX_PRICE`].
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError, field_validator

from aumann import bounded
from aumann.errors import ConfigError

#: the most tokens one request may report (prompt or completion); more is refused as absurd
MAX_TOKENS_PER_REQUEST = 10_000_000
#: the highest price accepted, USD per million tokens
MAX_PRICE = 1_000_000.0
#: the largest counter a ledger may hold (2**53: exact in a JSON double)
MAX_COUNT = 2**53


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ServerUsage(_Strict):
    """The ``usage`` object of a reply (missing counts are 0)."""

    prompt_tokens: StrictInt = Field(0, ge=0, le=MAX_TOKENS_PER_REQUEST)
    completion_tokens: StrictInt = Field(0, ge=0, le=MAX_TOKENS_PER_REQUEST)

    @field_validator("prompt_tokens", "completion_tokens", mode="before")
    @classmethod
    def _none_is_zero(cls, v: Any) -> Any:
        return 0 if v is None else v


class Completion:
    """A parsed reply body: ``text`` (``None`` when there is no ``choices[0].message.content`` string),
    the token counts, ``usage_refused`` -- why the reported usage was refused (``None``: accepted) -- and
    ``has_message``: whether the body is a chat completion at all (``choices[0].message`` an object; a model that
    answered with a refusal or a tool call has one, without a ``content`` string)."""

    __slots__ = ("completion_tokens", "finish_reason", "has_message", "prompt_tokens", "text", "usage_refused")

    def __init__(self, text: str | None, prompt_tokens: int, completion_tokens: int, usage_refused: str | None,
                 finish_reason: str | None = None, has_message: bool = True) -> None:
        self.text = text
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.usage_refused = usage_refused
        self.finish_reason = finish_reason
        self.has_message = has_message


def read_completion(body: bytes, *, max_bytes: int = bounded.MAX_BYTES) -> Completion:
    """Parse a 200 reply body (bounded); raises ``ValueError`` when it is not a JSON object."""
    data = bounded.loads_json(body, what="the server's reply", error=ValueError, max_bytes=max_bytes)
    if not isinstance(data, dict):
        raise ValueError(f"the server's reply is a JSON {type(data).__name__}, not an object")
    text = finish = None
    has_message = False
    try:
        choice = data["choices"][0]
        finish = choice.get("finish_reason")
        has_message = isinstance(choice["message"], dict)
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    if not isinstance(text, str):
        text = None
    if not isinstance(finish, str):
        finish = None
    raw = data.get("usage")
    refused = None if raw is not None else "the reply has no usage object"  # charged its upper bound, counted
    pt = ct = 0
    if raw is not None:
        try:
            if not isinstance(raw, dict):
                raise TypeError(f"usage is a {type(raw).__name__}, not an object")
            u = ServerUsage.model_validate(raw)
            pt, ct = u.prompt_tokens, u.completion_tokens
        except (ValidationError, TypeError) as exc:
            refused = _why(exc, raw)
    return Completion(text, pt, ct, refused, finish, has_message)


def _why(exc: Exception, raw: Any) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"usage.{'.'.join(map(str, e['loc']))} = {e.get('input')!r:.40}: {e['msg']}"
    return str(exc)


class CacheRow(_Strict):
    """One stored reply of the response cache."""

    text: str = Field(max_length=bounded.MAX_BYTES)
    prompt_tokens: StrictInt = Field(0, ge=0, le=MAX_TOKENS_PER_REQUEST)
    completion_tokens: StrictInt = Field(0, ge=0, le=MAX_TOKENS_PER_REQUEST)


class LedgerUsage(BaseModel):
    """The counters of ``llm-usage.json`` (``usage``): unknown keys are ignored, known ones checked."""

    model_config = ConfigDict(extra="ignore")

    cost_usd: StrictFloat | StrictInt = Field(0.0, ge=0.0, le=1e15)
    latency_bins: dict[str, StrictInt] = Field(default_factory=dict, max_length=100_000)

    @field_validator("cost_usd")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be finite")
        return float(v)

    @field_validator("latency_bins")
    @classmethod
    def _bins(cls, v: dict[str, int]) -> dict[str, int]:
        for k, c in v.items():
            try:
                b = int(k)
            except ValueError:
                raise ValueError(f"bin {k!r:.20} is not an integer") from None
            if not -10_000 <= b <= 10_000 or not 0 <= c <= MAX_COUNT:
                raise ValueError(f"bin {k!r:.20}: {c!r:.20} out of range")
        return v


def check_count(key: str, v: Any) -> int:
    """A ledger counter: an integer in [0, 2**53] (a float with an integer value is accepted)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or v > MAX_COUNT or (
            v != int(v)):
        raise ValueError(f"{key} must be an integer in [0, 2**53]; got {v!r:.40}")
    return int(v)


class PriceEntry(_Strict):
    """One model's price: USD per million input (prompt) and output (completion) tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: StrictFloat | StrictInt = Field(ge=0.0, le=MAX_PRICE)
    output: StrictFloat | StrictInt = Field(ge=0.0, le=MAX_PRICE)

    @field_validator("input", "output")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be finite")
        return float(v)


def price_entry(name: str, entry: Any, source: str) -> PriceEntry:
    """A validated price entry, or a :class:`ConfigError` naming the model and the field."""
    if not isinstance(entry, dict):
        raise ConfigError(f"price table {source}: model {name!r} needs exactly 'input' and 'output' (USD per million "
                          f"tokens); got {entry!r:.80}")
    try:
        return PriceEntry.model_validate(entry)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(map(str, e["loc"])) or "entry"
        raise ConfigError(f"price table {source}: {name}.{loc} must be a finite number >= 0; got "
                          f"{e.get('input')!r:.40} ({e['msg']}; at most {MAX_PRICE:g} USD per million tokens, exactly "
                          f"'input' and 'output')") from None


__all__ = ["MAX_COUNT", "MAX_PRICE", "MAX_TOKENS_PER_REQUEST", "CacheRow", "Completion", "LedgerUsage", "PriceEntry",
           "ServerUsage", "check_count", "price_entry", "read_completion"]
