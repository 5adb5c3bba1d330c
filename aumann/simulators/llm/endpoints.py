"""Endpoints of one model: parsing base URLs, credentials inside them, spreading and failover.

``OpenAIBackend(base_url=[url1, url2, ...])`` serves one model from several OpenAI-compatible servers
(as vLLM fleets are run). Requests go round-robin over the healthy endpoints; an endpoint that
refuses connections, or fails three attempts in a row (timeouts, 5xx), is taken out for a cool-down
(``cooldown`` seconds, doubling each time it is taken out again, at most 16×) and tried again after
it; a retry goes to another endpoint when there is one. When every endpoint is out, the one that
comes back first is used. Endpoints are assumed to serve the same model with the same capabilities.

Credentials inside a URL -- ``http://user:KEY@host/v1``, ``?api_key=KEY``, any query value, a
key-like path segment (the rule of :func:`aumann.manifest.redact_url`) -- are used for the requests
(the userinfo's password, or user name, becomes the bearer key when no ``api_key`` is given; query
parameters are kept) but never recorded: :attr:`Endpoint.public` is the URL with them stripped, and
it is the only form that reaches labels, logs, messages, caches, ledgers and manifests. The user name
is redacted from free text as well only where it is the key or looks like one (a key prefix, or 24+
letters and digits): ``user`` of ``http://user:KEY@host`` is an ordinary word.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

from aumann.errors import ConfigError
from aumann.manifest import redact_url

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Endpoint:
    """One server: where requests go (with credentials) and its public, credential-free label."""

    scheme: str
    host: str
    port: int
    base_path: str
    query: str
    public: str
    api_key: str | None = None
    url_secrets: tuple[str, ...] = ()
    failures: int = 0
    trips: int = 0
    down_until: float = 0.0
    served: int = field(default=0, compare=False)

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def __repr__(self) -> str:  # the public URL only: the key, the query and a key-like path stay out of any repr
        return (f"Endpoint({self.public!r}, failures={self.failures}, trips={self.trips}, "
                f"down_until={self.down_until}, served={self.served})")

    def path(self, suffix: str) -> str:
        """Request target for ``suffix`` (e.g. ``/chat/completions``), with the URL's query kept."""
        p = self.base_path.rstrip("/") + suffix
        return p + ("?" + self.query if self.query else "")


def check_api_key(key: str | None, what: str = "api_key") -> None:
    """Refuse a key that cannot travel in an HTTP header: whitespace or a control character anywhere (the carriage
    return a key read from a CRLF file ends with), or a character outside Latin-1. The message says where, never
    what the key holds.

    Raises:
        ConfigError: naming ``what`` (the variable or argument) and the position.
    """
    if key is None:
        return
    if not isinstance(key, str):
        raise ConfigError(f"{what} must be a string; got {type(key).__name__}")
    for i, ch in enumerate(key):
        if ch.isspace() or not ch.isprintable() or ord(ch) > 0xFF:
            kind = ("a carriage return (a key read from a CRLF file?)" if ch == "\r" else "a line feed" if ch == "\n"
                    else "whitespace" if ch.isspace() else "a control character" if not ch.isprintable()
                    else "a character outside Latin-1")
            raise ConfigError(f"{what} holds {kind} at position {i + 1} of {len(key)}: an API key cannot hold one "
                              "(an HTTP header could not carry it); the key itself is not shown")


