"""The execution options of ``aumann run``: where independent runs, forks and attribution blocks go.

``--executor local|ray``, ``--workers N`` (tasks at once, the same meaning on every executor),
``--ray-address ADDR``, ``--ray-runtime-env JSON|FILE`` and ``--ray-max-retries N``. Each has a config key in the
``[execution]`` table (:class:`~aumann.scenarios.base.ExecutionConfig`); the address also comes from
``RAY_ADDRESS``. Precedence: flag, then environment, then config. An address from a flag or the
config implies ``--executor ray``; ``RAY_ADDRESS`` alone does not (it is ambient), it only says where
``--executor ray`` attaches. ``--executor ray`` without an address starts a private local Ray
instance in its own temp dir.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from aumann.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the execution options to ``aumann run``."""
    e = p.add_argument_group("execution (see docs/cluster.md)")
    e.add_argument("--executor", choices=("local", "ray"), default=None,
                   help="where independent runs (or, with one run, its forks and attribution) execute: a local "
                        "process pool (default) or Ray (= execution.executor); results are bit-identical")
    e.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="tasks that run at once, on either executor (= execution.workers): default 1 locally "
                        "(serial) and every CPU of the cluster on Ray; 0 = every CPU there is")
    e.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="attach to this Ray cluster (host:6379, auto, ray://host:10001; else RAY_ADDRESS, else "
                        "execution.ray_address); implies --executor ray. Without one, --executor ray starts a "
                        "private local instance in its own temp dir")
    e.add_argument("--ray-runtime-env", default=None, metavar="JSON|FILE",
                   help="a Ray runtime environment (JSON text or a .json file) laid over the one aumann builds, "
                        "which already ships a scenario file and its folder (= execution.ray_runtime_env)")
    e.add_argument("--ray-max-retries", type=_retries, default=None, metavar="N",
                   help="re-runs of a task whose Ray worker or node died (preempted, killed) before the run stops "
                        "(= execution.ray_max_retries; default 3)")


#: the most tasks at once (``execution.workers`` has the same bound): a pool that size is already absurd, and a
#: larger number overflowed the process pool's semaphore (a raw ``OverflowError`` traceback)
MAX_WORKERS = 1_000_000


def _workers(text: str) -> int:
    """``--workers``: an integer in [0, :data:`MAX_WORKERS`] (0 = every CPU), through the shared flag parser."""
    from aumann.cli.args import integer

    try:
        return integer(minimum=0, maximum=MAX_WORKERS)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (0 = every CPU)") from None


#: the most re-runs of a task (``execution.ray_max_retries`` has the same bound)
MAX_RETRIES = 100


def _retries(text: str) -> int:
    """``--ray-max-retries``: an integer in [0, :data:`MAX_RETRIES`], through the shared flag parser."""
    from aumann.cli.args import integer

    return integer(minimum=0, maximum=MAX_RETRIES)(text)


def _runtime_env(text: str | None) -> dict[str, Any] | None:
    """``--ray-runtime-env``: JSON text, or the path of a JSON file (read with the bounded reader)."""
    if text is None:
        return None
    from aumann import bounded

    src = text.strip()
    if src.startswith(("{", "[")):
        data = bounded.loads_json(src, what="--ray-runtime-env", error=ConfigError, allow_nan=False)
    else:
        p = Path(src)
        if not p.is_file():
            raise ConfigError(f"--ray-runtime-env must be JSON text or a JSON file; {src!r} is neither")
        data = bounded.read_json(p, what="--ray-runtime-env file", error=ConfigError, allow_nan=False)
    if not isinstance(data, dict):
        raise ConfigError(f"--ray-runtime-env must be a JSON object (a Ray runtime environment); got "
                          f"{type(data).__name__}")
    return data


def check_runtime_env(env: dict[str, Any]) -> None:
    """Refuse a runtime environment Ray would ignore in part or reject only once attached: a key Ray does not
    know (a typo such as ``env_var`` was dropped without a word; keys of plugins named in
    ``RAY_RUNTIME_ENV_PLUGINS`` pass), a value of the wrong type, a local ``working_dir`` / ``py_modules``
    path that is not there."""
    try:
        from ray.runtime_env import RuntimeEnv
    except ImportError:  # make_executor says that Ray is missing
        return
    what = "--ray-runtime-env (execution.ray_runtime_env)"
    known = set(getattr(RuntimeEnv, "known_fields", ()))
    if known and not os.environ.get("RAY_RUNTIME_ENV_PLUGINS"):
        unknown = sorted(str(k) for k in env if k not in known)
        if unknown:
            raise ConfigError(f"{what}: unknown key(s) {', '.join(repr(k)[:80] for k in unknown[:5])}; a Ray runtime "
                              f"environment has {', '.join(sorted(k for k in known if not k.startswith('_')))}")
    for key in ("working_dir", "py_modules"):
        paths = env.get(key)
        for path in [paths] if isinstance(paths, str) else (paths if isinstance(paths, list) else []):
            if isinstance(path, str) and "://" not in path and not Path(path).exists():
                raise ConfigError(f"{what}: {key} {path[:200]!r} does not exist here (local paths are shipped "
                                  f"from the driver's disk)")
            archives = _package_extensions(key) if key == "working_dir" else ()  # (py_modules: .py files too)
            if isinstance(path, str) and "://" not in path and Path(path).is_file() and archives \
                    and not path.lower().endswith(archives):
                # refused by ray.init only once attached, as "cannot attach to the Ray cluster: ... (is `ray start
                # --head` running there ... RAY_AUTH_TOKEN?)": a hint about the connection, not the file
                raise ConfigError(f"{what}: {key} {path[:200]!r} is a file; it must be a folder or an archive "
                                  f"({', '.join(archives)})")
    try:
        RuntimeEnv(**{str(k): v for k, v in env.items()})
    except Exception as exc:  # Ray's own validation: TypeError, ValueError, ...
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise ConfigError(f"{what}: {first[:300]}") from None


