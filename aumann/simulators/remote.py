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
  with synthetic names (``aumann_user_<stem>_<hash>``) that a fresh worker cannot import.
  :class:`UserCode` names the ones a map's payload refers to (:func:`collecting` notes them while
  :func:`dumps` pickles) and the folders and packages they need; a worker installs them before it
  unpickles anything (:func:`install_user_code`), from the absolute path on the same machine or
  from the copy Ray shipped with the job's runtime environment (``py_modules``) on a node without
  the driver's disk. That copy is named after the module (``aumann_user_<stem>_<hash>.py``), not the
  file, so two files both named ``scenario.py`` cannot hide each other on a worker.
"""

from __future__ import annotations

import contextlib
import copyreg
import importlib.util
import io
import os
import pickle
import socket
import sys
import sysconfig
import traceback
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aumann.checks import USER_MODULE_PREFIX
from aumann.errors import ExecutorError, RemoteTaskError

#: the prefix of the modules user files (scenarios, indicators) are loaded into (:func:`aumann.checks.load_spec`)
USER_SCENARIO_PREFIX = USER_MODULE_PREFIX


# ---------------------------------------------------------------------------------------------- serialising
_SUBSTITUTES: dict[int, tuple[Any, Any]] = {}
_SEEN: list[set[str]] = []  # the open collecting() blocks: the user modules dumps() met in each


@contextlib.contextmanager
def collecting() -> Any:
    """While pickling in this block, note the user modules (``aumann_user_*``: scenario and indicator files) whose
    classes, functions or module objects the pickles refer to: yields the set of their names, which
    :func:`user_code` takes as ``only=`` (a worker needs those, and no other file loaded in this process)."""
    seen: set[str] = set()
    _SEEN.append(seen)
    try:
        yield seen
    finally:
        _SEEN.remove(seen)


def _note_user_module(obj: Any) -> None:
    import types

    if isinstance(obj, types.ModuleType):
        name = obj.__name__
    elif isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
        name = getattr(obj, "__module__", None)
    else:
        return
    if isinstance(name, str) and name.startswith(USER_SCENARIO_PREFIX):
        for seen in _SEEN:
            seen.add(name)


@contextlib.contextmanager
def substituting(pairs: dict[int, tuple[Any, Any]]) -> Any:
    """While pickling in this block, an object ``o`` with ``pairs[id(o)] == (o, twin)`` travels as
    ``twin`` (e.g. the driver's LLM backend, wherever a model refers to it, as the backend served to
    workers)."""
    saved = dict(_SUBSTITUTES)
    _SUBSTITUTES.update(pairs)
    try:
        yield
    finally:
        _SUBSTITUTES.clear()
        _SUBSTITUTES.update(saved)


def _same(obj: Any) -> Any:
    return obj


def dumps(obj: Any) -> bytes:
    """``obj`` as bytes: cloudpickle (lambdas and closures travel too), protocol 5, in-band buffers,
    with the repairs Mesa models need (:func:`_pickler_class`). An object graph too deep for the
    interpreter's stack (agents that point at the neighbourhoods of cells that hold agents ...) is
    pickled again on a thread with a large stack and a high recursion limit."""
    try:
        return _dump(obj)
    except (RecursionError, pickle.PicklingError) as exc:
        if "recursion" not in str(exc).lower() and not isinstance(exc, RecursionError):
            raise
    return _deep(_dump, obj)


def _dump(obj: Any) -> bytes:
    buf = io.BytesIO()
    _pickler_class()(buf, protocol=5).dump(obj)
    return buf.getvalue()


def _deep(fn: Any, arg: Any) -> Any:
    """``fn(arg)`` on a thread with a 1 GiB stack and a recursion limit of 10^6 (restored after)."""
    import threading

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = fn(arg)
        except BaseException as exc:  # handed to the caller's thread
            box["exc"] = exc

    old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
    try:
        threading.stack_size(1 << 30)
        sys.setrecursionlimit(max(old_limit, 1_000_000))
        t = threading.Thread(target=run, name="aumann-deep-pickle")
        t.start()
        t.join()
    finally:
        threading.stack_size(old_stack)
        sys.setrecursionlimit(old_limit)
    if "exc" in box:
        raise box["exc"]
    return box["out"]


class _CellClass:
    """The dynamic cell class of one Mesa grid, rebuilt once on unpickling.

    Mesa 3.3 gives every grid its own ``GridCell`` subclass (property layers such as ``cell.sugar``
    are descriptors on it) and pickles each cell through ``pickle_gridcell``, whose counterpart
    creates a new class *per cell*; the grid then puts its layer descriptors on the class of cell
    (0, 0) only, so every other cell loses them (``'GridCell' object has no attribute 'sugar'``
    in a worker). Cells pickled by :func:`dumps` share one of these per grid, so they share one class.
    """

    def __init__(self, base: type) -> None:
        self.base = base
        self._klass: type | None = None

    def __getstate__(self) -> dict:
        return {"base": self.base}

    def __setstate__(self, state: dict) -> None:
        self.base, self._klass = state["base"], None

    def klass(self, reducer: Any) -> type:
        if self._klass is None:
            self._klass = type("GridCell", (self.base,), {"_mesa_properties": set()})
            copyreg.pickle(self._klass, reducer)  # picklable again, the way Mesa pickles grid cells
        return self._klass


def _view_of(base: Any, dtype: Any, shape: tuple, offset: int, strides: tuple, writeable: bool) -> Any:
    import numpy as np

    out = np.ndarray(shape, dtype, buffer=base, offset=offset, strides=strides)
    if not writeable:
        out.flags.writeable = False
    return out


def _permuted(compact: Any, inverse: tuple[int, ...], writeable: bool) -> Any:
    import numpy as np

    out = np.transpose(compact, inverse)
    if not writeable:
        out.flags.writeable = False
    return out


def _weak_method(obj: Any, func: Any) -> Any:
    import types

    return weakref.WeakMethod(types.MethodType(func, obj))


def _dead_ref() -> Any:
    class _Gone:
        pass

    return weakref.ref(_Gone())


def _new_model(cls: type, counters: list[tuple[type, int]]) -> Any:
    """An empty model whose Mesa 3.3 ``unique_id`` counters continue where the original's were."""
    import itertools

    obj = cls.__new__(cls)
    for owner, nxt in counters:
        owner.__dict__["_ids"][obj] = itertools.count(nxt)
    return obj


