"""The LLM and execution options of ``aumann run``, and building the backend from them.

The OpenAI-compatible backend reads ``OPENAI_API_KEY`` (or ``AUMANN_LLM_API_KEY``) and, unless
``--base-url``/``--model`` are given, ``AUMANN_LLM_BASE_URL``/``OPENAI_BASE_URL`` and
``AUMANN_LLM_MODEL`` from the environment -- here, at the edge, and nowhere else; the key is passed
to the backend explicitly and never reaches logs, caches, messages or the manifest.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from aumann.cli.args import path
from aumann.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the backend, throughput and cost-guard options to ``aumann run`` (the execution options
    live in :mod:`aumann.cli.executor_options`)."""
    g = p.add_argument_group("LLM backend (--backend openai)")
    g.add_argument("--model", default=None, help="LLM model name (or AUMANN_LLM_MODEL)")
    g.add_argument("--base-url", action="append", default=None, metavar="URL",
                   help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (or AUMANN_LLM_BASE_URL); repeat "
                        "for several servers of the same model: requests are spread over them and a failing one "
                        "is taken out and retried later. Credentials in a URL are used but never recorded")
    g.add_argument("--concurrency", type=int, default=16, help="LLM requests in flight at once (default 16)")
    g.add_argument("--cache", type=path, default=None,
                   help="the LLM response cache (SQLite; default <out>/llm-cache.sqlite)")
    g.add_argument("--cache-mode", choices=("record", "replay", "off"), default="record",
                   help="record: read through, store new replies (default); replay: serve the cache only, a miss "
                        "is an error and nothing is sent (bit-identical offline re-runs); off: no cache")
    g.add_argument("--rpm", type=float, default=None, help="request rate limit per minute (token bucket)")
    g.add_argument("--tpm", type=float, default=None, help="token rate limit per minute (token bucket)")
    g.add_argument("--max-calls", type=int, default=None,
                   help="stop cleanly once this many LLM requests were sent in this run directory (resumable)")
    g.add_argument("--max-cost", type=float, default=None,
                   help="stop cleanly before the estimated spend in this run directory passes this many USD")
    g.add_argument("--prices", type=path, default=None,
                   help="TOML price table (USD per million tokens) layered over the packaged one")
    g.add_argument("--structured-output", choices=("auto", "json_schema", "json_object", "none"), default="auto",
                   help="response_format: auto = strict json_schema, falling back to json_object (default)")
    g.add_argument("--llm-timeout", type=float, default=60.0, help="seconds per LLM socket operation (default 60)")
    g.add_argument("--dry-run", action="store_true",
                   help="run the study with the offline policy in the loop and print the requests, tokens, cost "
                        "and time the LLM run would take (after the cache); sends nothing, writes nothing")
    g.add_argument("--assumed-latency", type=float, default=1.0,
                   help="seconds per LLM request assumed by --dry-run's time estimate (default 1.0)")


def check_arguments(args: argparse.Namespace) -> None:
    """Reject bad option values with a :class:`ConfigError` naming the option."""
    def bad(name: str, val: Any, need: str) -> ConfigError:
        return ConfigError(f"--{name} must be {need}; got {val!r}")

    if args.concurrency < 1:
        raise bad("concurrency", args.concurrency, "an int >= 1")
    if args.max_calls is not None and args.max_calls < 0:
        raise bad("max-calls", args.max_calls, "an int >= 0")
    for name in ("rpm", "tpm", "assumed_latency", "llm_timeout"):
        v = getattr(args, name)
        if v is not None and not (math.isfinite(v) and v > 0):
            raise bad(name.replace("_", "-"), v, "a finite number > 0")
    if args.max_cost is not None and not (math.isfinite(args.max_cost) and args.max_cost >= 0):
        raise bad("max-cost", args.max_cost, "a finite number >= 0 (USD)")
    if args.backend == "offline" and (args.cache is not None or args.cache_mode != "record"):
        raise ConfigError("--cache/--cache-mode apply to an LLM backend: add --backend openai --model NAME")
    if args.dry_run and args.backend != "openai":
        raise ConfigError("--dry-run estimates an LLM run: pass --backend openai --model NAME as for the real run")


def build_backend(args: argparse.Namespace, out: Path, scenario: Any) -> tuple[Any, str]:
    """The decision backend of ``aumann run`` and its label (recorded in the config digest; no secrets).

    Offline: ``(None, "offline")``. OpenAI: an :class:`OpenAIBackend` with the run directory's cache
    (``<out>/llm-cache.sqlite``); with ``--dry-run`` it sends nothing and the scenario's offline
    policy answers the cache misses (the cache is read if it exists, never created).
    """
    if args.backend == "offline":
        return None, "offline"
    from aumann.simulators.llm import OpenAIBackend, ResponseCache, load_prices

    api_key = os.environ.get("OPENAI_API_KEY") or os.environ.get("AUMANN_LLM_API_KEY")
    urls = args.base_url or [u for u in (os.environ.get("AUMANN_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL"),)
                             if u]
    model = args.model or os.environ.get("AUMANN_LLM_MODEL")
    if not model:
        raise ConfigError("--backend openai needs a model: pass --model NAME or set AUMANN_LLM_MODEL")
    cache_path = Path(args.cache) if args.cache is not None else out / "llm-cache.sqlite"
    if args.cache_mode == "replay" and not cache_path.is_file():
        raise ConfigError(f"--cache-mode replay needs a recorded cache; {str(cache_path)!r} does not exist "
                          "(record one first with --cache-mode record)")
    fallback = None
    if args.dry_run:
        cache = ResponseCache(cache_path, mode="replay") if cache_path.is_file() else None  # read, never write
        if scenario.offline_backend is None:
            raise ConfigError(f"scenario {scenario.name!r} has no offline policy to put in the loop of a dry run")
        fallback = scenario.offline_backend()
    else:
        out.mkdir(parents=True, exist_ok=True)
        cache = None if args.cache_mode == "off" else ResponseCache(cache_path, mode=args.cache_mode)
    backend = OpenAIBackend(
        model=model, base_url=urls or None, api_key=api_key, cache=cache, concurrency=args.concurrency,
        rpm=args.rpm, tpm=args.tpm, max_calls=args.max_calls, max_cost=args.max_cost,
        prices=load_prices(args.prices), structured_output=args.structured_output, timeout=args.llm_timeout,
        dry_run=args.dry_run, fallback=fallback)
    first = backend.base_url if urls else "default"
    return backend, f"openai:{model}@{first}"


def executor_from(args: argparse.Namespace, config: Any = None) -> Any:
    """Kept for callers of the earlier name: :func:`aumann.cli.executor_options.executor_from`."""
    from aumann.cli.executor_options import executor_from as _from

    return _from(args, config)


__all__ = ["add_arguments", "build_backend", "check_arguments", "executor_from"]
