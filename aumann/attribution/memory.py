"""Memory budgets for batched work: how much one batch may use, and what one item of it costs.

Every batched path — coalitions of the generic masking game, points of the path integral, steps of
:func:`~aumann.attribution.indicators.evaluate`, forks of the deletion study — sizes its batches as

    items per batch = budget // bytes per item

where ``budget`` is the method's ``memory_budget=`` (bytes; lowered to half the memory available on the
host, or 90 % of a device's free memory, when it asks for more) or, by default, ``min(256 MiB, half the
memory available on the machine)`` on the host (``MemAvailable`` of ``/proc/meminfo``) and a share of
the free memory on a CUDA device; and ``bytes per item`` is *measured*: the indicator runs once on one
item and once on a few, and the peak memory it allocates (the process's peak resident set after
returning freed heap pages to the system, or the device's peak allocation) gives the cost of one more
item — a pairwise (N × N) indicator costs N² floats per coalition however small its input is. The
static estimate (a few copies of the input) is a floor; the measurement is rounded up to a power of
two, so noise in it never changes a batch size. An item that alone needs more than the limit (the
requested budget, else half the available memory) raises :class:`~aumann.errors.MemoryBudgetError`
naming its size: a user indicator can never exhaust memory through our batching.

Measurements are cached per indicator and input shape, so a probe costs two small evaluations once.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from aumann.errors import MemoryBudgetError

MiB = 2**20
#: the default size of one batch on the host: bigger batches buy nothing once the vector units are busy
DEFAULT_TARGET = 256 * MiB
#: the share of the host's available memory one item may use at most (without an explicit budget)
HOST_SHARE = 0.5
#: the share of a device's free memory one batch may use (the rest is left to the caller's model)
DEVICE_SHARE = 0.5
#: items per probe batch (the second measurement)
PROBE_ITEMS = 4
#: the measurement is scaled by this before rounding up (allocator slack, temporaries a probe misses)
SAFETY = 1.25

_LOCK = threading.Lock()
_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple, int]] = weakref.WeakKeyDictionary()
_LIBC: Any = None


_AVAILABLE: tuple[float, int | None] = (-math.inf, None)  # (when read, bytes): re-read at most once a second


def available_host() -> int | None:
    """Bytes of memory available on the host (``MemAvailable``), or None where it cannot be read (read at most
    once a second: a small call should not pay for /proc/meminfo every time)."""
    global _AVAILABLE
    now = time.monotonic()
    if now - _AVAILABLE[0] < 1.0:
        return _AVAILABLE[1]
    _AVAILABLE = (now, _read_available())
    return _AVAILABLE[1]


def _read_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def limits(device: Any = None, requested: int | None = None, target: int = DEFAULT_TARGET) -> tuple[int, int]:
    """(batch target, per-item limit) in bytes for ``device`` (None: the host).

    With ``requested`` (a method's ``memory_budget=``) both are that, lowered to what the machine can give
    (the limit below, where it can be read): a budget beyond the machine's memory would size batches that
    cannot be allocated, and the process would be killed instead of batching. Otherwise the target is
    ``min(target, limit)`` and the limit half the available memory (host) or the given share of the
    free memory (CUDA, at most 8 GiB for the target, at least 64 MiB).
    """
    dev = getattr(device, "type", device)
    if dev == "cuda":
        import torch

        try:
            free, _total = torch.cuda.mem_get_info(device)
        except (RuntimeError, AssertionError):  # no CUDA here (the budget of a method built for another machine)
            if requested is None:
                raise
            return int(requested), int(requested)
        hard = int(0.9 * free)
        if requested is not None:
            return min(int(requested), hard), min(int(requested), hard)
        return int(max(2**26, min(DEVICE_SHARE * free, 8 * 2**30))), hard
    avail = available_host()
    if requested is not None:
        got = int(requested) if not avail else min(int(requested), max(2**16, int(HOST_SHARE * avail)))
        return got, got
    hard = int(HOST_SHARE * avail) if avail else 4 * 2**30
    return max(2**16, min(int(target), hard)), hard


# ---------------------------------------------------------------------- measuring one item
def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 - glibc only
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC


def release_freed() -> None:
    """Give the heap's freed pages back to the system (glibc's ``malloc_trim``; nothing elsewhere), after a
    collection. Between the stages of a large study: arrays under glibc's mmap threshold (up to 32 MiB once it
    adapts, e.g. every 8 MB N-vector of a 10⁶-agent run) are freed into the heap, where the resident set keeps
    them and the next stage's peak lands on top. Inside :func:`long_lived_set_aside` the collection leaves
    out the objects set aside. The pages read of spilled arrays (:func:`aumann.io.spill`) are dropped too."""
    import gc

    from aumann.io import drop_spilled

    gc.collect()
    if _libc():
        _libc().malloc_trim(0)
    drop_spilled()  # what was read of the arrays spilled to disk (aumann.io.spill) goes back to the page cache


_SET_ASIDE = [0]  # how many set_aside scopes are open (the gc's permanent generation is the process's)
_SET_ASIDE_LOCK = threading.Lock()


@contextlib.contextmanager
def long_lived_set_aside() -> Iterator[None]:
    """Inside: the objects alive on entry (e.g. a 10⁶-agent simulation's agents) are left out of every
    garbage collection (``gc.freeze``, after one last collection), so that :func:`release_freed` traverses only
    what was made since. A full collection had cost ~0.26 s at 2·10⁵ agents, 18 times per run (4.7 of a
    41 s run). On exit (of the last scope open) they are handed back to the collector (``gc.unfreeze``): a
    cycle among them (a model and its agents) is then collected as before. Objects set aside still die when
    their last reference goes; only their cyclic garbage waits for the exit."""
    import gc

    with _SET_ASIDE_LOCK:
        if _SET_ASIDE[0] == 0:
            gc.collect()
            gc.freeze()
        _SET_ASIDE[0] += 1
    try:
        yield
    finally:
        with _SET_ASIDE_LOCK:
            _SET_ASIDE[0] -= 1
            if _SET_ASIDE[0] == 0:
                gc.unfreeze()


def _rss_probe_available() -> bool:
    return bool(_libc()) and os.path.exists("/proc/self/clear_refs")


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise OSError(key)


def peak_bytes(run: Callable[[], Any], device: Any = None) -> int | None:
    """Peak memory ``run()`` allocates above what was in use when it started (None: cannot be measured here).

    Host: the peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) after glibc's
    ``malloc_trim`` gave freed pages back, so that reused heap memory counts, less the file-backed pages
    ``run()`` brought in (``RssFile``: library code run for the first time); CUDA: the device's peak
    allocation."""
    dev = getattr(device, "type", device)
    if dev == "cuda":
        import torch

        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        run()
        torch.cuda.synchronize(device)
        return max(0, int(torch.cuda.max_memory_allocated(device)) - before)
    if not _rss_probe_available():
        return None
    try:
        _libc().malloc_trim(0)
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")  # reset the peak resident set to the current one
        before, code_before = _status("VmRSS:"), _file_pages()
        run()
        peak = _status("VmHWM:") - before
        # pages of files mapped in (a library's code run for the first time: ~7 MiB for autograd's first
        # backward) stay resident and are shared, not working memory: a cold first probe counted them, which
        # cached an estimate 100× too large for a small indicator and made a small budget an error
        return max(0, peak - max(0, _file_pages() - code_before))
    except OSError:
        return None


def _file_pages() -> int:
    """The process's resident file-backed pages (``RssFile``; 0 where the kernel does not report it)."""
    try:
        return _status("RssFile:")
    except OSError:
        return 0


