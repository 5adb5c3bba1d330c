"""Mutable objects that a replayed model shares with its original (a module-level default, a global graph).

A replay rebuilds the model with ``factory()``. When the model's constructor takes a mutable object it does not
make itself — mesa-examples' ``aco_tsp`` has ``def __init__(self, tsp_graph=TSPGraph.from_random(20))``, a
default built once when the module is imported — every model the factory builds holds the *same* graph: the
replay's steps (and the constructor's own re-initialisation of the pheromones) write into the original's graph,
and the branch and the original no longer describe two runs. :func:`shared_state` finds such objects by
identity, :data:`MAX_DEPTH` (4) levels deep: the model's attributes, the attributes or items of those
(``model.grid.G``), and so on (``model.world.layers['roads'].edges``), through dicts, lists, sets, deques and the
immutable containers that can hold mutable objects (tuples, frozensets, frozen dataclasses: ``model.layers =
(grid, [...])``); at most :data:`MAX_OBJECTS` objects on each side and 10,000 items of one container. It cannot see
sharing deeper than that, or through objects that are not plain Python containers or instances (``__slots__``
without a ``__dict__``, C extension types).

Objects that are immutable (numbers, text, tuples, frozensets, read-only arrays, frozen dataclasses), code
(classes, functions, modules), type annotations (``typing``'s generic aliases and type variables, ``list[int]``:
Mesa's cell collections carry the process-wide ``CellCollection[Cell]`` as ``__orig_class__``), and objects
whose type defines its own ``__deepcopy__`` (aumann's LLM backends, response caches and usage meters return
themselves there, to be shared by every branch on purpose) are not reported.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, tuple, frozenset, range, type, enum.Enum,
              np.generic, np.dtype, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
              types.ModuleType, types.GenericAlias, types.UnionType)
_ITEMS_CAP = 10_000  # items of one container looked at (a model's agent dict): identity checks are cheap
#: levels of attributes and items looked into (``model.a`` is level 1, ``model.a.b['c']`` level 3)
MAX_DEPTH = 4
#: objects looked at on each side (the original and the branch), whatever the depth: bounds the time of the check
MAX_OBJECTS = 200_000


def _mutable(obj: Any) -> bool:
    if isinstance(obj, _IMMUTABLE) or (callable(obj) and not hasattr(obj, "__dict__")):
        return False
    if type(obj).__module__ == "typing":  # CellCollection[Cell], TypeVar: cached once per process, never written
        return False
    if isinstance(obj, np.ndarray):
        return bool(obj.flags.writeable)
    if dataclasses.is_dataclass(obj) and getattr(type(obj), "__dataclass_params__", None) is not None \
            and type(obj).__dataclass_params__.frozen:
        return False
    return getattr(type(obj), "__deepcopy__", None) is None  # a type that copies itself decides what it shares


def _enterable(obj: Any) -> bool:
    """Whether the walk looks inside ``obj``: a mutable object, or an immutable container (a tuple, a frozenset, a
    frozen dataclass) whose items may be mutable objects themselves (``model.layers = (grid, [...])``)."""
    if _mutable(obj):
        return True
    if isinstance(obj, tuple | frozenset):
        return True
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type) \
        and getattr(type(obj), "__deepcopy__", None) is None


_SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes, range})  # neither mutable nor containers
_KINDS: dict[type, tuple[bool, bool]] = {}  # type -> (mutable, enterable): both decided by the type alone


def _kind(obj: Any) -> tuple[bool, bool]:
    """(:func:`_mutable`, :func:`_enterable`) of ``obj``, by its type (an array's writeable flag by the array)."""
    t = type(obj)
    if isinstance(obj, np.ndarray):
        return bool(obj.flags.writeable), False
    k = _KINDS.get(t)
    if k is None:
        k = (_mutable(obj), _enterable(obj))
        if len(_KINDS) < 10_000:
            _KINDS[t] = k
    return k


def _children(obj: Any) -> Iterator[tuple[str, Any, Any]]:
    """(how, key, value) of ``obj``'s items (``how`` ``"["``) or attributes (``"."``)."""
    if isinstance(obj, dict):
        for k, (key, v) in enumerate(obj.items()):
            if k >= _ITEMS_CAP:
                return
            yield "[", key, v
    elif isinstance(obj, list | set | tuple | frozenset | collections.deque):
        for k, v in enumerate(obj):
            if k >= _ITEMS_CAP:
                return
            yield "[", k, v
    else:
        try:
            attrs = vars(obj)
        except TypeError:
            return
        for name, v in list(attrs.items()):
            yield ".", name, v


def _path(path: str, how: str, key: Any) -> str:
    return f"{path}[{key!r}]" if how == "[" else f"{path}.{key}"


def _reach(root: Any, shared: set[int] | None = None) -> tuple[list[tuple[str, Any]], list[Any]]:
    """(path, object) of the mutable objects reachable from ``root``'s attributes or items, breadth first, up to
    :data:`MAX_DEPTH` levels and :data:`MAX_OBJECTS` objects, each entered once. With ``shared`` (ids), only
    the objects among them, at every path they are reached by, and not entered (what one holds is shared along with
    it). Also returns what was looked at, to be kept alive so that no id() is reused during the walk."""
    out: list[tuple[str, Any]] = []
    seen = {id(root)}
    keep: list[Any] = [root]
    frontier: list[tuple[str, Any]] = [("", root)]
    for _ in range(MAX_DEPTH):
        nxt: list[tuple[str, Any]] = []
        for path, obj in frontier:
            for how, key, v in _children(obj):
                if type(v) in _SCALARS:
                    continue
                i = id(v)
                if shared is not None and i in shared:  # listed at every path it is reached by, not entered
                    out.append((_path(path, how, key), v))
                    continue
                if i in seen:
                    continue
                if len(keep) > MAX_OBJECTS:
                    return out, keep
                seen.add(i)
                keep.append(v)
                mutable, enter = _kind(v)
                if mutable or enter:
                    where = _path(path, how, key)
                    if shared is None and mutable:
                        out.append((where, v))
                    if enter:
                        nxt.append((where, v))
        frontier = nxt
    return out, keep


def shared_state(original: Any, branch: Any) -> list[str]:
    """Paths (``".tsp_graph"``, ``".grid.G"``, ``".layers[1]"``, ``".a.b['c']"``) of mutable objects that ``branch``
    holds and that are the very objects ``original`` holds, up to :data:`MAX_DEPTH` levels deep, through attributes,
    dict items and the items of lists, sets, tuples, frozensets and deques (see the module's docstring for what is
    not reported). A shared object's own contents are not listed again."""
    if original is branch:
        return ["(the same model)"]
    theirs, keep = _reach(original)
    ids = {id(v) for _, v in theirs}
    mine, keep_mine = _reach(branch, ids)
    del keep, keep_mine
    return [path for path, _ in mine]


__all__ = ["shared_state"]
