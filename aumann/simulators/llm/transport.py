"""The HTTP layer of the OpenAI-compatible backend: one POST (or GET) and its raw reply.

The default :class:`StdlibTransport` uses :mod:`http.client` with one keep-alive connection per
worker thread and endpoint: about 0.2–0.5 ms of CPU per request, where the ``openai`` SDK spends
~3.5 ms and an ``httpx`` client ~2 ms (measured on the project's 2-core machines; see
``benchmarks/bench_llm_client.py``). It does not read proxy settings: when the environment
configures a proxy for an endpoint (``HTTPS_PROXY``, ...), the backend uses :class:`HttpxTransport`
instead, which honours them. :class:`HttpxTransport` also wraps any ``httpx`` transport, e.g.
``httpx.MockTransport(handler)`` in tests.

Both bound a request by its ``timeout`` in all -- the status line, the headers and the body arriving within it,
not each socket read (a server trickling any of them a byte at a time cannot hold a request longer) -- and
read at most ``max_bytes`` of a reply body: a larger body raises :class:`ReplyTooLarge` (the
connection is dropped, nothing is stored). Network failures raise :class:`TransportFailure` with a
kind (``"timeout"`` or ``"connect"``); a keep-alive connection the server closed while idle is
re-opened once, silently (the server never saw that request).
"""

from __future__ import annotations

import functools
import http.client
import io
import select
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aumann.errors import ReplyTooLarge, TransportFailure
from aumann.simulators.llm.endpoints import Endpoint


@dataclass(frozen=True)
class Reply:
    """An HTTP reply: status, lower-cased headers, body bytes (at most the cap)."""

    status: int
    headers: Mapping[str, str]
    body: bytes




class _DeadlineIO(io.RawIOBase):
    """The socket reader of one response: every read waits at most until the request's deadline. (A socket's own
    timeout bounds each read alone: a server trickling its status line and headers, a byte at a time, held
    ``getresponse()`` for as long as it liked -- up to 100 header lines of 64 KiB each.)"""

    def __init__(self, raw: Any, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._raw, self._sock, self._deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's time is up")
        self._sock.settimeout(left)
        return self._raw.readinto(b)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()  # the socket reader's close: the socket is really closed once no reader holds it
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    """An :class:`http.client.HTTPResponse` that reads through :class:`_DeadlineIO` (status line, headers, body)."""

    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = io.BufferedReader(_DeadlineIO(self.fp.detach(), sock, deadline))


def _readable(sock: socket.socket) -> bool:
    """Whether an idle socket has something to read (bytes, or the end of the stream); ``True`` when it cannot
    be told (so it is not reused)."""
    try:
        if getattr(sock, "pending", None) is not None and sock.pending():  # TLS: decrypted, not yet read
            return True
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def _ssl_context() -> ssl.SSLContext:
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - certifi comes with httpx
        return ssl.create_default_context()


class StdlibTransport:
    """:mod:`http.client` with a keep-alive connection per (thread, endpoint)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._ssl: ssl.SSLContext | None = None

    def _conn(self, ep: Endpoint, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        key = (ep.scheme, ep.host, ep.port)
        conn = conns.get(key)
        if conn is not None and conn.sock is not None and _readable(conn.sock):
            # an idle keep-alive connection with something to read: the server closed it, or sent bytes no request
            # asked for (an extra reply), which the next request would read as its own answer -- open another
            conn.close()
            conn = conns[key] = None
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, False
        host = ep.host.strip("[]")
        if ep.scheme == "https":
            if self._ssl is None:
                self._ssl = _ssl_context()
            conn = http.client.HTTPSConnection(host, ep.port, timeout=timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(host, ep.port, timeout=timeout)
        conns[key] = conn
        return conn, True

    def _drop(self, ep: Endpoint) -> None:
        conns = getattr(self._local, "conns", {})
        conn = conns.pop((ep.scheme, ep.host, ep.port), None)
        if conn is not None:
            conn.close()

    def request(self, method: str, ep: Endpoint, path: str, body: bytes | None, headers: Mapping[str, str],
                timeout: float, max_bytes: int) -> Reply:
        """One request, bounded by ``timeout`` in all (not per socket operation: a server trickling its reply a
        byte at a time would otherwise hold it for as long as it likes)."""
        deadline = time.monotonic() + timeout
        for attempt in (0, 1):
            conn, fresh = self._conn(ep, max(1e-3, deadline - time.monotonic()))
            conn.response_class = functools.partial(_DeadlineResponse, deadline=deadline)
            try:
                conn.request(method, path, body=body, headers=dict(headers))
                resp = conn.getresponse()
            except _STALE as exc:
                self._drop(ep)
                if not fresh and attempt == 0:
                    continue  # an idle keep-alive connection the server closed: reopen once
                raise TransportFailure("connect", f"connection to {ep.public} lost: {exc!r}") from None
            except TimeoutError:
                self._drop(ep)
                raise TransportFailure("timeout", f"timed out after {timeout:g}s") from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop(ep)
                raise TransportFailure("connect", f"cannot connect to {ep.public}: {exc!r}") from None
            except ValueError:  # http.client refusing a header value; its text would hold the header (the key)
                self._drop(ep)
                raise TransportFailure("connect", f"cannot send a request to {ep.public}: a header value is not "
                                       "valid HTTP (a control character in the API key?)") from None
            try:
                length = resp.getheader("content-length")
                if length is not None and length.isdigit() and int(length) > max_bytes:
                    self._drop(ep)
                    raise ReplyTooLarge(int(length))
                buf = bytearray()
                while True:  # to the end (a chunked body too, so the connection can be reused), within the deadline
                    if deadline <= time.monotonic():
                        raise TimeoutError  # still arriving when the request's whole time is up
                    chunk = resp.read1(1 << 16)  # each socket read waits until the deadline at most (_DeadlineIO)
                    if not chunk:
                        break
                    buf += chunk
                    if len(buf) > max_bytes:
                        self._drop(ep)
                        raise ReplyTooLarge(None)
                if resp.length:  # read1 ends quietly where the server closed before its Content-Length's end
                    raise http.client.IncompleteRead(bytes(buf), resp.length)
                resp.read()  # b"": marks the response closed (read1 does not at a Content-Length's end)
                data = bytes(buf)
                hdrs = {k.lower(): v for k, v in resp.getheaders()}
            except TimeoutError:
                self._drop(ep)
                raise TransportFailure("timeout", f"the reply took longer than {timeout:g}s in all") from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop(ep)
                raise TransportFailure("connect", f"reply from {ep.public} cut off: {exc!r}") from None
            if resp.will_close:
                self._drop(ep)
            return Reply(resp.status, hdrs, data)
        raise TransportFailure("connect", f"cannot reach {ep.public}")  # pragma: no cover - loop returns

    def close(self) -> None:
        for conn in getattr(self._local, "conns", {}).values():
            conn.close()
        self._local = threading.local()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()


#: the deadline of the httpx request running on this thread (read by :class:`_DeadlineBackend`'s streams)
_httpx_deadline = threading.local()


def _left(timeout: float | None, exc: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of this thread's httpx request (raise ``exc`` when nothing is left)."""
    at = getattr(_httpx_deadline, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise exc("the request's time is up")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """An httpcore network stream whose every read and write waits at most until the request's deadline (httpx's
    own timeouts bound each socket operation alone: a trickled status line or header block held a request for
    hours)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        import httpcore

        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        import httpcore

        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        import httpcore

        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend:
    """An httpcore network backend whose streams are :class:`_DeadlineStream` s."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **kwargs: Any) -> Any:
        import httpcore

        return _DeadlineStream(self._inner.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout), **kwargs))

    def connect_unix_socket(self, path: str, timeout: float | None = None, **kwargs: Any) -> Any:
        import httpcore

        return _DeadlineStream(self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout), **kwargs))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _bound_reads(client: Any) -> None:
    """Put a :class:`_DeadlineBackend` under the connection pools of ``client``'s transports (the default one and
    the proxies' mounts) where they are httpcore pools; a transport of another kind (``MockTransport``) has no
    socket to bound, and is left alone (the body is still cut at the deadline between chunks)."""
    transports = [getattr(client, "_transport", None), *(getattr(client, "_mounts", None) or {}).values()]
    for t in transports:
        pool = getattr(t, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)


