"""The packaged default configs, and how user configs layer over them.

The TOML files in this folder are package data: a regular (non-editable) ``pip install`` ships them,
and they are found through :mod:`importlib.resources`, never by climbing the source tree.

* :func:`path` — the on-disk path of a packaged file or folder (``"social-llm.toml"``, ``"topics"``);
* :func:`load_toml` — a TOML file as a dict, with a typed :class:`~aumann.errors.ConfigError` for a
  missing, unreadable, binary or malformed file;
* :func:`deep_merge` — a user config over the defaults: only the keys it sets change, tables merge
  recursively;
* :func:`parse_assignment` / :func:`apply_assignments` — ``--set key=value`` overrides
  (``study.permutations=200`` for a key in a table; values parse as TOML literals, else strings);
* :class:`ConfigModel` — the base of every pydantic config model: unknown keys, NaN/±inf, booleans
  given for numbers and strings or floats given for integers (``"1000"``, ``1.5``; ``1e3`` in a file) are refused with a
  :class:`~aumann.errors.ConfigError` (never pydantic's ``ValidationError``) whose one-line message names
  every offending key; :func:`validation_message` formats a pydantic error that way.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import math
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from aumann import bounded
from aumann.errors import ConfigError

_EXTRACTED = contextlib.ExitStack()
atexit.register(_EXTRACTED.close)


def path(name: str) -> Path:
    """The filesystem path of the packaged config file or folder ``name`` (e.g. ``"topics"``).

    Raises:
        ConfigError: no such packaged file.
    """
    from aumann.io import safe_component

    for part in str(name).split("/"):  # "topics" or "topics/x.toml": each part one safe name
        try:
            safe_component(part, "packaged config name")
        except ConfigError as exc:
            raise ConfigError(f"no packaged config {name!r} in aumann/configs ({exc})") from None
    res = resources.files(__name__).joinpath(name)
    if not res.is_file() and not res.is_dir():
        raise ConfigError(f"no packaged config {name!r} in aumann/configs")
    if isinstance(res, Path):
        return res
    return Path(_EXTRACTED.enter_context(resources.as_file(res)))  # zip-imported package: extract once


def load_toml(source: str | os.PathLike[str], *, what: str = "config file") -> dict[str, Any]:
    """Read a TOML file into a dict.

    Raises:
        ConfigError: the file is missing, is a directory, is not UTF-8 text, or is not valid TOML
            (the message names the file).
    """
    if not isinstance(source, str | os.PathLike):
        raise ConfigError(f"{what} must be a path (str or os.PathLike); got {type(source).__name__}")
    p = Path(source)
    if not p.is_file():
        raise ConfigError(f"{what} {str(p)!r} does not exist" if not p.exists() else f"{what} {str(p)!r} is not a file")
    return bounded.read_toml(p, what=what, error=ConfigError)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it: tables merge key by key, anything else is replaced.

    >>> deep_merge({"agents": 10, "study": {"permutations": 1000, "k_del": 5}}, {"study": {"permutations": 50}})
    {'agents': 10, 'study': {'permutations': 50, 'k_del': 5}}
    """
    out = copy.deepcopy(dict(base))
    for key, val in override.items():
        if isinstance(val, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], val)
        else:
            out[key] = copy.deepcopy(val)
    return out


#: a plain decimal integer as ``--set`` takes it for an int key: digits, a sign, underscores between digits (TOML's
#: and Python's ``1_000``)
_DECIMAL = re.compile(r"[+-]?\d+(_\d+)*")
#: past this magnitude a ``--set`` float is no integer an int key could take (every one is bounded by an int64;
#: the integer flags' rule, :func:`aumann.cli.args.exact_integer`)
_EXACT_LIMIT = 2**64


class SetInteger(float):
    """A ``--set`` value in float notation that writes an exact integer (``1e3``, ``1000.0``,
    ``9.007199254740993e15``): an int key takes it as that integer (:attr:`exact`, every digit of the text kept), as
    the integer flags take ``--permutations 1e3``; a float key takes it as the float TOML reads."""

    exact: int

    def __new__(cls, value: float, exact: int | None = None) -> SetInteger:
        obj = super().__new__(cls, value)
        obj.exact = int(value) if exact is None else exact  # (a copy: its __dict__ puts the exact one back)
        return obj


