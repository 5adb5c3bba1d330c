"""The core of the OpenAI-compatible backend: one attempt of one decision, nothing else.

:class:`ChatCompletions` turns a :class:`~aumann.simulators.llm.calls.Call` into one ``POST
{base_url}/chat/completions`` on one endpoint (round-robin with cool-down failover, see
:mod:`.endpoints`) and reads the reply (:func:`~aumann.simulators.llm.replies.interpret`). Retries,
rate limits, spend caps, caching, coalescing and dry runs are layers around it
(:mod:`aumann.simulators.llm.layers`).

**Structured output, negotiated once per endpoint.** In ``auto`` mode the first request to an endpoint
is the probe (the others to it wait): ``json_schema`` (strict), and when the server answers with any
4xx/5xx naming the response format (llama.cpp answers HTTP 500), ``json_object`` with the schema
under its ``schema`` key (llama.cpp constrains the output by it), then no ``response_format`` at all.
The outcome is remembered for the endpoint. Only the last mode pastes a description of the fields
into the prompt: where the server constrains the output itself, no schema text is added (a small
model copies pasted schemas back). A server that refuses ``max_tokens`` by name is sent
``max_completion_tokens`` instead (remembered too).

**The request body**: the caller's messages, ``temperature`` (a varied retry raises it), ``top_p``,
the request seed (mixed with the sampling seed when one is set), the reply bound ``max_tokens``
(the sampling's, else sized from the schema: :func:`~aumann.simulators.llm.calls.reply_bound`), the
response format and, on a repair retry, a last user message naming what was wrong with the reply.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from aumann.errors import BoundFieldRefused, ModeUnsupported, ReplyTooLarge, Retryable, TransportFailure
from aumann.simulators.llm.calls import Answer, Call, Decision, reply_bound
from aumann.simulators.llm.endpoints import Endpoint, EndpointPool, check_api_key, parse_endpoint
from aumann.simulators.llm.redaction import Redactor, protect_logs
from aumann.simulators.llm.replies import interpret
from aumann.simulators.llm.settings import MAX_SECONDS, Sampling
from aumann.simulators.llm.transport import HttpxTransport, StdlibTransport
from aumann.simulators.llm.usage import Usage

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: the shortest request timeout (seconds): below it every request would time out (as --llm-timeout says)
MIN_TIMEOUT = 0.001
STRUCTURED_MODES = ("auto", "json_schema", "json_object", "none")
_NEXT_MODE = {"json_schema": "json_object", "json_object": "none"}


def mix_seed(seed: int | None, llm_seed: int | None) -> int | None:
    """The request seed sent: the decision's, mixed with the sampling seed when one is set (31 bits)."""
    if seed is None or llm_seed is None:
        return seed
    return int((int(seed) * 0x9E3779B1 + int(llm_seed) * 0x85EBCA77 + 0x27D4EB2F) % 0x7FFFFFFF)


class _EndpointState:
    """What was negotiated with one endpoint: the structured-output mode and the reply-bound field."""

    __slots__ = ("bound_field", "final", "mode", "probe")

    def __init__(self, mode: str, final: bool) -> None:
        self.mode, self.final = mode, final
        self.bound_field = "max_tokens"
        self.probe = threading.Lock()


