"""The layers of an LLM backend, composed around a core the way httpx layers transports.

Every layer has one verb, ``handle(call) -> Answer``, and wraps an ``inner`` object with the same
verb; :func:`compose` stacks them. From the outside in, the OpenAI-compatible backend is::

    Coalesce → Cache → [DryRun] → Retry → Budget → RateLimit → Throttle → ChatCompletions (the core)

* :class:`Coalesce` -- identical requests in flight are sent once (the others wait for its answer),
  and finished answers -- failed ones too -- are remembered, so forks never ask again.
* :class:`Cache` -- the persistent :class:`~aumann.simulators.llm.cache.ResponseCache` (replies
  that stayed invalid are stored and marked, so a resumed run does not re-ask them either; so are
  decisions whose reply was too large, ``too large: ...`` without the reply, and decisions whose
  requests all failed, ``failed: ...``, once a later answer shows it was no outage).
* :class:`DryRun` -- sends nothing: a stand-in answers, and the prompt and schema give the estimate.
* :class:`Retry` -- backoff with jitter for failures; an invalid reply is retried *varied* (a higher
  temperature and a repair message), and one still invalid becomes an abstention (``Answer.invalid``).
* :class:`Budget` -- the spend caps, checked before each attempt against an *upper bound* of its cost.
* :class:`RateLimit` -- request and token buckets (``rpm``, ``tpm``).
* :class:`Throttle` -- the requests in flight, adapted to the observed latency: a server that answers
  one request at a time gets fewer at once, and a timeout scales the next attempt's timeout up.

Layers that can answer without sending (coalescing memory, the cache) also implement
``peek_many(calls) -> {index: Answer}``, which the backend asks first on the caller's thread.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from aumann.errors import (
    BudgetExceededError,
    CacheMissError,
    LLMError,
    MalformedResponseError,
    ResponseTooLargeError,
    Retryable,
    ServerDownError,
)
from aumann.simulators.llm.cache import TOO_LARGE_MARK
from aumann.simulators.llm.calls import Answer, Call, check_reply
from aumann.simulators.llm.ratelimit import RateLimiter
from aumann.simulators.llm.records import MAX_TOKENS_PER_REQUEST
from aumann.simulators.llm.settings import Caps, RetryPolicy
from aumann.simulators.llm.usage import Usage

logger = logging.getLogger(__name__)


class Layer:
    """Base of the layers: holds ``inner``; ``peek_many`` and ``close`` pass through by default."""

    _transient: tuple[str, ...] = ()

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._init_runtime()

    def _init_runtime(self) -> None:
        pass

    def handle(self, call: Call) -> Answer:
        return self.inner.handle(call)

    def peek_many(self, calls: Sequence[Call]) -> dict[int, Answer]:
        peek = getattr(self.inner, "peek_many", None)
        return peek(calls) if peek is not None else {}

    def close(self) -> None:
        if hasattr(self.inner, "close"):
            self.inner.close()

    def find(self, kind: type) -> Any:
        """The first layer of type ``kind`` at or below this one (or the core), else ``None``."""
        node: Any = self
        while node is not None:
            if isinstance(node, kind):
                return node
            node = getattr(node, "inner", None)
        return None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._transient}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_runtime()


def compose(core: Any, *layers: Callable[[Any], Any]) -> Any:
    """Stack ``layers`` (factories taking the inner object, innermost first) around ``core``."""
    node = core
    for make in layers:
        node = make(node)
    return node


def _watch_failures(layer: Layer) -> None:
    """Register ``layer`` with the first :class:`Retry` below it, to be told about failed decisions (see there)."""
    node = layer.inner
    while node is not None:
        if isinstance(node, Retry):
            if not any(w is layer for w in node.watchers):
                node.watchers.append(layer)
            return
        node = getattr(node, "inner", None)


# ---------------------------------------------------------------------- attempt level
class Throttle(Layer):
    """At most ``limit`` attempts in flight, adapted to the latency (see the module docstring).

    The window starts at ``concurrency``. When answers take much longer than the fastest seen while
    several are in flight (the server queues them), the window shrinks by one; when they come back
    near the fastest, it grows by one, up to ``concurrency``. A timeout halves the window.
    """

    _transient = ("_cond", "_in_flight", "_window", "_fastest")

    def __init__(self, inner: Any, concurrency: int = 16, *, adaptive: bool = True) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 100_000:
            from aumann.errors import LLMRequestError

            raise LLMRequestError(f"concurrency must be an int in [1, 100000]; got {concurrency!r}")
        self.concurrency = concurrency
        self.adaptive = adaptive
        super().__init__(inner)

    def _init_runtime(self) -> None:
        self._cond = threading.Condition()
        self._in_flight = 0
        self._window = float(self.concurrency)
        self._fastest = math.inf

    @property
    def window(self) -> int:
        return max(1, int(self._window))

    def handle(self, call: Call) -> Answer:
        with self._cond:
            while self._in_flight >= self.window:
                self._cond.wait()
            self._in_flight += 1
            busy = self._in_flight
        ok = False
        try:
            answer = self.inner.handle(call)
            ok = True
            return answer
        except Retryable as exc:
            if exc.kind == "timeout" and self.adaptive:
                with self._cond:
                    self._window = max(1.0, self._window / 2)
            raise
        finally:
            with self._cond:
                self._in_flight -= 1
                if ok and self.adaptive:
                    self._adapt(answer.latency, busy)
                self._cond.notify_all()

    def _adapt(self, latency: float, busy: int) -> None:
        if latency <= 0:
            return
        self._fastest = min(self._fastest, latency)
        if busy > 1 and latency > 3.0 * self._fastest:
            self._window = max(1.0, self._window - 1.0)
        elif latency < 1.5 * self._fastest:
            self._window = min(float(self.concurrency), self._window + 1.0)


class RateLimit(Layer):
    """Request and token buckets per minute (``rpm``, ``tpm``; ``None``: no limit)."""

    def __init__(self, inner: Any, rpm: float | None = None, tpm: float | None = None, *,
                 tokens_of: Callable[[Call], float] | None = None) -> None:
        self.limiter = RateLimiter(rpm, tpm)
        self.tokens_of = tokens_of
        super().__init__(inner)

    def stop(self) -> None:
        """The run is being interrupted: requests waiting for a rate slot are not sent (they raise)."""
        self.limiter.stop()

    def resume(self) -> None:
        self.limiter.resume()

    def handle(self, call: Call) -> Answer:
        if not self.limiter.active:
            return self.inner.handle(call)
        est = self.tokens_of(call) if self.tokens_of is not None else call.decision.chars / 4 + 64
        tpm = self.limiter.tpm
        if tpm and est > tpm:  # it could never pass: refuse now rather than wait for ever
            from aumann.errors import LLMRequestError

            raise LLMRequestError(f"one request needs ~{est:,.0f} tokens, more than tpm={tpm:g} allows in a minute; "
                                  f"raise --tpm (or shorten the prompt / --max-tokens)")
        self.limiter.acquire(est)
        answer = self.inner.handle(call)
        self.limiter.settle(est, answer.prompt_tokens + answer.completion_tokens)
        return answer


class Budget(Layer):
    """The spend caps (:class:`~aumann.simulators.llm.settings.Caps`), counting what ``usage`` holds.

    Before each attempt the cap is checked against an **upper bound** of what the attempt can cost:
    its prompt's UTF-8 bytes (a token is at least one byte) plus the reply bound, at the model's price.
    After the attempt the server's counts are charged; counts the attempt cannot have used (negative,
    not integers, above that bound) are refused, counted (``bad_usage``) and replaced by the bound --
    so no report can lower the spend, and none can push it past a cap the reservation allowed.
    """

    _transient = ("_lock", "_reserved")

    def __init__(self, inner: Any, usage: Usage, caps: Caps | None = None, *, price: Any = None,
                 bounds: Callable[[Call], tuple[int, int]] | None = None, where: Callable[[], str] = str) -> None:
        self.usage = usage
        self.caps = caps or Caps()
        self.price = price
        self.bounds = bounds or _rough_bounds
        self.where = where
        super().__init__(inner)

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._reserved = [0.0, 0]  # dollars and tokens reserved by attempts in flight
        node = self.inner  # the core re-sends below us (structured-output negotiation): each resend asks here
        while node is not None:
            if hasattr(node, "resend_gate"):
                node.resend_gate = self._another
            node = getattr(node, "inner", None)

    def _another(self, call: Call) -> None:
        """Admit one more request for ``call`` inside its attempt (a resend in another structured-output mode):
        checked against the caps and counted like any attempt; raises :class:`BudgetExceededError` past a cap."""
        pt_max, ct_max = self.bounds(call)
        cost_max, tok_max = self._cost(pt_max, ct_max), pt_max + ct_max
        self._reserve(cost_max, tok_max)
        self._release(cost_max, tok_max)  # the attempt's own reservation stays in force for the resend

    def _cost(self, pt: float, ct: float) -> float:
        return self.price.cost(pt, ct) if self.price is not None else 0.0

    def handle(self, call: Call) -> Answer:
        pt_max, ct_max = self.bounds(call)
        cost_max, tok_max = self._cost(pt_max, ct_max), pt_max + ct_max
        self._reserve(cost_max, tok_max)
        try:
            answer = self.inner.handle(call)
        except Retryable as exc:
            self._release(cost_max, tok_max, charge=(*exc.tokens, pt_max, ct_max, None) if exc.tokens else None)
            raise
        except BaseException as exc:
            self._release(cost_max, tok_max)
            if isinstance(exc, LLMError):
                self.usage.add(failures=1)  # sent, and refused by the server (401, 404, 400, ...)
            raise
        self._release(cost_max, tok_max, charge=(answer.prompt_tokens, answer.completion_tokens, pt_max, ct_max,
                                                 answer.meta.get("usage_refused")))
        return answer

    def _reserve(self, cost_max: float, tok_max: int) -> None:
        caps, u = self.caps, self.usage
        with self._lock:
            if caps.max_calls is not None and u.total_calls >= caps.max_calls:
                raise BudgetExceededError(
                    f"call cap reached: {u.total_calls} request(s) sent, max_calls={caps.max_calls} ({self.where()}); "
                    f"raise the cap to go on (the run resumes where it stopped)")
            if caps.max_tokens is not None and u.total_tokens + self._reserved[1] + tok_max > caps.max_tokens:
                raise BudgetExceededError(
                    f"token cap reached: {u.total_tokens} token(s) used (+{self._reserved[1]} in flight), the next "
                    f"request may use up to {tok_max}, max_tokens={caps.max_tokens} ({self.where()})")
            if caps.max_cost is not None and u.cost_usd + self._reserved[0] + cost_max > caps.max_cost:
                raise BudgetExceededError(
                    f"cost cap reached: ${u.cost_usd:.4f} spent (+${self._reserved[0]:.4f} in flight), the next "
                    f"request may cost up to ${cost_max:.5f} and would pass max_cost=${caps.max_cost:g} "
                    f"({self.where()}); raise "
                    f"the cap to go on (the run resumes where it stopped)")
            self._reserved[0] += cost_max
            self._reserved[1] += tok_max
            u.add(calls=1)

    def _release(self, cost_max: float, tok_max: int, *, charge: tuple | None = None) -> None:
        """Give back an attempt's reservation and, in the same hold of the lock, ``charge`` what it used: between
        the two another attempt could be admitted against a spend that counted neither (two requests each
        reserving $0.117 under a $0.2 cap both went through)."""
        with self._lock:
            self._reserved[0] = max(0.0, self._reserved[0] - cost_max)
            self._reserved[1] = max(0, self._reserved[1] - tok_max)
            if charge is not None:
                self._charge(*charge)

    def _charge(self, pt: int, ct: int, pt_max: int, ct_max: int, refused: str | None) -> None:
        # a prompt is never 0 tokens: a server reporting 0 (or nothing) would make every request free to the caps
        if refused is not None or not (0 < pt <= min(pt_max, MAX_TOKENS_PER_REQUEST) and 0 <= ct <= ct_max):
            if not self.usage.bad_usage:  # once: a server that never reports usage would warn on every request
                logger.warning("%s reported unusable token counts (%s); charged the request's upper bound (further "
                               "such replies are counted in bad_usage)", self.where(),
                               refused or f"prompt {pt}, completion {ct}")
            pt, ct = pt_max, ct_max
            self.usage.add(bad_usage=1)
        self.usage.add(prompt_tokens=pt, completion_tokens=ct, cost_usd=self._cost(pt, ct))


def _rough_bounds(call: Call) -> tuple[int, int]:
    """An upper bound without a core: every prompt byte a token, and the largest reply bound."""
    return sum(len(m["content"].encode()) + 8 for m in call.decision.messages) + 64, 4096


# ---------------------------------------------------------------------- decision level
class Retry(Layer):
    """Retries of one decision (see :class:`~aumann.simulators.llm.settings.RetryPolicy`).

    A reply is validated here (:func:`~aumann.simulators.llm.calls.check_reply`); an invalid one is
    retried varied -- at ``vary_temperature`` (or the sampling temperature when higher) with a repair
    message -- and one still invalid after ``invalid_retries`` such retries comes back as an
    abstention (``Answer.invalid`` holds why; the text is kept). Transport failures back off and retry
    up to ``max_retries``; after ``down_after`` consecutive decisions that could not reach a server the
    backend raises :class:`~aumann.errors.ServerDownError` instead of abstaining on every decision.

    A decision whose requests all failed is an abstention too (``BackendUnavailableError``, its short,
    redacted reason in ``exc.reason``), and the layers above keep it -- but only once it is known not to be
    part of an outage. The *streak* is the failed decisions since the server last answered (in the order
    they finish); ``watchers`` (the :class:`Coalesce` and :class:`Cache` layers above, registered by
    themselves) are told, under this layer's lock: ``failed(call, exc)`` for each failed decision,
    ``confirmed(keys)`` when the server answers again -- a reply over ``max_response_bytes`` included: it
    arrived -- (the streak was no outage: keep them), and
    ``outage(keys)`` when the streak reaches ``down_after`` (its decisions are forgotten and never stored,
    so a resumed run asks them again).
    """

    _transient = ("_rand", "_lock", "_streak", "watchers", "_stopping")

    def __init__(self, inner: Any, usage: Usage, policy: RetryPolicy | None = None, *,
                 sleep: Callable[[float], Any] | None = None, where: Callable[[], str] = str,
                 base_temperature: float = 0.0, down_after: int = 8) -> None:
        self.usage = usage
        self.policy = policy or RetryPolicy()
        self.sleep = sleep or time.sleep
        self.where = where
        self.base_temperature = float(base_temperature)
        self.down_after = int(down_after)
        self.unreachable = 0
        super().__init__(inner)

    def _init_runtime(self) -> None:
        self._rand = random.Random()
        self._lock = threading.Lock()
        self._streak: list[str] = []  # the keys of the failed decisions since the server last answered
        self.watchers: list[Any] = []
        self._stopping = threading.Event()  # set by stop(): the run was interrupted, no attempt is retried

    def stop(self) -> None:
        """No failed attempt is retried from now on (the run was interrupted: Ctrl-C, SIGTERM): a decision still
        in flight ends with its current attempt, and a backoff under way (up to ``retry_after_max``) is cut short,
        so the process exits within one request's timeout instead of every retry's."""
        self._stopping.set()

    def resume(self) -> None:
        """Retry again (a new batch after an interrupted one)."""
        self._stopping.clear()

    def _pause(self, seconds: float) -> None:
        if self.sleep is time.sleep:
            self._stopping.wait(seconds)
        else:  # (an injected clock: tests)
            self.sleep(seconds)

    def _interrupted(self) -> None:
        if self._stopping.is_set():  # not a failed decision (never kept as an abstention): the run is ending
            raise KeyboardInterrupt("the run was interrupted; this LLM request is not retried")

    def _answered(self) -> None:
        """The server answered (usable or not): the streak of failed decisions before it was no outage."""
        with self._lock:
            self.unreachable = 0
            if self._streak:
                keys, self._streak = self._streak, []
                for w in self.watchers:
                    w.confirmed(keys)

    def _backoff(self, attempt: int, wait: float) -> float:
        p = self.policy
        base = min(p.backoff * 2 ** (attempt - 1), p.backoff_max)
        if p.jitter:
            base *= 1.0 - p.jitter * self._rand.random()
        return max(base, wait)

    def handle(self, call: Call) -> Answer:
        p = self.policy
        info = call.decision.info
        failures = invalid = 0
        last, kind, wait, text = "", "unavailable", 0.0, None
        scale = 1.0
        while failures <= p.max_retries:
            attempt = Call(call.decision, attempt=failures + invalid, timeout_scale=scale, fork=call.fork)
            if invalid:
                attempt.temperature = max(p.vary_temperature, self.base_temperature)
                attempt.repair = (f"Your previous reply was not usable ({last[:200]}). Answer again with only the "
                                  f"JSON object, with a value for every required key.")
            if failures + invalid:
                self._interrupted()
                self.usage.add(retries=1)
            try:
                answer = self.inner.handle(attempt)
            except LLMError as exc:
                if not too_long(exc):
                    raise
                # this request does not fit the model's context: this decision abstains, the run goes on
                answer = Answer("", source="server", invalid=f"the request is too long for the model: {exc}")
                return answer
            except Retryable as exc:
                if exc.kind != "malformed":
                    self.usage.add(failures=1)
                    kind, last, wait = exc.kind, str(exc), exc.wait
                    if exc.kind == "timeout":
                        scale = min(scale * 2.0, 16.0)  # a slow queue: wait longer next time
                    elif exc.kind == "too_large":
                        self._answered()  # a reply arrived, too large to read: the server is up, as for any answer
                    failures += 1
                    logger.warning("LLM attempt %d failed for %s: %s", failures + invalid, self.where(), last)
                    if failures <= p.max_retries:
                        self._pause(self._backoff(failures, wait))
                    continue
                answer = Answer("", source="server")  # a 200 without a usable body: an invalid reply
                answer.meta["unusable"] = str(exc)
            self._answered()
            call.mode = attempt.mode
            try:
                if "unusable" in answer.meta:
                    raise Retryable("malformed", answer.meta["unusable"])
                answer.meta["obj"] = check_reply(answer.text, info)
                return answer
            except Retryable as exc:
                self.usage.add(failures=1)
                last, text = str(exc), answer.text
                if invalid >= p.invalid_retries:
                    answer.invalid = last
                    return answer
                invalid += 1
        if kind == "too_large":  # the server answered, too much: no outage (its reply already ended the streak)
            big = ResponseTooLargeError(f"{self.where()} failed after {failures + invalid} attempt(s): {last}")
            big.reason = f"{TOO_LARGE_MARK}{failures + invalid} attempt(s); last error: {last[:200]}"
            raise big
        from aumann.errors import BackendUnavailableError

        del text
        with self._lock:
            self.unreachable += 1
            if self.unreachable >= self.down_after:
                exc: BackendUnavailableError = ServerDownError(
                    f"{self.where()}: {self.unreachable} decisions in a row could not get an answer after "
                    f"{p.max_retries + 1} attempt(s) each; last error: {last}. Is the server up?")
                keys, self._streak = self._streak, []
                for w in self.watchers:
                    w.outage(keys)
            else:
                exc = BackendUnavailableError(f"{self.where()} failed after {failures + invalid} attempt(s); "
                                              f"last error: {last}")
                exc.reason = f"failed: {failures + invalid} attempt(s); last error: {last[:200]}"
                self._streak.append(call.decision.key)
                for w in self.watchers:
                    w.failed(call, exc)
        raise exc


_TOO_LONG = ("context length", "maximum context", "context_length_exceeded", "context window", "too many tokens",
             "prompt is too long", "exceeds the context", "n_ctx")


def too_long(exc: BaseException) -> bool:
    """Whether a rejection is about this request's length (one decision abstains), not the setup (fatal)."""
    from aumann.errors import LLMRequestError

    low = str(exc).lower()
    return isinstance(exc, LLMRequestError) and any(w in low for w in _TOO_LONG)