def parse_endpoint(url: str, api_key: str | None = None) -> Endpoint:
    """Parse a base URL such as ``http://127.0.0.1:8000/v1`` (credentials allowed, never recorded).

    Raises:
        ConfigError: not an ``http(s)://host[:port][/path]`` URL (the message shows it without
            credentials).
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"base_url must be a non-empty http(s) URL; got {url!r}")
    public = redact_url(url.strip()).rstrip("/")
    if url.count("://") > 1:  # "http://a/v1,http://b/v1" went to http://a/v1 alone, with ",http://b/v1" in its path
        raise ConfigError(f"base_url {public!r} holds more than one URL: pass one per server (--base-url repeated, or "
                          "a list of base URLs)")
    for i, ch in enumerate(url.strip()):
        # urlsplit drops tabs and line breaks silently and http.client refuses a space in the path, retried as an
        # unreachable server (or blamed on the API key) until the run stopped with "Is the server up?"
        if ord(ch) < 0x21 or ord(ch) == 0x7F:
            kind = "whitespace" if ch.isspace() else "a control character"
            raise ConfigError(f"base_url {public!r} holds {kind} at position {i + 1}: a URL cannot (percent-encode "
                              "it, e.g. a space as %20)")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ConfigError(f"base_url {public!r} is not a valid URL: its host[:port] part does not parse (a password "
                          "holding '/', '?' or '#' must be percent-encoded: %2F, %3F, %23)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"base_url must look like http(s)://host[:port]/v1; got {public!r}")
    if port == 0:
        raise ConfigError(f"base_url {public!r} names port 0, which no server listens on")
    if parts.path.rstrip("/").endswith(("/chat/completions", "/completions")):
        raise ConfigError(f"base_url {public!r} is an endpoint, not the API root: aumann adds /chat/completions "
                          "itself -- pass the URL up to it (e.g. http://host:8000/v1)")
    if "@" in url.strip()[len(parts.scheme) + 3 + len(parts.netloc):]:
        raise ConfigError(f"base_url {public!r} has an '@' after its host: a password holding '/', '?' or '#' must be "
                          "percent-encoded (%2F, %3F, %23), else the URL's host is not the one meant")
    from aumann.manifest import _PLAIN_PARAMS, _path_token

    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    key = api_key
    if key is None and (password or user):
        key = password or user
        check_api_key(key, f"the {'password' if password else 'user name'} in base_url {public!r}")
    # the whole userinfo is redacted wherever the URL is shown (redact_url); the user name is a secret to redact from
    # free text too only where it is the key or looks like one (the rule of a key-like path segment: a key prefix,
    # or 24+ letters and digits): registered as a secret, "user" of http://user:KEY@host became *** in every message
    secrets = [password] if password else []
    if user and (user == key or _path_token(user) == "***"):
        secrets.append(user)

    for piece in parts.query.split("&"):
        name, eq, value = piece.partition("=")
        if value and name.lower() not in _PLAIN_PARAMS:  # every query value but the plain ones is a secret
            secrets.append(unquote(value))
        elif not eq and _path_token(piece) == "***":  # a bare key-like piece (``?sk-…``): a key without a name
            secrets.append(unquote(piece))
    secrets += [unquote(seg) for seg in parts.path.split("/") if seg and _path_token(seg) == "***"]
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    # http.client sends the request target as ASCII: a path or query holding other characters is sent UTF-8
    # percent-encoded (as httpx does), never refused as "a header value is not valid HTTP"
    return Endpoint(scheme=parts.scheme, host=host, port=port or (443 if parts.scheme == "https" else 80),
                    base_path=quote(parts.path or "", safe=_URL_SAFE), query=quote(parts.query, safe=_URL_SAFE),
                    public=public, api_key=key, url_secrets=tuple(secrets))


#: the characters of a request target sent as they are (the rest, non-ASCII, is percent-encoded as UTF-8)
_URL_SAFE = "/%:@!$&'()*+,;=~-._?[]"


class EndpointPool:
    """Round-robin over healthy endpoints with cool-down failover (see the module docstring)."""

    def __init__(self, endpoints: Sequence[Endpoint], *, cooldown: float = 30.0, failures_to_trip: int = 3,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not endpoints:
            raise ConfigError("an LLM backend needs at least one endpoint (base_url)")
        self.endpoints = list(endpoints)
        self.cooldown = float(cooldown)
        self.failures_to_trip = int(failures_to_trip)
        self.clock = clock
        self._next = 0
        self._lock = threading.Lock()

    def pick(self, avoid: Endpoint | None = None) -> Endpoint:
        """The next healthy endpoint (not ``avoid`` when another is healthy)."""
        with self._lock:
            now = self.clock()
            healthy = [e for e in self.endpoints if e.down_until <= now]
            pool = [e for e in healthy if e is not avoid] or healthy
            if not pool:
                return min(self.endpoints, key=lambda e: e.down_until)
            ep = pool[self._next % len(pool)]
            self._next += 1
            ep.served += 1
            return ep

    def success(self, ep: Endpoint) -> None:
        if ep.failures or ep.down_until:
            with self._lock:
                ep.failures = 0
                ep.down_until = 0.0

    def failure(self, ep: Endpoint, *, hard: bool = False) -> None:
        """Count a failed attempt; ``hard`` (connection refused) takes the endpoint out at once."""
        with self._lock:
            ep.failures += 1
            if len(self.endpoints) > 1 and (hard or ep.failures >= self.failures_to_trip):
                wait = self.cooldown * 2 ** min(ep.trips, 4)
                ep.down_until = self.clock() + wait
                ep.trips += 1
                ep.failures = 0
                logger.warning("LLM endpoint %s taken out for %.0f s after failures; %d other endpoint(s) serve",
                               ep.public, wait, len(self.endpoints) - 1)

    @property
    def public(self) -> list[str]:
        return [e.public for e in self.endpoints]

    def __getstate__(self) -> dict:  # picklable for worker processes (health is not carried over)
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "clock")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self.clock = time.monotonic
        for e in self.endpoints:
            e.failures, e.down_until = 0, 0.0


__all__ = ["Endpoint", "EndpointPool", "parse_endpoint"]
