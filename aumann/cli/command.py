"""The command line as a manifest and the reports record it: ``aumann`` and the command's words, shell-quoted
(:func:`shlex.join`: it runs again by copy and paste), each word redacted on its own
(:func:`aumann.manifest.redact_command`: URL credentials, secret-named JSON members and ``NAME=value`` words; and
every key an LLM backend of this process registered) — one function for every command that writes a manifest."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

#: the arguments :func:`aumann.cli.main` parses now (``None``: not inside ``main``; ``sys.argv`` then)
_ARGV: ContextVar[tuple[str, ...] | None] = ContextVar("aumann_cli_argv", default=None)


@contextmanager
def invoked_with(argv: Sequence[str]) -> Iterator[None]:
    """Within the block, :func:`command_line` reads ``argv`` (what ``main(argv)`` was given; it may differ from
    ``sys.argv`` when ``main`` is called from Python)."""
    token = _ARGV.set(tuple(argv))
    try:
        yield
    finally:
        _ARGV.reset(token)


def command_words(*command: str, fallback: Sequence[str] = ()) -> list[str]:
    """The words of this command line after the command's own (``command``: ``("run",)``, ``("bluesky", "study")``).
    The top-level options before the command (``aumann --debug run ...``) take no value, so the command starts at
    the first word that is not an option; ``fallback`` when these words are not that command (a call of the
    command's function from Python)."""
    argv = _ARGV.get()
    words = list(sys.argv[1:] if argv is None else argv)
    at = next((i for i, w in enumerate(words) if not w.startswith("-")), None)
    if at is not None and words[at:at + len(command)] == list(command):
        return words[at + len(command):]
    return list(fallback)


def command_line(*command: str, fallback: Sequence[str] = ()) -> str:
    """``aumann COMMAND ...`` as this process was invoked, redacted word by word and shell-quoted (what
    ``manifest.json`` → ``command`` holds; ``shlex.split`` of it gives the words back, each secret as ``***``)."""
    from aumann.manifest import redact_command

    # each word through redact_text, which also redacts every key an LLM backend of this process registered
    return redact_command(["aumann", *command, *command_words(*command, fallback=fallback)])


__all__ = ["command_line", "command_words", "invoked_with"]
