"""What travels between the driver and an executor's workers, and back.

Every executor (a local process pool, Ray) moves work the same way, so a task sees the same
objects wherever it runs:

* **tasks** -- ``fn`` and each item are serialised by the driver with cloudpickle (:func:`dumps`)
  and run in the worker by :func:`run_task`, which sends back a :class:`Done` (the result,
  serialised the same way) or a :class:`Failed` (the exception, its remote traceback and the
  node it ran on). Nothing is zero-copy on arrival, so numpy arrays arrive writable in both
  directions (Ray's own zero-copy path hands arrays out read-only, and Mesa writes into the arrays
  of its grids and property layers).
* **shared objects** -- one object per ``map`` call (a model checkpoint, a game kernel, a panel) is
  serialised once and handed to every task as ``fn(shared, item)``: on Ray it goes to the object
  store once (``ray.put``), in a process pool to one temporary file. Each worker process
  unpickles it once and keeps it for the later tasks of that map (:func:`resolve_shared`), so tasks
  must not modify it (forks copy their checkpoint first).
* **user code** -- scenarios loaded from a file (``path/to/model.py:scenario``) live in modules
  with synthetic names (``aumann_user_scenario_<stem>_<hash>``) that a fresh worker cannot import.
  :class:`UserCode` names them and the folders and packages they need; a worker installs them
  before it unpickles anything (:func:`install_user_code`), from the absolute path on the same
  machine or from the copy Ray shipped with the job's runtime environment (``working_dir``,
  ``py_modules``) on a node without the driver's disk.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import socket
import sys
import sysconfig
import traceback
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aumann.errors import ExecutorError, RemoteTaskError

#: the prefix of the modules :mod:`aumann.scenarios` loads scenario files into
USER_SCENARIO_PREFIX = "aumann_user_scenario_"


# ---------------------------------------------------------------------------------------------- serialising
def dumps(obj: Any) -> bytes:
    """``obj`` as bytes: cloudpickle (lambdas and closures travel too), protocol 5, in-band buffers."""
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - cloudpickle is a dependency; plain pickle as a last resort
        return pickle.dumps(obj, protocol=5)
    return cloudpickle.dumps(obj, protocol=5)


def loads(data: Any) -> Any:
    """The object :func:`dumps` serialised (from bytes or any buffer)."""
    return pickle.loads(data)


# ---------------------------------------------------------------------------------------------- user code
@dataclass(frozen=True)
class UserCode:
    """User modules a worker must be able to import before it unpickles a task.

    Attributes:
        files: ``(module name, absolute path, path relative to its shipped folder)`` of modules
            loaded from files under a synthetic name (scenario files).
        folders: folders whose modules import by plain name (a scenario file's siblings); Ray
            ships the first as the job's ``working_dir`` and the modules of the others by name.
        packages: absolute paths of top-level packages or single-file modules outside the
            installed site (a ``module:attr`` scenario imported from the working directory);
            Ray ships them as ``py_modules``.
    """

    files: tuple[tuple[str, str, str], ...] = ()
    folders: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.files or self.folders or self.packages)

    def covers(self, other: UserCode) -> bool:
        """Whether everything ``other`` needs is already part of this one."""
        return (set(other.files) <= set(self.files) and set(other.folders) <= set(self.folders)
                and set(other.packages) <= set(self.packages))

    def merged(self, other: UserCode) -> UserCode:
        return UserCode(tuple(dict.fromkeys(self.files + other.files)),
                        tuple(dict.fromkeys(self.folders + other.folders)),
                        tuple(dict.fromkeys(self.packages + other.packages)))


def _installed_roots() -> list[Path]:
    roots = {sysconfig.get_paths().get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    roots |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    import aumann

    aumann_root = Path(aumann.__file__).resolve().parent  # aumann itself: installed on every worker
    return [Path(r).resolve() for r in roots if r] + [aumann_root]


def _is_installed(path: Path) -> bool:
    path = path.resolve()
    return any(path == r or r in path.parents for r in _installed_roots()) or "site-packages" in path.parts \
        or "dist-packages" in path.parts


def user_code(modules: Iterable[Any] = ()) -> UserCode:
    """The user code workers need: every scenario file loaded so far (modules named
    ``aumann_user_scenario_*`` in ``sys.modules``), plus ``modules`` (module objects or importable
    names, e.g. the module of a ``package.module:attr`` scenario) that do not live in the installed
    site (site-packages, the standard library, aumann itself)."""
    files: list[tuple[str, str, str]] = []
    folders: list[str] = []
    packages: list[str] = []
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if name.startswith(USER_SCENARIO_PREFIX) and path:
            p = Path(path).resolve()
            files.append((name, str(p), p.name))
            folders.append(str(p.parent))
    for mod in modules:
        name = mod if isinstance(mod, str) else getattr(mod, "__name__", None)
        if not name or name.startswith(USER_SCENARIO_PREFIX):
            continue
        top = sys.modules.get(name.split(".")[0])
        if top is None:
            continue
        origin = getattr(top, "__file__", None)
        if origin is None and getattr(top, "__path__", None):
            origin = next(iter(top.__path__), None)
        if origin is None:
            continue
        p = Path(origin).resolve()
        if _is_installed(p):
            continue
        packages.append(str(p.parent if p.name == "__init__.py" else p))
    return UserCode(tuple(dict.fromkeys(files)), tuple(dict.fromkeys(folders)), tuple(dict.fromkeys(packages)))


def install_user_code(code: UserCode | None, *, shipped: bool = False) -> None:
    """Make ``code`` importable in this (worker) process: each scenario file is executed once under
    its synthetic module name -- from Ray's shipped copy in the working directory when ``shipped``
    and it is there, else from its absolute path -- and its folder goes on ``sys.path``."""
    if not code:
        return
    if not shipped:
        for folder in code.folders:
            if folder not in sys.path and os.path.isdir(folder):
                sys.path.insert(0, folder)
        for pkg in code.packages:
            parent = str(Path(pkg).parent)
            if parent not in sys.path and os.path.isdir(parent):
                sys.path.insert(0, parent)
    for name, path, rel in code.files:
        if name in sys.modules:
            continue
        candidates = [os.path.join(os.getcwd(), rel), path] if shipped else [path]
        where = next((c for c in candidates if os.path.isfile(c)), None)
        if where is None:
            raise ExecutorError(f"the worker on {socket.gethostname()} cannot find the scenario file {rel!r} "
                                f"(looked in {candidates}); it should have been shipped with the job")
        spec = importlib.util.spec_from_file_location(name, where)
        if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
            raise ExecutorError(f"the worker cannot load {where!r} as module {name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise


# ---------------------------------------------------------------------------------------------- shared objects
@dataclass(frozen=True)
class SharedRef:
    """How a worker finds the shared object of one ``map`` call: a token plus where the bytes are
    (a Ray ObjectRef in a list, so Ray does not resolve it per task, or a file on this machine)."""

    token: str
    ray_ref: list | None = None
    path: str | None = None
    size: int = 0


_SHARED: OrderedDict[str, Any] = OrderedDict()
_SHARED_KEEP = 2  # the shared objects of the last two maps stay cached in a worker


def resolve_shared(ref: SharedRef | None) -> Any:
    """The shared object behind ``ref``, unpickled once per worker process and cached."""
    if ref is None:
        return None
    if ref.token in _SHARED:
        _SHARED.move_to_end(ref.token)
        return _SHARED[ref.token]
    if ref.ray_ref is not None:
        import ray

        obj = loads(ray.get(ref.ray_ref[0]))
    elif ref.path is not None:
        with open(ref.path, "rb") as fh:
            obj = loads(fh.read())
    else:  # pragma: no cover - SharedRef is always built with one of the two
        raise ExecutorError("a shared object without a location")
    _SHARED[ref.token] = obj
    while len(_SHARED) > _SHARED_KEEP:
        _SHARED.popitem(last=False)
    return obj


# ---------------------------------------------------------------------------------------------- tasks
def _where() -> str:
    """Where this task runs: the Ray node id when in a Ray worker, else host and process id."""
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            if ray.is_initialized():
                return f"ray node {ray.get_runtime_context().get_node_id()[:12]}"
        except Exception:  # pragma: no cover - a Ray without a runtime context
            pass
    return f"{socket.gethostname()} (pid {os.getpid()})"


@dataclass
class Done:
    """A finished task: its result, serialised by :func:`dumps`, and where it ran."""

    payload: bytes
    where: str = field(default_factory=_where)


@dataclass
class Failed:
    """A failed task: the exception (serialised, or ``None`` when it does not pickle), its type and
    message, the remote traceback, and where it ran."""

    exc: bytes | None
    type_name: str
    message: str
    traceback: str
    where: str = field(default_factory=_where)


def run_task(fn_bytes: bytes, item_bytes: bytes, shared: SharedRef | None = None, code: UserCode | None = None,
             shipped: bool = False) -> Done | Failed:
    """Run one task in a worker: install the user code, unpickle ``fn`` and the item, call
    ``fn(item)`` (or ``fn(shared, item)``), and send back a :class:`Done` or :class:`Failed`."""
    try:
        install_user_code(code, shipped=shipped)
        fn = loads(fn_bytes)
        item = loads(item_bytes)
        out = fn(item) if shared is None else fn(resolve_shared(shared), item)
        return Done(dumps(out))
    except Exception as exc:
        try:
            blob: bytes | None = dumps(exc)
            loads(blob)
        except Exception:  # an exception that does not survive pickling: its text still travels
            blob = None
        return Failed(blob, type(exc).__qualname__, str(exc), traceback.format_exc())


def unwrap(res: Any, index: int, total: int) -> Any:
    """The result of a :class:`Done`, or for a :class:`Failed` the task's own exception (when it
    unpickles here) with the remote traceback as its ``__cause__`` (a :class:`RemoteTaskError`) and
    in ``exc.remote_traceback``; a :class:`RemoteTaskError` when it does not."""
    if isinstance(res, Done):
        return loads(res.payload)
    if not isinstance(res, Failed):  # pragma: no cover - run_task returns one of the two
        return res
    remote = RemoteTaskError(f"task {index + 1} of {total} failed on {res.where}: {res.type_name}: "
                             f"{_first_line(res.message)}\n--- remote traceback ---\n{res.traceback.rstrip()}")
    remote.remote_traceback = res.traceback
    remote.where = res.where
    exc = None
    if res.exc is not None:
        try:
            exc = loads(res.exc)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        remote.args = (f"task {index + 1} of {total} failed on {res.where}: {res.type_name}: "
                       f"{_first_line(res.message)}",)
        return remote
    exc.__cause__ = remote
    try:
        exc.remote_traceback = res.traceback
    except AttributeError:  # pragma: no cover - exceptions with __slots__
        pass
    return exc


def _first_line(text: str) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


__all__ = ["Done", "Failed", "SharedRef", "UserCode", "dumps", "install_user_code", "loads", "resolve_shared",
           "run_task", "unwrap", "user_code"]
