"""Reading an HTTP reply of a chat-completions server: the answer, or what went wrong.

:func:`interpret` turns one reply into a :class:`~aumann.simulators.llm.records.Completion` (the text and
the checked token counts) or raises:

* :class:`Retryable` -- worth another attempt: 429 (with the server's ``Retry-After``), 5xx and
  408, and a 200 whose body is not a chat completion at all (not JSON -- a proxy's HTML page --, or without a
  ``choices[0].message`` object), all ``unavailable``: the server failed, the model did not answer; a completion
  whose message has no ``content`` string (a refusal, a tool call) is ``malformed``: the model's answer;
* :class:`ModeUnsupported` -- any HTTP 4xx/5xx (but 401/403/404/408/429) whose message names the
  structured-output request (``response_format``, ``json_schema``, ``json_object``, ...) while the mode
  may still be negotiated (the backend falls back and resends) -- llama.cpp's server answers an
  unsupported ``json_schema`` with HTTP 500;
* :class:`~aumann.errors.RetryAfterTooLongError` -- the server asks to wait longer than allowed;
* ``LLMAuthenticationError`` (401/403), ``ModelNotFoundError`` (404, with the server's model list
  when it gives one), ``LLMRequestError`` (other 4xx) -- never retried.

Every message goes through the caller's ``redact`` (no key survives, whatever the server echoed).
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from aumann import bounded
from aumann.errors import ModeUnsupported, Retryable, RetryAfterTooLongError
from aumann.simulators.llm.base import LLMAuthenticationError, LLMRequestError, ModelNotFoundError
from aumann.simulators.llm.records import Completion, read_completion


def retry_after(headers: Mapping[str, str]) -> float:
    """Seconds to wait from ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``; 0 if absent.

    An HTTP date is UTC in each of its three formats (RFC 9110 5.6.7), also where it names no zone: the asctime
    form (``Sun Nov  6 08:49:37 1994``) and a ``-0000`` zone, which :func:`parsedate_to_datetime` gives as a naive
    datetime, and whose ``timestamp()`` read it in this machine's local time (under ``TZ=America/New_York`` a date
    30 s ahead was a wait of 5 h, past ``retry_after_max``; east of UTC, a wait of none)."""
    value = headers.get("retry-after")
    if value is None:
        ms = headers.get("retry-after-ms")
        try:
            return max(0.0, float(ms) / 1000.0) if ms is not None else 0.0
        except ValueError:
            return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
            if when.tzinfo is None:
                when = when.replace(tzinfo=_dt.UTC)
            return max(0.0, when.timestamp() - time.time())
        except (TypeError, ValueError, IndexError, OverflowError):
            return 0.0


def error_text(body: bytes) -> str:
    """The server's error message (``error.message`` of a JSON body, else the body), whole: cut it only after
    redacting (a key the server echoed across the cut would otherwise survive in part)."""
    try:
        data = bounded.loads_json(body, what="the server's error body", error=ValueError, max_bytes=2_000_000)
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message", err) if isinstance(err, dict) else err
        return str(msg)
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace")


def _head(body: bytes, redact: Callable[[object], str], n: int = 160) -> str:
    """The start of a reply body for a message: redacted whole, then cut (never cut, then redacted)."""
    return repr(redact(body.decode("utf-8", "replace"))[:n])


#: words in an error that name the structured-output request (any 4xx/5xx naming one means "unsupported")
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "structured", "'text'", "grammar")


def names_response_format(detail: str) -> bool:
    """Whether an error message is about the ``response_format`` the request asked for."""
    low = detail.lower()
    return any(w in low for w in _FORMAT_WORDS)


def interpret(reply: Any, *, where: str, model: str, redact: Callable[[object], str], retry_after_max: float,
              negotiable: bool, list_models: Callable[[], list[str] | None],
              max_bytes: int = 1_000_000) -> Completion:
    """The :class:`~aumann.simulators.llm.records.Completion` of a good reply, else raise (see the module)."""
    status = reply.status
    if 200 <= status < 300:  # a proxy's 203, a gateway's 201: the body decides (a 204's none is no completion)
        # a body that is no chat completion is the server (or a proxy in front of it) failing, not the model
        # answering: retried like a 5xx and never stored as the decision's answer (a wrong base URL answering every
        # request with an HTML page filled the cache with permanent abstentions, and never looked like an outage)
        try:
            done = read_completion(reply.body, max_bytes=max(max_bytes, len(reply.body)))
        except ValueError as exc:
            raise Retryable("unavailable", redact(
                f"HTTP {status} whose body is not a chat completion: not JSON ({redact(str(exc))[:80]}): "
                f"{_head(reply.body, redact)}")) from None
        if not done.has_message:
            said = redact(error_text(reply.body))[:500]
            if negotiable and names_response_format(said):  # a server that reports errors with HTTP 200
                raise ModeUnsupported(f"HTTP {status}: {said}")
            raise Retryable("unavailable", redact(
                f"HTTP {status} whose body is not a chat completion: no choices[0].message: "
                f"{_head(reply.body, redact)}"),
                tokens=(done.prompt_tokens, done.completion_tokens) if done.usage_refused is None else None)
        if done.text is None:
            raise Retryable("malformed", redact(
                f"reply has no choices[0].message.content: {_head(reply.body, redact)}"),
                tokens=(done.prompt_tokens, done.completion_tokens))
        return done
    detail = redact(error_text(reply.body))[:500]
    if negotiable and status >= 400 and status not in (401, 403, 404, 408, 429) and names_response_format(detail):
        raise ModeUnsupported(f"HTTP {status}: {detail}")
    if status == 401:
        raise LLMAuthenticationError(
            f"the server at {where} rejected the API key (HTTP 401) for model {model!r}: {detail}. "
            f"Check the key given to the backend (keys are read from the environment only by the CLI/config).")
    if status == 403:
        raise LLMAuthenticationError(f"the server at {where} denied access (HTTP 403) to model {model!r}: {detail}")
    if status == 404:
        models = list_models()
        hint = (f"; models this server lists: {redact(str(models))[:500]}" if models else
                "; check the model name and that base_url ends with the API root (e.g. .../v1)")
        raise ModelNotFoundError(f"not found (HTTP 404): model {model!r} at {where}: {detail}{hint}")
    if 300 <= status < 400:
        to = reply.headers.get("location")
        raise LLMRequestError(
            f"the server at {where} redirects (HTTP {status}) "
            + (f"to {redact(to)[:300]!r}" if to else "without saying where")
            + "; redirects are not followed (they could carry the API key to another host): pass the URL it "
              "redirects to as base_url (an http:// URL of an https:// server?)")
    if status == 429 or status >= 500 or status == 408:
        wait = retry_after(reply.headers)
        what = "rate-limits" if status == 429 else "is unavailable for"
        if wait > retry_after_max:
            raise RetryAfterTooLongError(
                f"the server at {where} {what} model {model!r} (HTTP {status}) and asks to wait Retry-After = "
                f"{wait:g} s, longer than retry_after_max = {retry_after_max:g} s; lower --concurrency/--rpm/--tpm "
                f"or raise the maximum wait (--retry-after-max) ({detail})")
        label = "rate limited" if status == 429 else "server error"
        raise Retryable("unavailable", f"{label} (HTTP {status}): {detail}", wait)
    raise LLMRequestError(f"request rejected (HTTP {status}) by model {model!r} at {where}: {detail}")


__all__ = ["ModeUnsupported", "Retryable", "error_text", "interpret", "names_response_format", "retry_after"]