class HttpxTransport:
    """An ``httpx.Client`` (or any ``httpx`` transport, e.g. ``MockTransport``) as the HTTP layer."""

    def __init__(self, transport: Any = None, *, client: Any = None, trust_env: bool = True) -> None:
        import httpx

        self._httpx = httpx
        self.client = client if client is not None else httpx.Client(transport=transport, timeout=None,
                                                                       trust_env=trust_env)
        _bound_reads(self.client)

    def request(self, method: str, ep: Endpoint, path: str, body: bytes | None, headers: Mapping[str, str],
                timeout: float, max_bytes: int) -> Reply:
        httpx = self._httpx
        deadline = _httpx_deadline.at = time.monotonic() + timeout
        try:
            with self.client.stream(method, ep.origin + path, content=body, headers=dict(headers),
                                    timeout=timeout) as r:
                length = r.headers.get("content-length")
                if length is not None and length.isdigit() and int(length) > max_bytes:
                    raise ReplyTooLarge(int(length))
                buf = bytearray()
                for chunk in r.iter_bytes():
                    buf += chunk
                    if len(buf) > max_bytes:
                        raise ReplyTooLarge(None)
                    if time.monotonic() > deadline:  # httpx's timeout is per read: a trickle would never end
                        raise TimeoutError  # still arriving when the request's whole time is up
                return Reply(r.status_code, {k.lower(): v for k, v in r.headers.items()}, bytes(buf))
        except (httpx.TimeoutException, TimeoutError):
            raise TransportFailure("timeout", f"timed out after {timeout:g}s") from None
        except httpx.TransportError as exc:
            raise TransportFailure("connect", f"cannot connect to {ep.public}: {exc!r}") from None
        finally:
            _httpx_deadline.at = None

    def close(self) -> None:
        self.client.close()


__all__ = ["HttpxTransport", "Reply", "ReplyTooLarge", "StdlibTransport", "TransportFailure"]