def _package_extensions(key: str) -> tuple[str, ...]:
    """The archive extensions Ray accepts for a local ``working_dir`` file (its own table;
    ``()`` where this Ray does not have it, and then Ray alone decides)."""
    try:
        from ray._common.runtime_env_package import RUNTIME_ENV_PACKAGE_EXTENSIONS
    except ImportError:
        return ()
    found = RUNTIME_ENV_PACKAGE_EXTENSIONS.get(key, ()) if isinstance(RUNTIME_ENV_PACKAGE_EXTENSIONS, dict) else ()
    return tuple(str(e).lower() for e in found)


def settings(args: argparse.Namespace, config: Any = None) -> dict[str, Any]:
    """The effective execution settings: ``{"executor", "workers", "address", "address_from",
    "runtime_env", "max_retries"}`` from the flags, ``RAY_ADDRESS`` and the config's ``[execution]`` table."""
    ex = getattr(config, "execution", None)
    flag_addr = getattr(args, "ray_address", None)
    env_addr = os.environ.get("RAY_ADDRESS") or None
    cfg_addr = getattr(ex, "ray_address", None)
    address, source = next(((a, s) for a, s in ((flag_addr, "--ray-address"), (env_addr, "RAY_ADDRESS"),
                                                  (cfg_addr, "execution.ray_address")) if a), (None, None))
    kind = getattr(args, "executor", None) or getattr(ex, "executor", None)
    explicit_addr = flag_addr or cfg_addr
    if kind is None:
        kind = "ray" if explicit_addr else "local"
    if kind == "local" and explicit_addr:
        which = "--ray-address" if flag_addr else "execution.ray_address"
        raise ConfigError(f"{which} attaches to a Ray cluster, but the executor is 'local': drop --executor local "
                          f"(or execution.executor = \"local\") or the address")
    workers = getattr(args, "workers", None)
    if workers is None:
        workers = getattr(ex, "workers", None)
    runtime_env = _runtime_env(getattr(args, "ray_runtime_env", None))
    if runtime_env is None:
        runtime_env = getattr(ex, "ray_runtime_env", None)
    if kind == "local" and runtime_env:
        raise ConfigError("--ray-runtime-env (execution.ray_runtime_env) applies to --executor ray")
    max_retries = getattr(args, "ray_max_retries", None)
    if max_retries is None:
        max_retries = getattr(ex, "ray_max_retries", None)
    if kind == "local" and max_retries is not None:
        raise ConfigError("--ray-max-retries (execution.ray_max_retries) applies to --executor ray")
    if kind == "ray" and runtime_env:
        check_runtime_env(runtime_env)
    return {"executor": kind, "workers": workers, "address": address if kind == "ray" else None,
            "address_from": source if kind == "ray" else None, "runtime_env": runtime_env, "max_retries": max_retries}


def require_extra(args: argparse.Namespace, config: Any = None) -> None:
    """When the flags, ``RAY_ADDRESS`` with ``--executor ray`` or the config choose Ray and the optional package is
    not installed: one :class:`~aumann.errors.ExecutorError` naming the extra, before the command makes its output
    folder (the executor says the same once built, which left the run directory behind, empty)."""
    import importlib.util

    from aumann.errors import ExecutorError

    s = settings(args, config)
    if s["executor"] == "ray" and importlib.util.find_spec("ray") is None:
        how = s["address_from"] if s["address_from"] in ("--ray-address", "execution.ray_address") else "--executor ray"
        raise ExecutorError(f"{how} needs the optional 'ray' package: pip install 'aumann[ray]' "
                            "(or --executor local on one machine)")


def executor_from(args: argparse.Namespace, config: Any = None, *, scenario_spec: str | None = None,
                  out: Path | None = None, connect: bool = True) -> Any:
    """``None`` (serial), a local process pool or a Ray executor from the flags and the config.

    The module of a ``package.module:attr`` scenario is shipped to Ray workers when it does not live
    in the installed site (a scenario file and its folder always are). With ``connect`` a Ray
    executor attaches (or starts) now, so a wrong address fails in one line before any work.
    """
    from aumann.simulators.executors import make_executor

    s = settings(args, config)
    ship = []
    if scenario_spec and ":" in scenario_spec:
        where = scenario_spec.rpartition(":")[0]
        if not (where.endswith(".py") or "/" in where or os.sep in where):
            ship.append(where)
    ex = make_executor(s["executor"], s["workers"], address=s["address"], runtime_env=s["runtime_env"], ship=ship,
                       exclude=[out] if out is not None else (), max_retries=s["max_retries"])
    if ex is not None and connect and s["executor"] == "ray":
        ex.cluster_cpus()  # attach / start now: errors are one line, before the first run
    return ex


__all__ = ["add_arguments", "check_runtime_env", "executor_from", "require_extra", "settings"]