def small_enough(items: int, item_input_bytes: int, n_agents: int, target: int) -> bool:
    """Whether a batch of ``items`` is too small to need a measurement: even at 16·N times its input per item
    (an indicator quadratic in the agents, such as a pairwise N × N form) it fits ``target``."""
    return items * item_input_bytes * 16 * max(1, n_agents) <= target


def cache_owner(indicator: Any) -> Any:
    """What a measurement is cached on: a wrapped function, the class of aumann's own indicators (their
    cost depends on the shape only), else the indicator object."""
    fn = getattr(indicator, "fn", None)
    if fn is not None:
        return fn
    cls = type(indicator)
    if cls.__module__.startswith("aumann.") and not hasattr(indicator, "terms"):
        return cls
    return indicator


def _pow2(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1.0, x))))


def item_bytes(run: Callable[[int], Any], static: int, *, key: tuple = (), owner: Any = None, device: Any = None,
               limit: int | None = None, what: str = "item", max_items: int = PROBE_ITEMS,
               target: int | None = None) -> int:
    """Bytes one item of a batch costs: ``max(static, measured)``, the measurement from ``run(1)`` and
    ``run(k)`` (k ≤ ``max_items``; the difference per extra item, or ``run(1)``'s peak when that is larger),
    times :data:`SAFETY`, rounded up to a power of two. Cached per ``owner`` (weakly) and ``key``. With
    ``target`` (the batch being sized) the probe never runs more items than that batch would hold (two at
    least): at 10⁶ agents four probe points of an N × D float64 input and their autograd graph cost ~0.8 GB,
    the largest allocation of MegaScale-Social's whole study.

    Raises:
        MemoryBudgetError: one item alone needs more than ``limit`` bytes.
    """
    cache = None
    if owner is not None:
        try:
            cache = _CACHE.setdefault(owner, {})
        except TypeError:  # not weak-referenceable: measure every time
            cache = None
        if cache is not None and key in cache:
            return _check(cache[key], limit, what)
    with _LOCK:  # one probe at a time: the peak resident set is the process's
        one = peak_bytes(lambda: run(1), device)
        measured = 0.0
        if one is not None:
            if limit is not None and one > limit:
                _check(one, limit, what)
            k = max_items
            if limit is not None and one > 0:
                k = int(max(2, min(max_items, limit // max(1, 2 * one))))
            if target is not None and one > 0:
                k = int(max(2, min(k, target // max(1, one))))
            more = peak_bytes(lambda: run(k), device) if k > 1 else None
            slope = (more - one) / (k - 1) if more is not None else 0.0
            measured = max(slope, one / 2 if slope <= 0 else 0.0)
    out = max(int(static), _pow2(SAFETY * measured)) if measured else int(static)
    if cache is not None:
        cache[key] = out
    return _check(out, limit, what)


def _check(per_item: int, limit: int | None, what: str) -> int:
    if limit is not None and per_item > limit:
        raise MemoryBudgetError(
            f"one {what} needs about {per_item / MiB:,.1f} MiB of working memory, more than the limit of "
            f"{limit / MiB:,.1f} MiB (memory_budget=, in bytes; default half the available memory); pass a larger "
            "memory_budget= or use an indicator with a smaller footprint")
    return per_item


def items_per_batch(per_item: int, target: int) -> int:
    """How many items of ``per_item`` bytes one batch of ``target`` bytes holds (at least one)."""
    return max(1, int(target) // max(1, int(per_item)))


__all__ = ["DEFAULT_TARGET", "DEVICE_SHARE", "HOST_SHARE", "MiB", "available_host", "cache_owner", "item_bytes",
           "items_per_batch", "limits", "long_lived_set_aside", "peak_bytes", "release_freed", "small_enough"]
