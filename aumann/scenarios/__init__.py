"""Runnable scenarios: an explicit registry of :class:`~aumann.scenarios.base.Scenario` objects.

Each built-in scenario lives in its own folder (``social_llm/``, ``midscale_social/``,
``econagent/``, ``megascale_social/``) whose ``scenario.py`` calls :func:`register`. Importing
:mod:`aumann.scenarios` imports none of them; :func:`get` and :func:`names` import the built-in modules on first use.

User scenarios come in three ways:

* ``register(scenario)`` from Python;
* a spec naming where one lives, ``package.module:attribute`` or ``path/to/file.py:attribute``
  (what ``aumann run`` takes; the attribute is a ``Scenario`` or a factory returning one; the
  module is imported from the working directory too, which console scripts do not put on
  ``sys.path``), resolved by :func:`load` and by :func:`get`;
* an installed package's entry point in the group ``aumann.scenarios``
  (``[project.entry-points."aumann.scenarios"] my-model = "my_pkg.scenarios:scenario"``): its name
  joins :func:`names` and ``aumann run --list``. A built-in's name (``midscale-social``, or ``Midscale_Social``,
  the same name once normalised) keeps running the built-in: :func:`get` warns
  (:class:`~aumann.errors.ScenarioShadowWarning`) and the list shows the entry point by its spec.

>>> from aumann import scenarios
>>> "social-llm" in scenarios.names()
True
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from importlib import metadata
from typing import Any

from aumann.checks import load_spec, user_module_name
from aumann.errors import ConfigError, ScenarioLoadError, ScenarioShadowWarning, UnknownScenarioError
from aumann.scenarios.base import Scenario, ScenarioConfig

ENTRY_POINT_GROUP = "aumann.scenarios"

_REGISTRY: dict[str, Scenario] = {}

#: name → module whose import registers the built-in scenario
_BUILTIN: dict[str, str] = {
    "social-llm": "aumann.scenarios.social_llm.scenario",
    "midscale-social": "aumann.scenarios.midscale_social.scenario",
    "econagent": "aumann.scenarios.econagent.scenario",
    "megascale-social": "aumann.scenarios.megascale_social.scenario",
}


def register(scenario):
    """Add ``scenario`` (a :class:`~aumann.scenarios.base.Scenario`) to the registry and return it.

    Re-registering a name replaces the earlier entry (so reloading a module is harmless).
    """
    if not isinstance(scenario, Scenario):
        raise ConfigError(f"register() takes a Scenario; got {type(scenario).__name__}")
    for old in [k for k in _REGISTRY if _key(k) == _key(scenario.name)]:  # "My_Model" replaces "my-model"
        del _REGISTRY[old]
    _REGISTRY[scenario.name] = scenario
    return scenario


def _registered(key: str) -> Scenario | None:
    """The registered scenario whose name is ``key`` once normalised (``get`` normalises what it is given: a
    scenario registered as ``My_Model`` was listed by ``names()`` and then unknown to ``get("My_Model")``)."""
    for name, scenario in _REGISTRY.items():
        if _key(name) == key:
            return scenario
    return None


def _available_builtins() -> list[str]:
    out = []
    for name, mod in _BUILTIN.items():
        try:
            if importlib.util.find_spec(mod) is not None:
                out.append(name)
        except ModuleNotFoundError:
            continue
    return out


def _load_builtin(name: str) -> None:
    mod = _BUILTIN.get(name)
    if mod is not None and _registered(name) is None and name in _available_builtins():
        importlib.import_module(mod)


def _key(name: str) -> str:
    return str(name).strip().lower().replace("_", "-")


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {k: eps[-1] for k, eps in _entry_point_names().items()}


def _entry_point_names() -> dict[str, list[metadata.EntryPoint]]:
    """Installed entry points by normalised name, each name's distinct targets in the order found (the last one
    runs, as before)."""
    out: dict[str, list[metadata.EntryPoint]] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        same = out.setdefault(_key(ep.name), [])
        same[:] = [e for e in same if e.value != ep.value] + [ep]  # one package seen twice is one target
    return out


def _twins(key: str) -> list[metadata.EntryPoint]:
    """The entry points of normalised name ``key`` that the one run hides (two packages naming a scenario alike)."""
    return _entry_point_names().get(key, [])[:-1]


def _twin_note(key: str, hidden: metadata.EntryPoint, runs: metadata.EntryPoint) -> str:
    return (f"the installed entry point {hidden.name!r} = {hidden.value!r} (group {ENTRY_POINT_GROUP!r}) is hidden by "
            f"{runs.name!r} = {runs.value!r}, which the name {key!r} runs; run it by its spec: aumann run "
            f"{hidden.value}")


def _shadowed() -> dict[str, list[metadata.EntryPoint]]:
    """Installed entry points whose name (normalised) is a built-in scenario's: the name runs the built-in."""
    builtin = {_key(n) for n in _BUILTIN}
    return {k: eps for k, eps in _entry_point_names().items() if k in builtin}


def _shadow_note(key: str, ep: metadata.EntryPoint) -> str:
    return (f"the installed entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP!r}) is hidden by the "
            f"built-in scenario {key!r}; run it by its spec: aumann run {ep.value}")


