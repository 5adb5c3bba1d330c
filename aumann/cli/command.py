"""The command line as a manifest and the reports record it: ``aumann`` and the command's words, shell-quoted
(:func:`shlex.join`: it runs again by copy and paste), each word redacted on its own
(:func:`aumann.manifest.redact_command`: URL credentials, secret-named JSON members and ``NAME=value`` words; and
every key an LLM backend of this process registered) — one function for every command that writes a manifest; and
:func:`refuse_if_busy`, the early refusal of an output folder another live command writes."""

from __future__ import annotations

import os
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


def refuse_if_busy(out: str | os.PathLike[str] | None, *command: str, fallback: Sequence[str] = ()) -> None:
    """Take the lock of the output folder ``out`` now when another command may be writing it (its lock file,
    :data:`~aumann.io.lock.OUTPUTS_LOCK`, is there): a command calls this before its heavy imports (torch, pandas,
    the scenarios), so that a folder another live command writes is refused with an
    :class:`~aumann.errors.OutputBusyError` in a fraction of a second, not after seconds of imports. The command
    still takes the lock where it did, once ``--out`` is checked (re-entrant: it keeps this one); a folder with no
    lock file is left alone here (nothing made before the command's checks: no holder to refuse it either).

    Raises:
        OutputBusyError: another live process holds the folder's lock.
        OutputError: the lock file is something that cannot be locked (as :func:`~aumann.io.lock_output_dir`).
    """
    if out is None:
        return
    from aumann.io.lock import OUTPUTS_LOCK, lock_output_dir

    try:
        busy = os.path.lexists(os.path.join(out, OUTPUTS_LOCK))
    except (TypeError, ValueError):  # (a path the command's own checks refuse, typed)
        return
    if busy:
        lock_output_dir(out, command=command_line(*command, fallback=fallback))


__all__ = ["command_line", "command_words", "invoked_with", "refuse_if_busy"]
