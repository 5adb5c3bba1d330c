"""Request- and token-rate limits for decision backends (token buckets, thread-safe).

:class:`TokenBucket` refills at ``rate`` units per second up to ``capacity``; ``acquire(cost)``
waits until it holds ``min(cost, capacity)`` units, then takes ``cost`` (the level may go negative,
so a request larger than the capacity still passes, and the debt delays the next ones). In any
window of W seconds at most ``capacity + rate·W`` units (plus one request's overshoot) pass.

:class:`RateLimiter` combines a request bucket (``rpm``: capacity one request, so requests are
paced evenly at rpm/60 per second -- providers enforce per-minute limits over shorter windows) and a
token bucket (``tpm``: capacity one second's worth; a request is charged its estimated prompt
tokens plus the expected completion, then corrected with the server's count by
:meth:`RateLimiter.settle`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from aumann.errors import ConfigError


class TokenBucket:
    """A thread-safe token bucket (see the module docstring)."""

    def __init__(self, rate: float, capacity: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not (math.isfinite(rate) and rate > 0) or not (math.isfinite(capacity) and capacity > 0):
            raise ConfigError(f"a rate limit needs a finite positive rate and capacity; got {rate!r}, {capacity!r}")
        self.rate = float(rate)
        self.capacity = float(capacity)
        self.clock = clock
        self.level = float(capacity)
        self.stamp = clock()
        self._cond = threading.Condition()
        self._stopped = False  # set by stop(): the run is being interrupted, nobody waits for a slot any more

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def acquire(self, cost: float = 1.0) -> float:
        """Take ``cost`` units, waiting as needed; returns the seconds waited. After :meth:`stop` (the run is being
        interrupted) a caller waiting here, or arriving, raises ``KeyboardInterrupt`` instead of waiting for its turn
        (with ``--rpm 2`` the fourth of four queued requests waited 1.5 minutes, which Ctrl-C had to sit out)."""
        need = min(float(cost), self.capacity)
        waited = 0.0
        with self._cond:
            while True:
                if self._stopped:
                    raise KeyboardInterrupt("the run was interrupted; this LLM request is not sent")
                self._refill()
                if self.level >= need:
                    self.level -= float(cost)
                    return waited
                pause = (need - self.level) / self.rate
                self._cond.wait(pause)
                waited += pause

    def __getstate__(self) -> dict:  # picklable for worker processes: a full bucket there
        return {"rate": self.rate, "capacity": self.capacity}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["rate"], state["capacity"])

    def stop(self) -> None:
        """Wake every caller waiting in :meth:`acquire`, which then raises (the run is being interrupted)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def resume(self) -> None:
        """Hand out units again (a new batch after an interrupted one)."""
        with self._cond:
            self._stopped = False

    def adjust(self, delta: float) -> None:
        """Give back (``delta > 0``) or take (``delta < 0``) units after the fact."""
        with self._cond:
            self._refill()
            self.level = min(self.capacity, self.level + float(delta))
            self._cond.notify_all()


class RateLimiter:
    """``rpm`` requests and ``tpm`` tokens per minute (either may be ``None``: unlimited)."""

    def __init__(self, rpm: float | None = None, tpm: float | None = None) -> None:
        for name, v in (("rpm", rpm), ("tpm", tpm)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
                                  or v <= 0):
                raise ConfigError(f"{name} must be a positive number (per minute) or None; got {v!r}")
        self.rpm, self.tpm = rpm, tpm
        self.requests = TokenBucket(rpm / 60.0, 1.0) if rpm else None
        self.tokens = TokenBucket(tpm / 60.0, max(1.0, tpm / 60.0)) if tpm else None

    @property
    def active(self) -> bool:
        return self.requests is not None or self.tokens is not None

    def acquire(self, tokens: float) -> None:
        """Wait for one request slot and ``tokens`` tokens (an estimate; see :meth:`settle`)."""
        if self.requests is not None:
            self.requests.acquire(1.0)
        if self.tokens is not None:
            self.tokens.acquire(tokens)

    def stop(self) -> None:
        """The run is being interrupted: a request waiting for its slot raises (see :meth:`TokenBucket.stop`)."""
        for bucket in (self.requests, self.tokens):
            if bucket is not None:
                bucket.stop()

    def resume(self) -> None:
        for bucket in (self.requests, self.tokens):
            if bucket is not None:
                bucket.resume()

    def settle(self, estimated: float, actual: float) -> None:
        """Correct the token bucket once the server reported the request's real token count."""
        if self.tokens is not None and actual != estimated:
            # at most one minute of debt: a server reporting absurd counts cannot stall the run for days
            self.tokens.adjust(max(estimated - actual, -float(self.tpm)))

    def __repr__(self) -> str:
        return f"RateLimiter(rpm={self.rpm}, tpm={self.tpm})"


__all__ = ["RateLimiter", "TokenBucket"]
