"""Reading an HTTP reply of a chat-completions server: the answer, or what went wrong.

:func:`interpret` turns one reply into ``(text, prompt_tokens, completion_tokens)`` or raises:

* :class:`Retryable` -- worth another attempt: 429 (with the server's ``Retry-After``), 5xx and
  408, a 200 whose body is not JSON or has no ``choices[0].message.content``;
* :class:`ModeUnsupported` -- HTTP 400/422 naming ``response_format``/``json_schema`` while the
  structured-output mode may still be negotiated (the backend falls back and resends);
* :class:`~aumann.errors.RetryAfterTooLongError` -- the server asks to wait longer than allowed;
* ``LLMAuthenticationError`` (401/403), ``ModelNotFoundError`` (404, with the server's model list
  when it gives one), ``LLMRequestError`` (other 4xx) -- never retried.

Every message goes through the caller's ``redact`` (no key survives, whatever the server echoed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from aumann.errors import ModeUnsupported, Retryable, RetryAfterTooLongError
from aumann.simulators.llm.base import LLMAuthenticationError, LLMRequestError, ModelNotFoundError


def retry_after(headers: Mapping[str, str]) -> float:
    """Seconds to wait from ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``; 0 if absent."""
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
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError, IndexError, OverflowError):
            return 0.0


def error_text(body: bytes) -> str:
    """The server's error message (``error.message`` of a JSON body, else the body's start)."""
    try:
        data = json.loads(body)
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message", err) if isinstance(err, dict) else err
        return str(msg)[:500]
    except (ValueError, AttributeError):
        return body[:500].decode("utf-8", "replace")


def interpret(reply: Any, *, where: str, model: str, redact: Callable[[object], str], retry_after_max: float,
              negotiable: bool, list_models: Callable[[], list[str] | None]) -> tuple[str, int, int]:
    """``(text, prompt_tokens, completion_tokens)`` of a good reply, else raise (see the module)."""
    status = reply.status
    if status == 200:
        try:
            data = json.loads(reply.body)
        except ValueError:
            raise Retryable("malformed", redact(
                f"reply body is not JSON: {reply.body[:160].decode('utf-8', 'replace')!r}")) from None
        usage = data.get("usage") if isinstance(data, dict) else None
        pt = ct = 0
        if isinstance(usage, dict):
            pt = int(usage.get("prompt_tokens") or 0)
            ct = int(usage.get("completion_tokens") or 0)
        try:
            text = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            text = None
        if not isinstance(text, str):
            raise Retryable("malformed", redact(
                f"reply has no choices[0].message.content: {reply.body[:160].decode('utf-8', 'replace')!r}"),
                tokens=(pt, ct))
        return text, pt, ct
    detail = redact(error_text(reply.body))
    if status == 401:
        raise LLMAuthenticationError(
            f"the server at {where} rejected the API key (HTTP 401) for model {model!r}: {detail}. "
            f"Check the key given to the backend (keys are read from the environment only by the CLI/config).")
    if status == 403:
        raise LLMAuthenticationError(f"the server at {where} denied access (HTTP 403) to model {model!r}: {detail}")
    if status == 404:
        models = list_models()
        hint = (f"; models this server lists: {models}" if models else
                "; check the model name and that base_url ends with the API root (e.g. .../v1)")
        raise ModelNotFoundError(f"not found (HTTP 404): model {model!r} at {where}: {detail}{hint}")
    if status == 429 or status >= 500 or status == 408:
        wait = retry_after(reply.headers)
        what = "rate-limits" if status == 429 else "is unavailable for"
        if wait > retry_after_max:
            raise RetryAfterTooLongError(
                f"the server at {where} {what} model {model!r} (HTTP {status}) and asks to wait Retry-After = "
                f"{wait:g} s, longer than retry_after_max = {retry_after_max:g} s; lower --concurrency/--rpm/--tpm "
                f"or raise the maximum wait ({detail})")
        label = "rate limited" if status == 429 else "server error"
        raise Retryable("unavailable", f"{label} (HTTP {status}): {detail}", wait)
    low = detail.lower()
    if negotiable and status in (400, 422) and ("response_format" in low or "json_schema" in low
                                               or "structured" in low):
        raise ModeUnsupported(detail)
    raise LLMRequestError(f"request rejected (HTTP {status}) by model {model!r} at {where}: {detail}")


__all__ = ["ModeUnsupported", "Retryable", "error_text", "interpret", "retry_after"]