def _exact_integer(raw: str) -> int | None:
    """The integer the float literal ``raw`` writes, every digit kept, or ``None`` (not an integer, not finite, or
    past :data:`_EXACT_LIMIT`)."""
    from decimal import Decimal, InvalidOperation

    try:
        d = Decimal(raw.replace("_", ""))
    except InvalidOperation:
        return None
    if not d.is_finite() or abs(d) > _EXACT_LIMIT or d != d.to_integral_value():
        return None
    return int(d)


def parse_assignment(text: str) -> dict[str, Any]:
    """``"study.permutations=200"`` → ``{"study": {"permutations": 200}}``.

    The value is read as a TOML literal (``200``, ``1_000``, ``0.5``, ``true``, ``"x"``, ``[1, 2]``); anything
    that is not one is kept as a plain string (``interaction=synchronous``), and so is an integer TOML writes in
    another base (``0x10``, ``0o17``, ``0b1``). An int key takes decimal integers, and float notation that writes an
    exact integer (``1e3``, ``1000.0``: a :class:`SetInteger`), as the integer flags do (``--permutations 1e3``);
    the models refuse ``"1000"``, ``1.5``, ``true``, ``0x10`` and a string for it, naming the key, the value and the
    type.

    Raises:
        ConfigError: no ``=``, or an empty key or key part.
    """
    key, sep, raw = str(text).partition("=")
    key = key.strip()
    parts = key.split(".")
    if not sep or not key or any(not p.strip() for p in parts):
        from aumann.manifest import redact_text  # a secret-named key's value (x..HF_TOKEN=hf_...) is not echoed

        raise ConfigError("--set takes KEY=VALUE (dotted keys for tables, e.g. study.permutations=200); "
                          f"got {redact_text(str(text))!r}")
    raw = raw.strip()
    if bounded.nesting_depth(raw, toml=True) > bounded.MAX_DEPTH:
        raise ConfigError(f"--set {key}: the value nests deeper than {bounded.MAX_DEPTH} levels")
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    if type(value) is int and not _DECIMAL.fullmatch(raw):  # 0x10, 0o17, 0b1: a plain string (a name, never
        value = raw  # an int: an int key refuses it, naming it, where TOML read it as 16, 15, 1)
    elif type(value) is float and (exact := _exact_integer(raw)) is not None:  # 1e3: 1000 to an int key, as the
        value = SetInteger(value, exact)  # integer flags read it (a float key: the float)
    out: dict[str, Any] = {}
    node = out
    for p in parts[:-1]:
        node = node.setdefault(p.strip(), {})
    node[parts[-1].strip()] = value
    return out


def apply_assignments(data: Mapping[str, Any], assignments: Iterable[str]) -> dict[str, Any]:
    """``data`` with every ``KEY=VALUE`` of ``assignments`` laid over it (later ones win)."""
    out = dict(data)
    for a in assignments:
        out = deep_merge(out, parse_assignment(a))
    return out


def _wants_number(ann: Any) -> bool:
    """Whether a field annotation takes a number (int or float, possibly optional or annotated)."""
    if ann in (int, float):
        return True
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _wants_number(args[0])
    if origin in (typing.Union, types.UnionType):
        return bool not in args and any(_wants_number(a) for a in args)
    return False


def _int_only(ann: Any) -> bool:
    """Whether a field annotation takes an integer and nothing a string or a float could be (``int``,
    ``int | None``, annotated)."""
    if ann is int:
        return True
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _int_only(args[0])
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return bool(rest) and all(_int_only(a) for a in rest)
    return False


def _not_int_for_int(value: Any, ann: Any) -> Any:
    """The first value in ``value`` that an int field of ``ann`` would take only by coercion (a string such as
    ``"1000"``, a float such as ``1e3`` or ``1000.0``), else ``None``."""
    if _int_only(ann):
        return value if isinstance(value, str | float) else None
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _not_int_for_int(value, args[0])
    if origin in (list, tuple, set, frozenset) and isinstance(value, list | tuple):
        items = [a for a in args if a is not Ellipsis] or [Any]
        return next((bad for i, v in enumerate(value)
                     if (bad := _not_int_for_int(v, items[min(i, len(items) - 1)])) is not None), None)
    return None


def _bool_for_number(value: Any, ann: Any) -> bool:
    if isinstance(value, bool):
        return _wants_number(ann)
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _bool_for_number(value, args[0])
    if origin in (list, tuple, set, frozenset) and isinstance(value, list | tuple):
        items = [a for a in args if a is not Ellipsis] or [Any]
        return any(_bool_for_number(v, items[min(i, len(items) - 1)]) for i, v in enumerate(value))
    return False


