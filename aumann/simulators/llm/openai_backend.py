"""OpenAI-compatible decision backend (OpenAI, vLLM, Ollama, llama.cpp server, ...), built for batches.

Each decision is one ``POST {base_url}/chat/completions``. Scenario steps hand whole batches of
independent decisions to :meth:`OpenAIBackend.decide_many`:

1. every request is keyed (sha256 of the logical request: model, the caller's messages, the schema,
   temperature, seed, completion limit, scope) and looked up in the response cache in one query;
   an identical request already in flight is joined, not sent twice (counted as a cache hit);
2. the misses go out on a pool of worker threads, at most ``concurrency`` in flight, paced by the
   ``rpm``/``tpm`` token buckets, spread over the endpoints (``base_url`` may be a list);
3. replies are validated, the good ones buffered into the cache and committed once per batch (and
   every 64 replies within a long one); results come back **in request order**, so a run is
   byte-identical at concurrency 1 and 64.

Request body: the caller's messages, ``temperature``, the request ``seed`` and, by default,
``response_format={"type": "json_schema", "json_schema": {"name", "strict": true, "schema"}}``
(``structured_output="auto"``). When the server answers that this mode is unsupported (HTTP 400/422
naming ``response_format``/``json_schema``), the backend falls back to ``{"type": "json_object"}``
with the schema pasted into a system message, then to no ``response_format`` at all; the first
request probes while the others wait, so a fallback costs one extra request per run. The mode in use
is :attr:`OpenAIBackend.structured_mode`. Replies are parsed with :func:`json.loads` (```json fences
and prose around one object tolerated; never ``eval``) and validated by the pydantic schema; a reply
whose fields validation coerced away (a non-null value turned into ``None``, e.g. an unknown
``action`` string) is treated as malformed: retried, and never cached as a good answer.

Failures: 401/403 → :class:`LLMAuthenticationError`, 404 → :class:`ModelNotFoundError` (listing the
server's models when it can), other 4xx → :class:`LLMRequestError`: raised at once, never retried.
429, 5xx, 408, connection errors, timeouts, malformed/invalid replies and bodies over
``max_response_bytes`` (default 1 MB; rejected, counted, never stored) are retried with exponential
backoff and jitter, ``backoff · 2^k`` capped at ``backoff_max``, or the server's ``Retry-After``
when longer -- honoured up to ``retry_after_max``; a longer ``Retry-After`` raises
:class:`~aumann.errors.RetryAfterTooLongError` naming the wait asked for. After ``max_retries``
retries the backend uses ``fallback`` (counted in ``usage.fallbacks``) when given, else raises
:class:`BackendUnavailableError` / :class:`MalformedResponseError` /
:class:`~aumann.errors.ResponseTooLargeError`. Every message, log line and stored text is passed
through a :class:`~aumann.simulators.llm.redaction.Redactor`: API keys (given or found in a URL)
never appear, whatever path the text took.

Cost guard: ``max_calls`` (requests), ``max_tokens`` (prompt + completion) and ``max_cost`` (USD,
from the model's price) cap what the backend spends, counting what ``usage`` already holds (a
resumed run's earlier spending included); the request that would pass a cap raises
:class:`BudgetExceededError` instead of being sent (requests already in flight complete and are
cached). ``dry_run=True`` sends nothing: cache hits are served, misses are counted
(``usage.planned_calls`` and token estimates, see :meth:`OpenAIBackend.estimate`) and answered by
``fallback`` (or the schema's defaults).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from aumann.errors import ResponseTooLargeError
from aumann.simulators.llm.base import (
    BackendUnavailableError,
    BudgetExceededError,
    CacheMissError,
    LLMError,
    LLMRequestError,
    MalformedResponseError,
    Messages,
    check_messages,
    check_schema,
    parse_json_object,
)
from aumann.simulators.llm.cache import ResponseCache
from aumann.simulators.llm.endpoints import Endpoint, EndpointPool, parse_endpoint
from aumann.simulators.llm.prices import Price, load_prices, price_for
from aumann.simulators.llm.ratelimit import RateLimiter
from aumann.simulators.llm.redaction import Redactor, protect_logs
from aumann.simulators.llm.replies import ModeUnsupported, Retryable, interpret
from aumann.simulators.llm.schemas import SchemaInfo, coerced_away, schema_info
from aumann.simulators.llm.transport import (
    HttpxTransport,
    ReplyTooLarge,
    StdlibTransport,
    TransportFailure,
)
from aumann.simulators.llm.usage import Usage

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
STRUCTURED_MODES = ("auto", "json_schema", "json_object", "none")
_FALLBACK_CHAIN = {"json_schema": "json_object", "json_object": "none"}
_RECENT = 200_000  # completed keys remembered in memory (joins identical requests across batches)


@dataclass(frozen=True)
class CallEstimate:
    """What a dry run found: requests that would be sent, their rough tokens, cache hits, and the
    ideal batch rounds (Σ ⌈requests in a batch / concurrency⌉; × latency = the ideal wall time)."""

    calls: int
    prompt_tokens: int
    cache_hits: int
    completion_tokens: int = 0
    rounds: int = 0
    fork_rounds: int = 0


@dataclass(slots=True)
class _Request:
    index: int
    messages: Messages
    schema: type[BaseModel]
    info: SchemaInfo
    context: Any
    seed: int | None
    scope: str | None
    key: str
    chars: int


class OpenAIBackend:
    """A :class:`DecisionBackend` on OpenAI-compatible chat-completions servers (see the module docstring).

    Args:
        model: the model name the servers serve.
        base_url: one URL or a list of URLs serving the same model, e.g. ``http://127.0.0.1:8000/v1``;
            default the OpenAI API. Credentials inside a URL are used, never recorded.
        api_key: the key, or ``None`` for servers that need none. Never logged, cached or recorded.
        client: an ``openai.OpenAI`` client whose base URL, key and HTTP client are reused (the
            ``openai`` SDK itself is not used to send).
        transport: the HTTP layer: ``None`` (:class:`~aumann.simulators.llm.transport.StdlibTransport`,
            or ``httpx`` when a proxy is configured), an ``httpx`` transport (e.g.
            ``httpx.MockTransport``) or an object with the transport interface.
        cache: a :class:`ResponseCache` (``None``: no cache).
        temperature: sampling temperature passed through.
        timeout: seconds per socket operation of a request.
        max_retries: retries after the first attempt for retryable failures.
        concurrency: the most requests in flight at once (default 16).
        rpm, tpm: request and token rate limits per minute (token buckets; ``None``: none).
        max_calls, max_tokens, max_cost: caps on requests, tokens and dollars (cost guard).
        prices: a model → :class:`~aumann.simulators.llm.prices.Price` table (default the packaged
            one); ``price`` sets this model's price directly.
        max_completion_tokens: per-request completion limit sent to the server.
        structured_output: ``"auto"`` (json_schema, falling back), ``"json_schema"``,
            ``"json_object"`` or ``"none"``.
        schema_in_prompt: paste the schema into a system message in the json_object/none modes.
        fallback: a backend used when retries are exhausted (counted in ``usage.fallbacks``).
        dry_run: send nothing; count planned calls (see :meth:`estimate`).
        backoff, backoff_max, jitter: exponential backoff base and cap (seconds) and the jitter
            fraction (each wait is scaled by a uniform factor in [1 − jitter, 1]).
        retry_after_max: the longest ``Retry-After`` honoured (seconds).
        max_response_bytes: reply bodies larger than this are rejected (default 1 MB).
        endpoint_cooldown: seconds a failing endpoint is taken out (doubling per repeat).
        sleep: the sleep function for backoff (injectable so tests do not wait).

    Example:
        >>> backend = OpenAIBackend(model="qwen2.5-7b-instruct", base_url="http://127.0.0.1:8000/v1",
        ...                         cache=ResponseCache("runs/llm.sqlite"), concurrency=32)  # doctest: +SKIP
        >>> backend.decide_many([{"messages": msgs, "schema": Work, "seed": s} for s in range(64)])  # doctest: +SKIP
    """

    name = "openai"
    batch_protocol = 1  # decide_many(requests, return_exceptions=...) and decide(..., scope=...)

    def __init__(
        self,
        model: str,
        base_url: str | Sequence[str] | None = None,
        api_key: str | None = None,
        *,
        client: Any = None,
        transport: Any = None,
        cache: ResponseCache | None = None,
        temperature: float = 0.0,
        timeout: float = 60.0,
        max_retries: int = 3,
        concurrency: int = 16,
        rpm: float | None = None,
        tpm: float | None = None,
        max_calls: int | None = None,
        max_tokens: int | None = None,
        max_cost: float | None = None,
        prices: Mapping[str, Price] | None = None,
        price: Price | None = None,
        max_completion_tokens: int | None = None,
        structured_output: str = "auto",
        schema_in_prompt: bool = True,
        fallback: Any = None,
        dry_run: bool = False,
        backoff: float = 0.5,
        backoff_max: float = 8.0,
        jitter: float = 0.5,
        retry_after_max: float = 60.0,
        max_response_bytes: int = 1_000_000,
        endpoint_cooldown: float = 30.0,
        sleep: Callable[[float], Any] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise LLMRequestError(f"model must be a non-empty string; got {model!r}")
        for nm, val, lo in (("max_retries", max_retries, 0), ("concurrency", concurrency, 1),
                            ("max_response_bytes", max_response_bytes, 1)):
            if isinstance(val, bool) or not isinstance(val, int) or val < lo:
                raise LLMRequestError(f"{nm} must be an int >= {lo}; got {val!r}")
        for nm, val in (("max_calls", max_calls), ("max_tokens", max_tokens)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
                raise LLMRequestError(f"{nm} must be None or an int >= 0; got {val!r}")
        for nm, val in (("max_cost", max_cost), ("timeout", timeout), ("backoff", backoff),
                        ("backoff_max", backoff_max), ("retry_after_max", retry_after_max)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int | float)
                                    or not math.isfinite(val) or val < 0):
                raise LLMRequestError(f"{nm} must be a finite number >= 0; got {val!r}")
        if not (isinstance(jitter, int | float) and 0 <= jitter <= 1):
            raise LLMRequestError(f"jitter must be a fraction in [0, 1]; got {jitter!r}")
        if structured_output not in STRUCTURED_MODES:
            raise LLMRequestError(f"structured_output must be one of {list(STRUCTURED_MODES)}; "
                                  f"got {structured_output!r}")
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
        self.max_cost = None if max_cost is None else float(max_cost)
        self.max_completion_tokens = max_completion_tokens
        self.structured_output = structured_output
        self.schema_in_prompt = schema_in_prompt
        self.fallback = fallback
        self.dry_run = dry_run
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self.jitter = float(jitter)
        self.retry_after_max = float(retry_after_max)
        self.max_response_bytes = max_response_bytes
        self.sleep = sleep or time.sleep
        self.limiter = RateLimiter(rpm, tpm)
        self.price = price if price is not None else price_for(model, prices if prices is not None else load_prices())
        self.usage = Usage()
        self._injected = client is not None or (transport is not None and not isinstance(transport, str))
        if client is not None:
            base_url = base_url or str(getattr(client, "base_url", "") or DEFAULT_BASE_URL)
            key = getattr(client, "api_key", None)
            api_key = api_key if api_key is not None else (key if key and key != "no-key" else None)
            http = getattr(client, "_client", None)
            transport = HttpxTransport(client=http) if http is not None else transport
        urls = [base_url or DEFAULT_BASE_URL] if base_url is None or isinstance(base_url, str) else list(base_url)
        self.endpoints = EndpointPool([parse_endpoint(u, api_key) for u in urls], cooldown=endpoint_cooldown)
        secrets = [api_key, *(e.api_key for e in self.endpoints.endpoints),
                   *(s for e in self.endpoints.endpoints for s in e.url_secrets)]
        self._redactor = Redactor(secrets)
        protect_logs(self._redactor.secrets)
        self._transport_spec = transport
        self._init_runtime()

    def _init_runtime(self) -> None:
        spec = self._transport_spec
        if spec is None:
            self._transport = StdlibTransport() if not self._proxied() else HttpxTransport()
        elif hasattr(spec, "request") and callable(spec.request):
            self._transport = spec
        else:
            self._transport = HttpxTransport(spec)
        self._mode = "json_schema" if self.structured_output == "auto" else self.structured_output
        self._mode_final = self.structured_output != "auto"
        self._probe = threading.Lock()
        self._sem = threading.BoundedSemaphore(self.concurrency)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: dict[str, Future] = {}
        self._recent: OrderedDict[str, str] = OrderedDict()
        self._reserved_cost = 0.0
        self._rand = random.Random()

    def _proxied(self) -> bool:
        import urllib.request

        proxies = urllib.request.getproxies()
        return any(e.scheme in proxies and not urllib.request.proxy_bypass(e.host)
                   for e in self.endpoints.endpoints)

    # ------------------------------------------------------------------ public properties
    @property
    def base_url(self) -> str:
        """The first endpoint's URL, credentials stripped."""
        return self.endpoints.endpoints[0].public

    @property
    def base_urls(self) -> list[str]:
        """Every endpoint's URL, credentials stripped."""
        return self.endpoints.public

    @property
    def structured_mode(self) -> str:
        """The structured-output mode in use: ``json_schema``, ``json_object`` or ``none``."""
        return self._mode

    @property
    def label(self) -> str:
        """``openai:MODEL@URL[,URL...]`` without credentials (for logs, digests and manifests)."""
        return f"openai:{self.model}@{','.join(self.base_urls)}"

    @property
    def price_known(self) -> bool:
        return self.price is not None

    def describe(self) -> dict[str, Any]:
        """What the manifest records about the backend (no secrets)."""
        return {"backend": "openai", "model": self.model, "endpoints": self.base_urls,
                "structured_output": self._mode, "concurrency": self.concurrency, "rpm": self.limiter.rpm,
                "tpm": self.limiter.tpm, "temperature": self.temperature,
                "price_usd_per_mtok": None if self.price is None else {"input": self.price.input,
                                                                       "output": self.price.output},
                "price_note": None if self.price is not None else
                f"no price known for model {self.model!r}: cost_usd is reported as 0"}

    def _redact(self, text: object) -> str:
        return self._redactor(text)

    def _where(self) -> str:
        return f"model {self.model!r} at {self.base_url}" + (
            f" (+{len(self.base_urls) - 1} endpoint(s))" if len(self.base_urls) > 1 else "")

    # ------------------------------------------------------------------ requests
    def _prepare(self, index: int, messages: Any, schema: Any, context: Any = None, seed: int | None = None,
                 scope: str | None = None) -> _Request:
        messages = check_messages(messages)
        schema = check_schema(schema)
        info = schema_info(schema)
        if seed is not None:
            seed = int(seed)
        try:
            text = json.dumps({"backend": self.name, "model": self.model, "messages": messages,
                               "schema": info.canonical, "temperature": self.temperature, "seed": seed,
                               "max_completion_tokens": self.max_completion_tokens, "scope": scope},
                              sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise LLMRequestError(f"messages must be JSON-serialisable: {exc}") from None
        key = hashlib.sha256(text.encode()).hexdigest()
        chars = sum(len(m["content"]) for m in messages) + len(info.canonical)
        return _Request(index, messages, schema, info, context, seed, scope, key, chars)

    def request_for(self, messages: Messages, schema: type[BaseModel], seed: int | None,
                    mode: str | None = None) -> dict[str, Any]:
        """The exact request body a decision sends in ``mode`` (default: the current mode)."""
        return self._body(check_messages(messages), schema_info(check_schema(schema)), seed, mode or self._mode)

    def _body(self, messages: Messages, info: SchemaInfo, seed: int | None, mode: str) -> dict[str, Any]:
        msgs = messages
        if mode != "json_schema" and self.schema_in_prompt:
            msgs = [*messages, info.system_message]
        body: dict[str, Any] = {"model": self.model, "messages": msgs, "temperature": self.temperature}
        if seed is not None:
            body["seed"] = int(seed)
        if self.max_completion_tokens is not None:
            body["max_completion_tokens"] = int(self.max_completion_tokens)
        if mode in info.response_formats:
            body["response_format"] = info.response_formats[mode]
        return body

    def cache_key(self, messages: Messages, schema: type[BaseModel], seed: int | None = None,
                  scope: str | None = None) -> str:
        """The cache key of a decision (see the module docstring; no key, URL or mode in it)."""
        return self._prepare(0, messages, schema, None, seed, scope).key

    def _headers(self, ep: Endpoint) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json", "Accept-Encoding": "identity",
             "User-Agent": "aumann"}
        if ep.api_key:
            h["Authorization"] = f"Bearer {ep.api_key}"
        return h

    def _validate(self, text: str | None, req: _Request) -> BaseModel:
        if text is not None and self._redactor.secrets and self._redactor.contains_secret(text):
            text = self._redact(text)
        try:
            raw = parse_json_object(text)
        except ValueError as exc:
            raise Retryable("malformed", self._redact(exc)) from None
        try:
            obj = req.schema.model_validate(raw)
        except ValidationError as exc:
            errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
            raise Retryable("malformed", self._redact(f"reply fails {req.schema.__name__}: {errs}")) from None
        lost = coerced_away(raw, obj, req.info)
        if lost:
            shown = {k: raw[k] for k in lost}
            raise Retryable("malformed", self._redact(
                f"reply fails {req.schema.__name__}: field(s) {lost} coerced away (the reply gave "
                f"{json.dumps(shown)[:120]}, validation kept None); not accepted as an answer")) from None
        return obj

    def _estimate_cost(self, req: _Request) -> float:
        if self.price is None:
            return 0.0
        u = self.usage
        done = max(1, u.total_calls - u.failures)
        completion = (u.completion_tokens / done) if u.completion_tokens else (self.max_completion_tokens or 64)
        return self.price.cost(req.chars / 4, completion)

    def _reserve(self, req: _Request) -> float:
        """Check the caps and count one call (atomically); returns the cost reserved for it."""
        with self._lock:
            u = self.usage
            if self.max_calls is not None and u.total_calls >= self.max_calls:
                raise BudgetExceededError(
                    f"call cap reached: {u.total_calls} request(s) sent, max_calls={self.max_calls} "
                    f"({self._where()}); raise the cap to go on (the run resumes where it stopped)")
            if self.max_tokens is not None and u.total_tokens >= self.max_tokens:
                raise BudgetExceededError(
                    f"token cap reached: {u.total_tokens} token(s) used, max_tokens={self.max_tokens} "
                    f"({self._where()})")
            est = self._estimate_cost(req)
            if self.max_cost is not None and u.cost_usd + self._reserved_cost + est > self.max_cost:
                raise BudgetExceededError(
                    f"cost cap reached: ${u.cost_usd:.4f} spent (+${self._reserved_cost:.4f} in flight), the next "
                    f"request (~${est:.5f}) would pass max_cost=${self.max_cost:g} ({self._where()}); raise the "
                    f"cap to go on (the run resumes where it stopped)")
            self._reserved_cost += est
            u.add(calls=1)
        return est

    def _acquire_mode(self) -> tuple[str, bool]:
        if self._mode_final:
            return self._mode, False
        self._probe.acquire()
        if self._mode_final:
            self._probe.release()
            return self._mode, False
        return self._mode, True

    def _list_models(self, ep: Endpoint) -> list[str] | None:
        try:
            r = self._transport.request("GET", ep, ep.path("/models"), None, self._headers(ep), self.timeout,
                                        self.max_response_bytes)
            data = json.loads(r.body)
            return sorted(str(m["id"]) for m in data["data"])[:20]
        except Exception:  # best effort only: the listing is a hint in an error message
            return None

    def _interpret(self, reply: Any, ep: Endpoint, mode: str) -> tuple[str, int, int]:
        if reply.status >= 500 or reply.status == 408:
            self.endpoints.failure(ep)
        try:
            return interpret(reply, where=ep.public, model=self.model, redact=self._redact,
                             retry_after_max=self.retry_after_max,
                             negotiable=self.structured_output == "auto" and mode != "none",
                             list_models=lambda: self._list_models(ep))
        except Retryable as exc:
            if exc.tokens:
                self._account_tokens(*exc.tokens)
            raise

    def _account_tokens(self, pt: int, ct: int) -> None:
        cost = self.price.cost(pt, ct) if self.price is not None else 0.0
        self.usage.add(prompt_tokens=pt, completion_tokens=ct, cost_usd=cost)

    def _backoff(self, attempt: int, wait: float) -> float:
        base = min(self.backoff * 2 ** (attempt - 1), self.backoff_max)
        if self.jitter:
            base *= 1.0 - self.jitter * self._rand.random()
        return max(base, wait)

    def _send(self, req: _Request) -> tuple[str, BaseModel, int, int]:
        """One decision over the network with retries (runs on a worker thread)."""
        attempt = 0
        last, kind, wait = "", "unavailable", 0.0
        ep: Endpoint | None = None
        while True:
            if attempt > self.max_retries:
                break
            if attempt:
                self.usage.add(retries=1)
                self.sleep(self._backoff(attempt, wait))
            est_tokens = req.chars / 4 + (self.max_completion_tokens or 64)
            if self.limiter.active:
                self.limiter.acquire(est_tokens)
            mode, probing = self._acquire_mode()
            reserved, sent = 0.0, False
            try:
                reserved = self._reserve(req)
                sent = True
                body = json.dumps(self._body(req.messages, req.info, req.seed, mode), ensure_ascii=False).encode()
                with self._sem:
                    ep = self.endpoints.pick(avoid=ep)
                    t0 = time.perf_counter()
                    try:
                        reply = self._transport.request("POST", ep, ep.path("/chat/completions"), body,
                                                        self._headers(ep), self.timeout, self.max_response_bytes)
                    except ReplyTooLarge as exc:
                        seen = f"{exc.size} bytes announced" if exc.size else "cut off while reading"
                        raise Retryable("too_large", f"reply body over max_response_bytes = "
                                         f"{self.max_response_bytes} bytes ({seen}); rejected, not stored",
                                         size=exc.size) from None
                    except TransportFailure as exc:
                        self.endpoints.failure(ep, hard=exc.kind == "connect")
                        detail = self._redact(exc.detail)
                        raise Retryable("unavailable", detail if exc.kind == "timeout" else
                                         f"cannot connect to {ep.public}: {detail}") from None
                    latency = time.perf_counter() - t0
                text, pt, ct = self._interpret(reply, ep, mode)
                self.usage.add_latency(latency)
                self._account_tokens(pt, ct)
                if self.limiter.active:
                    self.limiter.settle(est_tokens, pt + ct)
                self.endpoints.success(ep)
                if probing:
                    self._mode_final = True
                obj = self._validate(text, req)
                if self._redactor.secrets and self._redactor.contains_secret(text):
                    text = self._redact(text)
                return text, obj, pt, ct
            except ModeUnsupported as exc:
                nxt = _FALLBACK_CHAIN.get(mode)
                self.usage.add(failures=1, retries=1)
                if nxt is not None and self._mode == mode:
                    logger.warning("%s rejected response_format mode %r (%s); falling back to %r",
                                   self._where(), mode, self._redact(exc), nxt)
                    self._mode = nxt
                    if nxt == "none":
                        self._mode_final = True
                continue  # same attempt number: a mode negotiation is not a retry of the decision
            except Retryable as exc:
                self.usage.add(failures=1)
                kind, last, wait = exc.kind, str(exc), exc.wait
                logger.warning("LLM attempt %d/%d failed for %s: %s", attempt + 1, self.max_retries + 1,
                               self._where(), last)
                attempt += 1
                continue
            except (LLMError, ValueError):
                if sent:
                    self.usage.add(failures=1)
                raise
            finally:
                with self._lock:
                    self._reserved_cost = max(0.0, self._reserved_cost - reserved)
                if probing:
                    self._probe.release()
        where = self._where()
        if kind == "too_large":
            raise ResponseTooLargeError(f"{where} failed after {self.max_retries + 1} attempt(s): {last}")
        err = MalformedResponseError if kind == "malformed" else BackendUnavailableError
        raise err(f"{where} failed after {self.max_retries + 1} attempt(s); last error: {last}")

    def _task(self, req: _Request) -> tuple[str, BaseModel]:
        try:
            text, obj, pt, ct = self._send(req)
        except BaseException:
            with self._lock:
                self._inflight.pop(req.key, None)
            raise
        with self._lock:
            self._recent[req.key] = text
            if len(self._recent) > _RECENT:
                self._recent.popitem(last=False)
            self._inflight.pop(req.key, None)
        if self.cache is not None:
            self.cache.put(req.key, text, backend=self.name, model=self.model,
                           request={"messages": req.messages, "schema": req.info.name, "seed": req.seed,
                                    "temperature": self.temperature, "scope": req.scope},
                           prompt_tokens=pt, completion_tokens=ct)
        return text, obj

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=2 * self.concurrency + 2,
                                                    thread_name_prefix="aumann-llm")
        return self._pool

    # ------------------------------------------------------------------ the interface
    def decide(
        self,
        messages: Messages,
        schema: type[BaseModel],
        *,
        context: Mapping[str, Any] | None = None,
        seed: int | None = None,
        scope: str | None = None,
    ) -> BaseModel:
        """Ask for one decision validated as ``schema`` (a batch of one; see :meth:`decide_many`).

        ``context`` is not sent (the messages carry the observation); it is passed to ``fallback``.
        ``scope`` labels the request in the cache key (e.g. a scenario's interaction mode).

        Raises:
            LLMAuthenticationError, ModelNotFoundError, LLMRequestError: at once, not retried.
            BackendUnavailableError, MalformedResponseError, ResponseTooLargeError: after
            ``max_retries`` retries. RetryAfterTooLongError: the server asked for too long a wait.
            BudgetExceededError: a cap would be exceeded. CacheMissError: replay-mode miss.
        """
        return self.decide_many([{"messages": messages, "schema": schema, "context": context, "seed": seed,
                                  "scope": scope}])[0]

    def decide_many(self, requests: Sequence[Mapping[str, Any]], *,
                    return_exceptions: bool = False) -> list[BaseModel | BaseException]:
        """Decide a batch of independent requests concurrently; results in request order.

        Each request is a dict of :meth:`decide` keyword arguments (``messages``, ``schema``,
        optionally ``context``, ``seed`` and ``scope``). With ``return_exceptions=True`` a failed
        decision is returned as its exception in place; otherwise the first failure in request order
        is raised -- after every other request of the batch finished and its answer was cached.
        """
        reqs = list(requests)
        n = len(reqs)
        results: list[Any] = [None] * n
        prepared: list[_Request] = []
        for i, r in enumerate(reqs):
            try:
                prepared.append(self._prepare(i, **r))
            except TypeError as exc:
                results[i] = LLMRequestError(f"request {i} is not a dict of decide() arguments: {exc}")
            except LLMError as exc:
                results[i] = exc
        hits = decided = 0
        to_send: list[_Request] = []
        waiting: list[tuple[_Request, Future]] = []
        use_cache = self.cache is not None and self.cache.mode != "off"
        remember = use_cache or self.dry_run
        texts: dict[int, str] = {}
        if prepared:
            if remember:
                with self._lock:
                    for p in prepared:
                        t = self._recent.get(p.key)
                        if t is not None:
                            texts[p.index] = t
            if use_cache:
                found = self.cache.get_many(p.key for p in prepared if p.index not in texts)
                for p in prepared:
                    if p.index not in texts and p.key in found:
                        texts[p.index] = found[p.key].text
            for p in prepared:
                if p.index in texts:
                    try:
                        results[p.index] = self._validate(texts[p.index], p)
                        hits += 1
                    except Retryable as exc:
                        results[p.index] = MalformedResponseError(f"cached reply {p.key[:12]} is invalid: {exc}")
            misses = [p for p in prepared if p.index not in texts]
            if self.dry_run:
                hits += self._dry(misses, results)
                misses = []
            if misses and self.cache is not None and self.cache.mode == "replay":
                for p in misses:
                    results[p.index] = CacheMissError(
                        f"replay cache miss for {self._where()} (key {p.key[:12]}, {len(p.messages)} message(s), "
                        f"last: {self._redact(p.messages[-1]['content'][:80])!r}, seed={p.seed}); record it first "
                        f"with ResponseCache({self.cache.path!r}, mode='record')")
                misses = []
            if misses:
                pool = self._executor()
                with self._lock:
                    for p in misses:
                        t = self._recent.get(p.key) if remember else None
                        if t is not None:
                            texts[p.index] = t
                            continue
                        fut = self._inflight.get(p.key) if remember else None
                        if fut is None:
                            fut = pool.submit(self._task, p)
                            if remember:
                                self._inflight[p.key] = fut
                            to_send.append(p)
                        waiting.append((p, fut))
                for p in misses:
                    if p.index in texts and results[p.index] is None:
                        try:
                            results[p.index] = self._validate(texts[p.index], p)
                            hits += 1
                        except Retryable as exc:
                            results[p.index] = MalformedResponseError(f"cached reply {p.key[:12]} is invalid: {exc}")
                sent_keys = {id(p) for p in to_send}
                self.usage.add(planned_calls=len(to_send), rounds=math.ceil(len(to_send) / self.concurrency))
                for p, fut in waiting:
                    try:
                        _text, obj = fut.result()
                        results[p.index] = obj if id(p) in sent_keys else self._validate(_text, p)
                        if id(p) not in sent_keys:
                            hits += 1
                    except (BackendUnavailableError, MalformedResponseError, ResponseTooLargeError) as exc:
                        results[p.index] = self._use_fallback(p, exc)
                    except LLMError as exc:
                        results[p.index] = exc
                    except Retryable as exc:  # a joined request whose cached text fails this schema
                        results[p.index] = MalformedResponseError(str(exc))
            if self.cache is not None:
                self.cache.flush()
        decided = sum(1 for r in results if r is not None and not isinstance(r, BaseException))
        self.usage.add(cache_hits=hits, decisions=decided)
        if not return_exceptions:
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return results

    def _use_fallback(self, p: _Request, exc: LLMError) -> Any:
        if self.fallback is None:
            return exc
        logger.warning("LLM gave up for %s; using fallback %r: %s", self._where(), self.fallback,
                       self._redact(exc))
        self.usage.add(fallbacks=1)
        try:
            return self.fallback.decide(p.messages, p.schema, context=p.context, seed=p.seed)
        except LLMError as fexc:
            return fexc

    def _dry(self, misses: list[_Request], results: list[Any]) -> int:
        """Dry run: count the misses, answer them with the fallback, remember them (later: hits)."""
        hits = planned = 0
        for p in misses:
            with self._lock:
                known = self._recent.get(p.key)
            if known is not None:
                results[p.index] = self._validate(known, p)
                hits += 1
                continue
            try:
                out = self._dry_answer(p)
            except LLMError as exc:
                results[p.index] = exc
                continue
            text = out.model_dump_json()
            with self._lock:
                self._recent[p.key] = text
            planned += 1
            sys_chars = len(p.info.system_message["content"]) if self._mode != "json_schema" else 0
            self.usage.add(planned_calls=1, planned_prompt_tokens=(p.chars + sys_chars) // 4 + 8,
                           planned_completion_tokens=len(text) // 4 + 1)
            results[p.index] = out
        self.usage.add(rounds=math.ceil(planned / self.concurrency))
        return hits

    def _dry_answer(self, p: _Request) -> BaseModel:
        if self.fallback is not None:
            out = self.fallback.decide(p.messages, p.schema, context=p.context, seed=p.seed)
            return out if isinstance(out, p.schema) else p.schema.model_validate(out)
        try:
            return p.schema()
        except ValidationError:
            raise LLMError(
                f"dry run of {p.schema.__name__} needs a fallback backend (the schema has required fields "
                f"{[n for n, f in p.schema.model_fields.items() if f.is_required()]})"
            ) from None

    def estimate(self) -> CallEstimate:
        """Requests a dry run so far would have sent (cache misses), their tokens, cache hits, rounds."""
        u = self.usage
        return CallEstimate(u.planned_calls, u.planned_prompt_tokens, u.cache_hits, u.planned_completion_tokens,
                            u.rounds, u.fork_rounds)

    def close(self) -> None:
        """Shut the worker threads and connections down and commit the cache buffer."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if hasattr(self._transport, "close"):
            self._transport.close()
        if self.cache is not None:
            self.cache.flush()

    # ------------------------------------------------------------------ copying
    def __deepcopy__(self, memo: dict) -> OpenAIBackend:
        return self  # forks share the client, cache, caps and usage

    def __getstate__(self) -> dict:
        if self._injected:
            raise LLMError("an OpenAIBackend built with an injected client or transport cannot be pickled; "
                           "build it from model/base_url/api_key in each worker")
        drop = {"_transport", "_probe", "_sem", "_lock", "_pool", "_inflight", "_recent", "_reserved_cost", "_rand",
                "_mode", "_mode_final"}
        state = {k: v for k, v in self.__dict__.items() if k not in drop}
        state["_mode_state"] = (self._mode, self._mode_final)
        return state

    def __setstate__(self, state: dict) -> None:
        mode = state.pop("_mode_state", None)
        self.__dict__.update(state)
        self._init_runtime()
        protect_logs(self._redactor.secrets)
        if mode is not None:
            self._mode, self._mode_final = mode

    def __repr__(self) -> str:
        return f"OpenAIBackend(model={self.model!r}, base_url={self.base_url!r}, cache={self.cache!r})"


__all__ = ["DEFAULT_BASE_URL", "STRUCTURED_MODES", "CallEstimate", "OpenAIBackend"]
