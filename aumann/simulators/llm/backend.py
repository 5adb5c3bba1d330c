"""The decision backend over a stack of layers: batches in, validated decisions (or abstentions) out.

:class:`LLMBackend` is what agents talk to (:class:`~aumann.simulators.llm.base.DecisionBackend`
plus the batch protocol). It prepares each decision once (messages, schema, request seed, scope, the
content address ``key``), asks the stack's memory and cache for the whole batch on the caller's
thread, sends each *distinct* missing key once on a thread pool (identical requests of a batch, or of
concurrent forks, share one request: the :class:`~aumann.simulators.llm.layers.Coalesce` layer), and
returns the results **in request order** -- so a run is byte-identical at any concurrency.

A reply that stays invalid after the varied retry, an oversized reply, or a decision whose requests
all failed comes back as an exception in place (``return_exceptions=True``) -- an *abstention*, which
scenarios count and record -- and is counted in ``usage.invalid_decisions`` (the first replies kept
in :attr:`LLMBackend.invalid_replies`, every one in the cache). Only what is not an answer stops a
run: authentication, an unknown model, a spend cap, a replay-cache miss, a server that is down.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from aumann.errors import (
    BackendUnavailableError,
    LLMError,
    LLMRequestError,
    MalformedResponseError,
    ResponseTooLargeError,
    Retryable,
    ServerDownError,
)
from aumann.simulators.llm.base import Messages, check_messages, check_schema
from aumann.simulators.llm.calls import Answer, Call, Decision, check_reply
from aumann.simulators.llm.schemas import schema_info
from aumann.simulators.llm.settings import Sampling
from aumann.simulators.llm.usage import Usage

logger = logging.getLogger(__name__)

#: abstention-kind failures: a decision without a usable answer (counted, recorded, the run goes on)
ABSTENTIONS = (MalformedResponseError, ResponseTooLargeError, BackendUnavailableError)


def is_abstention(exc: BaseException) -> bool:
    """Whether a failed decision is an abstention (no usable answer) rather than a reason to stop the run."""
    from aumann.errors import DecisionParseError, PolicyError

    return isinstance(exc, (*ABSTENTIONS, PolicyError, DecisionParseError)) and not isinstance(exc, ServerDownError)


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


class LLMBackend:
    """A :class:`DecisionBackend` over a layer stack (see the module docstring).

    Args:
        stack: the outermost layer (``handle(call) -> Answer``, optionally ``peek_many``).
        name: the backend's registered name (``"openai"``, ``"local"``, ...): part of every cache key.
        model: the model name.
        usage: the account every layer writes to (shared by forks).
        concurrency: worker threads sending distinct requests (the :class:`Throttle` layer bounds
            what is actually in flight).
        sampling: the :class:`~aumann.simulators.llm.settings.Sampling` (its temperature, reply bound,
            seed and system prompt enter the cache key).
        fallback: a backend answering decisions whose requests all failed (counted in ``fallbacks``).
        core: the innermost object (for labels and descriptions).
    """

    batch_protocol = 1

    def __init__(self, stack: Any, *, name: str, model: str, usage: Usage, concurrency: int = 16,
                 sampling: Sampling | None = None, fallback: Any = None, core: Any = None) -> None:
        self.stack = stack
        self.name = name
        self.model = model
        self.usage = usage
        self.concurrency = int(concurrency)
        self.sampling = sampling or Sampling()
        self._fallback = fallback
        self.core = core
        #: what tells the model apart beyond its name, part of every cache key when set (the local backend: a
        #: fingerprint of the GGUF file's weights -- two files named model.gguf are two models)
        self.model_identity: dict[str, Any] = {}
        self.invalid_replies: deque[dict[str, Any]] = deque(maxlen=50)
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ layers and settings
    def layer(self, kind: type) -> Any:
        node = self.stack
        while node is not None:
            if isinstance(node, kind):
                return node
            node = getattr(node, "inner", None)
        return None

    @property
    def fallback(self) -> Any:
        return self._fallback

    @fallback.setter
    def fallback(self, value: Any) -> None:
        from aumann.simulators.llm.layers import DryRun

        self._fallback = value
        dry = self.layer(DryRun)
        if dry is not None:
            dry.stand_in = value

    @property
    def dry_run(self) -> bool:
        from aumann.simulators.llm.layers import DryRun

        return self.layer(DryRun) is not None

    @property
    def cache(self) -> Any:
        from aumann.simulators.llm.layers import Cache

        c = self.layer(Cache)
        return None if c is None else c.cache

    @property
    def limiter(self) -> Any:
        from aumann.simulators.llm.layers import RateLimit

        r = self.layer(RateLimit)
        return None if r is None else r.limiter

    @property
    def caps(self) -> Any:
        from aumann.simulators.llm.layers import Budget

        b = self.layer(Budget)
        return None if b is None else b.caps

    @property
    def max_calls(self) -> int | None:
        caps = self.caps
        return None if caps is None else caps.max_calls

    @property
    def price(self) -> Any:
        from aumann.simulators.llm.layers import Budget

        b = self.layer(Budget)
        return None if b is None else b.price

    @property
    def price_known(self) -> bool:
        return self.price is not None

    @property
    def temperature(self) -> float:
        return self.sampling.temperature

    @property
    def base_urls(self) -> list[str]:
        return list(getattr(self.core, "base_urls", []) or [])

    @property
    def base_url(self) -> str:
        urls = self.base_urls
        return urls[0] if urls else ""

    @property
    def endpoints(self) -> Any:
        return getattr(self.core, "endpoints", None)

    @property
    def structured_mode(self) -> str:
        return str(getattr(self.core, "mode", "none"))

    @property
    def label(self) -> str:
        """``NAME:MODEL@URL[,URL...]`` without credentials (for logs, digests and manifests)."""
        return f"{self.name}:{self.model}@{','.join(self.base_urls)}"

    def where(self) -> str:
        w = getattr(self.core, "where", None)
        return w() if callable(w) else f"model {self.model!r}"

    def describe(self) -> dict[str, Any]:
        """What the manifest records about the backend (no secrets)."""
        d = dict(self.core.describe()) if hasattr(self.core, "describe") else {"model": self.model}
        lim = self.limiter
        price = self.price
        caps = self.caps
        d.update({"backend": self.name, "concurrency": self.concurrency,
                  "rpm": None if lim is None else lim.rpm, "tpm": None if lim is None else lim.tpm,
                  "max_calls": None if caps is None else caps.max_calls,
                  "max_cost": None if caps is None else caps.max_cost,
                  "price_usd_per_mtok": None if price is None else {"input": price.input, "output": price.output},
                  "price_note": None if price is not None else
                  f"no price known for model {self.model!r}: cost_usd is reported as 0",
                  "layers": self.layer_names()})
        if self.model_identity:
            d["model_identity"] = dict(self.model_identity)
        return d

    def layer_names(self) -> list[str]:
        names, node = [], self.stack
        while node is not None:
            names.append(type(node).__name__)
            node = getattr(node, "inner", None)
        return names

    # ------------------------------------------------------------------ requests
    def _prepare(self, index: int, messages: Any, schema: Any, context: Any = None, seed: int | None = None,
                 scope: str | None = None) -> Decision:
        messages = check_messages(messages)
        schema = check_schema(schema)
        info = schema_info(schema)
        s = self.sampling
        if s.system_prompt is not None:
            rest = [m for m in messages if m["role"] != "system"]
            messages = [{"role": "system", "content": s.system_prompt}, *rest]
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int | float) or not math.isfinite(seed):
                raise LLMRequestError(f"seed must be an integer; got {seed!r}")
            seed = int(seed)
        parts = {"backend": self.name, "model": self.model, "messages": messages, "schema": info.canonical,
                 "temperature": s.temperature, "seed": seed, "max_completion_tokens": s.max_tokens, "scope": scope,
                 **s.key_parts(), **({"model_identity": self.model_identity} if self.model_identity else {})}
        try:
            text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise LLMRequestError(f"messages must be JSON-serialisable: {exc}") from None
        key = hashlib.sha256(text.encode()).hexdigest()
        chars = sum(len(m["content"]) for m in messages)
        return Decision(index, messages, schema, info, context, seed, scope, key, chars)

    def cache_key(self, messages: Messages, schema: type[BaseModel], seed: int | None = None,
                  scope: str | None = None) -> str:
        """The cache key of a decision (no key, URL or structured-output mode in it)."""
        return self._prepare(0, messages, schema, None, seed, scope).key

    def request_for(self, messages: Messages, schema: type[BaseModel], seed: int | None = None,
                    mode: str | None = None) -> dict[str, Any]:
        """The exact request body a decision sends in ``mode`` (default: the mode in use)."""
        d = self._prepare(0, messages, schema, None, seed, None)
        return self.core.body(Call(d), mode or self.structured_mode)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=self.concurrency + 2, thread_name_prefix="aumann-llm")
        return self._pool

    def decide(self, messages: Messages, schema: type[BaseModel], *, context: Mapping[str, Any] | None = None,
               seed: int | None = None, scope: str | None = None) -> BaseModel:
        """One decision validated as ``schema`` (a batch of one; see :meth:`decide_many`)."""
        return self.decide_many([{"messages": messages, "schema": schema, "context": context, "seed": seed,
                                  "scope": scope}])[0]

    def decide_many(self, requests: Sequence[Mapping[str, Any]], *,
                    return_exceptions: bool = False) -> list[BaseModel | BaseException]:
        """Decide a batch of independent requests; results in request order.

        Each request is a dict of :meth:`decide` keyword arguments. With ``return_exceptions=True`` a
        failed decision (an abstention or another error) is returned as its exception in place;
        otherwise the first failure in request order is raised after the whole batch finished.
        """
        reqs = list(requests)
        self._each("resume")  # (a batch after an interrupted one, e.g. a notebook cell run again, is sent again)
        results: list[Any] = [None] * len(reqs)
        calls: list[Call] = []
        fork = self.usage.in_fork
        for i, r in enumerate(reqs):
            try:
                calls.append(Call(self._prepare(i, **r), fork=fork))
            except TypeError as exc:
                results[i] = LLMRequestError(f"request {i} is not a dict of decide() arguments: {exc}")
            except LLMError as exc:
                results[i] = exc
        hits = 0
        if calls:
            known = self.stack.peek_many(calls) if hasattr(self.stack, "peek_many") else {}
            first: dict[str, Call] = {}
            for c in calls:
                if c.decision.index in known:
                    continue
                first.setdefault(c.decision.key, c)
            futures: dict[str, Future] = {}
            if first:
                pool = self._executor()
                for key, c in first.items():
                    futures[key] = pool.submit(self.stack.handle, c)
                self.usage.add(planned_calls=len(first), rounds=math.ceil(len(first) / self.concurrency))
            gots: list[tuple[Call, Any, bool]] = []
            for c in calls:
                d = c.decision
                got: Any = known.get(d.index)
                fresh = False
                if got is None:
                    fut = futures[d.key]
                    fresh = first[d.key] is c
                    try:
                        got = fut.result()
                    except BaseException as exc:
                        if not (fut.done() and not fut.cancelled() and fut.exception() is exc):
                            # the wait itself was interrupted (Ctrl-C; SIGTERM's TerminatedBySignal), not the call
                            # failing: it was taken for this decision's result (an abstention) and the run went on
                            self._interrupt(futures.values())
                            raise
                        got = exc
                gots.append((c, got, fresh))
            # a request counted above that another batch (a concurrent fork's) had asked first was joined or served,
            # not sent: the count of requests after the cache (a dry run's forecast) is what was sent, whatever the
            # timing (the live count above keeps showing what is in flight)
            unsent = sum(1 for _, got, fresh in gots
                         if fresh and isinstance(got, Answer) and got.source not in ("server", "dry_run"))
            if unsent:
                self.usage.add(planned_calls=-unsent)
            cache = self.cache
            if cache is not None:
                cache.flush()
                gots = self._reconcile(cache, gots)
            for c, got, fresh in gots:
                if not isinstance(got, BaseException) and (not fresh or got.source not in ("server", "dry_run")):
                    hits += 1
                results[c.decision.index] = self._result(c, got, fresh)
        decided = sum(1 for r in results if r is not None and not isinstance(r, BaseException))
        self.usage.add(cache_hits=hits, decisions=decided)
        if not return_exceptions:
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return results

    def _interrupt(self, futures: Any) -> None:
        """The run is being interrupted: requests not yet sent are never sent (queued in the pool, or waiting in
        the stack for their turn), and those in flight are not retried (each layer and the core with a ``stop``)."""
        for fut in futures:
            fut.cancel()
        self._each("stop")

    def _each(self, method: str) -> None:
        node = self.stack
        while node is not None:
            fn = getattr(node, method, None)
            if callable(fn):
                fn()
            node = getattr(node, "inner", None)

    def _reconcile(self, cache: Any, gots: list[tuple[Call, Any, bool]]) -> list[tuple[Call, Any, bool]]:
        """Use the stored reply where another process sharing the cache stored its own answer to the same request
        first (``cache.lost``): this run used its own answer while the cache -- what every replay, fork and resume
        serves -- holds the other's, so a replay of this run was not this run. The stored one is remembered in
        place of ours too (forks in this process ask again)."""
        lost = getattr(cache, "lost", None)
        if lost is None or getattr(cache, "mode", None) != "record":
            return gots
        keys = [c.decision.key for c, got, _ in gots if not (isinstance(got, Answer) and got.source == "cache")]
        won = lost(keys) if keys else {}
        if not won:
            return gots
        from aumann.simulators.llm.layers import Cache, Coalesce

        layer, memory = self.layer(Cache), self.layer(Coalesce)
        out = []
        for c, got, fresh in gots:
            row = won.get(c.decision.key)
            if row is not None and layer is not None and (isinstance(got, Answer) or is_abstention(got)):
                stored = layer._served(row)
                if isinstance(stored, Answer):  # counted as what it was (sent, joined, remembered), never a hit
                    stored = Answer(stored.text, stored.prompt_tokens, stored.completion_tokens, 0.0,
                                    got.source if isinstance(got, Answer) else "server")
                if memory is not None:
                    memory.adopt(c.decision.key, stored)
                got, fresh = stored, False
            out.append((c, got, fresh))
        return out

    def _result(self, c: Call, got: Answer | BaseException, fresh: bool) -> Any:
        d = c.decision
        if isinstance(got, BaseException):
            if isinstance(got, Retryable):  # a layer let an internal signal through: a malformed reply
                got = MalformedResponseError(str(got))
            if isinstance(got, ServerDownError) or not isinstance(got, ABSTENTIONS):
                return got
            if self._fallback is not None and not self.dry_run:
                return self._use_fallback(d, got)
            self._abstain(d, got, getattr(got, "reply", None))
            return got
        obj = got.meta.get("obj") if fresh and not got.invalid else None
        why = got.invalid
        if obj is None and why is None:
            try:
                obj = check_reply(got.text, d.info)
            except Retryable as exc:
                why = str(exc)
        if why is not None:
            exc = MalformedResponseError(f"{self.where()}: the reply stayed invalid after a varied retry: {why}",
                                         reply=got.text)
            if self._fallback is not None and not self.dry_run:
                return self._use_fallback(d, exc)
            self._abstain(d, exc, got.text)
            return exc
        if fresh:
            return obj
        return obj if isinstance(obj, d.schema) else d.schema.model_validate(obj)

    def _abstain(self, d: Decision, exc: BaseException, text: str | None) -> None:
        self.usage.add(invalid_decisions=1)
        with self._lock:
            if len(self.invalid_replies) < (self.invalid_replies.maxlen or 0):
                self.invalid_replies.append({"key": d.key[:16], "schema": d.schema.__name__, "error": str(exc)[:300],
                                             "reply": None if text is None else str(text)[:500]})

    def _use_fallback(self, d: Decision, exc: BaseException) -> Any:
        logger.warning("LLM gave up for %s; using fallback %r: %s", self.where(), self._fallback, exc)
        self.usage.add(fallbacks=1)
        try:
            return self._fallback.decide(d.messages, d.schema, context=d.context, seed=d.seed)
        except LLMError as fexc:
            return fexc

    def share(self, parts: int, workers: int) -> LLMBackend:
        """A copy for runs in parallel: its caps allow 1/``parts`` of what is left, its concurrency and rate
        limits are 1/``workers`` of this backend's, so the totals hold (the core, cache and usage are shared)."""
        import copy

        from aumann.simulators.llm.layers import Budget, RateLimit, Throttle
        from aumann.simulators.llm.ratelimit import RateLimiter
        from aumann.simulators.llm.settings import Caps

        u = self.usage

        def rebuild(node: Any) -> Any:
            if node is None or node is self.core or not hasattr(node, "inner"):
                return node
            new = copy.copy(node)
            new.inner = rebuild(node.inner)
            if isinstance(new, Throttle):
                new.concurrency = max(1, node.concurrency // workers)
            elif isinstance(new, RateLimit):
                lim = node.limiter
                new.limiter = RateLimiter(lim.rpm / workers if lim.rpm else None,
                                          lim.tpm / workers if lim.tpm else None)
            elif isinstance(new, Budget):
                c = node.caps
                new.caps = Caps(None if c.max_calls is None else u.total_calls + max(0, c.max_calls - u.total_calls)
                                // parts,
                                None if c.max_tokens is None else u.total_tokens + max(0, c.max_tokens - u.total_tokens)
                                // parts,
                                None if c.max_cost is None else u.cost_usd + max(0.0, c.max_cost - u.cost_usd) / parts)
            new._init_runtime()
            return new

        b = copy.copy(self)
        b.stack = rebuild(self.stack)
        b.concurrency = max(1, self.concurrency // workers)
        b._init_runtime()
        return b

    def estimate(self) -> Any:
        """Requests a dry run so far would have sent (cache misses), their tokens, cache hits, rounds."""
        u = self.usage
        return CallEstimate(u.planned_calls, u.planned_prompt_tokens, u.cache_hits, u.planned_completion_tokens,
                            u.rounds, u.fork_rounds)

    def close(self, *, keep_failed: bool = True) -> None:
        """Shut the worker threads and connections down and commit the cache buffer. The decisions whose
        requests all failed and that no later answer confirmed (see :class:`~aumann.simulators.llm.layers.Cache`)
        are stored as abstentions; ``keep_failed=False`` (a run that stopped) forgets them instead, so a
        resumed run asks them again."""
        from aumann.simulators.llm.layers import Cache

        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if not keep_failed:
            layer = self.layer(Cache)
            if layer is not None:
                layer.drop_held()
        self.stack.close()
        cache = self.cache
        if cache is not None:
            # flush; a ResponseCache then merges its log into the file (the file alone is the recorded run)
            getattr(cache, "checkpoint", cache.flush)()
        server = getattr(self, "server", None)
        if server is not None:  # the local backend's llama.cpp server
            server.stop()

    # ------------------------------------------------------------------ copying
    def __deepcopy__(self, memo: dict) -> LLMBackend:
        return self  # forks share the stack, cache, caps and usage

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_pool")}
        state["invalid_replies"] = list(self.invalid_replies)
        return state

    def __setstate__(self, state: dict) -> None:
        replies = state.pop("invalid_replies", [])
        self.model_identity = {}
        self.__dict__.update(state)
        self.invalid_replies = deque(replies, maxlen=50)
        self._init_runtime()

    def __repr__(self) -> str:
        return f"LLMBackend(name={self.name!r}, model={self.model!r}, layers={self.layer_names()})"


__all__ = ["ABSTENTIONS", "CallEstimate", "LLMBackend", "is_abstention"]