class DryRun(Layer):
    """Sends nothing: ``stand_in`` (a backend, e.g. the scenario's offline policy) answers, and what the
    request would cost is estimated from its prompt and schema (``estimate(call) -> (prompt, completion)``
    tokens) into ``usage.planned_*``. ``inner`` is kept only so the stack can be described."""

    def __init__(self, inner: Any, usage: Usage, stand_in: Any, *,
                 estimate: Callable[[Call, str], tuple[int, int]]) -> None:
        self.usage = usage
        self.stand_in = stand_in
        self.estimate = estimate
        super().__init__(inner)

    def handle(self, call: Call) -> Answer:
        d = call.decision
        if self.stand_in is None:
            try:
                out = d.schema()
            except Exception:
                raise LLMError(f"dry run of {d.schema.__name__} needs a fallback backend to answer (the schema has "
                               f"required "
                               f"fields {[n for n, f in d.schema.model_fields.items() if f.is_required()]})") from None
        else:
            out = self.stand_in.decide(d.messages, d.schema, context=d.context, seed=d.seed)
            out = out if isinstance(out, d.schema) else d.schema.model_validate(out)
        text = out.model_dump_json()
        pt, ct = self.estimate(call, text)
        self.usage.add(planned_prompt_tokens=pt, planned_completion_tokens=ct)
        return Answer(text, source="dry_run")


