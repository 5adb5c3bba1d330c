"""Runnable scenarios: an explicit registry of :class:`~aumann.scenarios.base.Scenario` objects.

Each built-in scenario lives in its own folder (``social_llm/``, ``midscale_social/``,
``econagent/``, ``megascale_social/``) whose ``scenario.py`` calls :func:`register`. Importing :mod:`aumann.scenarios`
imports none of them; :func:`get` and :func:`names` import the built-in modules on first use. No
entry points, no dotted paths from configs: user scenarios are added with ``register(scenario)``.

>>> from aumann import scenarios
>>> "social-llm" in scenarios.names()
True
"""

from __future__ import annotations

import importlib
import importlib.util

from aumann.errors import ConfigError, UnknownScenarioError

_REGISTRY: dict[str, object] = {}

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
    from aumann.scenarios.base import Scenario

    if not isinstance(scenario, Scenario):
        raise ConfigError(f"register() takes a Scenario; got {type(scenario).__name__}")
    _REGISTRY[scenario.name] = scenario
    return scenario


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
    if mod is not None and name not in _REGISTRY and name in _available_builtins():
        importlib.import_module(mod)


def get(name: str):
    """The scenario registered as ``name`` (built-ins are imported on demand).

    Raises:
        UnknownScenarioError: no such scenario; the message lists the valid names.
    """
    key = str(name).strip().lower().replace("_", "-")
    _load_builtin(key)
    if key not in _REGISTRY:
        raise UnknownScenarioError(f"unknown scenario {name!r}; registered scenarios: {names()}")
    return _REGISTRY[key]


def names() -> list[str]:
    """Sorted names of all registered scenarios, including the built-ins (imported here)."""
    for name in _available_builtins():
        _load_builtin(name)
    return sorted(_REGISTRY)


__all__ = ["UnknownScenarioError", "get", "names", "register"]
