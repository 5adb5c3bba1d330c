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

from aumann.cli.args import exact_integer, path
from aumann.cli.unused_flags import backend_flags_given
from aumann.errors import ConfigError

#: the seconds per LLM request ``--dry-run``'s time estimate assumes when ``--assumed-latency`` is not given
ASSUMED_LATENCY = 1.0
#: the files SQLite keeps beside a database (write-ahead log, shared memory, rollback journal)
SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def run_dir_file(out: Path, name: str, what: str, *, sqlite: bool = False) -> Path:
    """``<out>/<name>``, a file aumann keeps in the run directory (the LLM response cache, the usage ledger,
    the local server's log), confined to it like every other file of a run directory
    (:func:`aumann.io.confine`): a symbolic link there -- or, for an SQLite database, at any of the files
    SQLite opens beside it -- that leads out of the run directory is a
    :class:`~aumann.errors.PathEscapeError`, before anything is read or written through it. (A ``--cache PATH``
    the user names is theirs and is not confined.)"""
    from aumann.io import confine

    target = Path(out) / name
    for side in SQLITE_SIDE_FILES if sqlite else ("",):
        confine(Path(f"{target}{side}"), out, what=what)
    return target


def backend_choices() -> list[str]:
    """The registered decision backends (``aumann run --backend``): built-ins, registered, installed."""
    from aumann.simulators.llm.registry import backend_names

    return backend_names()


def backend_help() -> str:
    """``--backend``'s help: every registered name with its description. A description is the registrant's text (an
    installed package's entry point too): its control characters are shown as escapes, not obeyed by the terminal,
    and a ``%`` is doubled -- argparse formats help with ``%``, and ``"answers 100% yes"`` stopped ``aumann run
    --help`` with ``ValueError: unsupported format character 'y'``."""
    from aumann.cli.terminal import terminal_text
    from aumann.simulators.llm.registry import describe_backends

    text = "; ".join(f"{terminal_text(n)}: {terminal_text(d)}" for n, d in describe_backends())
    return f"decision backend (registered: {text})".replace("%", "%%")


def _exact_number(text: str) -> int | float:
    """An argparse type for the numeric LLM flags: an integer exactly as written, anything else a float (the range,
    NaN and infinities are checked by :func:`check_arguments`). ``type=float`` rounded an integer past 2⁵³ to its
    neighbour: ``--llm-seed 9007199254740993`` ran, and was recorded, as the seed 9007199254740992. Float notation
    past 2⁵³ (where a float no longer holds every integer; every non-integer flag is capped far below it) is read
    exactly, as :func:`aumann.cli.args.integer` reads it: ``9.007199254740993e15`` is 9007199254740993, and a
    value there that is no integer (``9007199254740992.5``, which a float made 2⁵³) is refused naming the flag."""
    try:
        return int(text)
    except ValueError:
        pass
    value = exact_integer(text)
    if value is not None and abs(value) > 2**53:
        return value
    out = float(text)
    # (past 2**64 exact_integer reads no integer at all, and every flag's range ends below: check_arguments refuses
    # it by its range, not as a non-integer shown with its hundreds of digits)
    if math.isfinite(out) and 2**53 <= abs(out) <= 2**64 and value is None:
        raise argparse.ArgumentTypeError(f"{text.strip()[:40]} is past 2**53 and not an integer (a float would round "
                                         f"it to {int(out)}): give an integer")
    if value is None and math.isfinite(out) and out.is_integer():
        return _RoundedToInteger(out, text)
    return out


class _RoundedToInteger(float):
    """A flag's value whose text writes no integer (``4.00000000000000001``, ``3.9999999999999999``) but whose float
    is one: fine for a real-valued flag, refused by :func:`check_arguments` for an integer one (``--max-tokens
    4.00000000000000001`` ran as 4). ``text`` is what was written, for the error message."""

    text: str

    def __new__(cls, value: float, text: str) -> _RoundedToInteger:
        out = super().__new__(cls, value)
        out.text = text.strip()
        return out


