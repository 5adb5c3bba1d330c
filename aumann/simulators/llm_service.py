"""One LLM service for a whole cluster: the response cache, the rate limits and the spend caps live
in one place (a Ray actor on the driver's node), and every worker's backend reaches them through
three small proxies -- so no worker opens the cache file, and a limit set for the run holds for the
run, whatever the number of workers.

The service's interface is deliberately small (what any backend needs from the three concerns):

* cache: ``get_many(keys) -> {key: (text, prompt_tokens, completion_tokens)}``, ``put_many(rows)``,
  ``flush()`` -- served from the run's SQLite file (:class:`~aumann.simulators.llm.ResponseCache`),
  which only the driver's node opens;
* rate limits: ``acquire(tokens) -> seconds to wait`` (one request slot and the estimated tokens,
  taken from one request bucket and one token bucket for the whole cluster; the caller sleeps, the
  service never blocks) and ``settle(estimated, actual)``;
* spend caps: ``reserve(cost, tokens) -> None | refusal``, ``release(cost, tokens)``,
  ``charge(prompt_tokens, completion_tokens, cost)`` -- one account starting from what the run had
  spent when the workers started.

:class:`ServedCache`, :class:`ServedLimiter` and :class:`ServedBudget` are the worker-side proxies
(picklable: they hold the actor's handle); :func:`serve_backend` gives an LLM backend whose layers use them.
:class:`LLMService` is a plain class (tested without Ray) that Ray runs as an actor.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from typing import Any

from aumann.errors import BudgetExceededError
from aumann.simulators.llm.layers import Budget
from aumann.simulators.llm.records import MAX_TOKENS_PER_REQUEST


class _Bucket:
    """A token bucket that never blocks: taking more than it holds leaves a debt, and the caller is told
    how long to wait before it may go (the service answers at once; the worker sleeps)."""

    def __init__(self, per_minute: float, capacity: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = capacity
        self.level = capacity
        self.stamp = time.monotonic()

    def take(self, amount: float) -> float:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        self.level -= amount
        return max(0.0, -self.level / self.rate)

    def give(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


class LLMService:
    """The cluster's one cache, rate limiter and spend account (see the module docstring).

    Args:
        cache_path, cache_mode: the run's response cache (``None``: no cache).
        rpm, tpm: requests and tokens per minute for the whole cluster (``None``: no limit).
        max_calls, max_tokens, max_cost: the run's caps (``None``: none).
        spent: ``(calls, tokens, cost_usd)`` already spent when the service starts.
    """

    def __init__(self, cache_path: str | None = None, cache_mode: str = "record", *, rpm: float | None = None,
                 tpm: float | None = None, max_calls: int | None = None, max_tokens: int | None = None,
                 max_cost: float | None = None, spent: tuple[int, int, float] = (0, 0, 0.0)) -> None:
        self.cache = None
        if cache_path is not None and cache_mode != "off":
            from aumann.simulators.llm import ResponseCache

            self.cache = ResponseCache(cache_path, mode=cache_mode)
        self.requests = _Bucket(rpm, 1.0) if rpm else None
        self.tokens = _Bucket(tpm, max(1.0, tpm / 60.0)) if tpm else None
        self.caps = (max_calls, max_tokens, max_cost)
        self.calls, self.spent_tokens, self.cost = int(spent[0]), int(spent[1]), float(spent[2])
        self.reserved = [0.0, 0]
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ cache
    def get_many(self, keys: list[str]) -> dict[str, tuple[str, int, int, str | None]]:
        if self.cache is None:
            return {}
        return {k: (r.text, r.prompt_tokens, r.completion_tokens, r.failed)
                for k, r in self.cache.get_many(keys).items()}

    def put_many(self, rows: list[tuple[str, str, dict]]) -> int:
        if self.cache is None:
            return 0
        for key, text, meta in rows:
            self.cache.put(key, text, **meta)
        return len(rows)

    def flush(self) -> int:
        return self.cache.flush() if self.cache is not None else 0

    def lost(self, keys: list[str]) -> dict[str, tuple[str, int, int, str | None]]:
        """Of ``keys`` put here, those stored with another worker's reply (see ``ResponseCache.lost``)."""
        if self.cache is None:
            return {}
        return {k: (r.text, r.prompt_tokens, r.completion_tokens, r.failed) for k, r in self.cache.lost(keys).items()}

    def size(self) -> int:
        return len(self.cache) if self.cache is not None else 0

    # ------------------------------------------------------------------ rate limits
    def acquire(self, tokens: float) -> float:
        with self._lock:
            wait = 0.0
            if self.requests is not None:
                wait = max(wait, self.requests.take(1.0))
            if self.tokens is not None:
                wait = max(wait, self.tokens.take(min(float(tokens), self.tokens.capacity)))
            return wait

    def settle(self, estimated: float, actual: float) -> None:
        if self.tokens is not None and actual != estimated:
            with self._lock:
                self.tokens.give(float(estimated) - float(actual))

    # ------------------------------------------------------------------ spend caps
    def reserve(self, cost: float, tokens: int) -> str | None:
        """Count one call and reserve its cost and tokens, or say why not (a refusal message)."""
        max_calls, max_tokens, max_cost = self.caps
        with self._lock:
            if max_calls is not None and self.calls >= max_calls:
                return (f"call cap reached: {self.calls} request(s) sent by the whole cluster, max_calls={max_calls}; "
                        f"raise the cap to go on (the run resumes where it stopped)")
            if max_tokens is not None and (self.spent_tokens >= max_tokens
                                           or self.spent_tokens + self.reserved[1] + tokens > max_tokens):
                return (f"token cap reached: {self.spent_tokens} token(s) used by the whole cluster "
                        f"(+{self.reserved[1]} in flight), max_tokens={max_tokens}")
            if max_cost is not None and self.cost + self.reserved[0] + cost > max_cost:
                return (f"cost cap reached: ${self.cost:.4f} spent by the whole cluster (+${self.reserved[0]:.4f} in "
                        f"flight), the next request (~${cost:.5f}) would pass max_cost=${max_cost:g}; raise the cap "
                        f"to go on (the run resumes where it stopped)")
            self.reserved[0] += float(cost)
            self.reserved[1] += int(tokens)
            self.calls += 1
            return None

    def release(self, cost: float, tokens: int) -> None:
        with self._lock:
            self.reserved[0] = max(0.0, self.reserved[0] - float(cost))
            self.reserved[1] = max(0, self.reserved[1] - int(tokens))

    def charge(self, prompt_tokens: int, completion_tokens: int, cost: float) -> None:
        with self._lock:
            self.spent_tokens += int(prompt_tokens) + int(completion_tokens)
            self.cost += float(cost)

    def totals(self) -> dict[str, Any]:
        with self._lock:
            return {"calls": self.calls, "tokens": self.spent_tokens, "cost_usd": self.cost,
                    "reserved_usd": self.reserved[0], "reserved_tokens": self.reserved[1]}

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


