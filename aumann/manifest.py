"""Run manifests: what produced a result (package versions, config, seeds, git revision).

Every command that writes results writes ``manifest.json`` beside them. Values whose key names a
secret are redacted before anything is written: keys containing ``api_key``/``apikey``, ``secret``,
``password``, ``passwd``, ``authorization``, ``credential`` or ``bearer``, and keys whose last word is
``token`` (``token``, ``access_token``, ``hf_token``) -- never counts such as ``prompt_tokens``.
Credentials inside URLs are stripped by :func:`redact_url` / :func:`redact_command` before a URL or a
command line is recorded, in every part of the URL:

* **userinfo**, in full: everything between ``scheme://`` and the *last* ``@`` of the authority (a
  password may itself contain ``@``);
* **query**: every parameter's value except the few that are never secret (``api-version``,
  ``version``, ``model``, ``format``);
* **fragment**: everything after ``#`` becomes ``***`` (never sent to a server; a pasted token would be
  recorded otherwise);
* **path tokens** (the documented rule): a path segment that looks like a key -- it starts with a key
  prefix (``sk-``, ``sk_``, ``key-``, ``pk-``, ``rk-``, ``hf_``, ``gsk_``, ``xai-``) or is 24+ characters of
  letters, digits, ``-`` and ``_`` with both letters and digits -- becomes ``***`` (``/v1``,
  ``/openai/deployments/gpt-4o`` stay as they are).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from aumann.io import ensure_output_dir, write_json

_PACKAGES = ("aumann", "numpy", "torch", "mesa", "networkx", "pydantic", "openai", "duckdb", "pandas")
_SECRET = re.compile(r"(api[_-]?key|secret|passw(or)?d|authorization|credential|bearer)", re.IGNORECASE)
_SECRET_WORD = re.compile(r"(^|[_\-.\s])token$", re.IGNORECASE)  # "token" as the key's last word
#: query parameters whose values are credentials (matched case-insensitively, whole name)
_SECRET_PARAMS = ("api_key", "api-key", "apikey", "key", "token", "access_token", "auth", "secret", "password",
                  "sig", "signature", "code", "x-api-key")
# everything between scheme:// and the LAST "@" of the URL: a password holding "/", "?", "#" or "@" unencoded is
# still userinfo to a human, whatever a URL parser makes of it (a path "@" is redacted with it: never a secret lost)
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s\"'<>]*@")
_URL_SECRET_PARAM = re.compile(r"(?i)([?&](?:" + "|".join(re.escape(k) for k in _SECRET_PARAMS) + r")=)[^&#\s]*")
#: query parameters whose values are never credentials (kept in recorded URLs)
_PLAIN_PARAMS = ("api-version", "api_version", "version", "model", "format")
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s?#]*)([^\s?#]*)(\?[^\s#]*)?(#\S*)?")
_KEY_PREFIX = re.compile(r"^(sk-|sk_|key-|pk-|rk-|hf_|gsk_|xai-)", re.IGNORECASE)
_KEY_LIKE = re.compile(r"^(?=.*[A-Za-z])(?=.*\d)[A-Za-z0-9_\-]{24,}$")


def _path_token(seg: str) -> str:
    return "***" if seg and (_KEY_PREFIX.match(seg) or _KEY_LIKE.match(seg)) else seg


def _redact_parts(m: re.Match) -> str:
    origin, path, query, fragment = m.group(1), m.group(2) or "", m.group(3) or "", m.group(4) or ""
    path = "/".join(_path_token(seg) for seg in path.split("/"))
    if query:
        pairs = []
        for piece in query[1:].split("&"):
            name, eq, value = piece.partition("=")
            if not eq:  # a bare piece (``?sk-…``): a key-like one is a key given without a name
                pairs.append(_path_token(piece))
                continue
            keep = not value or name.lower() in _PLAIN_PARAMS
            pairs.append(piece if keep else f"{name}=***")
        query = "?" + "&".join(pairs)
    # a fragment is never sent to a server, so it has no business in a base URL -- but a key pasted there
    # (``…/v1#sk-…``, ``#access_token=…`` as OAuth implicit flows write it) must not reach a file either
    return origin + path + query + ("#***" if len(fragment) > 1 else fragment)


def is_secret_key(name: Any) -> bool:
    """Whether a mapping key names a secret (``api_key``, ``Authorization``, ``access_token``, ...).

    >>> [is_secret_key(k) for k in ("api_key", "token", "hf_token", "prompt_tokens", "max_tokens")]
    [True, True, True, False, False]
    """
    k = str(name)
    return bool(_SECRET.search(k) or _SECRET_WORD.search(k))


def redact_url(text: str) -> str:
    """``text`` with URL credentials replaced by ``***``: the userinfo of every ``scheme://user:key@host``
    and the values of credential query parameters (``?api_key=``, ``&token=``, ``key=``, ...).

    >>> redact_url("http://bob:sk-1@h:8000/v1?api_key=sk-2&x=1")
    'http://***@h:8000/v1?api_key=***&x=***'
    >>> redact_url("https://u:p@ss@host/v1/sk-abc123/chat?api-version=2024-02-01")
    'https://***@host/v1/***/chat?api-version=2024-02-01'
    """
    text = _URL_USERINFO.sub(r"\1***@", str(text))
    return _URL_SECRET_PARAM.sub(r"\1***", _URL.sub(_redact_parts, text))


#: a JSON member with a string value (``"OPENAI_API_KEY": "sk-…"``) and a NAME=value word, in a command line
_JSON_MEMBER = re.compile(r'("((?:[^"\\]|\\.)*)"\s*:\s*)"(?:[^"\\]|\\.)*"')
_ASSIGNMENT = re.compile(r"(?<![\w.-])([A-Za-z_][A-Za-z0-9_.-]*)=([^\s\"',}]+)")


def redact_command(argv: Any) -> str:
    """A command line (a string or a list of arguments) with URL credentials stripped (:func:`redact_url`) and the
    values of secret-named JSON members and ``NAME=value`` words (``--ray-runtime-env '{"env_vars":
    {"OPENAI_API_KEY": "sk-…"}}'``, ``HF_TOKEN=…``) replaced by ``***``.

    A list is redacted word by word and joined shell-quoted (:func:`shlex.join`), so the recorded line runs again
    by copy and paste; a string that is such a line stays one (redacting it again changes nothing).

    >>> print(redact_command(['run', '--ray-runtime-env', '{"env_vars": {"OPENAI_API_KEY": "sk-1", "X": "1"}}']))
    run --ray-runtime-env '{"env_vars": {"OPENAI_API_KEY": "***", "X": "1"}}'
    """
    if not isinstance(argv, str):
        return shlex.join(redact_text(str(a)) for a in argv)
    try:
        words = shlex.split(argv)
    except ValueError:  # not a shell line (an unbalanced quote): redacted as text
        words = None
    if words is not None and shlex.join(words) == argv:  # a recorded (shell-quoted) line: each word on its own, so
        return shlex.join(redact_text(w) for w in words)  # a URL's redaction never takes a closing quote with it
    return redact_text(argv)


def redact_text(text: str) -> str:
    """``text`` (one value from the command line: a flag's value, a path, a URL) as every file aumann writes records
    it — the one redaction of ``command`` (each word), ``config`` and every other string of a manifest, a summary or
    a report: every key an LLM backend of this process registered, URL credentials (:func:`redact_url`) and the
    values of secret-named JSON members and ``NAME=value`` words.

    >>> redact_text("out/http://bob:sk-1@host/v1")
    'out/http://***@host/v1'
    """
    for more in _REDACTORS:  # the keys an LLM backend of this process registered
        text = more(text)
    return _redact_words(text)


#: further redactions of recorded text, registered by the layers that know secrets (the LLM backends' keys)
_REDACTORS: list[Callable[[str], str]] = []


def add_redactor(fn: Callable[[str], str]) -> None:
    """Register ``fn`` (text → text with the secrets it knows replaced) for :func:`redact_text`: the layer that knows
    a secret (an LLM backend's key) registers it, so this ground-floor module imports nothing above it."""
    if fn not in _REDACTORS:
        _REDACTORS.append(fn)


def _redact_words(text: str) -> str:
    text = _JSON_MEMBER.sub(lambda m: f'{m.group(1)}"***"' if is_secret_key(m.group(2)) else m.group(0), text)
    text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}=***" if is_secret_key(m.group(1)) else m.group(0), text)
    return redact_url(text)


def package_versions(names: tuple[str, ...] = _PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_revision(start: Path | None = None) -> str | None:
    """The git commit of the source tree aumann was imported from (``None`` outside a checkout, and where its files
    are not tracked there: an installed copy in a project's ``.venv`` is not that project's commit)."""
    where = start or Path(__file__).resolve().parent
    try:
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "--", "."], cwd=where, capture_output=True,
                                 text=True, timeout=5, check=False)
        if tracked.returncode != 0:
            return None
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5, check=False
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where, capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if rev.returncode != 0:
        return None
    return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def redact(obj: Any) -> Any:
    """A copy of ``obj`` with the string values of secret-looking keys replaced by ``"<redacted>"``
    (counts such as ``prompt_tokens`` are numbers, never secrets, and stay), and every other string (and path)
    redacted as the command line is (:func:`redact_text`: a flag's value recorded in ``config`` — a URL with
    credentials, a path holding a registered key — is recorded as ``command`` records it)."""
    if isinstance(obj, Mapping):
        return {k: ("<redacted>" if is_secret_key(k) and isinstance(v, str | bytes) and v else redact(v))
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, os.PathLike):
        return redact_text(os.fspath(obj))
    return obj


