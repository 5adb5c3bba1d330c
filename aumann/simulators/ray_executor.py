"""Ray as an executor: attach to a cluster or start a private local instance; nothing on a shared disk.

* **Where**: ``address`` (``"host:port"``, ``"auto"`` for a cluster started with ``ray start`` on
  this machine, ``"ray://..."`` for Ray Client), else the ``RAY_ADDRESS`` environment variable, else
  a private local instance started in its own temp dir (``tempfile.mkdtemp(prefix="aumann-ray-")``,
  emptied on :meth:`RayExecutor.close` but for this process's own log files, and removed once this
  process exits; never ``/tmp/ray``, never ``~/.ray``: its session token is kept in this process's
  environment). ``address="local"`` always starts one.
* **How many**: ``workers`` tasks run at once (default: every CPU of the cluster); a local instance
  gets ``workers`` CPUs (default ``os.cpu_count()``).
* **What travels** (:mod:`aumann.simulators.remote`): the function and every item, serialised once
  by the driver; the ``shared`` object of a ``map`` goes to the object store once (``ray.put``)
  and each worker process unpickles it once. Results come back through the object store; arrays
  arrive writable. The user's scenario files (each as a copy named after its module, so two files both
  named ``scenario.py`` do not collide), their sibling modules and ``ship``-ped packages go to the
  workers with the job's runtime environment (``py_modules``, plus ``runtime_env`` given here), so a
  worker needs no copy of the driver's disk; a task installs only the files its payload refers to.
  Only the driver writes files.
* **Failures**: a task that raises comes back as its own exception with the remote traceback
  (:class:`~aumann.errors.RemoteTaskError` as ``__cause__``); a task whose worker or node dies is
  retried (``max_retries``, Ray's lineage) and, when the retries run out, raises an
  :class:`~aumann.errors.ExecutorError` naming the task; errors starting or attaching are one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from aumann.errors import AumannWarning, ExecutorError
from aumann.simulators import remote

OnResult = Callable[[int, Any], None] | None

#: never shipped with a scenario's folder (version control, environments, caches)
DEFAULT_EXCLUDES = (".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache",
                    ".ruff_cache", "node_modules", ".ipynb_checkpoints")

_REMOTE: list[Any] = []


def _remote_task(ray: Any, max_retries: int, runtime_env: dict | None = None) -> Any:
    """The Ray remote function that runs :func:`remote.run_task` (made once per process), with options."""
    if not _REMOTE:
        _REMOTE.append(ray.remote(remote.run_task))
    opts: dict[str, Any] = {"max_retries": max_retries, "retry_exceptions": False}
    if runtime_env is not None:
        opts["runtime_env"] = runtime_env
    return _REMOTE[0].options(**opts)


class RayExecutor:
    """Run ``fn`` over items as Ray tasks (optional extra: ``pip install 'aumann[ray]'``).

    Args:
        address: a cluster to attach to (``"host:port"``, ``"auto"``, ``"ray://host:10001"``);
            ``None``: ``RAY_ADDRESS`` if set, else a private local instance; ``"local"``: always a
            private local instance.
        workers: tasks that run at once (default: every CPU the cluster has).
        num_cpus: CPUs of a private local instance (default: ``workers``, else ``os.cpu_count()``);
            when attaching it only caps the tasks in flight, like ``workers``.
        runtime_env: a Ray runtime environment merged into the one aumann builds (``pip``,
            ``env_vars``, extra ``py_modules``, ``excludes``...).
        temp_dir: the parent of a local instance's private temp dir (default: the system's).
        ship: modules (objects or importable names) of user code to send to the workers, beyond
            the scenario files loaded so far (found by themselves).
        exclude: paths never shipped with a scenario's folder (the run directory).
        max_retries: how often a task whose worker died is re-run (default 3).
        init_kwargs: extra keyword arguments for ``ray.init``.

    Raises:
        ExecutorError: ``ray`` is not installed (on construction); the cluster cannot be reached or
            the local instance cannot start (on first use).
    """

    supports_shared = True

    def __init__(self, address: str | None = None, *, workers: int | None = None, num_cpus: int | None = None,
                 runtime_env: dict | None = None, temp_dir: str | os.PathLike[str] | None = None,
                 ship: Sequence[Any] = (), exclude: Sequence[str | os.PathLike[str]] = (), max_retries: int = 3,
                 init_kwargs: dict | None = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise ExecutorError(
                "RayExecutor needs the optional 'ray' package: pip install 'aumann[ray]' "
                "(or use LocalExecutor for one machine)"
            ) from exc
        for name, val in (("workers", workers), ("num_cpus", num_cpus)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
                raise ExecutorError(f"{name} must be None or an int >= 1; got {val!r}")
        if runtime_env is not None and not isinstance(runtime_env, dict):
            raise ExecutorError(f"runtime_env must be a dict (a Ray runtime environment); got "
                                f"{type(runtime_env).__name__}")
        address = address if address is not None else (os.environ.get("RAY_ADDRESS") or None)
        self.address = None if address in (None, "local") else str(address).strip()
        self.workers = workers
        self.num_cpus = num_cpus
        self.runtime_env = dict(runtime_env or {})
        self.temp_root = None if temp_dir is None else str(temp_dir)
        self.ship = list(ship)
        self.exclude = [str(p) for p in exclude]
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ExecutorError(f"max_retries must be an int >= 0 (re-runs of a task whose worker died); got "
                                f"{max_retries!r}")
        self.max_retries = max_retries
        self.init_kwargs = dict(init_kwargs or {})
        self._started = False  # this executor called ray.init (and shuts it down)
        self._temp_dir: str | None = None
        self._env_saved: dict[str, str | None] = {}
        self._job_code: remote.UserCode | None = None
        self._code_dir: str | None = None  # the copies of scenario files shipped under their module's name
        self.task_hosts: Counter[str] = Counter()
        self._service: Any = None  # the LLM service actor (serve_llm)
        self._substitutes: dict[int, tuple[Any, Any]] = {}
        self._head_gone_since: float | None = None
        self._head_lost = False  # the head is gone: close() does not wait on it
        self._head: tuple[str, int] | None = None  # the head's host:port, once attached (``auto`` resolved)
        self._kept_logs: str | None = None  # a local instance's logs, copied after a worker died (_worker_logs)
        self._cluster_id: str | None = None  # the attached cluster's id (hex): a head restarted there has another

    # ------------------------------------------------------------------ connecting
    @property
    def attached(self) -> bool:
        """Whether this executor attaches to an existing cluster (rather than starting its own)."""
        return self.address is not None

    def _set_env(self, key: str, value: str) -> None:
        self._env_saved.setdefault(key, os.environ.get(key))
        os.environ[key] = value

    def _restore_env(self) -> None:
        changed = bool(self._env_saved)
        for key, old in self._env_saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        self._env_saved = {}
        if changed:
            _refresh_auth()

    def _ensure(self) -> Any:
        """``ray``, initialised. The job's runtime environment ships every scenario file loaded so far (Ray takes
        local paths in ``py_modules`` at the job level only, and a later map may refer to any of them), each under
        its module's name; a task installs only those its payload refers to."""
        import ray

        if ray.is_initialized():
            return ray
        code = remote.user_code(self.ship)
        env = self._runtime_env(code)
        kw: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False, "logging_level": logging.WARNING}
        if env:
            kw["runtime_env"] = env
        kw.update(self.init_kwargs)
        if self.attached:
            what = f"attach to the Ray cluster at {self.address!r}"
            self._head = _reachable(self.address)  # Ray itself waits minutes for a GCS that is not there
            kw["address"] = self.address
            _refresh_auth()  # RAY_AUTH_TOKEN / RAY_AUTH_MODE as the environment holds them now
        else:
            what = "start a local Ray instance"
            self._temp_dir = tempfile.mkdtemp(prefix="aumann-ray-", dir=self.temp_root)
            if len(self._temp_dir) > 48:  # Ray's Unix sockets live below it; their paths must stay short
                shutil.rmtree(self._temp_dir, ignore_errors=True)
                self._temp_dir = tempfile.mkdtemp(prefix="aumann-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
            remove_after_exit(self._temp_dir)
            if os.environ.get("RAY_AUTH_MODE", "").lower() != "disabled" and not os.environ.get("RAY_AUTH_TOKEN"):
                # token authentication without Ray writing ~/.ray/auth_token: the token lives in this process's
                # environment (inherited by the instance's processes) until close()
                self._set_env("RAY_AUTH_MODE", "token")
                self._set_env("RAY_AUTH_TOKEN", secrets.token_hex(32))
                _refresh_auth()
            self._set_env("RAY_USAGE_STATS_ENABLED", "0")
            kw.update(address="local", num_cpus=self.num_cpus or self.workers or os.cpu_count() or 1,
                      include_dashboard=False, _temp_dir=self._temp_dir)
        try:
            with _stderr_held(self.attached) as said:
                ray.init(**kw)
        except Exception as exc:
            self._cleanup_local()
            if self.attached and ("InvalidAuthToken" in said[0] or "Unauthenticated" in said[0]):
                raise ExecutorError(f"cannot {what}: the cluster refused the authentication token ("
                                    + ("RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH is not this cluster's"
                                       if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                                       else "none given: RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH are unset")
                                    + "); get it with `ray get-auth-token` on the head and set RAY_AUTH_TOKEN "
                                      "(or RAY_AUTH_TOKEN_PATH) here") from None
            if _runtime_env_failure(exc):  # the cluster answered; what failed is the job's runtime environment
                raise ExecutorError(f"cannot {what}: the job's runtime environment could not be set up: "
                                    f"{_reason(exc)} (see --ray-runtime-env / execution.ray_runtime_env)") from None
            raise ExecutorError(f"cannot {what}: {type(exc).__name__}: {_one_line(exc)}"
                                + (" (is `ray start --head` running there, with the same Ray version, and is "
                                   "RAY_AUTH_TOKEN its token?)" if self.attached else "")) from None
        self._started = True
        self._job_code = code
        self._cluster_id = _cluster_id_attached() if self.attached else None
        return ray

    def _runtime_env(self, code: remote.UserCode) -> dict[str, Any]:
        """The job's runtime environment: the modules of each scenario folder (its ``.py`` files and
        packages: the scenario file and its siblings, importable by plain name, without the folder's
        data or the run directory) and other user packages as ``py_modules``, laid under what the
        caller gave in ``runtime_env`` (e.g. a ``working_dir``). The workers' working directory is
        left alone."""
        env = dict(self.runtime_env)
        py_modules = list(env.get("py_modules") or [])
        for name, path, _rel in code.files:  # each scenario file as a copy named after its module: no two collide
            if not os.path.isfile(path):  # loaded once and gone since: no task can need it (one that does is told)
                continue
            copy = self._code_copy(path, f"{name}.py")
            if copy not in py_modules:
                py_modules.append(copy)
        out = [Path(p).resolve() for p in self.exclude]
        for folder in code.folders:
            for f in sorted(Path(folder).iterdir()) if os.path.isdir(folder) else ():
                if f.resolve() in out or f.name.startswith(".") or f.name == "__pycache__":
                    continue
                if (f.suffix == ".py" and f.is_file()) or (f.is_dir() and (f / "__init__.py").is_file()):
                    if str(f) not in py_modules:
                        py_modules.append(str(f))
        py_modules += [p for p in code.packages if p not in py_modules]
        if py_modules:
            env["py_modules"] = py_modules
            env["excludes"] = list(dict.fromkeys([*(env.get("excludes") or []), *DEFAULT_EXCLUDES]))
        return env

    def _code_copy(self, path: str, rel: str) -> str:
        """A copy of the scenario file ``path`` named ``rel`` (its module's name, ``aumann_user_<stem>_<hash>.py``)
        in this executor's own temp folder, for ``py_modules``: shipped as ``path``'s own name, two files both named
        ``scenario.py`` landed on a worker's ``sys.path`` side by side and both modules loaded the first one found."""
        if self._code_dir is None:
            self._code_dir = tempfile.mkdtemp(prefix="aumann-ray-code-", dir=self.temp_root)
            remove_after_exit(self._code_dir)
        dest = Path(self._code_dir) / rel
        shutil.copyfile(path, dest)
        return str(dest)

    def _cleanup_local(self) -> None:
        self._restore_env()
        if self._temp_dir is not None:
            _remove_tree(self._temp_dir)
            self._temp_dir = None

    # ------------------------------------------------------------------ the LLM service
    serves_llm = True

    def serve_llm(self, backend: Any) -> Any:
        """The LLM ``backend`` as workers should use it: its response cache, rate limits and spend caps
        served by one actor on the driver's node (:mod:`aumann.simulators.llm_service`), so the
        cluster shares one cache file nobody else opens and one set of limits. Wherever a task's
        payload refers to ``backend`` (a model's checkpoint), the served twin travels instead.
        Returns ``backend`` unchanged when it is not an LLM backend."""
        from aumann.simulators.llm_service import LLMService, serve_backend, service_args

        args = service_args(backend)
        if args is None:
            return backend
        pair = self._substitutes.get(id(backend))
        if pair is not None and pair[0] is backend:
            return pair[1]
        ray = self._live()
        if self._service is None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = ray.get_runtime_context().get_node_id()  # the driver's node: the cache file's disk
            actor = ray.remote(LLMService).options(
                num_cpus=0, max_concurrency=256,
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
            self._service = actor.remote(**args)
        served = serve_backend(backend, self._service)
        self._substitutes[id(backend)] = (backend, served)
        return served

    def llm_totals(self) -> dict[str, Any] | None:
        """The service's account (calls, tokens, dollars) of what the workers spent, or ``None``."""
        if self._service is None:
            return None
        ray = self._live()
        return ray.get(self._service.totals.remote())

    def _stop_service(self) -> None:
        if self._service is not None:
            import ray

            try:
                ray.get(self._service.flush.remote(), timeout=60)
                ray.get(self._service.close.remote(), timeout=60)
            finally:
                ray.kill(self._service)
                self._service = None
                self._substitutes = {}

    def close(self) -> None:
        """Disconnect; a local instance this executor started is shut down and its temp dir removed
        (an attached cluster keeps running). The LLM service flushes the cache and stops first."""
        if self._started:
            import ray

            try:
                if self._head_lost or self._head_refuses():  # nothing answers: the service went with the head
                    self._service, self._substitutes = None, {}
                self._stop_service()
            finally:
                ray.shutdown()
            self._started = False
            self._head_lost, self._head_gone_since = False, None
        self._cleanup_local()
        self._job_code = None
        if self._code_dir is not None:
            shutil.rmtree(self._code_dir, ignore_errors=True)
            self._code_dir = None

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:  # an executor inside a spec travels without its connection
        state = dict(self.__dict__)
        state.update(_started=False, _temp_dir=None, _env_saved={}, _job_code=None, _code_dir=None,
                     task_hosts=Counter(),
                     _service=None, _substitutes={}, _head_gone_since=None, _head_lost=False, _kept_logs=None,
                     _cluster_id=None)
        return state

    # ------------------------------------------------------------------ sizes
    def cluster_cpus(self) -> int:
        """CPUs of the cluster (connects first)."""
        ray = self._live()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    @property
    def max_workers(self) -> int:
        """Tasks that run at once: ``workers`` (or ``num_cpus``), else every CPU of the cluster."""
        return self.workers or self.num_cpus or self.cluster_cpus()

    def describe(self) -> dict[str, Any]:
        """What the manifest records: executor, Ray's version, where, nodes and CPUs, task placement."""
        import ray

        out: dict[str, Any] = {"executor": "ray", "ray_version": ray.__version__,
                               "cluster": "attached" if self.attached else "local (private temp dir)",
                               "workers": self.workers}
        if self._started and self._head_refuses():  # the head died after the last task: say so, do not wait
            self._head_lost = True
        if ray.is_initialized() and not self._head_lost:  # ray.nodes() waits on a dead head until Ray exits
            try:
                nodes = [n for n in ray.nodes() if n.get("Alive")]
                out.update(nodes=len(nodes), cpus=int(ray.cluster_resources().get("CPU", 0)))
            except Exception:  # pragma: no cover - a cluster that does not answer
                pass
        if self.task_hosts:
            out["nodes_used"] = len(self.task_hosts)
        return out

    # ------------------------------------------------------------------ map
    def map(self, fn: Callable[..., Any], specs: Sequence[Any], *, shared: Any = None, on_result: OnResult = None,
            return_exceptions: bool = False) -> list[Any]:
        """``[fn(s) for s in specs]`` (``fn(shared, s)`` with a shared object), computed as Ray tasks,
        in spec order (see the module docstring)."""
        specs = list(specs)
        if not specs:
            return []
        ray = self._live()
        with remote.substituting(self._substitutes), remote.collecting() as needed:
            fn_b = remote.dumps(fn)
            items = [remote.dumps(s) for s in specs]
            blob = remote.dumps(shared) if shared is not None else None
        code = remote.user_code(self.ship, only=needed)  # what a task installs: the files this payload refers to
        late = code and (self._job_code is None or not self._job_code.covers(code))  # code loaded after ray.init
        task = _remote_task(ray, self.max_retries, self._runtime_env(code) if late else None)
        sref = None
        if blob is not None:
            import numpy as np

            sref = remote.SharedRef(uuid.uuid4().hex, ray_ref=[ray.put(np.frombuffer(blob, dtype=np.uint8))],
                                    size=len(blob))
            del blob
        limit = self.workers or self.num_cpus or 2 * self.cluster_cpus()
        results: list[Any] = [None] * len(specs)
        pending: dict[Any, int] = {}
        nxt = 0
        while nxt < len(specs) or pending:
            while nxt < len(specs) and len(pending) < limit:
                pending[task.remote(fn_b, items[nxt], sref, code, True)] = nxt
                nxt += 1
            done, _ = ray.wait(list(pending), num_returns=1, timeout=HEAD_CHECK_SECONDS if self.attached else None)
            if not done:
                self._check_head(len(pending) + len(specs) - nxt, len(specs))
                continue
            self._head_gone_since = None
            for ref in done:
                i = pending.pop(ref)
                try:
                    raw = ray.get(ref)
                except Exception as exc:  # the worker died and the retries ran out, the runtime env failed, ...
                    results[i] = _system_failure(exc, i, len(specs), self.max_retries, self._worker_logs())
                else:
                    if isinstance(raw, remote.Done | remote.Failed):
                        self.task_hosts[raw.where] += 1
                    results[i] = remote.unwrap(raw, i, len(specs))
                if on_result is not None:
                    on_result(i, results[i])
                if isinstance(results[i], BaseException) and not return_exceptions:
                    for ref in pending:
                        ray.cancel(ref, force=False)
                    raise results[i]
        return results

    def _worker_logs(self) -> str:
        """Where the log of a worker that died is, as a phrase. A private local instance's temp dir goes when this
        process exits, so its logs are copied once to a folder that stays (``aumann-ray-logs-*``, beside it)."""
        files = "python-core-worker-*.log and worker-*.err; raylet.out says whether the OOM killer ended it"
        if self._temp_dir is None:
            return (f"on the node that ran it, under that node's Ray temp dir (`ray start --temp-dir`, default "
                    f"/tmp/ray): session_latest/logs/ ({files})")
        if self._kept_logs is None:
            src = Path(self._temp_dir) / "session_latest" / "logs"
            try:
                kept = tempfile.mkdtemp(prefix="aumann-ray-logs-", dir=self.temp_root)
                shutil.copytree(src, kept, dirs_exist_ok=True, symlinks=True)
            except OSError:  # nothing to copy (or no room): say where they were
                return f"{src} ({files}; removed when this process exits)"
            self._kept_logs = kept
        return f"{self._kept_logs} (a copy of this local instance's logs, kept after it ends: {files})"

    def _head_refuses(self) -> bool:
        """Whether the head of the attached cluster refuses connections (or says nothing for 2 s) now; ``False``
        for a local instance and for an address there is nothing to probe at (``ray://``)."""
        import socket

        where = (self._head or _host_port(self.address or "")) if self.attached else None
        if where is None:
            return False
        try:
            with socket.create_connection(where, timeout=2.0):
                return False
        except OSError:
            return True

    def _live(self) -> Any:
        """``ray``, attached, for a call that needs the head's GCS (the cluster's resources, tasks, the LLM
        service). Ray waits 60 s on a head that is gone and then ends this process with a fatal C++ log (exit
        1, nothing cleaned up): a head that died between two calls -- after the last task of a ``map``, where
        no wait notices it -- is one :class:`ExecutorError` once it has refused connections for
        :data:`HEAD_GONE_SECONDS`. A head started again at the address (:meth:`_reattach_if_restarted`) is
        attached to afresh."""
        import time

        if self._started and self.attached:
            self._reattach_if_restarted()
        ray = self._ensure()
        end = None
        while self._head_refuses():
            now = time.monotonic()
            end = now + HEAD_GONE_SECONDS if end is None else end
            if now >= end:
                self._head_lost = True
                raise ExecutorError(f"the Ray cluster at {self.address!r} is gone (its head refused connections for "
                                    f"{HEAD_GONE_SECONDS:g} s); what finished is kept: start the cluster again and "
                                    f"rerun the same command to resume (in Python, the next call attaches again)")
            time.sleep(min(1.0, max(0.0, end - now)))
        return ray

    def _reattach_if_restarted(self) -> None:
        """A head marked lost is probed again (once, bounded like :meth:`_head_refuses`): still refusing, the call
        is the same one line at once; answering again -- the cluster started anew at that address -- or a head
        that was restarted between two calls without anyone noticing (another cluster id at the address), the
        old connection is dropped and the call attaches afresh. The old one cannot be used: its first request to
        the new head's GCS ends this process (Ray's fatal ``WrongClusterID`` check). What lived on the old
        cluster (the LLM service, objects in its store) is gone; ``serve_llm`` starts a new service."""
        if self._head_lost:
            if self._head_refuses():
                raise ExecutorError(f"the Ray cluster at {self.address!r} is gone (its head refuses connections); what "
                                    f"finished is kept: start the cluster again there (`ray start --head`) and rerun "
                                    f"the same command to resume (in Python, the next call attaches again)")
        elif self._cluster_id is None or _cluster_id_at(self._head or _host_port(self.address or "")) in (
                None, self._cluster_id):
            return
        import warnings

        import ray

        warnings.warn(f"the Ray cluster at {self.address!r} was started again (a new cluster): attached to it afresh; "
                      "what lived on the old one (the LLM service, objects in its store) is gone", AumannWarning,
                      stacklevel=3)
        self._service, self._substitutes = None, {}  # they lived on the old cluster
        with contextlib.suppress(Exception):
            ray.shutdown()
        self._started, self._head_lost, self._head_gone_since = False, False, None
        self._job_code, self._cluster_id = None, None

    def _check_head(self, pending: int, total: int) -> None:
        """Raise a one-line :class:`ExecutorError` once the head's GCS has refused connections for
        :data:`HEAD_GONE_SECONDS` (a killed head: Ray itself ends the driver's process after 60 s with a
        fatal C++ log, without cleanup). For a ``host:port`` address and ``auto`` (the head it resolved to)."""
        import socket
        import time

        where = self._head or _host_port(self.address or "")
        if where is None:
            return
        try:
            with socket.create_connection(where, timeout=2.0):
                self._head_gone_since = None
                return
        except OSError:
            pass
        now = time.monotonic()
        if self._head_gone_since is None:
            self._head_gone_since = now
        elif now - self._head_gone_since >= HEAD_GONE_SECONDS:
            self._head_lost = True
            raise ExecutorError(f"the Ray cluster at {self.address!r} is gone (its head refused connections for "
                                f"{HEAD_GONE_SECONDS:g} s) with {pending} of {total} task(s) unfinished; what finished "
                                f"is kept: start the cluster again and rerun the same command to resume")

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, workers={self.workers})"


#: how often a driver waiting on an attached cluster checks that its head still answers, and how long the head
#: may refuse connections before the run stops (Ray ends the driver's process itself after 60 s)
HEAD_CHECK_SECONDS = 5.0
HEAD_GONE_SECONDS = 20.0

#: how long attaching waits for an address to answer (connect, then the GCS's first HTTP/2 frame)
PROBE_SECONDS = 10.0


def _reachable(address: str, timeout: float | None = None) -> tuple[str, int] | None:
    """Fail in one line, in bounded time, when nothing listens at a ``host:port`` address, or what
    listens is not a gRPC server (an HTTP port, a port that accepts and never answers). ``auto`` is probed at
    the address Ray would attach to (``RAY_ADDRESS``, else the last ``ray start`` on this machine, which
    ``/tmp/ray/ray_current_cluster`` names): a stale file there made Ray wait over 13 minutes. Returns the
    probed (host, port), or ``None`` when there is nothing to probe (``ray://``; ``auto`` with no cluster to
    find, which Ray itself reports at once)."""
    import socket

    timeout = PROBE_SECONDS if timeout is None else timeout

    if address == "auto":
        resolved = _resolve_auto()
        if resolved is None:
            return None
        shown, address = f"'auto' ({resolved}, from RAY_ADDRESS or the last `ray start` here)", resolved
    else:
        shown = repr(address)
    scheme = address.partition("://")[0] if "://" in address else None
    if scheme is not None and scheme != "ray":  # Ray's own refusal of http:// ended mid-sentence ("either:")
        raise ExecutorError(f"a Ray address is host:port (e.g. 10.0.0.5:6379), 'auto' or ray://host:10001; got "
                            f"{address!r}: {scheme}:// is not where a driver attaches (the dashboard and the job API "
                            "serve HTTP); give the head's GCS host:port (`ray start --head --port=...`)")
    where = _host_port(address)
    if where is None:
        if address not in ("auto",) and "://" not in address:
            raise ExecutorError(f"a Ray address is host:port (e.g. 10.0.0.5:6379), 'auto' or ray://host:10001; "
                                f"got {address!r}" + ("" if _port_text(address) is None else
                                                      "; a port is a number from 1 to 65535"))
        return None
    try:
        with socket.create_connection(where, timeout=timeout) as sock:
            reply = None if _uses_tls() else _http2_reply(sock, timeout)
    except OSError as exc:
        raise ExecutorError(f"cannot attach to the Ray cluster at {shown}: nothing answers there "
                            f"({type(exc).__name__}: {exc}); start one with `ray start --head --port={where[1]}` or "
                            f"fix --ray-address / RAY_ADDRESS / execution.ray_address") from None
    if reply is None and not _uses_tls():
        raise ExecutorError(f"cannot attach to the Ray cluster at {shown}: something accepts connections there "
                            f"but does not answer as Ray's GCS (no reply in {timeout:g} s); is it the head's --port? "
                            f"fix --ray-address / RAY_ADDRESS / execution.ray_address")
    if reply is not None and not (len(reply) >= 9 and reply[3] == 0x04):  # an HTTP/2 SETTINGS frame: a gRPC server
        raise ExecutorError(f"cannot attach to the Ray cluster at {shown}: what answers there is not Ray's GCS "
                            f"(a gRPC server; it replied {reply[:24]!r}); is it the head's --port (not the dashboard "
                            f"or another service)? fix --ray-address / RAY_ADDRESS / execution.ray_address")
    return where


def _cluster_id_attached() -> str | None:
    """The id (hex) of the cluster this process is attached to, ``None`` where this Ray does not say."""
    try:
        import ray._private.worker as worker

        return str(worker.global_worker.node.cluster_id.hex())
    except Exception:  # pragma: no cover - another Ray version
        return None


def _cluster_id_at(where: tuple[str, int] | None, timeout: float = 2.0) -> str | None:
    """The id (hex) of the cluster whose GCS answers at ``where`` now (a millisecond on a live head), ``None``
    when nothing says so within ``timeout`` (Ray's client waits 30 s on a GCS that is not there: the lookup
    runs on a thread of its own, left behind when it takes longer)."""
    import socket
    import threading

    if where is None:
        return None
    try:
        with socket.create_connection(where, timeout=timeout):
            pass
    except OSError:
        return None
    found: list[str] = []

    def ask() -> None:
        try:
            from ray._raylet import GcsClient

            found.append(str(GcsClient(address=f"{where[0]}:{where[1]}").cluster_id.hex()))
        except Exception:  # another Ray version, a GCS that refuses the token: nothing known
            pass

    th = threading.Thread(target=ask, name="aumann-ray-cluster-id", daemon=True)
    th.start()
    th.join(timeout)
    return found[0] if found else None


def _resolve_auto() -> str | None:
    """The ``host:port`` Ray attaches to for ``auto`` (Ray's own lookup: ``RAY_ADDRESS``, else the cluster file of
    the last ``ray start``, else a running GCS process), or ``None`` when there is none or Ray's lookup is not
    available in this Ray version (then ``ray.init`` decides, as before)."""
    try:
        from ray._private.services import get_ray_address_from_environment
    except ImportError:
        return None
    try:
        found = get_ray_address_from_environment("auto", None)
    except Exception:  # ConnectionError: no cluster to find; ray.init says so in one line at once
        return None
    return found if isinstance(found, str) and _host_port(found) is not None else None


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``host:port`` address (``[::1]:6379`` too; an empty host is this machine), ``None``
    for ``auto``, ``ray://…`` and anything else without a numeric port."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return None
    # beyond 65535 the socket layer wraps the number: port 99999 was probed (and attached to) at 34463
    if not 1 <= int(port) <= 65535:
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _port_text(address: str) -> str | None:
    """The digits after the last ``:`` of ``address`` (``None`` when there are none)."""
    port = address.rpartition(":")[2]
    return port if port.isdigit() else None


#: the client's side of an HTTP/2 connection start: the preface and an empty SETTINGS frame
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _http2_reply(sock: Any, timeout: float) -> bytes | None:
    """The first bytes a server sends back to an HTTP/2 connection start (Ray's GCS is a gRPC server:
    a SETTINGS frame at once), ``b""`` when it closes the connection, ``None`` when it says nothing in
    ``timeout`` seconds. Ray itself waits minutes on a port that accepts and never answers."""
    import time

    sock.settimeout(timeout)
    end = time.monotonic() + timeout
    try:
        sock.sendall(_HTTP2_PREFACE)
        got = b""
        while len(got) < 9:
            sock.settimeout(max(0.01, end - time.monotonic()))
            chunk = sock.recv(64)
            if not chunk:
                return got
            got += chunk
        return got
    except TimeoutError:
        return None
    except OSError:  # reset by the peer
        return b""


def _uses_tls() -> bool:
    """Whether Ray speaks TLS here (``RAY_USE_TLS``): then the plain-text HTTP/2 probe is skipped."""
    return os.environ.get("RAY_USE_TLS", "").strip().lower() in ("1", "true", "yes")


@contextlib.contextmanager
def _stderr_held(hold: bool) -> Iterator[list[str]]:
    """While attaching, what Ray's core writes to file descriptor 2 (a GCS that refuses the token: a
    warning a second for some 20 s) is held in a temporary file: yields a one-item list that holds the
    text afterwards. It is written back to stderr when the block succeeds, dropped when it fails (the
    caller raises one line naming the cause)."""
    said = [""]
    if not hold:
        yield said
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no file descriptor 2 (an embedded interpreter): nothing to hold
        yield said
        return
    with tempfile.TemporaryFile() as held:
        ok = False
        try:
            os.dup2(held.fileno(), 2)
            yield said
            ok = True
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            said[0] = held.read(1 << 20).decode(errors="replace")
            if ok and said[0]:
                sys.stderr.write(said[0])


def _remove_tree(path: str) -> None:
    """Empty a local instance's temp dir but for this process's own Ray log files (``session_*/logs``):
    Ray's logger may reopen them by name while the interpreter shuts down, and a missing folder there
    can crash it. The watcher started with the instance (:func:`remove_after_exit`) removes the whole
    folder once this process has exited (also what Ray's last processes wrote after ``ray.shutdown()``)."""
    root = Path(path)
    for child in list(root.iterdir()) if root.is_dir() else []:
        if child.is_dir() and child.name.startswith("session_") and not child.is_symlink():
            for sub in child.iterdir():
                if sub.name == "logs":
                    continue
                if sub.is_dir() and not sub.is_symlink():
                    shutil.rmtree(sub, ignore_errors=True)
                else:
                    sub.unlink(missing_ok=True)
        elif child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def remove_after_exit(path: str) -> None:
    """Start a small watcher process that removes ``path`` once this process has exited (however it
    ends: ``close()`` forgotten, an exception, a signal)."""
    import subprocess
    import sys

    if not (sys.platform.startswith("linux") or sys.platform == "darwin"):
        return
    watch = f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; rm -rf -- \"$0\""
    try:
        subprocess.Popen(["sh", "-c", watch, str(path)], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:  # pragma: no cover - no shell: the folder stays, named aumann-ray-*
        pass


def _refresh_auth() -> None:
    """Make an already imported Ray read RAY_AUTH_MODE / RAY_AUTH_TOKEN again (it caches them)."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except Exception:  # pragma: no cover - a Ray without token authentication
        pass


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _runtime_env_failure(exc: BaseException) -> bool:
    return "RuntimeEnvSetupError" in type(exc).__name__


def _reason(exc: BaseException, limit: int = 500) -> str:
    """A runtime-environment failure's message on one line: Ray's first line is "Failed to set up runtime
    environment." and the reason (a package too large, a pip error) follows on the next ones, which
    :func:`_one_line` dropped."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].lower().startswith("failed to set up runtime environment"):
        lines = lines[1:]
    if any("Traceback (most recent call last)" in ln for ln in lines):
        lines = lines[-1:]  # a worker's traceback: its last line is the exception that ended it
    text = " ".join(lines) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


#: how to give a task more re-runs, on every level a user meets it
RETRIES_SETTING = "--ray-max-retries N (execution.ray_max_retries; RayExecutor(max_retries=N))"


def _system_failure(exc: BaseException, i: int, n: int, retries: int, logs: str = "") -> ExecutorError:
    """A one-line :class:`ExecutorError` for a task Ray could not run to the end: what happened, then what to do
    (the worker's log, ``logs``; the setting that gives a task more re-runs; fewer tasks at once for memory)."""
    name = type(exc).__name__
    log = f" ({logs})" if logs else ""
    if "RuntimeEnvSetupError" in name:
        why = ("its runtime environment could not be set up on the worker (shipped folder too large, or a "
               "package that does not install there; see --ray-runtime-env)")
        todo = ""
    elif any(k in name for k in ("WorkerCrashed", "NodeDied", "ActorDied", "ObjectLost", "OwnerDied")):
        why = f"the worker or node running it died and its {retries} retries ran out"
        todo = (f". What to do: a task that dies every time (out of memory, a crash in native code) dies again, so "
                f"read the worker's log first{log}; a node that was lost (preempted, restarted) calls for more "
                f"re-runs: {RETRIES_SETTING}, now {retries}")
    elif "OutOfMemory" in name:
        why = "the worker ran out of memory"
        todo = (f". What to do: fewer tasks at once (--workers N, execution.workers) or nodes with more memory; "
                f"the worker's log{log} says what it held")
    else:
        why = "Ray could not run it"
        todo = f". What to do: read the worker's log{log}" if log else ""
    said = _reason(exc) if _runtime_env_failure(exc) else _one_line(exc)
    err = ExecutorError(f"task {i + 1} of {n}: {why} ({name}: {said}){todo}")
    err.__cause__ = exc
    return err


__all__ = ["DEFAULT_EXCLUDES", "RETRIES_SETTING", "RayExecutor"]
