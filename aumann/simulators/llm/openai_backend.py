"""The OpenAI-compatible backend (OpenAI, vLLM, Ollama, llama.cpp's server, ...): a core plus layers.

:func:`OpenAIBackend` builds an :class:`~aumann.simulators.llm.backend.LLMBackend` from the keywords
the backend always took, by composing (outermost first)::

    Coalesce → Cache → [DryRun] → Retry → Budget → RateLimit → Throttle → ChatCompletions

(:mod:`aumann.simulators.llm.layers`, :mod:`aumann.simulators.llm.core`). Build your own stack with
:func:`~aumann.simulators.llm.layers.compose` to leave layers out, reorder them or add one (see
``docs/extending.md``, "An LLM backend").

Each decision is one ``POST {base_url}/chat/completions``; batches are keyed (sha256 of the logical
request: backend, model, the caller's messages, the schema, temperature, seed, reply bound, scope),
looked up in memory and in the response cache at once, and only the distinct misses are sent -- at
most ``concurrency`` in flight (fewer while the server is slow to answer), paced by ``rpm``/``tpm``,
spread over the endpoints. Results come back in request order.

Structured output is negotiated once per endpoint: strict ``json_schema``, then ``json_object``
with the schema (llama.cpp constrains by it), then prompt-only field instructions; any 4xx/5xx naming
the response format counts as "unsupported". Every request carries a reply bound (``max_tokens``,
sized from the schema unless given). A reply that is not valid -- not JSON, missing a required field,
a field coerced away, or an echo of the schema -- is retried once *varied* (temperature ≥ 0.7 and a
repair message); still invalid, it is an abstention (an exception in place, counted in
``usage.invalid_decisions``, stored in the cache marked invalid so nothing asks it again).

Failures: 401/403 → :class:`~aumann.errors.LLMAuthenticationError`, 404 →
:class:`~aumann.errors.ModelNotFoundError`, other 4xx → :class:`~aumann.errors.LLMRequestError`: at
once, never retried. 429, 5xx, 408, connection errors and timeouts are retried with exponential
backoff and jitter (or the server's ``Retry-After``, up to ``retry_after_max``); a timeout doubles
the next attempt's timeout and halves the requests in flight. Every message, log line and stored text
goes through a :class:`~aumann.simulators.llm.redaction.Redactor`: keys never appear.

Cost guard: ``max_calls``, ``max_tokens`` (prompt + completion) and ``max_cost`` (USD) cap what the
backend spends, counting what ``usage`` holds (a resumed run's earlier spending included), checked
against an upper bound of each request's cost; server-reported token counts that are negative,
non-integer or absurd are refused, counted (``usage.bad_usage``) and replaced by that bound.
``dry_run=True`` sends nothing: ``fallback`` (or the schema's defaults) answers, and the prompt and
schema give the token estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from aumann.errors import LLMRequestError
from aumann.simulators.llm.backend import CallEstimate, LLMBackend
from aumann.simulators.llm.cache import ResponseCache
from aumann.simulators.llm.calls import Call
from aumann.simulators.llm.core import DEFAULT_BASE_URL, STRUCTURED_MODES, ChatCompletions
from aumann.simulators.llm.layers import Budget, Cache, Coalesce, DryRun, RateLimit, Retry, Throttle
from aumann.simulators.llm.options import BackendOptions
from aumann.simulators.llm.prices import Price, load_prices, price_for
from aumann.simulators.llm.settings import Caps, RetryPolicy, Sampling
from aumann.simulators.llm.tokens import estimate_call, upper_bound
from aumann.simulators.llm.transport import HttpxTransport
from aumann.simulators.llm.usage import Usage


def build_stack(core: ChatCompletions, usage: Usage, *, name: str = "openai", cache: ResponseCache | None = None,
                concurrency: int = 16, rates: tuple[float | None, float | None] = (None, None),
                caps: Caps | None = None, price: Price | None = None, retry: RetryPolicy | None = None,
                dry_run: Any = None, sleep: Callable[[float], Any] | None = None) -> Any:
    """The standard layer stack around ``core`` (see the module docstring). ``dry_run`` is ``False``/``None``
    (send), or the stand-in backend answering in place of the model (``True``: the schema's defaults)."""
    where = core.where
    node: Any = Throttle(core, concurrency)
    node = RateLimit(node, *rates, tokens_of=partial(_half_bound, core))
    node = Budget(node, usage, caps, price=price, bounds=partial(upper_bound, core), where=where)
    node = Retry(node, usage, retry, sleep=sleep, where=where, base_temperature=core.sampling.temperature)
    if dry_run is not None and dry_run is not False:
        node = DryRun(node, usage, None if dry_run is True else dry_run, estimate=partial(estimate_call, core))
    node = Cache(node, cache, backend=name, model=core.model, where=where, describe=partial(_stored, core))
    return Coalesce(node)


def _half_bound(core: ChatCompletions, call: Call) -> float:
    """The token charge a rate limit expects of a request: half its upper bound (corrected after)."""
    return sum(upper_bound(core, call)) / 2


def _stored(core: ChatCompletions, call: Call) -> dict[str, Any]:
    d = call.decision
    return {"messages": d.messages, "schema": d.info.name, "seed": d.seed, "temperature": core.sampling.temperature,
            "scope": d.scope, "mode": call.mode}


def OpenAIBackend(model: str, base_url: str | Sequence[str] | None = None, api_key: str | None = None, *,
                  client: Any = None, transport: Any = None, cache: ResponseCache | None = None,
                  temperature: float = 0.0, timeout: float = 60.0, max_retries: int = 3, concurrency: int = 16,
                  rpm: float | None = None, tpm: float | None = None, max_calls: int | None = None,
                  max_tokens: int | None = None, max_cost: float | None = None,
                  prices: Mapping[str, Price] | None = None, price: Price | None = None,
                  max_completion_tokens: int | None = None, structured_output: str = "auto",
                  schema_in_prompt: bool = True, fallback: Any = None, dry_run: bool = False, backoff: float = 0.5,
                  backoff_max: float = 8.0, jitter: float = 0.5, retry_after_max: float = 60.0,
                  max_response_bytes: int = 1_000_000, endpoint_cooldown: float = 30.0,
                  sleep: Callable[[float], Any] | None = None, top_p: float | None = None,
                  llm_seed: int | None = None, system_prompt: str | None = None, name: str = "openai",
                  sampling: Sampling | None = None) -> LLMBackend:
    """An OpenAI-compatible :class:`~aumann.simulators.llm.backend.LLMBackend` from the classic keywords.

    A convenience builder: it makes the core (:class:`~aumann.simulators.llm.core.ChatCompletions`)
    and composes the standard layers (:func:`build_stack`). ``max_tokens`` is the spend cap on
    prompt + completion tokens; ``max_completion_tokens`` is each reply's bound (default: sized from
    the schema). ``client`` is an ``openai.OpenAI`` client whose base URL, key and HTTP client are
    reused (the ``openai`` SDK itself is not used to send). ``schema_in_prompt`` is accepted for
    compatibility: field instructions are added to the prompt only where the server does not
    constrain the output (the ``none`` mode).

    Example:
        >>> backend = OpenAIBackend(model="qwen2.5-7b-instruct", base_url="http://127.0.0.1:8000/v1",
        ...                         cache=ResponseCache("runs/llm.sqlite"), concurrency=32)  # doctest: +SKIP
    """
    del schema_in_prompt
    if cache is not None and not isinstance(cache, ResponseCache):
        raise LLMRequestError(f"cache must be a ResponseCache or None; got {type(cache).__name__}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise LLMRequestError(f"max_retries must be an int >= 0; got {max_retries!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise LLMRequestError(f"concurrency must be an int >= 1; got {concurrency!r}")
    try:
        sampling = sampling or Sampling(temperature, top_p, max_completion_tokens, llm_seed, system_prompt)
        retry = RetryPolicy(max_retries, backoff, backoff_max, jitter, retry_after_max)
        caps = Caps(max_calls, max_tokens, max_cost)
    except ValueError as exc:  # ConfigError: a bad setting, named
        raise LLMRequestError(str(exc)) from None
    injected = transport
    if client is not None:
        base_url = base_url or str(getattr(client, "base_url", "") or DEFAULT_BASE_URL)
        key = getattr(client, "api_key", None)
        api_key = api_key if api_key is not None else (key if key and key != "no-key" else None)
        http = getattr(client, "_client", None)
        injected = HttpxTransport(client=http) if http is not None else transport
    usage = Usage()
    core = ChatCompletions(model, base_url, api_key, transport=injected, sampling=sampling,
                           structured_output=structured_output, timeout=timeout, usage=usage,
                           max_response_bytes=max_response_bytes, endpoint_cooldown=endpoint_cooldown,
                           retry_after_max=retry_after_max)
    if client is not None:
        core.injected = True
    the_price = price if price is not None else price_for(model, prices if prices is not None else load_prices())
    stack = build_stack(core, usage, name=name, cache=cache, concurrency=concurrency, rates=(rpm, tpm), caps=caps,
                        price=the_price, retry=retry, dry_run=(fallback or True) if dry_run else None, sleep=sleep)
    return LLMBackend(stack, name=name, model=model, usage=usage, concurrency=concurrency, sampling=sampling,
                      fallback=fallback, core=core)


def from_options(options: BackendOptions, *, name: str = "openai") -> LLMBackend:
    """An OpenAI-compatible backend from :class:`~aumann.simulators.llm.options.BackendOptions`."""
    caps = options.caps
    x = options.extra
    return OpenAIBackend(
        model=options.model, base_url=list(options.base_urls) or None, api_key=options.api_key, cache=options.cache,
        sampling=options.sampling, concurrency=x.get("concurrency", 16), rpm=x.get("rpm"), tpm=x.get("tpm"),
        max_calls=None if caps is None else caps.max_calls, max_tokens=None if caps is None else caps.max_tokens,
        max_cost=None if caps is None else caps.max_cost, prices=x.get("prices"),
        structured_output=x.get("structured_output", "auto"), timeout=x.get("timeout", 60.0),
        max_retries=x.get("max_retries", 3), retry_after_max=x.get("retry_after_max", 60.0),
        dry_run=options.dry_run is not None, fallback=options.dry_run, name=name)


__all__ = ["DEFAULT_BASE_URL", "STRUCTURED_MODES", "CallEstimate", "OpenAIBackend", "build_stack", "from_options"]
