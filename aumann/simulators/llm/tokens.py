"""Token counts before the server answers: an upper bound (for the spend caps) and an estimate (dry runs).

* :func:`upper_bound` -- what one attempt can use at most: every byte of the prompt a token (a BPE
  token is at least one byte), plus the chat template's tokens per message, plus the reply bound the
  request sends. The spend caps reserve this before an attempt, so a cap holds whatever the server
  later reports.
* :func:`estimate_call` -- what a dry run expects: the prompt at :data:`CHARS_PER_TOKEN` characters a
  token plus the template, and the reply the stand-in gave at :data:`REPLY_CHARS_PER_TOKEN` (JSON
  punctuation tokenizes densely). Measured against SmolLM2-135M behind llama.cpp's server (see
  ``docs/simulators.md``).
"""

from __future__ import annotations

from typing import Any

from aumann.simulators.llm.calls import Call

#: characters per prompt token (English prose with numbers)
CHARS_PER_TOKEN = 3.6
#: characters per reply token (short JSON objects)
REPLY_CHARS_PER_TOKEN = 2.6
#: chat-template tokens per message, and per request
TEMPLATE_PER_MESSAGE = 5
TEMPLATE_PER_REQUEST = 8


def _prompt_texts(core: Any, call: Call) -> list[str]:
    d = call.decision
    texts = [m["content"] for m in d.messages]
    if getattr(core, "mode", None) == "none" and d.info.prompt_message:
        texts.append(d.info.prompt_message["content"])
    if call.repair:
        texts.append(call.repair)
    return texts


def upper_bound(core: Any, call: Call) -> tuple[int, int]:
    """``(prompt, completion)`` tokens one attempt can use at most (see the module docstring)."""
    texts = _prompt_texts(core, call)
    prompt = sum(len(t.encode("utf-8")) for t in texts) + 8 * (len(texts) + 1) + 32
    return prompt, int(core.reply_tokens(call.decision))


def estimate_call(core: Any, call: Call, reply: str | None = None) -> tuple[int, int]:
    """``(prompt, completion)`` tokens a dry run expects one request to use (see the module docstring)."""
    texts = _prompt_texts(core, call)
    prompt = sum(len(t) for t in texts) / CHARS_PER_TOKEN + TEMPLATE_PER_MESSAGE * len(texts) + TEMPLATE_PER_REQUEST
    if reply is None:
        completion = min(core.reply_tokens(call.decision), 24)
    else:
        completion = min(core.reply_tokens(call.decision), len(reply) / REPLY_CHARS_PER_TOKEN + 2)
    return round(prompt), round(completion)


__all__ = ["CHARS_PER_TOKEN", "REPLY_CHARS_PER_TOKEN", "estimate_call", "upper_bound"]