class Cache(Layer):
    """The persistent response cache: a hit is served, a miss goes on and its answer is stored (an
    abstention's reply too, marked invalid, so it is not asked again). In ``replay`` mode a miss is a
    :class:`~aumann.errors.CacheMissError` and nothing is sent.

    A decision whose reply stayed over ``max_response_bytes`` (a ``ResponseTooLargeError`` from the
    :class:`Retry` layer) is stored at once as an empty reply marked invalid ``too large: ...`` (redacted; the
    oversized text is never kept), and a hit on it is the same ``ResponseTooLargeError`` abstention.

    A decision whose requests all failed is stored too, as an empty reply marked invalid with the reason
    ``failed: ...`` (redacted), and a hit on it is the same abstention again (a ``BackendUnavailableError``).
    It is *held* until the :class:`Retry` layer below confirms that it was no outage -- the server answered
    a later request -- or until the backend is closed (:meth:`close`; :meth:`drop_held` forgets them); a
    streak of failures that ends in :class:`~aumann.errors.ServerDownError` is dropped, never stored."""

    _transient = ("_held", "_held_lock")

    def __init__(self, inner: Any, cache: Any, *, backend: str, model: str,
                 describe: Callable[[Call], dict[str, Any]], where: Callable[[], str] = str) -> None:
        self.cache = cache
        self.backend, self.model = backend, model
        self.describe = describe
        self.where = where
        super().__init__(inner)

    def _init_runtime(self) -> None:
        self._held: dict[str, dict[str, Any]] = {}  # failed decisions not yet known to be no outage
        self._held_lock = threading.Lock()
        _watch_failures(self)

    @property
    def on(self) -> bool:
        return self.cache is not None and self.cache.mode != "off"

    # the Retry layer's reports (under its lock: cheap, and in the order it saw them)
    def failed(self, call: Call, exc: BaseException) -> None:
        if not self.on or self.cache.mode != "record":
            return
        row = self._no_reply(call, getattr(exc, "reason", None) or f"failed: {exc}")
        with self._held_lock:
            self._held[call.decision.key] = row

    def _no_reply(self, call: Call, reason: str) -> dict[str, Any]:
        """The row of an abstention stored without a reply: empty, marked invalid with ``reason`` (redacted, capped)."""
        return {"text": "", "backend": self.backend, "model": self.model,
                "request": {**self.describe(call), "invalid": _redactor(self)(reason)[:300]},
                "prompt_tokens": 0, "completion_tokens": 0}

    def confirmed(self, keys: Sequence[str]) -> None:
        with self._held_lock:
            rows = [(k, self._held.pop(k)) for k in keys if k in self._held]
        for key, row in rows:
            self.cache.put(key, row.pop("text"), **row)

    def outage(self, keys: Sequence[str]) -> None:
        with self._held_lock:
            for k in keys:
                self._held.pop(k, None)

    def drop_held(self) -> int:
        """Forget the failed decisions still held (a run that stopped: a resume asks them again); how many."""
        with self._held_lock:
            n = len(self._held)
            self._held.clear()
        return n

    def close(self) -> None:
        """Store the failed decisions still held (no outage followed them), then close the layers below."""
        with self._held_lock:
            keys = list(self._held)
        self.confirmed(keys)
        super().close()

    def peek_many(self, calls: Sequence[Call]) -> dict[int, Answer]:
        found: dict[int, Answer] = {}
        if self.on:
            rows = self.cache.get_many(c.decision.key for c in calls)
            for c in calls:
                row = rows.get(c.decision.key)
                if row is not None:
                    found[c.decision.index] = self._served(row)
        rest = [c for c in calls if c.decision.index not in found]
        if rest:
            found.update(super().peek_many(rest))
        return found

    def _served(self, row: Any) -> Answer | BaseException:
        """A stored row as an answer; an abstention stored without a reply as the error the live decision
        raised: ``ResponseTooLargeError`` (``too large: ...``), else ``BackendUnavailableError`` (``failed: ...``)."""
        failed = getattr(row, "failed", None)
        if failed:
            from aumann.errors import BackendUnavailableError

            kind = ResponseTooLargeError if failed.startswith(TOO_LARGE_MARK) else BackendUnavailableError
            exc = kind(f"{self.where()}: {failed} (recorded in the response cache)")
            exc.reason = failed
            return exc
        return Answer(row.text, row.prompt_tokens, row.completion_tokens, source="cache")

    def handle(self, call: Call) -> Answer:
        d = call.decision
        if self.on:
            row = self.cache.get(d.key)
            if row is not None:
                got = self._served(row)
                if isinstance(got, BaseException):
                    raise got
                return got
            if self.cache.mode == "replay" and self.find(DryRun) is None:  # a dry run's stand-in answers misses
                raise CacheMissError(
                    f"replay cache miss for {self.where()} (key {d.key[:12]}, {len(d.messages)} message(s), seed="
                    f"{d.seed}): the recorded run never asked it (another scenario, size, seed or model?); record it "
                    f"first: aumann run ... --cache-mode record (the default), or ResponseCache({self.cache.path!r}, "
                    f"mode='record')")
        try:
            answer = self.inner.handle(call)
        except ResponseTooLargeError as exc:  # stored at once: unlike failed requests, no sign of an outage
            if self.on and self.cache.mode == "record":
                row = self._no_reply(call, getattr(exc, "reason", None) or f"{TOO_LARGE_MARK}{exc}")
                self.cache.put(d.key, row.pop("text"), **row)
            raise
        if self.on and answer.source != "dry_run":
            self.cache.put(d.key, answer.text, backend=self.backend, model=self.model,
                           request={**self.describe(call), **({"invalid": answer.invalid} if answer.invalid else {})},
                           prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens)
        return answer


