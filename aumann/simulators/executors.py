"""Executor seam for many runs or forks: ``executor.map(fn, specs) -> list`` in spec order.

Seeds come from the run spec, never from the worker: :func:`seeded_specs` gives each spec a child
of ``numpy.random.SeedSequence(root_seed)`` (``.spawn``), so a run's random numbers depend only on
(root seed, index) and results are identical serial, in a process pool, or on Ray.

* :class:`LocalExecutor` -- ``concurrent.futures.ProcessPoolExecutor`` (``spawn`` start method, so
  no forked torch/thread state), started on first use and kept for later calls until
  :meth:`~LocalExecutor.close`; ``max_workers`` of 0 or 1 runs serially in-process.
* :class:`RayExecutor` -- the optional extra ``aumann[ray]``; ``ray`` is imported lazily and a local
  instance is started if none is running.

``fn`` must be a picklable top-level function; specs must be picklable (a Mesa model holding a
``DataCollector`` with agent reporters is not).

``map(fn, specs, on_result=None, return_exceptions=False)``: results in spec order;
``on_result(index, result)`` is called as each one finishes (in the caller's process, e.g. to move
a progress bar or merge usage); with ``return_exceptions=True`` a failed spec's exception is
returned in its place and every other spec still runs. :func:`make_executor` builds one from the
CLI's ``--executor`` / ``--workers``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aumann.errors import ExecutorError

OnResult = Callable[[int, Any], None] | None


@dataclass(frozen=True)
class RunSpec:
    """One run: its position, its own seed (a spawned ``SeedSequence``) and free parameters."""

    index: int
    seed: np.random.SeedSequence
    params: Any = None

    def rng(self) -> np.random.Generator:
        """A fresh Generator for this run (the same every time it is called)."""
        return np.random.default_rng(self.seed)


def seeded_specs(root_seed: int | np.random.SeedSequence, n_or_params: int | Sequence[Any]) -> list[RunSpec]:
    """Specs with independent seeds spawned from ``root_seed``.

    Args:
        root_seed: the run's root seed (int) or a SeedSequence.
        n_or_params: a count n, or a sequence of per-run parameters (one spec each).

    Example:
        >>> [s.index for s in seeded_specs(7, ["a", "b"])]
        [0, 1]
    """
    params = [None] * n_or_params if isinstance(n_or_params, int) else list(n_or_params)
    root = root_seed if isinstance(root_seed, np.random.SeedSequence) else np.random.SeedSequence(root_seed)
    return [RunSpec(i, child, p) for i, (child, p) in enumerate(zip(root.spawn(len(params)), params))]


class LocalExecutor:
    """Run ``fn`` over specs in a local process pool (or serially with ``max_workers`` 0/1).

    Args:
        max_workers: pool size (default: ``os.cpu_count()``); 0 or 1 runs in-process.
        mp_context: multiprocessing start method (default ``"spawn"``).
    """

    def __init__(self, max_workers: int | None = None, *, mp_context: str = "spawn") -> None:
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 0):
            raise ExecutorError(f"max_workers must be None or an int >= 0; got {max_workers!r}")
        self.max_workers = max_workers
        self.mp_context = mp_context
        self._pool: Any = None

    def _get_pool(self) -> Any:
        """The process pool, started on first use and kept for later ``map`` calls (workers import
        the package once); :meth:`close` (or garbage collection) shuts it down."""
        if self._pool is None:
            import multiprocessing as mp
            import weakref
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(max_workers=self.max_workers, mp_context=mp.get_context(self.mp_context))
            weakref.finalize(self, self._pool.shutdown, wait=True)
        return self._pool

    def close(self) -> None:
        """Shut the worker processes down (a later ``map`` starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        return {"max_workers": self.max_workers, "mp_context": self.mp_context, "_pool": None}

    def map(self, fn: Callable[[Any], Any], specs: Sequence[Any], *, on_result: OnResult = None,
            return_exceptions: bool = False) -> list[Any]:
        """``[fn(s) for s in specs]``, computed by the pool, in spec order (see the module docstring)."""
        specs = list(specs)
        if self.max_workers in (0, 1) or len(specs) <= 1:
            out = []
            for i, s in enumerate(specs):
                try:
                    res = fn(s)
                except Exception as exc:
                    if not return_exceptions:
                        raise
                    res = exc
                if on_result is not None:
                    on_result(i, res)
                out.append(res)
            return out
        from concurrent.futures import as_completed

        results: list[Any] = [None] * len(specs)
        pool = self._get_pool()
        futures = {pool.submit(fn, s): i for i, s in enumerate(specs)}
        for fut in as_completed(futures):
            i = futures[fut]
            exc = fut.exception()
            results[i] = exc if exc is not None else fut.result()
            if on_result is not None:
                on_result(i, results[i])
        if not return_exceptions:
            for res in results:
                if isinstance(res, BaseException):
                    raise res
        return results

    def __repr__(self) -> str:
        return f"LocalExecutor(max_workers={self.max_workers})"


class RayExecutor:
    """Run ``fn`` over specs as Ray tasks (optional extra: ``pip install 'aumann[ray]'``).

    Args:
        address: a Ray cluster address, or ``None`` to start/attach a local instance.
        num_cpus: CPUs for a local instance (ignored when attaching).
        init_kwargs: extra keyword arguments for ``ray.init``.

    Raises:
        ExecutorError: ``ray`` is not installed (on construction).
    """

    def __init__(
        self, address: str | None = None, *, num_cpus: int | None = None, init_kwargs: dict | None = None
    ) -> None:
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise ExecutorError(
                "RayExecutor needs the optional 'ray' package: pip install 'aumann[ray]' "
                "(or use LocalExecutor for one machine)"
            ) from exc
        self.address = address
        self.num_cpus = num_cpus
        self.init_kwargs = dict(init_kwargs or {})
        self._started = False

    def _ensure(self):
        import ray

        if not ray.is_initialized():
            kw = {"include_dashboard": False, "ignore_reinit_error": True, "log_to_driver": False}
            kw.update(self.init_kwargs)
            if self.address is not None:
                ray.init(address=self.address, **kw)
            else:
                ray.init(num_cpus=self.num_cpus, **kw)
            self._started = True
        return ray

    def close(self) -> None:
        """Shut down the Ray instance this executor started (an attached cluster is left alone)."""
        if self._started:
            import ray

            ray.shutdown()
            self._started = False

    @property
    def max_workers(self) -> int | None:
        return self.num_cpus

    def map(self, fn: Callable[[Any], Any], specs: Sequence[Any], *, on_result: OnResult = None,
            return_exceptions: bool = False) -> list[Any]:
        """``[fn(s) for s in specs]``, computed as Ray tasks, in spec order (see the module docstring)."""
        ray = self._ensure()
        remote = ray.remote(fn)
        refs = [remote.remote(s) for s in specs]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                i = index[ref]
                try:
                    results[i] = ray.get(ref)
                except Exception as exc:  # RayTaskError: hand back the task's own exception
                    results[i] = getattr(exc, "cause", None) or exc
                if on_result is not None:
                    on_result(i, results[i])
        if not return_exceptions:
            for res in results:
                if isinstance(res, BaseException):
                    raise res
        return results

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r})"


def make_executor(kind: str = "local", workers: int | None = None) -> LocalExecutor | RayExecutor | None:
    """The executor for ``--executor KIND --workers N``: ``None`` for a serial local run (N ≤ 1),
    a :class:`LocalExecutor` process pool, or a :class:`RayExecutor` (N CPUs; ``None``: all).

    Raises:
        ExecutorError: an unknown kind, a bad worker count, or Ray not installed.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise ExecutorError(f"--workers must be an int >= 0; got {workers!r}")
    if kind == "local":
        return None if workers is None or workers <= 1 else LocalExecutor(max_workers=workers)
    if kind == "ray":
        return RayExecutor(num_cpus=workers or None)
    raise ExecutorError(f"unknown executor {kind!r}; choose 'local' (process pool) or 'ray'")


__all__ = ["LocalExecutor", "RayExecutor", "RunSpec", "make_executor", "seeded_specs"]
