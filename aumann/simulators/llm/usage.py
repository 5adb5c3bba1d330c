"""Usage accounting of decision backends: counters, latency quantiles, cost, fork scope, the ledger.

One :class:`Usage` per backend (``backend.usage``) is shared by every fork of a model (``deepcopy``
returns it) and is safe to update from many threads. What a run directory reports
(``manifest.json`` → ``llm_usage``, ``report.md``, the progress bar) is :meth:`Usage.manifest_dict`,
exactly the keys of :data:`MANIFEST_KEYS`, plain numbers:

* ``calls`` / ``decisions`` -- HTTP requests sent and decisions returned in the factual runs;
  ``fork_calls`` / ``fork_decisions`` -- the same inside forks and re-simulations (deletion oracle,
  re-simulation game): :meth:`Usage.fork_scope` routes them there. ``calls + fork_calls`` is what
  the server saw.
* ``cache_hits`` (decisions served by the response cache, or by an identical request already in
  flight), ``retries`` (attempts repeated after a retryable failure), ``failures`` (failed
  attempts), ``prompt_tokens`` / ``completion_tokens`` (as reported by the server, all runs and
  forks), ``planned_calls`` (requests that missed the cache: sent, or counted only in a dry run),
  ``latency_p50_s`` / ``latency_p95_s`` (per answered request, from a log-binned histogram, 1 %
  resolution), ``cost_usd`` (tokens × the model's price; 0 when the price is unknown),
  ``invalid_decisions`` (abstentions: decisions whose reply stayed invalid after the varied retry, or
  whose requests all failed; factual runs and forks), ``bad_usage`` (replies whose token counts were
  refused -- negative, non-integer, absurd -- and charged at the request's upper bound instead).

The **ledger** (``<out>/llm-usage.json``, :func:`load_ledger` / :func:`save_ledger`) keeps the whole
account of a run directory, so a resumed run adds to what earlier invocations spent. The spend
(requests, tokens, cost, failures, retries, latencies) counts everything that was sent, across
invocations; the counts that describe the runs (:data:`RUN_COUNTS`: decisions, abstentions, cache
hits, fallbacks) count each run once: an invocation that stops leaves out those of the run it did not
finish (:func:`unfinished`), which the resume asks again -- from the cache -- and counts then; and the
ledger keeps the run counts of each run written (``run_counts``, :func:`written`), so a run written again
(``--strict`` recomputes a run whose optional stages did not all finish; a corrupt run is recomputed)
replaces its earlier counts instead of adding to them.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from aumann import bounded
from aumann.errors import ConfigError
from aumann.io import write_json

#: The keys of ``manifest.json`` → ``llm_usage`` (and of :meth:`Usage.manifest_dict`), in order.
MANIFEST_KEYS = ("calls", "cache_hits", "retries", "failures", "prompt_tokens", "completion_tokens", "decisions",
                 "planned_calls", "latency_p50_s", "latency_p95_s", "cost_usd", "fork_decisions", "fork_calls",
                 "invalid_decisions", "bad_usage")

#: The counters that describe the runs (each decision of a run counted once), as opposed to the spend.
RUN_COUNTS = ("decisions", "fork_decisions", "invalid_decisions", "cache_hits", "fallbacks")

_BIN = math.log(1.01)  # 1 % wide latency bins
_FORKED = {"calls": "fork_calls", "decisions": "fork_decisions", "rounds": "fork_rounds"}


class LatencyHistogram:
    """Mergeable latency histogram: bins 1 % wide (log scale); quantiles to about 1 %."""

    __slots__ = ("bins", "count")

    def __init__(self, bins: Mapping[int, int] | None = None) -> None:
        self.bins: dict[int, int] = {int(k): int(v) for k, v in (bins or {}).items()}
        self.count = sum(self.bins.values())

    def add(self, seconds: float) -> None:
        b = math.floor(math.log(max(float(seconds), 1e-6)) / _BIN)
        self.bins[b] = self.bins.get(b, 0) + 1
        self.count += 1

    def merge(self, other: LatencyHistogram, sign: int = 1) -> None:
        for b, c in other.bins.items():
            n = self.bins.get(b, 0) + sign * c
            if n:
                self.bins[b] = n
            else:
                self.bins.pop(b, None)
        self.count += sign * other.count

    def quantile(self, q: float) -> float:
        """The q-quantile in seconds (bin centre); 0.0 when empty."""
        if self.count <= 0:
            return 0.0
        target = q * self.count
        seen = 0
        for b in sorted(self.bins):
            seen += self.bins[b]
            if seen >= target:
                return math.exp((b + 0.5) * _BIN)
        return math.exp((max(self.bins) + 0.5) * _BIN)

    def copy(self) -> LatencyHistogram:
        return LatencyHistogram(self.bins)


@dataclass
class Usage:
    """Per-backend accounting, safe to read at any time and to update from many threads.

    Attributes:
        calls: HTTP requests sent in the factual runs (every attempt counts, successful or not).
        fork_calls: the same inside forks and re-simulations (see :meth:`fork_scope`).
        prompt_tokens, completion_tokens: tokens reported by the server (factual runs and forks).
        cache_hits: decisions served from the response cache (or by an identical in-flight request).
        failures: failed attempts (HTTP errors, timeouts, malformed, invalid or oversized replies).
        retries: attempts repeated after a retryable failure.
        fallbacks: decisions served by the fallback backend after giving up.
        decisions, fork_decisions: decisions returned to callers (factual runs / forks).
        planned_calls: requests that missed the cache (sent, or in a dry run only counted);
            ``fork_planned_calls`` the part of them made inside forks.
        planned_prompt_tokens, planned_completion_tokens: a dry run's estimates (characters / 4).
        rounds, fork_rounds: Σ over decision batches of ⌈requests sent / concurrency⌉ (the ideal
            wall time of a run is ``rounds`` × the latency).
        cost_usd: dollars spent (tokens × the model's price; 0 when unknown).
        invalid_decisions: abstentions (no usable answer after the varied retry, or no answer at all).
        bad_usage: replies whose reported token counts were refused (charged at the upper bound).
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0
    failures: int = 0
    retries: int = 0
    fallbacks: int = 0
    decisions: int = 0
    planned_calls: int = 0
    planned_prompt_tokens: int = 0
    planned_completion_tokens: int = 0
    fork_calls: int = 0
    fork_decisions: int = 0
    fork_planned_calls: int = 0
    rounds: int = 0
    fork_rounds: int = 0
    invalid_decisions: int = 0
    bad_usage: int = 0
    cost_usd: float = 0.0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _fork_depth: int = field(default=0, repr=False, compare=False)

    # ------------------------------------------------------------------ reading
    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def total_calls(self) -> int:
        """Requests the server saw: ``calls + fork_calls``."""
        return self.calls + self.fork_calls

    @property
    def total_decisions(self) -> int:
        return self.decisions + self.fork_decisions

    @property
    def in_fork(self) -> bool:
        return self._fork_depth > 0

    def counters(self) -> dict[str, int | float]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not f.name.startswith("_") and f.name != "latency"}

    def as_dict(self) -> dict[str, int | float]:
        """Every counter plus ``total_tokens`` and the latency quantiles."""
        d = self.counters()
        d["total_tokens"] = self.total_tokens
        d["latency_p50_s"] = round(self.latency.quantile(0.5), 6)
        d["latency_p95_s"] = round(self.latency.quantile(0.95), 6)
        return d

    def manifest_dict(self) -> dict[str, int | float]:
        """Exactly :data:`MANIFEST_KEYS`, plain ints and floats (what ``manifest.json`` records)."""
        with self._lock:
            d = self.as_dict()
            d["cost_usd"] = round(float(self.cost_usd), 9)
        return {k: (float(d[k]) if k.startswith("latency") or k == "cost_usd" else int(d[k])) for k in MANIFEST_KEYS}

    # ------------------------------------------------------------------ writing
    def add(self, **counts: int | float) -> None:
        """Add to counters; inside :meth:`fork_scope` ``calls``/``decisions``/``rounds`` go to ``fork_*``."""
        with self._lock:
            forked = self._fork_depth > 0
            for k, v in counts.items():
                if not v:
                    continue
                if forked:
                    if k == "planned_calls":
                        self.fork_planned_calls += v
                    k = _FORKED.get(k, k)
                setattr(self, k, getattr(self, k) + v)

    def add_latency(self, seconds: float) -> None:
        with self._lock:
            self.latency.add(seconds)

    @contextlib.contextmanager
    def fork_scope(self) -> Iterator[Usage]:
        """Count the calls and decisions made inside this block as ``fork_calls``/``fork_decisions``."""
        with self._lock:
            self._fork_depth += 1
        try:
            yield self
        finally:
            with self._lock:
                self._fork_depth -= 1

    def merge(self, other: Usage | None, sign: int = 1) -> Usage:
        """Add (``sign=-1``: subtract) another account's counters and latencies into this one."""
        if other is None or other is self:
            return self
        with self._lock:
            for k, v in other.counters().items():
                setattr(self, k, getattr(self, k) + sign * v)
            self.latency.merge(other.latency, sign)
        return self

    def copy(self) -> Usage:
        out = Usage(**self.counters())
        out.latency = self.latency.copy()
        return out

    def __sub__(self, other: Usage) -> Usage:
        return self.copy().merge(other, sign=-1)

    def run_counts(self) -> Usage:
        """An account holding only this one's :data:`RUN_COUNTS` (no spend, no latencies)."""
        with self._lock:
            return Usage(**{k: getattr(self, k) for k in RUN_COUNTS})

    def reset(self) -> dict[str, int | float]:
        """Zero every counter (e.g. between runs); returns the counts before the reset."""
        with self._lock:
            before = self.as_dict()
            for f in fields(self):
                if not f.name.startswith("_") and f.name != "latency":
                    setattr(self, f.name, type(getattr(self, f.name))())
            self.latency = LatencyHistogram()
        return before

    # ------------------------------------------------------------------ persistence
    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {**self.counters(), "latency_bins": {str(k): v for k, v in sorted(self.latency.bins.items())}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Usage:
        """An account from a ledger's ``usage`` object (:class:`~aumann.simulators.llm.records.LedgerUsage`:
        counters integers in [0, 2**53], cost finite and non-negative, latency bins bounded).

        Raises:
            ValueError: a field out of range or of the wrong type (named).
        """
        from pydantic import ValidationError

        from aumann.simulators.llm.records import LedgerUsage, check_count

        if not isinstance(data, Mapping):
            raise ValueError(f"usage must be an object; got {type(data).__name__}")
        try:
            checked = LedgerUsage.model_validate(dict(data))
        except ValidationError as exc:
            e = exc.errors()[0]
            raise ValueError(f"{'.'.join(map(str, e['loc']))}: {e['msg']} ({e.get('input')!r:.40})") from None
        names = {f.name for f in fields(cls) if not f.name.startswith("_") and f.name not in ("latency", "cost_usd")}
        out = cls(**{k: check_count(k, v) for k, v in data.items() if k in names})
        out.cost_usd = checked.cost_usd
        out.latency = LatencyHistogram({int(k): int(v) for k, v in checked.latency_bins.items()})
        return out

    def __deepcopy__(self, memo: dict) -> Usage:
        return self  # shared across forks: one account per backend

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


LEDGER_NAME = "llm-usage.json"


def load_ledger(path: str | os.PathLike[str]) -> Usage:
    """The account stored at ``path`` (a fresh :class:`Usage` when the file does not exist).

    Raises:
        ConfigError: the file exists but is not a usage ledger (the message names it).
    """
    p = Path(path)
    if not p.exists():
        return Usage()
    try:
        data = bounded.read_json(p, what="LLM usage ledger", error=ValueError)
        if not isinstance(data, dict) or not isinstance(data.get("usage"), dict):
            raise ValueError("no 'usage' object")
        return Usage.from_json(data["usage"])
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"LLM usage ledger {str(p)!r} is unreadable ({exc}); it records what earlier "
                          f"invocations spent -- repair or delete it to start counting afresh") from None