class Coalesce(Layer):
    """Identical requests (same key) in flight are sent once; answers and failures are remembered
    (up to ``remember`` keys, oldest forgotten first) so a repeated request -- a fork's -- is served
    from memory. Budget and cache-miss errors are not remembered (raising a cap must let it go on).
    A decision whose requests all failed is remembered when the :class:`Retry` layer below reports it,
    and forgotten again if its streak of failures turns out to be an outage (``ServerDownError``)."""

    _transient = ("_lock", "_inflight", "_memory")

    def __init__(self, inner: Any, *, remember: int = 200_000) -> None:
        self.remember = int(remember)
        super().__init__(inner)

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._inflight: dict[str, Future] = {}
        self._memory: OrderedDict[str, Answer | BaseException] = OrderedDict()
        _watch_failures(self)

    def _keep(self, key: str, answer: Answer | BaseException) -> None:
        """Remember ``answer`` for ``key`` (the caller holds the lock)."""
        self._memory[key] = answer
        if len(self._memory) > self.remember:
            self._memory.popitem(last=False)

    # the Retry layer's reports (under its lock, before the failure reaches this layer's handle)
    def failed(self, call: Call, exc: BaseException) -> None:
        with self._lock:
            self._keep(call.decision.key, exc)

    def confirmed(self, keys: Sequence[str]) -> None:
        pass

    def adopt(self, key: str, answer: Answer | BaseException) -> None:
        """Remember ``answer`` for ``key`` in place of what was remembered (the cache's stored reply, where another
        process stored its answer first: see :meth:`LLMBackend._reconcile`)."""
        with self._lock:
            self._keep(key, answer)

    def outage(self, keys: Sequence[str]) -> None:
        with self._lock:
            for k in keys:
                if isinstance(self._memory.get(k), BaseException):
                    self._memory.pop(k, None)

    def peek_many(self, calls: Sequence[Call]) -> dict[int, Answer]:
        found: dict[int, Any] = {}
        with self._lock:
            for c in calls:
                got = self._memory.get(c.decision.key)
                if got is not None:
                    found[c.decision.index] = got
        rest = [c for c in calls if c.decision.index not in found]
        if rest:
            found.update(super().peek_many(rest))
        return found

    def handle(self, call: Call) -> Answer:
        key = call.decision.key
        with self._lock:
            got = self._memory.get(key)
            if got is None:
                fut = self._inflight.get(key)
                owner = fut is None
                if owner:
                    fut = self._inflight[key] = Future()
        if got is not None:
            return _replay(got, "memory")
        if not owner:
            return _replay(fut.result(), "joined")
        try:
            answer: Answer | BaseException = self.inner.handle(call)
        except (MalformedResponseError, ResponseTooLargeError) as exc:
            answer = exc
        except BaseException as exc:
            # (a failed decision was remembered, or not, by the Retry layer's report: see failed/outage)
            with self._lock:
                self._inflight.pop(key, None)
            fut.set_exception(exc)
            raise
        with self._lock:
            self._inflight.pop(key, None)
            self._keep(key, answer)
        fut.set_result(answer)
        return _replay(answer, None)


def _redactor(layer: Layer) -> Callable[[object], str]:
    """The backend's redactor (its core's ``redact``: its keys, key-like tokens, URL credentials), else the
    process's registered keys."""
    node: Any = layer
    while node is not None:
        red = getattr(node, "redact", None)
        if callable(red):
            return red
        node = getattr(node, "inner", None)
    from aumann.simulators.llm.redaction import redact_registered

    return redact_registered


def _replay(got: Answer | BaseException, source: str | None) -> Answer:
    if isinstance(got, BaseException):
        raise got
    if source is None:
        return got
    return Answer(got.text, got.prompt_tokens, got.completion_tokens, 0.0, source, got.invalid, got.meta)


__all__ = ["Budget", "Cache", "Coalesce", "DryRun", "Layer", "RateLimit", "Retry", "Throttle", "compose"]
