"""What ``aumann run`` was given that the run it makes never reads: said, recorded, not refused.

Each is warned of once as an :class:`~aumann.errors.UnusedArgumentWarning` naming it and why nothing reads it, and
returned for ``manifest.json``'s ``unused_flags`` (as ``aumann attribute`` records its unused path-integral flags).
They are warned of, not refused: the command accepted them, and dropped them without a word, before.

* The LLM request settings (:data:`~aumann.simulators.llm.settings.REQUEST_KEYS`: temperature, top_p, max_tokens,
  seed, system_prompt) under the offline policy (``--backend offline``, the default, or a registered backend whose
  factory returns ``None``: :func:`~aumann.simulators.llm.registry.offline_policy_decides`), which sends no request --
  given as flags (``--temperature 0.7`` → ``"--temperature"``), as ``--set llm.KEY=VALUE`` (→ ``"--set llm.KEY"``)
  or in the ``[llm]`` table of the ``--config`` file (→ ``"--config llm.KEY"``). The scenario's packaged defaults
  are nobody's choice and are never named. ``llm.max_invalid_rate`` is read offline too (it judges abstentions).
* The LLM backend's flags (``--model``, ``--base-url``, ``--rpm``, ``--cache``, ...) under a registered backend whose
  factory returned ``None``: no backend reads them (``--backend offline`` refuses them before the run; a factory's
  ``None`` is known only once it ran).
* ``--assumed-latency`` without ``--dry-run``: it sets only the dry run's time estimate.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Mapping
from typing import Any

from aumann.errors import ConfigError, UnusedArgumentWarning

#: the sampling flags and the ``[llm]`` key each sets (``--llm-seed`` is ``llm.seed``)
_FLAG_KEYS = {"temperature": "temperature", "top_p": "top_p", "max_tokens": "max_tokens", "llm_seed": "seed",
              "system_prompt": "system_prompt"}


def unused_llm_settings(args: argparse.Namespace, *, offline: bool | None = None) -> list[str]:
    """The LLM request settings the user gave where the run's decisions come from the offline policy, which builds
    and sends no request, so nothing samples with them: flags first, then ``--set`` keys, then the ``--config``
    file's ``[llm]`` keys (``["--temperature", "--set llm.top_p", "--config llm.seed"]``), said in one warning.
    ``[]`` with any other backend, and for a run that gives none. Call it after the config loaded: a ``--set`` or a
    file it cannot read is then not a warning's business but was the config's error.

    ``offline``: whether the offline policy decides (:func:`~aumann.simulators.llm.registry.offline_policy_decides`
    of the backend ``build_backend`` made, which knows whether a registered factory returned ``None``); ``None``:
    ``--backend offline``."""
    from aumann.simulators.llm.settings import REQUEST_KEYS

    name = getattr(args, "backend", "offline")
    if not (name == "offline" if offline is None else offline):
        return []
    names: list[str] = []
    shown: list[str] = []
    for flag, key in _FLAG_KEYS.items():
        value = getattr(args, flag, None)
        if value is not None:
            names.append(f"--{flag.replace('_', '-')}")
            shown.append(_with_value(names[-1], key, value, " "))
    for key, value in _set_keys(getattr(args, "assignments", None) or [], REQUEST_KEYS).items():
        names.append(f"--set llm.{key}")
        shown.append(_with_value(f"--set llm.{key}", key, value, "="))
    config = getattr(args, "config", None)
    in_file = _file_keys(config, REQUEST_KEYS) if config is not None else {}
    if in_file:
        names.extend(f"--config llm.{key}" for key in in_file)
        shown.append(f"{', '.join(_with_value(f'llm.{k}', k, v, ' = ') for k, v in in_file.items())} in --config "
                     f"{config}")
    if not names:
        return []
    them = "them" if len(names) > 1 else "it"
    which = ("--backend offline, the default" if name == "offline" else
             f"--backend {name}, whose factory builds no backend: it returned None")
    warnings.warn(f"{', '.join(shown)} given but unused: the run's decisions come from the offline policy ({which}), "
                  f"which sends no LLM request, so nothing samples with {them}; add --backend openai (or local) to "
                  f"use {them}", UnusedArgumentWarning, stacklevel=2)
    return names


#: the flags that only an LLM backend reads (build_backend), with the default each has when left out
_BACKEND_FLAGS = {"model": None, "base_url": None, "concurrency": None, "rpm": None, "tpm": None, "max_calls": None,
                  "max_cost": None, "prices": None, "structured_output": "auto", "llm_timeout": 60.0,
                  "max_retries": None, "retry_after_max": None}


def backend_flags_given(args: argparse.Namespace) -> list[str]:
    """The LLM backend's flags given (``--model``, ``--rpm``, ...; one at its default value is not told apart)."""
    return [f"--{k.replace('_', '-')}" for k, default in _BACKEND_FLAGS.items() if getattr(args, k, default) != default]