class ChatCompletions:
    """One attempt of one decision on an OpenAI-compatible server (see the module docstring).

    Args:
        model: the model name the servers serve.
        base_url: one URL or a list of URLs serving the same model (credentials inside are used, never
            recorded); default the OpenAI API.
        api_key: the bearer key (``None``: none). Never logged, cached or recorded.
        transport: the HTTP layer (``None``: :class:`~.transport.StdlibTransport`, or httpx when a proxy
            is configured; an ``httpx`` transport such as ``MockTransport``; or an object with
            ``request(method, endpoint, path, body, headers, timeout, max_bytes)``).
        sampling: a :class:`~aumann.simulators.llm.settings.Sampling`.
        structured_output: ``auto`` (negotiated per endpoint), ``json_schema``, ``json_object`` or ``none``.
        timeout: seconds one request may take in all, from connecting to the last byte of the reply (a retry after
            a timeout may scale it up).
        usage: the :class:`~aumann.simulators.llm.usage.Usage` that latencies and refused usage go to.
        max_response_bytes: reply bodies larger than this are rejected.
        endpoint_cooldown: seconds a failing endpoint is taken out (doubling per repeat).
        retry_after_max: the longest ``Retry-After`` honoured (seconds).
    """

    def __init__(self, model: str, base_url: str | Sequence[str] | None = None, api_key: str | None = None, *,
                 transport: Any = None, sampling: Sampling | None = None, structured_output: str = "auto",
                 timeout: float = 60.0, usage: Usage | None = None, max_response_bytes: int = 1_000_000,
                 endpoint_cooldown: float = 30.0, retry_after_max: float = 60.0) -> None:
        from aumann.errors import LLMRequestError

        if not isinstance(model, str) or not model:
            raise LLMRequestError(f"model must be a non-empty string; got {model!r}")
        if structured_output not in STRUCTURED_MODES:
            raise LLMRequestError(f"structured_output must be one of {list(STRUCTURED_MODES)}; "
                                  f"got {structured_output!r}")
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or max_response_bytes < 1:
            raise LLMRequestError(f"max_response_bytes must be an int >= 1; got {max_response_bytes!r}")
        for nm, val, lo in (("timeout", timeout, MIN_TIMEOUT), ("endpoint_cooldown", endpoint_cooldown, 0),
                            ("retry_after_max", retry_after_max, 0)):
            if isinstance(val, bool) or not isinstance(val, int | float) or not lo <= val <= MAX_SECONDS:
                raise LLMRequestError(f"{nm} must be a finite number of seconds in [{lo:g}, {MAX_SECONDS:g}]; got "
                                      f"{val!r}" + (" (every request would time out)" if nm == "timeout" and val == val
                                                    and 0 <= val < lo else ""))
        self.model = model
        self.sampling = sampling or Sampling()
        self.structured_output = structured_output
        self.timeout = float(timeout)
        self.usage = usage if usage is not None else Usage()
        self.max_response_bytes = max_response_bytes
        self.retry_after_max = float(retry_after_max)
        check_api_key(api_key)
        urls = [base_url or DEFAULT_BASE_URL] if base_url is None or isinstance(base_url, str) else list(base_url)
        self.endpoints = EndpointPool([parse_endpoint(u, api_key) for u in urls], cooldown=endpoint_cooldown)
        self.redact = Redactor([api_key, *(e.api_key for e in self.endpoints.endpoints),
                                *(s for e in self.endpoints.endpoints for s in e.url_secrets)])
        protect_logs(self.redact.secrets)
        self._transport_spec = transport
        self.injected = transport is not None and not isinstance(transport, str)
        self.resend_gate: Callable[[Call], None] | None = None  # set by the Budget layer above (not pickled)
        self._init_runtime()

    def _init_runtime(self) -> None:
        spec = self._transport_spec
        if spec is None:
            self.transport = StdlibTransport() if not self._proxied() else HttpxTransport()
        elif hasattr(spec, "request") and callable(spec.request):
            self.transport = spec
        else:
            self.transport = HttpxTransport(spec)
        auto = self.structured_output == "auto"
        first = "json_schema" if auto else self.structured_output
        self._states = [_EndpointState(first, not auto) for _ in self.endpoints.endpoints]
        self._stopping = threading.Event()  # set by stop(): the run is being interrupted

    def stop(self) -> None:
        """Send nothing more (the run is being interrupted): a request waiting for its turn (behind the
        structured-output probe, the concurrency window) raises instead of being sent when its turn comes."""
        self._stopping.set()

    def resume(self) -> None:
        """Send again (a new batch after an interrupted one)."""
        self._stopping.clear()

    def _proxied(self) -> bool:
        proxies = urllib.request.getproxies()
        return any(e.scheme in proxies and not urllib.request.proxy_bypass(e.host) for e in self.endpoints.endpoints)

    # ------------------------------------------------------------------ what the backend shows
    @property
    def base_urls(self) -> list[str]:
        return self.endpoints.public

    @property
    def mode(self) -> str:
        """The structured-output mode of the first endpoint (the one in use where there is one)."""
        return self._states[0].mode

    def where(self) -> str:
        urls = self.base_urls
        return f"model {self.model!r} at {urls[0]}" + (f" (+{len(urls) - 1} endpoint(s))" if len(urls) > 1 else "")

    def describe(self) -> dict[str, Any]:
        s = self.sampling
        return {"backend": "openai", "model": self.model, "endpoints": self.base_urls,
                "structured_output": sorted({st.mode for st in self._states}) if len(self._states) > 1 else self.mode,
                "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
                "llm_seed": s.seed, "system_prompt": None if s.system_prompt is None else "(set)"}

    # ------------------------------------------------------------------ the request
    def reply_tokens(self, d: Decision) -> int:
        """The reply bound a request of this decision asks for."""
        return self.sampling.max_tokens or reply_bound(d.info)

    def body(self, call: Call, mode: str, bound_field: str = "max_tokens") -> dict[str, Any]:
        """The JSON body one attempt sends in structured-output ``mode``."""
        d = call.decision
        msgs = list(d.messages)
        if mode == "none":
            msgs.append(d.info.prompt_message)
        if call.repair:
            msgs.append({"role": "user", "content": call.repair})
        s = self.sampling
        body: dict[str, Any] = {"model": self.model, "messages": msgs,
                                "temperature": s.temperature if call.temperature is None else call.temperature}
        if s.top_p is not None:
            body["top_p"] = s.top_p
        seed = mix_seed(d.seed, s.seed)
        if seed is not None:
            body["seed"] = int(seed)
        body[bound_field] = self.reply_tokens(d)
        fmt = d.info.response_formats.get(mode)
        if fmt is not None:
            body["response_format"] = fmt
        return body

    def _headers(self, ep: Endpoint) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json", "Accept-Encoding": "identity",
             "User-Agent": "aumann"}
        if ep.api_key:
            h["Authorization"] = f"Bearer {ep.api_key}"
        return h

    def _list_models(self, ep: Endpoint) -> list[str] | None:
        from aumann import bounded

        try:
            r = self.transport.request("GET", ep, ep.path("/models"), None, self._headers(ep), self.timeout,
                                       self.max_response_bytes)
            data = bounded.loads_json(r.body, what="model list", error=ValueError)
            return sorted(str(m["id"]) for m in data["data"])[:20]
        except Exception:  # best effort only: the listing is a hint in an error message
            return None

    def handle(self, call: Call) -> Answer:
        """Send one attempt; an :class:`Answer`, or raise ``Retryable`` / an :class:`~aumann.errors.LLMError`."""
        from aumann.errors import LLMRequestError

        ep = self.endpoints.pick()
        st = self._states[self.endpoints.endpoints.index(ep)]
        while True:
            probing = False
            if not st.final:
                st.probe.acquire()
                probing = not st.final
                if not probing:
                    st.probe.release()
            if self._stopping.is_set():
                if probing:
                    st.probe.release()
                raise KeyboardInterrupt("the run was interrupted; this LLM request is not sent")
            mode = st.mode
            try:
                answer = self._once(call, ep, mode, st.bound_field, negotiable=probing and mode != "none")
                if probing:
                    st.final = True
                call.mode = mode
                return answer
            except BoundFieldRefused:
                self.usage.add(failures=1)
                self._admit_resend(call)
                st.bound_field = "max_completion_tokens"
                logger.warning("%s refuses max_tokens; sending max_completion_tokens", ep.public)
            except ModeUnsupported as exc:
                self.usage.add(failures=1)
                nxt = _NEXT_MODE.get(mode)
                if nxt is None:
                    raise LLMRequestError(f"{self.where()} rejected the request even without a response_format: "
                                          f"{exc}") from None
                if st.mode == mode:
                    logger.warning("%s rejected response_format mode %r (%s); falling back to %r for this endpoint",
                                   ep.public, mode, str(exc)[:200], nxt)
                    st.mode = nxt
                    st.final = nxt == "none"
                self._admit_resend(call)  # the resend is another request the server sees: within the caps
            except Retryable as exc:
                if probing and exc.kind == "malformed":
                    st.final = True  # the server took the mode: the reply itself was bad
                raise
            finally:
                if probing:
                    st.probe.release()

    def _admit_resend(self, call: Call) -> None:
        """Count one more request of this attempt: through the spend caps' gate when a Budget layer set one
        (``resend_gate``, which raises past a cap), else just counted."""
        gate = self.resend_gate
        if gate is not None:
            gate(call)
        else:
            self.usage.add(calls=1)

    def _once(self, call: Call, ep: Endpoint, mode: str, bound_field: str, *, negotiable: bool) -> Answer:
        from aumann.errors import LLMRequestError

        body = json.dumps(self.body(call, mode, bound_field), ensure_ascii=False).encode()
        timeout = min(MAX_SECONDS, self.timeout * call.timeout_scale)
        t0 = time.perf_counter()
        try:
            reply = self.transport.request("POST", ep, ep.path("/chat/completions"), body, self._headers(ep),
                                           timeout, self.max_response_bytes)
        except ReplyTooLarge as exc:
            self.endpoints.success(ep)  # it answered (too much): it is up, and its failures so far are forgiven
            seen = f"{exc.size} bytes announced" if exc.size else "cut off while reading"
            raise Retryable("too_large", f"reply body over max_response_bytes = {self.max_response_bytes} bytes "
                                         f"({seen}); rejected, its text not kept", size=exc.size) from None
        except TransportFailure as exc:
            self.endpoints.failure(ep, hard=exc.kind == "connect")
            detail = self.redact(exc.detail)
            named = exc.kind == "timeout" or ep.public in detail  # the transports' messages name the endpoint
            raise Retryable("timeout" if exc.kind == "timeout" else "unavailable",
                            detail if named else f"cannot connect to {ep.public}: {detail}") from None
        latency = time.perf_counter() - t0
        if reply.status >= 500 or reply.status == 408:
            self.endpoints.failure(ep)
        try:
            done = interpret(reply, where=ep.public, model=self.model, redact=self.redact,
                             retry_after_max=self.retry_after_max, negotiable=negotiable,
                             list_models=lambda: self._list_models(ep), max_bytes=self.max_response_bytes)
        except Retryable as exc:
            if reply.status < 300 and exc.kind == "unavailable":  # a 2xx that is no completion: a failing endpoint
                self.endpoints.failure(ep)
            raise
        except LLMRequestError as exc:
            if bound_field == "max_tokens" and "max_completion_tokens" in str(exc):
                raise BoundFieldRefused() from None
            raise
        self.usage.add_latency(latency)
        self.endpoints.success(ep)
        text = done.text if not self.redact.contains_secret(done.text) else self.redact(done.text)
        return Answer(text, done.prompt_tokens, done.completion_tokens, latency,
                      meta={"usage_refused": done.usage_refused, "finish_reason": done.finish_reason})

    def close(self) -> None:
        if hasattr(self.transport, "close"):
            self.transport.close()

    def __getstate__(self) -> dict:
        from aumann.errors import LLMError

        if self.injected:
            raise LLMError("an LLM backend built with an injected client or transport cannot be pickled; "
                           "build it from model/base_url/api_key in each worker")
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("transport", "_states", "resend_gate", "_stopping")}
        state["_modes"] = [(s.mode, s.final, s.bound_field) for s in self._states]
        return state

    def __setstate__(self, state: dict) -> None:
        modes = state.pop("_modes", None)
        self.resend_gate = None  # the Budget layer unpickled around this core sets it again
        self.__dict__.update(state)
        self._init_runtime()
        protect_logs(self.redact.secrets)
        for st, m in zip(self._states, modes or []):
            st.mode, st.final, st.bound_field = m


__all__ = ["DEFAULT_BASE_URL", "STRUCTURED_MODES", "ChatCompletions", "mix_seed"]
