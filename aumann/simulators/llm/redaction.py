"""Keeping API keys out of messages, logs and stored text.

A :class:`Redactor` knows the secrets of one backend (its API keys, keys found inside endpoint URLs)
and replaces them -- and anything that looks like a bearer key or URL credentials -- with ``***``.
Every exception message, log line and stored reply of :class:`~aumann.simulators.llm.OpenAIBackend`
goes through it, whatever path the text took (an error body, a malformed 200 reply that echoes the
``Authorization`` header, a connection error naming the URL).

:func:`protect_logs` installs, once, a logging filter on the HTTP libraries' loggers (``httpx``,
``httpcore``, ``urllib3``) and ours that redacts every registered secret from their records, so a
library logging a request URL with ``?api_key=...`` does not leak it either.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

from aumann.manifest import add_redactor, redact_url

#: a bearer key, ``sk-…`` / ``key-…`` token, at the start of a word: ``risk-averse`` or ``monkey-business`` (a topic, a
#: persona recorded in a manifest's config) is no key
_KEYLIKE = re.compile(r"(?<![A-Za-z0-9])(sk-|key-|Bearer\s+|Basic\s+)[A-Za-z0-9_\-\*\.+/=]{4,}")
_MIN_SECRET = 4  # shorter "secrets" would redact ordinary words
_PARTIAL_FROM = 12  # a secret this long is also redacted where only part of it survived a cut ...
_PARTIAL = 6  # ... from this many of its first or last characters on


def _partial(s: str, secret: str) -> str:
    """``s`` with every piece of ``secret`` that starts like it (its first :data:`_PARTIAL` characters and as many
    more as match) or ends like it (its last ones, extended backwards) replaced by ``***``: what is left of a key
    in a text cut before it was redacted (``body[:160]`` ending inside an echoed key), on either side of the cut."""
    spans = []
    head, tail = secret[:_PARTIAL], secret[-_PARTIAL:]
    i = s.find(head)
    while i >= 0:
        k = _PARTIAL
        while i + k < len(s) and k < len(secret) and s[i + k] == secret[k]:
            k += 1
        spans.append((i, i + k))
        i = s.find(head, i + k)
    j = s.find(tail)
    while j >= 0:
        end, k = j + _PARTIAL, _PARTIAL
        while j - 1 >= 0 and k < len(secret) and s[j - 1] == secret[-k - 1]:
            j, k = j - 1, k + 1
        spans.append((j, end))
        j = s.find(tail, end)
    if not spans:
        return s
    out, pos = [], 0
    for a, b in sorted(spans):
        if b <= pos:
            continue
        out.append(s[pos:max(a, pos)] if a > pos else "")
        if a >= pos:
            out.append("***")
        pos = b
    out.append(s[pos:])
    return "".join(out)


class Redactor:
    """Replace known secrets, key-like tokens and URL credentials in text with ``***``."""

    __slots__ = ("partial", "secrets")

    def __init__(self, secrets: Iterable[str | None] = (), *, partial: bool = True) -> None:
        uniq = {s for s in secrets if isinstance(s, str) and len(s) >= _MIN_SECRET}
        self.secrets: tuple[str, ...] = tuple(sorted(uniq, key=len, reverse=True))
        self.partial = partial  # also what is left of a key in a text cut before it was redacted

    def __call__(self, text: object) -> str:
        s = str(text)
        for secret in self.secrets:
            if secret in s:
                s = s.replace(secret, "***")
            if self.partial and len(secret) >= _PARTIAL_FROM:
                s = _partial(s, secret)
        return redact_url(_KEYLIKE.sub(lambda m: m.group(1) + "***", s))

    def contains_secret(self, text: str) -> bool:
        return any(secret in text for secret in self.secrets)


_registered: set[str] = set()
_installed = False
_reg_lock = threading.Lock()
# a logger's filters see only the records logged on that very logger (not its children's): list them
_LOGGERS = ("httpx", "httpcore", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy",
            "urllib3", "urllib3.connectionpool", "openai", "openai._base_client", "aumann",
            *(f"{__package__}.{m}" for m in ("openai_backend", "endpoints", "cache")))  # our loggers, by module


class _RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not _registered:
            return True
        try:
            msg = record.getMessage()
        except Exception:  # a broken log call is not ours to fix
            return True
        red = Redactor(_registered)(msg)
        if red != msg:
            record.msg, record.args = red, None
        return True


_NET_MIN = 8  # the net skips shorter keys ("test", a local server's dummy key): they would mangle ordinary words


def redact_registered(text: object) -> str:
    """``text`` with every secret of at least 8 characters a backend of this process registered
    (:func:`protect_logs`) redacted: the CLI's last net, applied to every error and warning it prints, whatever
    path the text took to get there (a backend's own messages are redacted of its keys, whatever their length)."""
    keys = [k for k in _registered if len(k) >= _NET_MIN]
    return Redactor(keys)(text) if keys else str(text)


def redact_recorded(text: object) -> str:
    """``text`` as a manifest, summary or report records it: every whole secret of at least 8 characters a backend
    of this process registered, key-like tokens and URL credentials redacted, but no partial piece of a key. A
    recorded value (a flag's value, a path, a prompt) is whole, never a message cut inside a key, and a key's first
    characters occur in ordinary words: an OpenAI project key's ``sk-pro`` is in ``risk-profile``."""
    keys = [k for k in _registered if len(k) >= _NET_MIN]
    return Redactor(keys, partial=False)(text) if keys else str(text)


add_redactor(redact_recorded)  # every text a manifest, summary or report records goes through it


def protect_logs(secrets: Iterable[str | None]) -> None:
    """Register ``secrets`` to be redacted from the records of the HTTP libraries' loggers and ours."""
    global _installed
    new = {s for s in secrets if isinstance(s, str) and len(s) >= _MIN_SECRET}
    with _reg_lock:
        _registered.update(new)
        if not _installed and _registered:
            flt = _RedactingFilter()
            for name in _LOGGERS:
                logging.getLogger(name).addFilter(flt)
            _installed = True


__all__ = ["Redactor", "protect_logs", "redact_recorded", "redact_registered"]