def _past_int64(obj: Any) -> Any:
    """An integer outside int64 as its digits, anything else as it is: the records read back hold int64 integers
    only (:mod:`aumann.records`), so a ``panel_meta`` holding ``2**70 + 1`` (``meta["rounded_values"]``, the largest
    integer float64 changed) made the whole manifest.json unreadable (``aumann report`` refused it)."""
    if isinstance(obj, int) and not isinstance(obj, bool) and not -(2**63) <= obj < 2**63:
        return str(obj)
    return obj


def int64_digits(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists and tuples at any depth) with every integer outside int64 as its digits, as
    manifest.json holds them: for the other JSON files written beside it from the same values (``trace_report.json``'s
    ``rounded_largest``, which held ``18446744073709551615`` where the manifest's ``trace`` held its digits)."""
    if isinstance(obj, Mapping):
        return {k: int64_digits(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [int64_digits(v) for v in obj]
    return _past_int64(obj)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "model_dump"):
        return _jsonable(obj.model_dump())
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return _past_int64(obj.item())
        except (TypeError, ValueError):
            pass
    if isinstance(obj, int):
        return _past_int64(obj)
    if isinstance(obj, str | float | bool) or obj is None:
        return obj
    return repr(obj)


def build_manifest(
    command: str, config: Mapping[str, Any] | None = None, seeds: Any = None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "command": redact_command(command),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "git_revision": git_revision(),
        "config": _jsonable(redact(dict(config or {}))),
        "seeds": _jsonable(seeds),
        **_jsonable(redact(dict(extra or {}))),
    }


def write_manifest(
    out_dir: str | os.PathLike[str],
    command: str,
    config: Mapping[str, Any] | None = None,
    seeds: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``manifest.json`` into ``out_dir`` (created if missing) atomically; return its path."""
    out = ensure_output_dir(out_dir, "manifest directory")
    return write_json(out / "manifest.json", build_manifest(command, config, seeds, extra), indent=2)


def record_outputs(out_dir: str | os.PathLike[str], digests: Mapping[str, str]) -> None:
    """Add ``digests`` (``{file: SHA-256}``) to the ``outputs_sha256`` of the aumann manifest in ``out_dir`` (files
    a command wrote after its manifest: ``aumann report``'s pages), so that a later run replaces or removes them as
    aumann's own; nothing when no aumann manifest is there."""
    from aumann.errors import AumannError
    from aumann.io import read_json

    out = Path(out_dir)
    try:
        manifest = read_json(out / "manifest.json", what="manifest", within=out)
    except (AumannError, OSError):
        return
    if not isinstance(manifest, dict) or not str(manifest.get("command", "")).startswith("aumann "):
        return
    ours = manifest.get("outputs_sha256")
    ours = ours if isinstance(ours, dict) else {}
    if all(ours.get(k) == v for k, v in digests.items()):
        return  # recorded already (the same bytes again): the manifest stays as it was
    manifest["outputs_sha256"] = {**ours, **digests}
    write_json(out / "manifest.json", manifest, indent=2, within=out)


__all__ = ["add_redactor", "build_manifest", "git_revision", "int64_digits", "is_secret_key", "package_versions",
           "record_outputs", "redact", "redact_command", "redact_text", "redact_url", "write_manifest"]
