"""OpenAI-compatible decision backend (OpenAI, vLLM, Ollama, llama.cpp server, ...).

The only module that imports ``openai``. Each decision is one chat-completions request:

* the caller's messages, plus (by default) a system message with the schema's JSON schema asking
  for a single JSON object, and ``response_format={"type": "json_object"}``;
* ``temperature`` and the request ``seed`` passed through;
* the reply parsed with :func:`json.loads` (tolerating ```json fences and prose around one
  object) and validated by the pydantic ``schema``.

Failures: 401/403 and 404 raise :class:`LLMAuthenticationError` / :class:`ModelNotFoundError` at
once (never retried, message names the base URL and model, never the key); other 4xx raise
:class:`LLMRequestError`. 429, 5xx, connection errors and timeouts are retried, as are malformed or
schema-invalid replies, with exponential backoff ``backoff · 2^k`` (or the server's ``Retry-After``
when longer; capped at ``backoff_max``).
The SDK's own retries are disabled (``max_retries=0``) so every attempt is counted in
:attr:`OpenAIBackend.usage`. After ``max_retries`` retries the backend uses ``fallback`` (e.g. an
:class:`OfflineBackend`) when given, counted in ``usage.fallbacks``, else raises
:class:`BackendUnavailableError` / :class:`MalformedResponseError`.

Cost guard: ``max_calls`` caps the HTTP requests sent and ``max_tokens`` the total tokens
(prompt + completion) of the run; the request that would pass a cap raises
:class:`BudgetExceededError` instead of being sent (the token cap is checked before each request,
so the last request may overshoot it by its own size). ``dry_run=True`` sends nothing: cache hits
are served, misses are counted in ``usage.planned_calls`` (see :meth:`OpenAIBackend.estimate`) and
answered by ``fallback`` (or the schema's defaults).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from aumann.errors import RetryableLLMError
from aumann.simulators.llm.base import (
    BackendUnavailableError,
    BudgetExceededError,
    CacheMissError,
    LLMAuthenticationError,
    LLMError,
    LLMRequestError,
    MalformedResponseError,
    Messages,
    ModelNotFoundError,
    Usage,
    canonical_json,
    check_messages,
    check_schema,
    parse_json_object,
)
from aumann.simulators.llm.cache import ResponseCache

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_NO_KEY = "no-key"  # local servers need none; the SDK insists on a value (and would read the env)
_KEYLIKE = re.compile(r"(sk-|key-|Bearer\s+)[A-Za-z0-9_\-\*\.]{4,}")


@dataclass(frozen=True)
class CallEstimate:
    """What a dry run found: requests that would be sent, their rough prompt tokens, cache hits."""

    calls: int
    prompt_tokens: int
    cache_hits: int


def _retry_after(exc: Any) -> float:
    try:
        return max(0.0, float(exc.response.headers.get("retry-after", 0)))
    except (AttributeError, TypeError, ValueError):
        return 0.0


class OpenAIBackend:
    """A :class:`DecisionBackend` on any OpenAI-compatible chat-completions server.

    Args:
        model: the model name the server serves.
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (vLLM), ``http://localhost:11434/v1`` (Ollama);
            default the OpenAI API. Never read from the environment here.
        api_key: the key, or ``None`` for servers that need none. Never logged or cached.
        client: an ``openai.OpenAI`` client to use instead of building one (its retries are turned
            off; ``base_url``/``api_key`` are then taken from it).
        cache: a :class:`ResponseCache` (``None``: no cache).
        temperature: sampling temperature passed through.
        timeout: seconds per request.
        max_retries: retries after the first attempt for retryable failures.
        concurrency: the most requests in flight at once (also the thread count of ``decide_many``).
        max_calls: cap on HTTP requests sent by this backend (cost guard).
        max_tokens: cap on total tokens (prompt + completion) used by this backend (cost guard).
        max_completion_tokens: per-request completion limit sent to the server.
        json_mode: send ``response_format={"type": "json_object"}`` (turn off for servers without it).
        schema_in_prompt: append a system message with the schema's JSON schema.
        fallback: a backend used when retries are exhausted (counted in ``usage.fallbacks``).
        dry_run: send nothing; count planned calls (see :meth:`estimate`).
        backoff, backoff_max: exponential backoff base and cap, in seconds.
        sleep: the sleep function (injectable so tests do not wait).

    Example:
        >>> backend = OpenAIBackend(model="qwen2.5-7b-instruct", base_url="http://127.0.0.1:8000/v1",
        ...                         cache=ResponseCache("runs/llm.sqlite"))      # doctest: +SKIP
        >>> backend.decide([{"role": "user", "content": "Work how many hours?"}], Work)  # doctest: +SKIP
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        client: Any = None,
        cache: ResponseCache | None = None,
        temperature: float = 0.0,
        timeout: float = 60.0,
        max_retries: int = 3,
        concurrency: int = 4,
        max_calls: int | None = None,
        max_tokens: int | None = None,
        max_completion_tokens: int | None = None,
        json_mode: bool = True,
        schema_in_prompt: bool = True,
        fallback: Any = None,
        dry_run: bool = False,
        backoff: float = 0.5,
        backoff_max: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise LLMRequestError(f"model must be a non-empty string; got {model!r}")
        for name, val, lo in (("max_retries", max_retries, 0), ("concurrency", concurrency, 1)):
            if isinstance(val, bool) or not isinstance(val, int) or val < lo:
                raise LLMRequestError(f"{name} must be an int >= {lo}; got {val!r}")
        for name, val in (("max_calls", max_calls), ("max_tokens", max_tokens)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
                raise LLMRequestError(f"{name} must be None or an int >= 0; got {val!r}")
        if cache is not None and not isinstance(cache, ResponseCache):
            raise LLMRequestError(f"cache must be a ResponseCache or None; got {type(cache).__name__}")
        self.model = model
        self.cache = cache
        self.temperature = float(temperature)
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.max_completion_tokens = max_completion_tokens
        self.json_mode = json_mode
        self.schema_in_prompt = schema_in_prompt
        self.fallback = fallback
        self.dry_run = dry_run
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self.sleep = sleep
        self.usage = Usage()
        self._injected = client is not None
        self._api_key = api_key
        if client is not None:
            self.base_url = str(getattr(client, "base_url", base_url or "")).rstrip("/")
            self._client = client.with_options(max_retries=0, timeout=self.timeout)
        else:
            self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
            self._client = None
        self._sem = threading.BoundedSemaphore(concurrency)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing
    @property
    def client(self):
        """The ``openai.OpenAI`` client (built lazily; SDK retries off)."""
        if self._client is None:
            import openai

            self._client = openai.OpenAI(
                api_key=self._api_key or _NO_KEY, base_url=self.base_url, max_retries=0, timeout=self.timeout
            )
        return self._client

    def _redact(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return _KEYLIKE.sub(lambda m: m.group(1) + "***", text)

    def _where(self) -> str:
        return f"model {self.model!r} at {self.base_url}"

    def request_for(self, messages: Messages, schema: type[BaseModel], seed: int | None) -> dict[str, Any]:
        """The exact request body (without transport options) a decision sends."""
        msgs = [dict(m) for m in messages]
        if self.schema_in_prompt:
            msgs.append({
                "role": "system",
                "content": "Reply with a single JSON object (no prose) that validates against this JSON "
                           "schema: " + json.dumps(schema.model_json_schema(), sort_keys=True),
            })
        body: dict[str, Any] = {"model": self.model, "messages": msgs, "temperature": self.temperature}
        if seed is not None:
            body["seed"] = int(seed)
        if self.max_completion_tokens is not None:
            body["max_completion_tokens"] = int(self.max_completion_tokens)
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    def cache_key(self, body: Mapping[str, Any], schema: type[BaseModel]) -> str:
        """sha256 over backend name, model, messages, schema, temperature, seed and parameters."""
        return ResponseCache.key(backend=self.name, request=dict(body), schema=schema.model_json_schema())

    def _validate(self, text: str | None, schema: type[BaseModel]) -> BaseModel:
        try:
            return schema.model_validate(parse_json_object(text))
        except ValueError as exc:  # json errors and pydantic ValidationError (a ValueError)
            if isinstance(exc, ValidationError):
                errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
                raise RetryableLLMError("malformed", f"reply fails {schema.__name__}: {errs}") from None
            raise RetryableLLMError("malformed", str(exc)) from None

    def _check_budget(self) -> None:
        with self._lock:
            if self.max_calls is not None and self.usage.calls >= self.max_calls:
                raise BudgetExceededError(
                    f"call cap reached: {self.usage.calls} request(s) sent, max_calls={self.max_calls} "
                    f"({self._where()}); raise the cap or serve the run from a cache"
                )
            if self.max_tokens is not None and self.usage.total_tokens >= self.max_tokens:
                raise BudgetExceededError(
                    f"token cap reached: {self.usage.total_tokens} token(s) used, "
                    f"max_tokens={self.max_tokens} ({self._where()})"
                )
            self.usage.calls += 1

    def _list_models(self) -> list[str] | None:
        try:
            return sorted(m.id for m in self.client.models.list())[:20]
        except Exception:  # best effort only: the listing is a hint in an error message
            return None

    def _send(self, body: dict[str, Any]) -> tuple[str | None, int, int]:
        import openai

        self._check_budget()
        try:
            with self._sem:
                resp = self.client.chat.completions.create(**body)
        except openai.AuthenticationError as exc:
            self.usage.add(failures=1)
            raise LLMAuthenticationError(
                f"the server at {self.base_url} rejected the API key (HTTP {exc.status_code}) for model "
                f"{self.model!r}: {self._redact(exc.message)}. Check the key given to the backend "
                f"(keys are read from the environment only by the CLI/config)."
            ) from None
        except openai.PermissionDeniedError as exc:
            self.usage.add(failures=1)
            raise LLMAuthenticationError(
                f"the server at {self.base_url} denied access (HTTP 403) to model {self.model!r}: "
                f"{self._redact(exc.message)}"
            ) from None
        except openai.NotFoundError as exc:
            self.usage.add(failures=1)
            models = self._list_models()
            hint = (f"; models this server lists: {models}" if models else
                    "; check the model name and that base_url ends with the API root (e.g. .../v1)")
            raise ModelNotFoundError(
                f"not found (HTTP 404): {self._where()}: {self._redact(exc.message)}{hint}"
            ) from None
        except openai.RateLimitError as exc:
            raise RetryableLLMError(
                "unavailable", f"rate limited (HTTP 429): {self._redact(exc.message)}", _retry_after(exc)
            ) from None
        except openai.APIStatusError as exc:
            if exc.status_code >= 500 or exc.status_code == 408:
                raise RetryableLLMError(
                    "unavailable", f"server error (HTTP {exc.status_code}): {self._redact(exc.message)}"
                ) from None
            self.usage.add(failures=1)
            raise LLMRequestError(
                f"request rejected (HTTP {exc.status_code}) by {self._where()}: {self._redact(exc.message)}"
            ) from None
        except openai.APITimeoutError:
            raise RetryableLLMError("unavailable", f"timed out after {self.timeout:g}s") from None
        except openai.APIConnectionError as exc:
            detail = self._redact(str(exc.__cause__ or exc))
            raise RetryableLLMError("unavailable", f"cannot connect to {self.base_url}: {detail}") from None
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        self.usage.add(prompt_tokens=pt, completion_tokens=ct)
        try:
            text = resp.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            raise RetryableLLMError("malformed", "reply has no choices[0].message.content") from None
        return text, pt, ct

    # ------------------------------------------------------------------ the interface
    def decide(
        self,
        messages: Messages,
        schema: type[BaseModel],
        *,
        context: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> BaseModel:
        """Ask the server for a decision validated as ``schema`` (see the module docstring).

        ``context`` is not sent (the messages carry the observation); it is passed to ``fallback``.

        Raises:
            LLMAuthenticationError, ModelNotFoundError, LLMRequestError: at once, not retried.
            BackendUnavailableError, MalformedResponseError: after ``max_retries`` retries.
            BudgetExceededError: a cap would be exceeded. CacheMissError: replay-mode miss.
        """
        messages = check_messages(messages)
        schema = check_schema(schema)
        body = self.request_for(messages, schema, seed)
        key = self.cache_key(body, schema) if self.cache is not None else None
        if key is not None:
            hit = self.cache.get(key)
            if hit is not None:
                try:
                    out = self._validate(hit.text, schema)
                except RetryableLLMError as exc:
                    raise MalformedResponseError(f"cached reply {key[:12]} is invalid: {exc}") from None
                self.usage.add(cache_hits=1, decisions=1)
                return out
            if self.cache.mode == "replay":
                raise CacheMissError(
                    f"replay cache miss for {self._where()} (key {key[:12]}, {len(messages)} message(s), "
                    f"last: {messages[-1]['content'][:80]!r}, seed={seed}); record it first with "
                    f"ResponseCache({self.cache.path!r}, mode='record')"
                )
        if self.dry_run:
            self.usage.add(planned_calls=1, planned_prompt_tokens=len(canonical_json(body["messages"])) // 4)
            return self._dry_answer(messages, schema, context, seed)

        last = ""
        kind = "unavailable"
        wait = 0.0
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.usage.add(retries=1)
                self.sleep(min(max(self.backoff * 2 ** (attempt - 1), wait), self.backoff_max))
            try:
                text, pt, ct = self._send(body)
                out = self._validate(text, schema)
            except RetryableLLMError as exc:
                self.usage.add(failures=1)
                kind, last, wait = exc.kind, str(exc), exc.wait
                logger.warning("LLM attempt %d/%d failed for %s: %s", attempt + 1, self.max_retries + 1,
                               self._where(), last)
                continue
            if key is not None:
                self.cache.put(key, text or "", backend=self.name, model=self.model, request=body,
                               prompt_tokens=pt, completion_tokens=ct)
            self.usage.add(decisions=1)
            return out
        if self.fallback is not None:
            logger.warning("LLM gave up after %d attempt(s) for %s; using fallback %r", self.max_retries + 1,
                           self._where(), self.fallback)
            self.usage.add(fallbacks=1, decisions=1)
            return self.fallback.decide(messages, schema, context=context, seed=seed)
        err = MalformedResponseError if kind == "malformed" else BackendUnavailableError
        raise err(f"{self._where()} failed after {self.max_retries + 1} attempt(s); last error: {last}")

    def _dry_answer(self, messages: Messages, schema: type[BaseModel], context: Any, seed: int | None):
        if self.fallback is not None:
            return self.fallback.decide(messages, schema, context=context, seed=seed)
        try:
            return schema()
        except ValidationError:
            raise LLMError(
                f"dry run of {schema.__name__} needs a fallback backend (the schema has required fields "
                f"{[n for n, f in schema.model_fields.items() if f.is_required()]})"
            ) from None

    def decide_many(self, requests: Sequence[Mapping[str, Any]]) -> list[BaseModel]:
        """Decide a batch concurrently (``concurrency`` threads); results in request order.

        Each request is a dict of :meth:`decide` keyword arguments (``messages``, ``schema``,
        optionally ``context`` and ``seed``).
        """
        reqs = list(requests)
        if self.concurrency == 1 or len(reqs) <= 1:
            return [self.decide(**r) for r in reqs]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda r: self.decide(**r), reqs))

    def estimate(self) -> CallEstimate:
        """Requests a dry run so far would have sent (cache misses), their prompt tokens, cache hits."""
        u = self.usage
        return CallEstimate(u.planned_calls, u.planned_prompt_tokens, u.cache_hits)

    # ------------------------------------------------------------------ copying
    def __deepcopy__(self, memo: dict) -> OpenAIBackend:
        return self  # forks share the client, cache, caps and usage

    def __getstate__(self) -> dict:
        if self._injected:
            raise LLMError("an OpenAIBackend built with an injected client cannot be pickled; "
                           "build it from model/base_url/api_key in each worker")
        state = {k: v for k, v in self.__dict__.items() if k not in ("_client", "_sem", "_lock")}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._client = None
        self._sem = threading.BoundedSemaphore(self.concurrency)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIBackend(model={self.model!r}, base_url={self.base_url!r}, cache={self.cache!r})"


__all__ = ["DEFAULT_BASE_URL", "CallEstimate", "OpenAIBackend"]
