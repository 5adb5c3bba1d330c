"""Record the live Jetstream v1 stream into one JSONL file per UTC day (``YYYY-MM-DD.jsonl``).

Each message is written verbatim (one line) to the file of the UTC day of its ``time_us`` (not
``createdAt``), so an event always lands in the file its day bucket reads. Messages whose
``time_us`` cannot be read go to ``unparsed.jsonl`` and are counted; the ingester will count them
as malformed. Files are appended to, so a restarted capture continues them.

Reconnects: on a dropped connection the client waits (exponential back-off, capped) and
reconnects with ``cursor = last time_us − rewind`` (default 5 s), as Jetstream's README advises:
delivery is at-least-once, and the ingester removes the replayed duplicates.

The websocket client (``websockets``, the optional extra ``aumann[capture]``) is imported only
when a live capture starts. :func:`record` takes any iterable of messages, so the file logic is
testable without a network; the tests use a fake source (this module was not run against the live
endpoint in development, where there is no network).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

from aumann import bounded
from aumann.errors import CaptureDependencyError, IngestError
from aumann.io import ensure_output_dir, lock_output_dir, unlock_output_dir

#: the largest time_us with a calendar day (9999-12-31T23:59:59.999999Z), as in the ingester
MAX_TIME_US = 253402300799999999

DEFAULT_ENDPOINT = "wss://jetstream2.us-east.bsky.network/subscribe"
DEFAULT_COLLECTIONS = ("app.bsky.feed.post", "app.bsky.feed.repost", "app.bsky.feed.like", "app.bsky.graph.follow")


@dataclass
class CaptureStats:
    """What a capture wrote."""

    messages: int = 0
    unparsed: int = 0
    reconnects: int = 0
    last_time_us: int | None = None
    files: dict[str, int] = field(default_factory=dict)


class DailyWriter:
    """Appends raw Jetstream messages to ``out/YYYY-MM-DD.jsonl`` by the UTC day of ``time_us``.

    Keeps at most ``max_open`` files open (events near midnight arrive slightly out of order). Holds the folder's
    lock (:func:`~aumann.io.lock_output_dir`) from its making to :meth:`close`: a second capture (or any aumann
    command writing there) into the same folder would mix its day files with this one's, and stops at once with an
    :class:`~aumann.errors.OutputBusyError` instead.
    """

    def __init__(self, out_dir: str | os.PathLike[str], *, max_open: int = 2) -> None:
        self.out = ensure_output_dir(out_dir, "capture directory")
        # one writer per folder (re-entrant: `aumann bluesky capture` holds it already)
        lock_output_dir(self.out, command="aumann.data.bluesky.capture (a Python call)")
        self._locked = True
        self.max_open = max_open
        self._open: dict[str, object] = {}
        self.stats = CaptureStats()

    @staticmethod
    def day_of(time_us: int) -> str:
        """The UTC day of ``time_us``, by integer division as the ingester buckets it (``time_us / 1e6`` as a float
        rounded 9999-12-31T23:59:59.999999 up to year 10000, a ValueError, and far-future times before midnight
        into the next day's file)."""
        return (_dt.date(1970, 1, 1) + _dt.timedelta(days=time_us // 86_400_000_000)).isoformat()

    def _handle(self, name: str):
        fh = self._open.pop(name, None)
        if fh is None:
            while len(self._open) >= self.max_open:
                oldest = next(iter(self._open))
                self._open.pop(oldest).close()  # type: ignore[attr-defined]
            fh = open(self.out / name, "ab")
        self._open[name] = fh  # most recently used last
        return fh

    def write(self, message: str | bytes) -> int | None:
        """Write one message; return its ``time_us`` (``None`` if it has none)."""
        raw = message.encode() if isinstance(message, str) else bytes(message)
        raw = raw.rstrip(b"\r\n")
        time_us: int | None = None
        try:
            obj = bounded.loads_json(raw, what="a Jetstream message", error=ValueError)  # (deep nesting: unparsed)
            t = obj.get("time_us") if isinstance(obj, dict) else None
            if isinstance(t, int) and not isinstance(t, bool) and 0 < t <= MAX_TIME_US:
                time_us = t  # (a time beyond year 9999 has no day file: it goes to unparsed.jsonl)
        except (ValueError, UnicodeDecodeError):
            pass
        name = f"{self.day_of(time_us)}.jsonl" if time_us is not None else "unparsed.jsonl"
        self._handle(name).write(raw.replace(b"\n", b" ") + b"\n")
        self.stats.messages += 1
        self.stats.files[name] = self.stats.files.get(name, 0) + 1
        if time_us is None:
            self.stats.unparsed += 1
        else:
            last = self.stats.last_time_us
            self.stats.last_time_us = time_us if last is None else max(last, time_us)
        return time_us

    def close(self) -> None:
        try:
            for fh in self._open.values():
                fh.close()  # type: ignore[attr-defined]
            self._open.clear()
        finally:
            if self._locked:  # (once: a second close must not let go of a lock the caller holds)
                self._locked = False
                unlock_output_dir(self.out)

    def __enter__(self) -> DailyWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record(messages: Iterable[str | bytes], out_dir: str | os.PathLike[str], *, max_messages: int | None = None,
           deadline: float | None = None) -> CaptureStats:
    """Write ``messages`` into daily files; stop after ``max_messages`` or at ``time.monotonic() ≥ deadline``."""
    with DailyWriter(out_dir) as w:
        for m in messages:
            w.write(m)
            if max_messages is not None and w.stats.messages >= max_messages:
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
        return w.stats


def subscribe_url(endpoint: str, collections: Sequence[str], cursor: int | None) -> str:
    """The ``/subscribe`` URL with ``wantedCollections`` and ``cursor`` (unix µs)."""
    params: list[tuple[str, str]] = [("wantedCollections", c) for c in collections]
    if cursor is not None:
        params.append(("cursor", str(int(cursor))))
    return endpoint + ("?" + urlencode(params) if params else "")


def resilient_stream(
    connect: Callable[[str], Iterator[str | bytes]],
    *,
    endpoint: str = DEFAULT_ENDPOINT,
    collections: Sequence[str] = DEFAULT_COLLECTIONS,
    cursor: int | None = None,
    rewind_s: float = 5.0,
    max_reconnects: int = 1000,
    backoff_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    stats: CaptureStats | None = None,
    deadline: float | None = None,
) -> Iterator[str | bytes]:
    """Messages from ``connect(url)``, reconnecting with the cursor rewound by ``rewind_s`` seconds.

    ``connect`` opens one connection and yields its messages; any ``OSError`` / ``ConnectionError``
    (or a clean end) triggers a reconnect from ``last seen time_us − rewind``. At ``time.monotonic() ≥ deadline``
    the stream ends instead of reconnecting (and no back-off sleeps past it): the consumer checks its deadline
    only when a message arrives, so with the endpoint down ``--duration 2`` retried for hours.
    """
    stats = stats if stats is not None else CaptureStats()
    last = cursor
    attempt = 0
    while True:
        url = subscribe_url(endpoint, collections, None if last is None else last - int(rewind_s * 1e6))
        try:
            for msg in connect(url):
                attempt = 0
                try:
                    t = bounded.loads_json(msg, what="a Jetstream message", error=ValueError).get("time_us")
                    if isinstance(t, int) and (last is None or t > last):
                        last = t
                except (ValueError, AttributeError, UnicodeDecodeError):
                    pass
                yield msg
        except (OSError, ConnectionError) as exc:  # websockets' ConnectionClosed derives from neither
            del exc
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        if stats.reconnects >= max_reconnects:
            raise IngestError(f"gave up after {stats.reconnects} reconnects to {endpoint}")
        stats.reconnects += 1
        wait = min(60.0, backoff_s * 2 ** min(attempt, 6))
        sleep(wait if left is None else min(wait, left))
        attempt += 1


def websocket_connect(url: str) -> Iterator[str | bytes]:
    """Yield messages from one live websocket connection (needs ``aumann[capture]``)."""
    try:
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect
    except ImportError as exc:
        raise CaptureDependencyError(
            "live capture needs the optional 'websockets' package: pip install 'aumann[capture]'"
        ) from exc
    try:
        with connect(url, max_size=None, open_timeout=30) as ws:
            yield from ws
    except WebSocketException as exc:  # closed connection, failed handshake, bad status: reconnect
        raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc


def capture(out_dir: str | os.PathLike[str], *, collections: Sequence[str] = DEFAULT_COLLECTIONS,
            duration_s: float | None = None, endpoint: str = DEFAULT_ENDPOINT, cursor: int | None = None,
            rewind_s: float = 5.0, connect: Callable[[str], Iterator[str | bytes]] | None = None,
            max_messages: int | None = None) -> CaptureStats:
    """Record the live stream into ``out_dir`` for ``duration_s`` seconds (forever if ``None``).

    ``connect(url)`` yields one connection's messages (default: a websocket); ``max_messages``
    stops after that many messages.
    """
    if connect is None:
        try:
            import websockets  # noqa: F401
        except ImportError as exc:
            raise CaptureDependencyError(
                "live capture needs the optional 'websockets' package: pip install 'aumann[capture]'"
            ) from exc
        connect = websocket_connect
    stats = CaptureStats()
    deadline = None if duration_s is None else time.monotonic() + duration_s
    stream = resilient_stream(connect, endpoint=endpoint, collections=collections, cursor=cursor,
                              rewind_s=rewind_s, stats=stats, deadline=deadline)
    written = record(stream, out_dir, deadline=deadline, max_messages=max_messages)
    written.reconnects = stats.reconnects
    return written


__all__ = [
    "DEFAULT_COLLECTIONS",
    "DEFAULT_ENDPOINT",
    "CaptureDependencyError",
    "CaptureStats",
    "DailyWriter",
    "capture",
    "record",
    "resilient_stream",
    "subscribe_url",
    "websocket_connect",
]