def _set_state(obj: Any, state: Any) -> None:
    if hasattr(obj, "__setstate__"):
        obj.__setstate__(state)
    else:  # pragma: no cover - every object has __setstate__ since Python 3.11
        obj.__dict__.update(state)


def _id_counters(model: Any) -> list[tuple[type, int]]:
    """Mesa 3.3 draws agent ids from a class-level ``Agent._ids[model]`` counter keyed by the model
    object, which pickling cannot see: (the class holding the counters, next id) for ``model``."""
    import re
    from collections.abc import MutableMapping

    out, seen = [], set()
    for klass in {type(a) for a in getattr(model, "agents", ())}:
        owner = next((k for k in klass.__mro__ if isinstance(k.__dict__.get("_ids"), MutableMapping)), None)
        if owner is None or owner in seen:
            continue
        seen.add(owner)
        ids = owner.__dict__["_ids"]
        if model in ids:
            m = re.fullmatch(r"count\((-?\d+)\)", repr(ids[model]))
            if m is not None:
                out.append((owner, int(m.group(1))))
    return out


def _links_cells(connections: Any) -> bool:
    """Whether a cell's pickled ``connections`` hold the linked cells themselves (Mesa 3.3), not their coordinates
    (Mesa >= 3.5: ``Cell.__getstate__``)."""
    values = connections.values() if isinstance(connections, Mapping) else ()
    return any(hasattr(v, "coordinate") and hasattr(v, "connections") for v in values)