def save_ledger(path: str | os.PathLike[str], usage: Usage, **extra: Any) -> Path:
    """Write ``usage`` (and JSON-able ``extra`` fields) to ``path`` atomically."""
    return write_json(path, {"usage": usage.to_json(), "manifest": usage.manifest_dict(), **extra}, indent=1)


def unfinished(exc: BaseException, delta: Usage | None) -> None:
    """Note on ``exc`` (``exc.llm_unfinished``) the :data:`RUN_COUNTS` of a run that it stopped before the run
    was written: the resume computes that run again and counts its decisions then, so the ledger leaves them
    out (its spend stays counted)."""
    if delta is None:
        return
    prev = getattr(exc, "llm_unfinished", None)
    part = delta.run_counts()
    try:
        exc.llm_unfinished = part.merge(prev) if isinstance(prev, Usage) else part
    except AttributeError:  # pragma: no cover - an exception type without a __dict__
        pass


def written(exc: BaseException, runs: Mapping[int, Usage]) -> None:
    """Note on ``exc`` (``exc.llm_written``: run index → :data:`RUN_COUNTS`) the counts of the runs written before
    it stopped the study: the ledger keeps each run's counts, so a run written again later (``--strict`` redoes
    a run whose optional stage failed) replaces them instead of adding to them."""
    prev = getattr(exc, "llm_written", None)
    merged = {**(prev if isinstance(prev, dict) else {}), **{r: u.run_counts() for r, u in runs.items()}}
    try:
        exc.llm_written = merged
    except AttributeError:  # pragma: no cover - an exception type without a __dict__
        pass