# ---------------------------------------------------------------------------------------------- proxies
def _call(handle: Any, method: str, *args: Any) -> Any:
    """``handle.method(*args)``: through Ray for an actor handle, directly for a local service."""
    fn = getattr(handle, method)
    remote = getattr(fn, "remote", None)
    if remote is None:
        return fn(*args)
    import ray

    return ray.get(remote(*args))


def _send(handle: Any, method: str, *args: Any) -> None:
    """Fire and forget (Ray), or call (local)."""
    fn = getattr(handle, method)
    remote = getattr(fn, "remote", None)
    if remote is None:
        fn(*args)
    else:
        remote(*args)


class ServedCache:
    """A worker's view of the run's response cache (the ``ResponseCache`` interface backends use)."""

    def __init__(self, handle: Any, mode: str, path: Any, *, flush_every: int = 64) -> None:
        self.handle, self.mode, self.path, self.flush_every = handle, mode, path, flush_every
        self._pending: list[tuple[str, str, dict]] = []
        self._lock = threading.Lock()

    @staticmethod
    def key(**parts: Any) -> str:
        from aumann.simulators.llm import ResponseCache

        return ResponseCache.key(**parts)

    def get(self, key: str) -> Any:
        return self.get_many([key]).get(key)

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        from aumann.simulators.llm import CachedResponse

        if self.mode == "off":
            return {}
        keys = list(dict.fromkeys(keys))
        from aumann.simulators.llm.cache import no_reply_reason

        def failed(text: str, meta: dict) -> str | None:  # an abstention stored without a reply: its reason
            why = (meta.get("request") or {}).get("invalid") if isinstance(meta.get("request"), dict) else None
            return no_reply_reason(text, why)

        with self._lock:
            mine = {k: (t, m.get("prompt_tokens", 0), m.get("completion_tokens", 0), failed(t, m))
                    for k, t, m in self._pending}
        found = {k: mine[k] for k in keys if k in mine}
        rest = [k for k in keys if k not in found]
        if rest:
            found.update(_call(self.handle, "get_many", rest))
        return {k: CachedResponse(r[0], int(r[1]), int(r[2]), r[3] if len(r) > 3 else None)
                for k, r in found.items()}

    def put(self, key: str, text: str, **meta: Any) -> None:
        if self.mode != "record":
            return
        with self._lock:
            self._pending.append((key, text, meta))
            due = len(self._pending) >= self.flush_every
        if due:
            self.flush()

    def flush(self) -> int:
        with self._lock:
            rows, self._pending = self._pending, []
        if not rows:
            return 0
        return int(_call(self.handle, "put_many", rows))

    def lost(self, keys: Iterable[str]) -> dict[str, Any]:
        """Of ``keys`` put by this worker, those the service stored with another worker's reply (two workers asked
        the same request at once): the stored rows, which this worker must use as well."""
        from aumann.simulators.llm import CachedResponse

        keys = list(keys)
        if self.mode != "record" or not keys:
            return {}
        self.flush()
        won = _call(self.handle, "lost", keys)
        return {k: CachedResponse(r[0], int(r[1]), int(r[2]), r[3]) for k, r in won.items()}

    def __len__(self) -> int:
        self.flush()
        return int(_call(self.handle, "size"))

    def close(self) -> None:
        self.flush()

    def __getstate__(self) -> dict:
        self.flush()
        return {"handle": self.handle, "mode": self.mode, "path": self.path, "flush_every": self.flush_every}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["handle"], state["mode"], state["path"], flush_every=state["flush_every"])

    def __repr__(self) -> str:
        return f"ServedCache({str(self.path)!r}, mode={self.mode!r})"


