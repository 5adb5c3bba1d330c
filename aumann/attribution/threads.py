"""Work items on this process's idle cores: ``[fn(i) for i in items]`` shared with pool threads.

Used where each item's work releases the GIL (numpy's reductions, torch's matrix–vector products, the
compiled kernels of :mod:`aumann.attribution.jit` and :mod:`aumann.attribution.jit_sampling`) and each
item writes only its own output, so the numbers never depend on how many threads ran or which item ran
where: the closed forms' blocks (:mod:`aumann.attribution.streaming`) and the permutation walks of the
structured game kernels (one permutation per item).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import torch


def run_items(fn: Callable[[Any], Any], items: list[Any], *, work: int = 1 << 62, threshold: int = 0) -> list[Any]:
    """``[fn(i) for i in items]``, on up to ``torch.get_num_threads()`` threads; in this thread when the
    ``work`` (e.g. values read) is below ``threshold``, too small to pay for the hand-off.

    This thread works too: it and the pool's helpers take the next item from one shared counter
    until none is left, so on a loaded machine — where a helper may wait long for a core — this
    thread carries on alone instead of waiting, and the call costs about what one thread would.
    Helpers are only handed work while a core is idle (:func:`idle_cores`)."""
    workers = min(len(items), torch.get_num_threads())
    if getattr(_LOCAL, "helper", False):  # called from a helper's item: the pool's threads are all busy
        workers = 1
    if workers > 1 and work >= threshold:
        workers = min(workers, 1 + idle_cores())
    if workers <= 1 or work < threshold:
        return [fn(i) for i in items]
    results: list[Any] = [None] * len(items)
    counter = itertools.count()
    lock = threading.Lock()

    def take() -> None:
        while True:
            with lock:
                k = next(counter)
            if k >= len(items):
                return
            results[k] = fn(items[k])

    def helper() -> None:
        _LOCAL.helper = True  # a nested call runs its items itself (waiting on this pool would never end)
        try:
            take()
        finally:
            _LOCAL.helper = False

    helpers = [_pool(workers - 1).submit(helper) for _ in range(workers - 1)]
    try:
        take()
    finally:
        wait(helpers)  # never return (or raise) while a helper still writes
    for h in helpers:
        h.result()  # re-raises a helper's exception
    return results


def usable_cores() -> int:
    """The CPUs this process may use (its affinity mask; ``os.cpu_count()`` where there is none)."""
    return _CPUS


def idle_cores() -> int:
    """Cores no other thread is waiting for right now: the CPUs this process may use, less the threads
    the kernel counts as runnable (``/proc/loadavg``), this one excepted. A helper handed work while every
    core is taken waits for one — and this thread then waits for the helper — so on a busy machine the
    work stays here. (What runs where never changes the numbers, only the speed.)"""
    try:
        with open("/proc/loadavg", "rb") as fh:
            runnable = int(fh.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):  # not Linux: assume the cores are free
        return _CPUS
    # our own background work (:func:`background_work`) does not hold a core against the foreground
    runnable = max(1, runnable - _BACKGROUND[0])
    return max(0, _CPUS - runnable)  # runnable counts this thread: _CPUS − (others + 1) are free


@contextlib.contextmanager
def background_work() -> Iterator[None]:
    """Marks what the calling thread does inside as this process's *background* work: work done ahead of
    need, such as drawing the next batch of permutations while the current one is walked.

    :func:`idle_cores` does not count a thread at background work as taking a core, so the foreground's
    items still go to every core; the background shares a core for its short while. Counted, the draw of
    a few permutations (~0.1 s) kept a whole batch of walks (~1 s) on one core: at 10⁷ agents the
    sampled-Shapley stages ran on 1.2 cores of 2. What runs where never changes a number."""
    with _BG_LOCK:
        _BACKGROUND[0] += 1
    try:
        yield
    finally:
        with _BG_LOCK:
            _BACKGROUND[0] -= 1


_BACKGROUND = [0]  # threads of this process at background work now
_BG_LOCK = threading.Lock()


_LOCAL = threading.local()
_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    key = (os.getpid(), workers)  # a forked child builds its own (threads do not survive fork)
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="aumann-items")
    return pool


__all__ = ["background_work", "idle_cores", "run_items", "usable_cores"]