def usage_of(obj: Any) -> Usage | None:
    """The :class:`Usage` account of a backend or a model (``obj.usage``), or ``None``."""
    u = getattr(obj, "usage", None)
    return u if isinstance(u, Usage) else None


def describe(usage: Usage, *, model: str | None = None, price_known: bool = True) -> str:
    """One line for the progress bar and the console: calls, tokens, cost.

    ``LLM 310 call(s) sent for 481 request(s) so far, 40 cached, …``: the requests are those that missed the cache
    up to now (``planned_calls``; in flight included), not the run's total, which no one knows ahead (the model's
    answers shape the later prompts; ``--dry-run`` estimates it by playing the whole study). The line read
    ``310 call(s) / 481 planned``, a fraction whose denominator grew as the run went (310, then 481)."""
    tok = usage.total_tokens
    tok_s = f"{tok / 1000:.1f}k" if tok >= 1000 else str(tok)
    cost = f"${usage.cost_usd:.4f}" if price_known else "cost n/a (price unknown)"
    calls = f"{usage.total_calls} call(s) sent" + (f" ({usage.fork_calls} in forks)" if usage.fork_calls else "")
    return (f"LLM {calls} for {usage.planned_calls} request(s) so far, {usage.cache_hits} cached, {tok_s} tok, "
            f"{cost}"
            + (f", {usage.retries} retries" if usage.retries else "")
            + (f", {usage.invalid_decisions} invalid" if usage.invalid_decisions else ""))


def invalid_rate(usage: Mapping[str, Any] | Usage) -> float:
    """Abstentions over all decisions asked (answered + abstained; factual runs and forks)."""
    get = (lambda k: getattr(usage, k, 0)) if isinstance(usage, Usage) else (lambda k: usage.get(k, 0) or 0)
    bad = get("invalid_decisions")
    total = get("decisions") + get("fork_decisions") + bad
    return float(bad) / total if total else 0.0


__all__ = ["LEDGER_NAME", "MANIFEST_KEYS", "RUN_COUNTS", "LatencyHistogram", "Usage", "describe", "invalid_rate",
           "load_ledger", "save_ledger", "unfinished", "usage_of", "written"]