class ServedLimiter:
    """A worker's share of the cluster's one rate limiter (the ``RateLimiter`` interface)."""

    def __init__(self, handle: Any, rpm: float | None, tpm: float | None) -> None:
        self.handle, self.rpm, self.tpm = handle, rpm, tpm
        self._stopping = threading.Event()  # set by stop(): the run is being interrupted

    def __getstate__(self) -> dict:
        return {"handle": self.handle, "rpm": self.rpm, "tpm": self.tpm}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["handle"], state["rpm"], state["tpm"])

    @property
    def active(self) -> bool:
        return bool(self.rpm or self.tpm)

    def acquire(self, tokens: float) -> None:
        wait = float(_call(self.handle, "acquire", float(tokens)))
        if wait > 0 and math.isfinite(wait):
            self._stopping.wait(wait)  # (returns at once when the run is interrupted)
        if self._stopping.is_set():
            raise KeyboardInterrupt("the run was interrupted; this LLM request is not sent")

    def stop(self) -> None:
        """The run is being interrupted: a request waiting for its slot raises instead of being sent."""
        self._stopping.set()

    def resume(self) -> None:
        self._stopping.clear()

    def settle(self, estimated: float, actual: float) -> None:
        if actual != estimated:
            _send(self.handle, "settle", float(estimated), float(actual))

    def __repr__(self) -> str:
        return f"ServedLimiter(rpm={self.rpm}, tpm={self.tpm})"


