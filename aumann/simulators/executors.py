"""Executor seam for many runs, forks and attribution blocks: ``executor.map(fn, items) -> list``.

The protocol is one method: ``map(fn, items, *, shared=None, on_result=None,
return_exceptions=False)`` returns ``[fn(item) for item in items]`` in item order (with ``shared``:
``[fn(shared, item) ...]``, the shared object shipped once). Anything with a ``map(fn, items)``
fits where aumann takes an executor (attribution accepts exactly that, see
:mod:`aumann.attribution.distributed`).

Seeds come from the run spec, never from the worker: :func:`seeded_specs` gives each spec a child
of ``numpy.random.SeedSequence(root_seed)`` (``.spawn``), so a run's random numbers depend only on
(root seed, index) and results are identical serial, in a process pool, or on Ray.

* :class:`LocalExecutor` -- a ``concurrent.futures.ProcessPoolExecutor`` (``spawn`` start method,
  so no forked torch/thread state), started on first use and kept until :meth:`~LocalExecutor.close`;
  ``max_workers`` of 0 or 1 runs serially in-process.
* :class:`~aumann.simulators.ray_executor.RayExecutor` -- the optional extra ``aumann[ray]``:
  attaches to a cluster (``address``, or ``RAY_ADDRESS``) or starts a private local instance in its
  own temp dir; the shared object goes to the object store once.

What travels and how (:mod:`aumann.simulators.remote`): ``fn`` and the items are serialised with
cloudpickle, so lambdas and closures travel too; results come back the same way, and arrays arrive
writable. Scenario files loaded by ``aumann run path/to/model.py:scenario`` (and the folder they
sit in) are installed in every worker before a task runs. A task's exception is raised in the
driver with its own type, the remote traceback as its ``__cause__``
(:class:`~aumann.errors.RemoteTaskError`) and in ``exc.remote_traceback``.

``map(fn, items, on_result=None, return_exceptions=False)``: ``on_result(index, result)`` is called
in the caller's process as each item finishes (to move a progress bar or merge usage); with
``return_exceptions=True`` a failed item's exception is returned in its place and every other item
still runs. :func:`make_executor` builds one from the CLI's ``--executor`` / ``--workers`` /
``--ray-address``: ``workers`` is the number of tasks that run at once on either executor.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from aumann.errors import ExecutorError
from aumann.simulators import remote
from aumann.simulators.ray_executor import RayExecutor

OnResult = Callable[[int, Any], None] | None


@runtime_checkable
class Executor(Protocol):
    """Anything that maps a top-level function over items, results in item order."""

    def map(self, fn: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> list[Any]: ...


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


def call(fn: Callable[..., Any], shared: Any, item: Any) -> Any:
    """``fn(item)``, or ``fn(shared, item)`` when there is a shared object."""
    return fn(item) if shared is None else fn(shared, item)


class LocalExecutor:
    """Run ``fn`` over items in a local process pool (or serially with ``max_workers`` 0/1).

    Args:
        max_workers: pool size (default: ``os.cpu_count()``); 0 or 1 runs in-process.
        mp_context: multiprocessing start method (default ``"spawn"``).
        ship: modules (objects or names) of user code the workers must import, beyond the
            scenario files loaded so far (found by themselves).
    """

    supports_shared = True

    def __init__(self, max_workers: int | None = None, *, mp_context: str = "spawn", ship: Sequence[Any] = ()) -> None:
        if max_workers is not None and (isinstance(max_workers, bool) or not isinstance(max_workers, int)
                                        or max_workers < 0):
            raise ExecutorError(f"max_workers must be None or an int >= 0; got {max_workers!r}")
        self.max_workers = max_workers
        self.mp_context = mp_context
        self.ship = list(ship)
        self._pool: Any = None
        self.task_hosts: Counter[str] = Counter()

    @property
    def workers(self) -> int:
        """How many tasks run at once."""
        return max(1, self.max_workers if self.max_workers is not None else (os.cpu_count() or 1))

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
        return {"max_workers": self.max_workers, "mp_context": self.mp_context, "ship": [], "_pool": None,
                "task_hosts": Counter()}

    def describe(self) -> dict[str, Any]:
        """What the manifest records about this executor."""
        return {"executor": "local", "workers": self.workers}

    def map(self, fn: Callable[..., Any], specs: Sequence[Any], *, shared: Any = None, on_result: OnResult = None,
            return_exceptions: bool = False) -> list[Any]:
        """``[fn(s) for s in specs]`` (``fn(shared, s)`` with a shared object), computed by the pool, in
        spec order (see the module docstring)."""
        specs = list(specs)
        if self.max_workers in (0, 1) or len(specs) <= 1:
            out = []
            for i, s in enumerate(specs):
                try:
                    res = call(fn, shared, s)
                except Exception as exc:
                    if not return_exceptions:
                        raise
                    res = exc
                if on_result is not None:
                    on_result(i, res)
                out.append(res)
            return out
        from concurrent.futures import as_completed
        from concurrent.futures.process import BrokenProcessPool

        with remote.collecting() as needed:  # the scenario files this map's payload refers to, and no other
            fn_b = remote.dumps(fn)
            items = [remote.dumps(s) for s in specs]
            blob = remote.dumps(shared) if shared is not None else None
        code = remote.user_code(self.ship, only=needed)
        sref, blob_path = None, None
        if blob is not None:
            fd, blob_path = tempfile.mkstemp(prefix="aumann-shared-", suffix=".pkl")
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            sref = remote.SharedRef(uuid.uuid4().hex, path=blob_path, size=len(blob))
        results: list[Any] = [None] * len(specs)
        try:
            pool = self._get_pool()
            futures = {pool.submit(remote.run_task, fn_b, item, sref, code, False): i for i, item in enumerate(items)}
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    raw = fut.result()
                except BrokenProcessPool as exc:
                    self.close()
                    raise ExecutorError(f"a worker process of the local pool died (killed, or out of memory) while "
                                        f"running task {i + 1} of {len(specs)}: {exc}") from exc
                if isinstance(raw, remote.Done | remote.Failed):
                    self.task_hosts[raw.where] += 1
                results[i] = remote.unwrap(raw, i, len(specs))
                if on_result is not None:
                    on_result(i, results[i])
        finally:
            if blob_path is not None:
                Path(blob_path).unlink(missing_ok=True)
        if not return_exceptions:
            for res in results:
                if isinstance(res, BaseException):
                    raise res
        return results

    def __repr__(self) -> str:
        return f"LocalExecutor(max_workers={self.max_workers})"


def make_executor(kind: str = "local", workers: int | None = None, *, address: str | None = None,
                  runtime_env: dict | None = None, ship: Sequence[Any] = (),
                  exclude: Sequence[str | os.PathLike[str]] = (),
                  max_retries: int | None = None) -> LocalExecutor | RayExecutor | None:
    """The executor for ``--executor KIND --workers N [--ray-address A]``.

    ``workers`` is the number of tasks that run at once, whatever the executor: ``None`` is the
    default (local: 1, i.e. serial; Ray: every CPU of the cluster), 0 means every CPU there is
    (local: ``os.cpu_count()``; Ray: the cluster's), 1 one at a time. A local executor with one
    worker is ``None`` (the serial in-process run).

    ``max_retries`` (Ray only): re-runs of a task whose worker or node died (``None``: Ray executor's default, 3).

    Raises:
        ExecutorError: an unknown kind, a bad worker count, an address or retries for the local executor, or
            Ray not installed.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise ExecutorError(f"--workers must be an int >= 0; got {workers!r}")
    if kind == "local":
        if address:
            raise ExecutorError("--ray-address attaches to a Ray cluster: use it with --executor ray (or leave "
                                "--executor out)")
        if max_retries is not None:
            raise ExecutorError("--ray-max-retries re-runs Ray tasks: use it with --executor ray")
        if workers is None or workers == 1:
            return None
        return LocalExecutor(max_workers=None if workers == 0 else workers, ship=ship)
    if kind == "ray":
        return RayExecutor(address=address, workers=workers or None, runtime_env=runtime_env, ship=ship,
                           exclude=exclude, **({} if max_retries is None else {"max_retries": max_retries}))
    raise ExecutorError(f"unknown executor {kind!r}; choose 'local' (process pool) or 'ray'")


def describe_executor(executor: Any) -> dict[str, Any]:
    """What the manifest records about ``executor`` (``None``: the serial run)."""
    if executor is None:
        return {"executor": "serial", "workers": 1}
    describe = getattr(executor, "describe", None)
    return describe() if callable(describe) else {"executor": type(executor).__name__}


__all__ = ["Executor", "LocalExecutor", "RayExecutor", "RunSpec", "describe_executor", "make_executor",
           "seeded_specs"]