def unused_backend_flags(args: argparse.Namespace, *, offline: bool) -> list[str]:
    """The LLM backend's flags (:func:`backend_flags_given`, ``--cache``, ``--cache-mode``) given to a run whose
    decisions come from the offline policy all the same: a registered backend whose factory returned ``None``
    (``offline``: :func:`~aumann.simulators.llm.registry.offline_policy_decides` of what ``build_backend`` made). No
    backend reads them -- no request is built, sent, limited, priced or cached -- and whether the factory returns
    ``None`` is known only once it ran, so they are warned of here, by name (a ``--base-url`` may hold credentials:
    no value is shown), and returned for the manifest's ``unused_flags``; ``[]`` otherwise. (``--backend offline``
    refuses them before anything runs: :func:`aumann.cli.llm_options.check_arguments`.)"""
    if not offline:
        return []
    names = backend_flags_given(args)
    if getattr(args, "cache", None) is not None:
        names.append("--cache")
    if getattr(args, "cache_mode", "record") != "record":
        names.append("--cache-mode")
    if not names:
        return []
    them = "them" if len(names) > 1 else "it"
    name = getattr(args, "backend", "offline")
    which = ("--backend offline, the default" if name == "offline" else
             f"--backend {name}, whose factory builds no backend: it returned None")
    warnings.warn(f"{', '.join(names)} given but unused: the run's decisions come from the offline policy ({which}), "
                  f"which builds, sends and caches no LLM request, so no LLM backend reads {them}; leave {them} out, "
                  "or use a backend that sends requests (--backend openai or local)", UnusedArgumentWarning,
                  stacklevel=2)
    return names


def unused_dry_run_flags(args: argparse.Namespace) -> list[str]:
    """``["--assumed-latency"]`` (and the warning) when it is given to a run that is no dry run: it sets only the
    seconds per request of ``--dry-run``'s time estimate, and a real run sends its requests and takes the time they
    take (``--assumed-latency 0.5`` was dropped without a word); else ``[]``."""
    value = getattr(args, "assumed_latency", None)
    if value is None or getattr(args, "dry_run", False):
        return []
    warnings.warn(f"--assumed-latency {_number(value)} given but unused: it sets only the seconds per LLM request of "
                  "--dry-run's time estimate, and this run is no dry run; add --dry-run for the estimate (nothing is "
                  "sent), or leave it out", UnusedArgumentWarning, stacklevel=2)
    return ["--assumed-latency"]


def unused_run_flags(args: argparse.Namespace, *, offline: bool | None = None) -> list[str]:
    """Everything :func:`unused_llm_settings` (given ``offline``), :func:`unused_backend_flags` (given ``offline``
    by the caller) and :func:`unused_dry_run_flags` find, in that order (each warned of)."""
    return [*unused_llm_settings(args, offline=offline), *(unused_backend_flags(args, offline=offline) if offline
                                                           else []), *unused_dry_run_flags(args)]


def _set_keys(assignments: list[str], keys: tuple[str, ...]) -> dict[str, Any]:
    """The ``llm`` request keys the ``--set`` assignments give (``llm.temperature=0.7``, ``llm={seed=3}``), each
    with its last value, in the order first given."""
    from aumann.configs import parse_assignment

    found: dict[str, Any] = {}
    for text in assignments:
        try:
            table = parse_assignment(text).get("llm")
        except ConfigError:  # load_config refused it already; nothing to name here
            continue
        if isinstance(table, Mapping):
            found.update({k: v for k, v in table.items() if k in keys})
    return found


def _file_keys(config: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The ``llm`` request keys the ``--config`` file's ``[llm]`` table sets (the file the config loaded)."""
    from aumann.configs import load_toml

    try:
        table = load_toml(config, what="--config file").get("llm")
    except ConfigError:
        return {}
    return {k: v for k, v in table.items() if k in keys} if isinstance(table, Mapping) else {}


def _with_value(name: str, key: str, value: Any, sep: str) -> str:
    # the system prompt's text is the user's, and long: named, not shown
    return name if key == "system_prompt" else f"{name}{sep}{_number(value)}"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)[:40]


__all__ = ["backend_flags_given", "unused_backend_flags", "unused_dry_run_flags", "unused_llm_settings",
           "unused_run_flags"]