class ServedBudget:
    """A worker's access to the cluster's one spend account."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def reserve(self, cost: float, tokens: int = 0) -> None:
        why = _call(self.handle, "reserve", float(cost), int(tokens))
        if why is not None:
            raise BudgetExceededError(why)

    def release(self, cost: float, tokens: int = 0) -> None:
        _send(self.handle, "release", float(cost), int(tokens))

    def charge(self, prompt_tokens: int, completion_tokens: int, cost: float) -> None:
        _send(self.handle, "charge", int(prompt_tokens), int(completion_tokens), float(cost))


# ---------------------------------------------------------------------------------------------- backends
def service_args(backend: Any) -> dict[str, Any] | None:
    """What :class:`LLMService` needs from an LLM ``backend`` (``None``: not an LLM backend)."""
    if backend is None or getattr(backend, "name", "") == "offline" or not hasattr(backend, "layer"):
        return None
    cache, limiter, caps, u = backend.cache, backend.limiter, backend.caps, backend.usage
    return {"cache_path": None if cache is None else str(cache.path),
            "cache_mode": "off" if cache is None else cache.mode,
            "rpm": None if limiter is None else limiter.rpm, "tpm": None if limiter is None else limiter.tpm,
            "max_calls": None if caps is None else caps.max_calls,
            "max_tokens": None if caps is None else caps.max_tokens,
            "max_cost": None if caps is None else caps.max_cost,
            "spent": (u.total_calls, u.total_tokens, u.cost_usd)}


def serve_backend(backend: Any, handle: Any) -> Any:
    """A copy of the LLM ``backend`` (:class:`~aumann.simulators.llm.LLMBackend`) for workers: its layer stack
    rebuilt with the service's (``handle``) cache, rate limiter and spend account in place of its own -- the
    ``Cache`` layer reads and writes through :class:`ServedCache`, the ``RateLimit`` layer takes from
    :class:`ServedLimiter`, the ``Budget`` layer (:class:`ServedBudgetLayer`) reserves and charges every attempt
    in the cluster's account (the caps live there) while still counting it in the worker's own usage. Its
    endpoints, model, prices, sampling and concurrency are its own."""
    import copy

    from aumann.simulators.llm.layers import Cache, RateLimit
    from aumann.simulators.llm.settings import Caps

    def rebuild(node: Any) -> Any:
        if node is None or node is backend.core or not hasattr(node, "inner"):
            return node
        new = copy.copy(node)
        new.inner = rebuild(node.inner)
        if isinstance(new, Cache) and node.cache is not None:
            new.cache = ServedCache(handle, node.cache.mode, node.cache.path)
        elif isinstance(new, RateLimit):
            new.limiter = ServedLimiter(handle, node.limiter.rpm, node.limiter.tpm)
        elif isinstance(new, Budget):
            new.__class__ = ServedBudgetLayer
            new.caps = Caps()  # the service holds the caps
            new.served = ServedBudget(handle)
        new._init_runtime()
        return new

    served = copy.copy(backend)
    served.stack = rebuild(backend.stack)
    served._init_runtime()
    return served


class ServedBudgetLayer(Budget):
    """The ``Budget`` layer of a served backend: each attempt is reserved in the cluster's one account before it
    is sent (a refusal is the :class:`~aumann.errors.BudgetExceededError` the service words), released when it
    ends, and charged what the worker's own layer charges (the server's counts, or the attempt's upper bound
    when they are unusable)."""

    served: ServedBudget

    def _reserve(self, cost_max: float, tok_max: int) -> None:
        self.served.reserve(cost_max, tok_max)
        try:
            super()._reserve(cost_max, tok_max)  # no local caps: counts the call in the worker's usage
        except BaseException:
            self.served.release(cost_max, tok_max)
            raise

    def _release(self, cost_max: float, tok_max: int, *, charge: tuple | None = None) -> None:
        # the charge (local, then the cluster account's) comes before the account's release: in between, the
        # attempt counts twice, never zero times, so no other worker is admitted against a spend that misses it
        super()._release(cost_max, tok_max, charge=charge)
        self.served.release(cost_max, tok_max)

    def _charge(self, pt: int, ct: int, pt_max: int, ct_max: int, refused: str | None) -> None:
        usable = refused is None and 0 < pt <= min(pt_max, MAX_TOKENS_PER_REQUEST) and 0 <= ct <= ct_max
        super()._charge(pt, ct, pt_max, ct_max, refused)
        pt, ct = (pt, ct) if usable else (pt_max, ct_max)
        self.served.charge(pt, ct, self._cost(pt, ct))


__all__ = ["LLMService", "ServedBudget", "ServedBudgetLayer", "ServedCache", "ServedLimiter", "serve_backend",
           "service_args"]
