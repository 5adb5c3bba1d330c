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
    """Everything :func:`unused_llm_settings` (given ``offline``) and :func:`unused_dry_run_flags` find, in that order
    (each warned of)."""
    return [*unused_llm_settings(args, offline=offline), *unused_dry_run_flags(args)]


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


__all__ = ["unused_dry_run_flags", "unused_llm_settings", "unused_run_flags"]