_exact_number.__name__ = "number"  # argparse's "invalid number value: 'x'"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the backend, sampling, throughput and cost-guard options to ``aumann run`` (the execution
    options live in :mod:`aumann.cli.executor_options`)."""
    g = p.add_argument_group("LLM backend (--backend openai | local | a registered one)")
    g.add_argument("--model", default=None,
                   help="LLM model name (or AUMANN_LLM_MODEL); with --backend local a .gguf file (default: the "
                        "bundled SmolLM2-135M)")
    g.add_argument("--base-url", action="append", default=None, metavar="URL",
                   help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (or AUMANN_LLM_BASE_URL); repeat "
                        "for several servers of the same model: requests are spread over them and a failing one "
                        "is taken out and retried later. Credentials in a URL are used but never recorded")
    g.add_argument("--concurrency", type=int, default=None,
                   help="LLM requests in flight at most (default 16; 2 for --backend local); fewer while the server "
                        "answers slowly")
    g.add_argument("--cache", type=path, default=None,
                   help="the LLM response cache (SQLite; default <out>/llm-cache.sqlite)")
    g.add_argument("--cache-mode", choices=("record", "replay", "off"), default="record",
                   help="record: read through, store new replies (default); replay: serve the cache only, a miss "
                        "is an error and nothing is sent (bit-identical offline re-runs); off: no cache")
    g.add_argument("--rpm", type=_exact_number, default=None, help="request rate limit per minute (token bucket)")
    g.add_argument("--tpm", type=_exact_number, default=None, help="token rate limit per minute (token bucket)")
    g.add_argument("--max-calls", type=_exact_number, default=None,
                   help="stop cleanly once this many LLM requests were sent in this run directory (resumable)")
    g.add_argument("--max-cost", type=_exact_number, default=None,
                   help="stop cleanly before the spend in this run directory could pass this many USD (each "
                        "request is charged its upper bound first)")
    g.add_argument("--prices", type=path, default=None,
                   help="TOML price table (USD per million tokens) layered over the packaged one")
    g.add_argument("--structured-output", choices=("auto", "json_schema", "json_object", "none"), default="auto",
                   help="response_format: auto = negotiated once per server: strict json_schema, else json_object "
                        "with the schema, else prompt-only (default)")
    g.add_argument("--llm-timeout", type=_exact_number, default=60.0,
                   help="seconds an LLM request may take in all, reply included (default 60; a retry after a timeout "
                        "waits longer)")
    g.add_argument("--max-retries", type=_exact_number, default=None,
                   help="retries of a failed LLM request (rate limited, server error, timeout) before its decision "
                        "is given up (default 3)")
    g.add_argument("--retry-after-max", type=_exact_number, default=None, metavar="SECONDS",
                   help="the longest Retry-After a server may ask for (default 60): a longer one stops the run "
                        "with a typed error instead of waiting")
    s = p.add_argument_group("LLM sampling (the [llm] config keys; flags override the config)")
    s.add_argument("--temperature", type=_exact_number, default=None,
                   help="sampling temperature (llm.temperature, default 0)")
    s.add_argument("--top-p", type=_exact_number, default=None,
                   help="nucleus sampling (llm.top_p, default: the server's)")
    s.add_argument("--max-tokens", type=_exact_number, default=None,
                   help="reply bound in tokens (llm.max_tokens; default sized from each decision's schema)")
    s.add_argument("--llm-seed", type=_exact_number, default=None,
                   help="mixed into every request's seed (llm.seed; default: the decisions' own seeds)")
    s.add_argument("--system-prompt", default=None,
                   help="replace the scenario's system message (llm.system_prompt); @FILE reads it from a file")
    s.add_argument("--max-invalid-rate", type=_exact_number, default=None,
                   help="mark the run unreliable above this share of invalid decisions (llm.max_invalid_rate, "
                        "default 0.2)")
    g.add_argument("--dry-run", action="store_true",
                   help="run the study with the offline policy in the loop and print the requests, tokens, cost "
                        "and time the LLM run would take (after the cache); sends nothing, writes nothing")
    g.add_argument("--assumed-latency", type=_exact_number, default=None,
                   help=f"seconds per LLM request assumed by --dry-run's time estimate (default {ASSUMED_LATENCY:g}; "
                        "without --dry-run it is warned of as unused)")


#: (flag, lowest, highest, lowest excluded, integer) of every numeric LLM flag
_RANGES = {
    "concurrency": (1, 4096, False, True),
    "rpm": (1e-3, 1e9, False, False),
    "tpm": (1.0, 1e13, False, False),
    "max_calls": (0, 2**53, False, True),
    "max_cost": (0.0, 1e12, False, False),
    "llm_timeout": (0.001, 86_400.0, False, False),
    "max_retries": (0, 100, False, True),
    "retry_after_max": (0.0, 86_400.0, False, False),  # below a millisecond every request would time out
    "assumed_latency": (0.0, 86_400.0, True, False),
    "temperature": (0.0, 2.0, False, False),
    "top_p": (0.0, 1.0, True, False),
    "max_tokens": (1, 32_768, False, True),
    "llm_seed": (0, 2**63 - 1, False, True),
    "max_invalid_rate": (0.0, 1.0, False, False),
}


def check_arguments(args: argparse.Namespace) -> None:
    """Reject bad option values with a one-line :class:`ConfigError` naming the option and its range."""
    for name, (lo, hi, lo_open, integer) in _RANGES.items():
        v = getattr(args, name, None)
        if v is None:
            continue
        ok = isinstance(v, int | float) and not isinstance(v, bool) and (isinstance(v, int) or math.isfinite(v))
        ok = ok and (v > lo if lo_open else v >= lo) and v <= hi and (
            not integer or (v == int(v) and not isinstance(v, _RoundedToInteger)))
        if not ok:
            kind = "an integer" if integer else "a number"
            top = f"{int(hi)}" if integer else f"{hi:g}"  # 9.22337e+18 hid that 9223372036854775808 is past it
            raise ConfigError(f"--{name.replace('_', '-')} must be {kind} {'>' if lo_open else '>='} {lo:g} and "
                              f"<= {top}; got {str(getattr(v, 'text', v))[:40]}")
        if integer:
            setattr(args, name, int(v))
    if args.backend == "offline" and (args.cache is not None or args.cache_mode != "record"):
        raise ConfigError("--cache/--cache-mode apply to an LLM backend: add --backend openai --model NAME")
    given = backend_flags_given(args)
    if args.backend == "offline" and given:  # the offline policy decides: no request is built, sent or limited
        raise ConfigError(f"{', '.join(given)} set{'s' if len(given) == 1 else ''} the LLM backend, and the run's is "
                          "the offline policy (--backend offline, the default), which sends nothing: add --backend "
                          "openai (or local), or leave them out")
    if args.dry_run and args.backend == "offline":
        raise ConfigError("--dry-run estimates an LLM run: pass --backend openai --model NAME (or --backend local) as "
                          "for the real run")
    if args.backend == "local" and not args.base_url and not args.dry_run:  # a server to start here
        from aumann.simulators.llm.local import require_local

        require_local(args.model)  # the aumann[local] extra and the model: said before --out is made


def unused_sampling_flags(args: argparse.Namespace, *, offline: bool | None = None) -> list[str]:
    """The LLM request settings given where the run's decisions come from the offline policy (flags, ``--set llm.*``
    and the ``--config`` file's ``[llm]`` keys), warned of and returned for the manifest's ``unused_flags``:
    :func:`aumann.cli.unused_flags.unused_llm_settings` (this name is kept for its callers).

    ``offline``: whether the offline policy decides, :func:`~aumann.simulators.llm.registry.offline_policy_decides`
    of what :func:`build_backend` returned -- ``True`` also for a registered backend whose factory returned ``None``,
    as ``aumann run`` decides (without it the two disagreed: ``aumann run --backend nothing --temperature 0.7`` warned
    of ``--temperature`` and this said ``[]``); ``None``: ``--backend offline`` alone, as before."""
    from aumann.cli.unused_flags import unused_llm_settings

    return unused_llm_settings(args, offline=offline)


def llm_assignments(args: argparse.Namespace) -> list[str]:
    """The ``--set llm.KEY=VALUE`` assignments the sampling flags stand for (they override the config)."""
    import json

    out = []
    for flag, key in (("temperature", "temperature"), ("top_p", "top_p"), ("max_tokens", "max_tokens"),
                      ("llm_seed", "seed"), ("max_invalid_rate", "max_invalid_rate")):
        v = getattr(args, flag, None)
        if v is not None:
            out.append(f"llm.{key}={v!r}")
    prompt = getattr(args, "system_prompt", None)
    if prompt is not None:
        if prompt.startswith("@"):
            from aumann import bounded

            where = Path(prompt[1:])
            if where.exists() and not where.is_file() and not where.is_dir():  # a FIFO with no writer: open() waited
                raise ConfigError(f"--system-prompt file {prompt[1:]!r} is not a regular file (a pipe, socket or "
                                  "device): give a text file")  # for ever, before the run had even started
            raw = bounded._read(prompt[1:], "--system-prompt file", ConfigError, 100_000)
            try:
                prompt = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(f"--system-prompt file {prompt[1:]!r} is not UTF-8 text") from None
        out.append(f"llm.system_prompt={json.dumps(prompt)}")
    return out


def build_backend(args: argparse.Namespace, out: Path, scenario: Any, config: Any = None) -> tuple[Any, str]:
    """The decision backend of ``aumann run`` (from the registry) and its label (recorded in the config
    digest; no secrets).

    Offline: ``(None, "offline")``. An LLM backend gets the run directory's cache
    (``<out>/llm-cache.sqlite``) and the config's ``[llm]`` sampling; with ``--dry-run`` it sends nothing
    and the scenario's offline policy answers the cache misses (the cache is read if it exists, never
    created). A registered factory that returns ``None`` (the offline policy decides): ``(None, NAME)``, and the
    cache opened for it is closed and, where opening it created it (and its folders), removed again.
    """
    from aumann.simulators.llm import ResponseCache, load_prices
    from aumann.simulators.llm.registry import BackendOptions, call_factory, get_backend
    from aumann.simulators.llm.settings import Caps

    entry = get_backend(args.backend)
    if args.backend == "offline":
        return None, "offline"
    api_key = os.environ.get("OPENAI_API_KEY") or os.environ.get("AUMANN_LLM_API_KEY")
    if api_key:
        from aumann.simulators.llm.endpoints import check_api_key

        check_api_key(api_key, "OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else "AUMANN_LLM_API_KEY")
    urls = args.base_url or [u for u in (os.environ.get("AUMANN_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL"),)
                             if u]
    if args.backend == "local" and not args.base_url:
        urls, api_key = [], None  # a server started here: no key, no environment URL
    model = args.model or (os.environ.get("AUMANN_LLM_MODEL") if args.backend != "local" else None)
    # needs_model: the backend the factory builds needs a model. A factory that returns None builds none (the offline
    # policy decides, and reads no model), which is known once it ran: refused after it, not before
    no_model = entry.needs_model and not model
    cache_path = (Path(args.cache) if args.cache is not None
                  else run_dir_file(out, "llm-cache.sqlite", "LLM response cache", sqlite=True))
    from aumann.simulators.llm.cache import not_a_file

    not_a_file(cache_path, error=ConfigError, what="--cache" if args.cache is not None else "the LLM response cache")
    if args.cache_mode == "replay" and not cache_path.is_file():
        raise ConfigError(f"--cache-mode replay needs a recorded cache; {str(cache_path)!r} does not exist "
                          "(record one first with --cache-mode record)")
    stand_in = None
    if args.dry_run:
        cache = ResponseCache(cache_path, mode="replay") if cache_path.is_file() else None  # read, never write
        if scenario.offline_backend is None:
            raise ConfigError(f"scenario {scenario.name!r} has no offline policy to put in the loop of a dry run")
        stand_in = scenario.offline_stand_in()  # never None: a None stand-in read as no dry run (all was sent)
    else:
        out.mkdir(parents=True, exist_ok=True)
        made = _not_there(cache_path)  # what opening the cache creates: removed again if no backend reads it
        cache = None if args.cache_mode == "off" else ResponseCache(cache_path, mode=args.cache_mode).open()
    settings = getattr(config, "llm", None)
    extra: dict[str, Any] = {"rpm": args.rpm, "tpm": args.tpm, "prices": load_prices(args.prices),
                             "structured_output": args.structured_output, "timeout": args.llm_timeout,
                             "server_log": (str(run_dir_file(out, "llm-server.log", "LLM server log"))
                                            if not args.dry_run else None)}
    if args.concurrency is not None:
        extra["concurrency"] = args.concurrency
    for name in ("max_retries", "retry_after_max"):  # the backend's defaults (3, 60 s) unless a flag is given
        if getattr(args, name, None) is not None:
            extra[name] = getattr(args, name)
    options = BackendOptions(model=model, base_urls=tuple(urls), api_key=api_key,
                             sampling=settings.sampling() if settings is not None else None,
                             caps=Caps(args.max_calls, None, args.max_cost), cache=cache, dry_run=stand_in,
                             extra=extra)
    needs = ConfigError(f"--backend {args.backend} needs a model: pass --model NAME or set AUMANN_LLM_MODEL")
    try:
        backend = call_factory(entry, options)  # a factory that raises or builds no backend: named, typed
    except BaseException as exc:
        if cache is not None and not args.dry_run:  # the cache opened for it is not left behind (nor held open)
            _discard(cache, made)
        if no_model and isinstance(exc, Exception):  # (what it raised without the model it needs: chained)
            raise needs from exc
        raise
    if backend is None:  # the factory built none: the offline policy decides and nothing reads the cache
        if cache is not None and not args.dry_run:
            _discard(cache, made)
        return None, args.backend
    unfit = needs if no_model else _unaccountable(args.backend, backend)
    if unfit is not None:
        import contextlib

        with contextlib.suppress(Exception):  # (a backend of the user's may have no close(), or fail in it)
            backend.close()
        if cache is not None and not args.dry_run:
            _discard(cache, made)
        raise unfit
    # a backend of the user's may have no model or base_url attribute (the protocol asks only for decide())
    first = getattr(backend, "base_url", None) if urls else ("default" if args.backend == "openai" else "loopback")
    return backend, f"{args.backend}:{getattr(backend, 'model', None)}@{first}"


def _unaccountable(name: str, backend: Any) -> Exception | None:
    """The :class:`~aumann.errors.BackendFactoryError` for a backend ``aumann run`` cannot account for, else ``None``:
    the run keeps a ledger of what its backend spent and records what it was, so it reads ``backend.usage`` (a
    :class:`~aumann.simulators.llm.usage.Usage`) and ``backend.describe()``. A registered factory's object with
    ``decide`` alone ran the whole simulation's set-up and stopped on ``AttributeError: 'X' object has no attribute
    'usage'``; :class:`~aumann.simulators.llm.LLMBackend` has both."""
    from aumann.errors import BackendFactoryError
    from aumann.simulators.llm.usage import usage_of

    lacks = [what for what, ok in (("a Usage account at .usage", usage_of(backend) is not None),
                                   ("a describe() method", callable(getattr(backend, "describe", None)))) if not ok]
    if not lacks:
        return None
    return BackendFactoryError(f"backend {name!r}: its factory returned {type(backend).__name__}, which aumann run "
                               f"cannot account for: it lacks {' and '.join(lacks)} (aumann run records what a "
                               "backend spent and what it was); build it as an aumann.simulators.llm.LLMBackend, "
                               "which has both")


def _not_there(cache_path: Path) -> list[Path]:
    """The cache's files (SQLite's side files included) and parent folders that do not exist yet, deepest first."""
    files = [Path(f"{cache_path}{side}") for side in SQLITE_SIDE_FILES]
    folders = [p for p in cache_path.parents if not p.exists()]
    return [f for f in files if not f.exists() and not f.is_symlink()] + folders


def _discard(cache: Any, made: list[Path]) -> None:
    """Close ``cache`` and remove what opening it created (``made``, from :func:`_not_there`): a registered backend
    whose factory returned ``None`` reads no cache, and its run left an empty ``llm-cache.sqlite`` behind. A cache
    that was there before is closed and kept as it was."""
    import contextlib

    cache.close()
    for p in made:
        with contextlib.suppress(OSError):  # a folder something else wrote into stays
            if p.is_dir() and not p.is_symlink():
                p.rmdir()
            else:
                p.unlink(missing_ok=True)


def reliability(usage: Any, config: Any, result: Any, run_counts: Any = None) -> dict[str, Any] | None:
    """The run's invalid-decision account (``manifest.json`` → ``llm_reliability``), or ``None`` offline:
    abstentions over all decisions asked, and ``unreliable`` when above ``llm.max_invalid_rate``.

    ``invalid_decisions_per_run`` splits ``invalid_decisions`` by run: each run's abstentions in its simulation
    and its forks (``run_counts``: run index → the ledger's counts of that run), so the list sums to the total;
    ``invalid_decisions_in_panel_per_run`` counts only those behind the recorded panel (the run's own model)."""
    if not isinstance(usage, dict) or not (usage.get("calls") or usage.get("fork_calls") or usage.get("cache_hits")
                                           or usage.get("invalid_decisions")):
        return None
    from aumann.simulators.llm.usage import invalid_rate

    limit = float(getattr(getattr(config, "llm", None), "max_invalid_rate", 0.2))
    rate = invalid_rate(usage)
    bad = int(usage.get("invalid_decisions", 0) or 0)
    asked = int(usage.get("decisions", 0) or 0) + int(usage.get("fork_decisions", 0) or 0) + bad
    records = list(getattr(result, "records", []))
    in_panel = [int(r.get("invalid_decisions", 0) or 0) for r in records]
    counts = run_counts if isinstance(run_counts, dict) else {}
    per_run = [int(getattr(counts[rec.get("run")], "invalid_decisions", 0) or 0) if rec.get("run") in counts
               else own for rec, own in zip(records, in_panel, strict=True)]
    return {"invalid_decisions": bad, "decisions_asked": asked, "invalid_rate": round(rate, 6),
            "max_invalid_rate": limit, "unreliable": bool(rate > limit), "invalid_decisions_per_run": per_run,
            "invalid_decisions_in_panel_per_run": in_panel}


def executor_from(args: argparse.Namespace, config: Any = None) -> Any:
    """Kept for callers of the earlier name: :func:`aumann.cli.executor_options.executor_from`."""
    from aumann.cli.executor_options import executor_from as _from

    return _from(args, config)


__all__ = ["ASSUMED_LATENCY", "SQLITE_SIDE_FILES", "add_arguments", "backend_choices", "build_backend",
           "check_arguments", "executor_from", "llm_assignments", "reliability", "run_dir_file",
           "unused_sampling_flags"]