def _as_scenario(obj: Any, spec: str) -> Scenario:
    if isinstance(obj, Scenario):
        return obj
    if not callable(obj):
        raise ScenarioLoadError(f"scenario spec {spec!r} names a {type(obj).__name__}; it must name a Scenario or a "
                                f"factory returning one")
    from aumann.simulators.boundary import call

    made = call(spec, "the factory", obj, error=ScenarioLoadError)  # sys:exit is typed too, not a silent exit 0
    if not isinstance(made, Scenario):
        raise ScenarioLoadError(f"scenario spec {spec!r}: the factory returned a {type(made).__name__}, not a Scenario")
    return made


def _module_name(where: str) -> str:
    """The ``sys.modules`` key of what :func:`~aumann.checks.load_spec` imported for ``where``."""
    is_file = where.endswith(".py") or "/" in where or os.sep in where
    if not is_file:
        return where
    return user_module_name(where)


def load(spec: str) -> Scenario:
    """The scenario at ``spec``: ``package.module:attribute`` or ``path/to/file.py:attribute``.

    The attribute (dotted paths allowed) is a :class:`Scenario` or a factory returning one.

    Raises:
        ScenarioLoadError: the module or file cannot be imported, the attribute is missing, or it is
            neither a Scenario nor a factory returning one (the message names the spec).
    """
    spec = str(spec).strip()
    try:
        module, obj = load_spec(spec, error=ScenarioLoadError, what="scenario")
    except ScenarioLoadError as exc:
        where, _, attr = spec.rpartition(":")
        if "has no attribute" not in str(exc):
            raise
        module = sys.modules.get(_module_name(where))
        found = sorted(k for k, v in vars(module).items() if isinstance(v, Scenario)) if module else []
        raise ScenarioLoadError(f"scenario spec {spec!r}: {where} has no attribute {attr!r}"
                                + (f"; Scenario objects there: {found}" if found else "")) from None
    return _as_scenario(obj, spec)


def get(name: str) -> Scenario:
    """The scenario registered as ``name`` (built-ins are imported on demand), an installed entry
    point of that name, or the scenario at a ``module:attribute`` / ``file.py:attribute`` spec.

    Raises:
        UnknownScenarioError: no such scenario; the message lists the valid names.
        ScenarioLoadError: a spec or entry point that cannot be loaded.
    """
    text = str(name).strip()
    key = _key(text)
    _load_builtin(key)
    found = _registered(key)
    if found is not None:
        for hidden in _shadowed().get(key, []) if key in _BUILTIN else []:  # a plugin named like a built-in
            warnings.warn(_shadow_note(key, hidden), ScenarioShadowWarning, stacklevel=2)
        return found
    if ":" in text:
        return load(text)
    ep = _entry_points().get(key)
    if ep is not None:
        for hidden in _twins(key):  # two installed packages name a scenario alike: say which one runs
            warnings.warn(_twin_note(key, hidden, ep), ScenarioShadowWarning, stacklevel=2)
        try:
            obj = ep.load()
        except (Exception, SystemExit) as exc:
            raise ScenarioLoadError(f"scenario {name!r} (entry point {ep.value!r} in group {ENTRY_POINT_GROUP!r}) "
                                    f"cannot be loaded: {type(exc).__name__}: {exc}") from exc
        return _as_scenario(obj, f"{name} = {ep.value}")
    raise UnknownScenarioError(f"unknown scenario {name!r}; registered scenarios: {names()}; or give "
                               f"package.module:attribute or path/to/file.py:attribute")


def names() -> list[str]:
    """Sorted names of all registered scenarios: built-ins (imported here), ``register()``-ed ones and
    installed ``aumann.scenarios`` entry points (listed, not imported)."""
    for name in _available_builtins():
        _load_builtin(name)
    registered = {_key(n) for n in _REGISTRY}
    return sorted(set(_REGISTRY) | {n for n in _entry_points() if n not in registered})


def describe() -> list[tuple[str, str]]:
    """``(name, description)`` for every name in :func:`names`; an entry point that fails to load
    is listed with the reason instead of a description, and one that a built-in's name (or another installed
    entry point of its name) hides is listed by its spec (``module:attribute``, the way to run it) with a note."""
    out = []
    for name in names():
        try:
            with warnings.catch_warnings():  # (the hidden entry points are listed below)
                warnings.simplefilter("ignore", ScenarioShadowWarning)
                out.append((name, get(name).description))
        except ConfigError as exc:
            out.append((name, f"[cannot load: {exc}]"))
    shadowed = _shadowed()
    for key, eps in sorted(shadowed.items()):
        out.extend((ep.value, f"[{_shadow_note(key, ep)}]") for ep in eps)
    runs = _entry_points()
    for key in sorted(k for k in runs if k not in shadowed):
        out.extend((ep.value, f"[{_twin_note(key, ep, runs[key])}]") for ep in _twins(key))
    return out


__all__ = ["ENTRY_POINT_GROUP", "Scenario", "ScenarioConfig", "ScenarioLoadError", "UnknownScenarioError", "describe",
           "get", "load", "names", "register"]