def _unpickle_cell(proxy: _CellClass, reducer: Any, fields: tuple) -> Any:
    """Mesa's ``unpickle_gridcell`` with the grid's one shared class."""
    instance = proxy.klass(reducer)((0, 0))
    for k, v in fields[1].items():
        if k != "__dict__":
            setattr(instance, k, v)
    return instance


_PICKLER: list[type] = []


def _pickler_class() -> type:
    if _PICKLER:
        return _PICKLER[0]
    import cloudpickle
    import numpy as np

    class _Pickler(cloudpickle.CloudPickler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._cell_classes: dict[type, _CellClass] = {}

        def reducer_override(self, obj: Any) -> Any:
            if _SEEN:
                _note_user_module(obj)
            if _SUBSTITUTES:
                pair = _SUBSTITUTES.get(id(obj))
                if pair is not None and pair[0] is obj:
                    return _same, (pair[1],)
            cls = type(obj)
            reducer = copyreg.dispatch_table.get(cls)
            if reducer is not None and getattr(reducer, "__name__", "") == "pickle_gridcell" and \
                    hasattr(obj, "__getstate__"):
                proxy = self._cell_classes.setdefault(cls, _CellClass(cls.__bases__[0]))
                d, slots = obj.__getstate__()
                # Mesa 3.3 hands the links over as the linked cells and re-links them on unpickling
                # (Grid.__setstate__): pickling them would recurse from cell to cell across the whole grid
                # (RecursionError on large grids), so they are dropped. Mesa >= 3.5 hands them over as coordinates
                # and re-links nothing (its space maps the coordinates back): those travel as they are
                slots = {k: ({} if k == "connections" and _links_cells(v) else v) for k, v in slots.items()}
                return _unpickle_cell, (proxy, reducer, (d, slots))
            if cls.__name__ == "WeakMethod" and cls.__module__ == "weakref":
                meth = obj()
                return (_dead_ref, ()) if meth is None else (_weak_method, (meth.__self__, meth.__func__))
            if cls is weakref.ref:  # a weak reference to an object that travels in the same pickle
                target = obj()
                return (_dead_ref, ()) if target is None else (weakref.ref, (target,))
            if cls.__name__ == "ndarray" and cls.__module__ == "numpy" and obj.dtype != object:
                base = obj.base
                if (type(base) is type(obj) and base.dtype != object
                        and base.nbytes <= max(4 * obj.nbytes, 1 << 20)):
                    # a view travels as a view of its base (Mesa's agent positions and the buffer behind them)
                    offset = obj.__array_interface__["data"][0] - base.__array_interface__["data"][0]
                    return _view_of, (base, obj.dtype, obj.shape, offset, obj.strides, obj.flags.writeable)
                if obj.ndim > 1 and not (obj.flags.c_contiguous or obj.flags.f_contiguous):
                    # numpy would send it C-ordered; its axes keep their memory order instead (kernels that
                    # reduce in memory order give the same bits in the worker as in the driver)
                    perm = tuple(int(i) for i in np.argsort([-abs(st) for st in obj.strides], kind="stable"))
                    inverse = tuple(int(i) for i in np.argsort(perm))
                    compact = np.array(np.transpose(obj, perm), order="C", copy=True)  # owns its data: no view rule
                    return _permuted, (compact, inverse, obj.flags.writeable)
            mesa = sys.modules.get("mesa")
            if mesa is not None and isinstance(obj, getattr(mesa, "Model", ())) and obj.__class__ is cls:
                counters = _id_counters(obj)
                if counters:
                    red = obj.__reduce_ex__(5)
                    if len(red) >= 3 and red[0] is copyreg.__newobj__:
                        return (_new_model, (cls, counters), red[2], red[3] if len(red) > 3 else None,
                                red[4] if len(red) > 4 else None, _set_state)
            return super().reducer_override(obj)

    _PICKLER.append(_Pickler)
    return _Pickler


def loads(data: Any) -> Any:
    """The object :func:`dumps` serialised (from bytes or any buffer). Mesa grids of any dimension unpickle (Mesa
    3.3's own ``Grid.__setstate__`` reads cell (0, 0), which a 1-D or 3-D grid lacks)."""
    from aumann.simulators.branching import grid_setstate_any_dims

    with grid_setstate_any_dims():
        try:
            return pickle.loads(data)
        except RecursionError:
            return _deep(pickle.loads, data)


# ---------------------------------------------------------------------------------------------- user code
@dataclass(frozen=True)
class UserCode:
    """User modules a worker must be able to import before it unpickles a task.

    Attributes:
        files: ``(module name, absolute path, path relative to its folder)`` of modules loaded
            from files under a synthetic name (scenario files). Ray ships each as a copy named
            after the module (``<module name>.py``), so files of the same name do not collide.
        folders: folders whose modules import by plain name (a scenario file's siblings); Ray
            ships their ``.py`` files and packages as ``py_modules``.
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


def user_code(modules: Iterable[Any] = (), *, only: Iterable[str] | None = None) -> UserCode:
    """The user code workers need: the scenario files loaded so far (modules named ``aumann_user_*`` in
    ``sys.modules``, indicator files too) -- with ``only``, just those it names (what :func:`collecting` found a
    map's payload refers to), else every one -- plus ``modules`` (module objects or importable names, e.g. the
    module of a ``package.module:attr`` scenario) that do not live in the installed site (site-packages, the
    standard library, aumann itself)."""
    files: list[tuple[str, str, str]] = []
    folders: list[str] = []
    packages: list[str] = []
    wanted = None if only is None else set(only)
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if name.startswith(USER_SCENARIO_PREFIX) and path and (wanted is None or name in wanted):
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
    its synthetic module name -- from Ray's shipped copy (on ``sys.path``, named after the module) when
    ``shipped`` and it is there, else from its absolute path -- and its folder goes on ``sys.path``."""
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
        # Ray unpacks shipped modules into folders it puts on sys.path: the scenario file's copy is there under its
        # module's name (two files both named scenario.py: the same name, and the worker took the first it found)
        candidates = ([path] if os.path.isfile(path) and not shipped else []) + \
            [os.path.join(p or os.getcwd(), f"{name}.py") for p in sys.path if shipped] + [path]
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
    message, the remote traceback, and where it ran; and what the driver's :class:`RemoteTaskError` keeps of an
    exception that does not pickle: its ``.branch`` (the :func:`~aumann.simulators.fork_many` branch it was raised
    in, when that key pickles) and its notes."""

    exc: bytes | None
    type_name: str
    message: str
    traceback: str
    where: str = field(default_factory=_where)
    branch: Any = None
    notes: tuple[str, ...] = ()


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
        branch, notes = None, ()
        if blob is None:  # what the driver's RemoteTaskError keeps of it
            branch = _picklable(getattr(exc, "branch", None))
            notes = tuple(n for n in getattr(exc, "__notes__", ()) if isinstance(n, str))
        return Failed(blob, type(exc).__qualname__, str(exc), traceback.format_exc(), branch=branch, notes=notes)


def _picklable(value: Any) -> Any:
    """``value`` if it survives :func:`dumps` and :func:`loads`, else its ``repr``."""
    try:
        loads(dumps(value))
    except Exception:
        return repr(value)
    return value


def unwrap(res: Any, index: int, total: int) -> Any:
    """The result of a :class:`Done`, or for a :class:`Failed` the task's own exception (when it
    unpickles here) with the remote traceback as its ``__cause__`` (a :class:`RemoteTaskError`) and
    in ``exc.remote_traceback``; a :class:`RemoteTaskError` when it does not (carrying the exception's ``.branch``
    and notes)."""
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
        remote.branch = getattr(res, "branch", None)  # a fork_many branch's key (Failed objects of before: none)
        for note in getattr(res, "notes", ()):
            remote.add_note(note)
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


__all__ = ["Done", "Failed", "SharedRef", "UserCode", "collecting", "dumps", "install_user_code", "loads",
           "resolve_shared", "run_task", "unwrap", "user_code"]