class ConfigModel(BaseModel):
    """Base of aumann's config models: a typo'd key, NaN/±inf, or ``true`` where a number belongs is an error.

    (pydantic alone would accept ``alpha = inf`` and read ``seed = true`` as 1.)
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    #: the error a model's invalid values raise (a subclass of :class:`ConfigError`; e.g. ``StudyError``)
    config_error: ClassVar[type[ConfigError]] = ConfigError

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:  # not chained: pydantic's own text shows each input unredacted (--debug)
            raise self.config_error(f"invalid {type(self).__name__}: {validation_message(exc)}") from None

    # not a "custom" __init__ for pydantic: nested models are validated by pydantic-core directly, so their
    # errors stay part of the outer model's one ValidationError (keys like study.permutations)
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Any:
        """pydantic's ``model_validate``, raising :attr:`config_error` (one line) instead of ``ValidationError``."""
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:  # not chained: pydantic's own text shows each input unredacted (--debug)
            raise cls.config_error(f"invalid {cls.__name__}: {validation_message(exc)}") from None

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _bool_for_number(v, field.annotation):
            raise ValueError("expected a number, not a boolean")
        if isinstance(v, SetInteger):  # --set's 1e3: the integer it writes to an int key, the float to any other
            return v.exact if field is not None and _int_only(field.annotation) else float(v)
        bad = None if field is None else _not_int_for_int(v, field.annotation)
        if bad is not None:  # pydantic's lax mode read "1000" and 1e3 as 1000: a typo'd or quoted number went through
            raise ValueError(int_expected(bad) + ("" if bad is v else f" ({bad!r})"))
        return v


def int_expected(bad: Any) -> str:
    """What an int key's error says of ``bad``, a string or a float it refuses, with the one rule of the three
    places an integer is written: a ``--config`` file is TOML, which has integers of its own, so a float there
    (``1e3``, ``1000.0``) is refused; ``--set`` and the integer flags, which read text, take float notation that
    writes an exact integer (``1e3``) as that integer.

    >>> int_expected(1000.0)
    'expected an integer, not the float 1000.0: write 1000 (in a --config file 1e3 and 1000.0 are TOML floats; only \
--set and the integer flags read float notation that writes an exact integer, 1e3, as that integer)'
    """
    if isinstance(bad, str):
        return "expected an integer (decimal digits, e.g. 200 or 1_000), not a string"
    if isinstance(bad, float) and math.isfinite(bad) and bad.is_integer():
        return (f"expected an integer, not the float {bad!r}: write {int(bad)} (in a --config file 1e3 and 1000.0 "
                "are TOML floats; only --set and the integer flags read float notation that writes an exact integer, "
                "1e3, as that integer)")
    return ("expected an integer, not a float: decimal digits (200, 1_000), or, with --set and the integer flags, "
            "float notation that writes an exact integer (1e3; a --config file takes only TOML integers)")


def validation_message(exc: ValidationError) -> str:
    """A pydantic ``ValidationError`` as one line: ``key.sub: message (got value); ...``.

    The value is shown redacted (:func:`aumann.manifest.redact`): a value under a secret-named key
    (``llm.api_key``, ``...env_vars.HF_TOKEN``) is ``<redacted>``, and so are URL credentials and the keys an LLM
    backend registered. The message reaches stderr, and a config's secrets (a Ray runtime environment's
    ``env_vars``) must not, whatever mistake put them in front of the validator."""
    from aumann.manifest import is_secret_key, redact, redact_text

    parts = []
    for err in exc.errors():
        path = err.get("loc", ())
        loc = ".".join(str(p) for p in path) or "(top level)"
        got = err.get("input")
        if any(isinstance(p, str) and is_secret_key(p) for p in path):
            shown = "<redacted>"
        else:
            red = redact(got)
            red = tuple(red) if isinstance(got, tuple) and isinstance(red, list) else red
            shown = repr(red) if len(repr(red)) <= 60 else repr(red)[:57] + "..."
        parts.append(f"{loc}: {redact_text(str(err.get('msg', 'invalid')))} (got {shown})")
    return "; ".join(parts)


__all__ = ["ConfigModel", "apply_assignments", "deep_merge", "load_toml", "parse_assignment", "path",
           "validation_message"]
