"""The ``aumann`` command line: parses arguments, builds objects, calls the library.

Every :class:`~aumann.errors.AumannError` (and a ``MemoryError`` from an input too large for the machine)
becomes one line on stderr and exit code 2; ``aumann --debug COMMAND ...`` shows the traceback instead. A
bad flag value is argparse's usage line and error naming the flag, also exit code 2. Output to a reader that
went away (``aumann run --list | head -0``, quitting ``less``) ends quietly with exit code 141, as a
SIGPIPE would. A command that fails leaves no empty output folder it made (``--out``, and any parent it had to
make): :func:`aumann.io.remove_unused_output_dirs`; a folder that was there before is never removed.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds its
parser and sets ``func`` (a callable taking the parsed namespace and returning an exit code).
Add the command's name and module to ``_COMMANDS`` to add a command.

A command line that names a command builds only that command's parser (``aumann run`` lists the
registered LLM backends, which imports the LLM layer: 0.15–0.2 s every other command need not pay); one
that names none (``aumann``, ``aumann --help``, ``aumann --version``) or an unknown one builds them all,
so the top-level help and argparse's "invalid choice" error list every command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from aumann import __version__
from aumann.errors import AumannError, AumannWarning

#: each command's name → the module that registers it (kept equal to what the modules register: tested)
_COMMANDS = {"attribute": "aumann.cli.attribute", "demo": "aumann.cli.demo", "run": "aumann.cli.run",
             "bluesky": "aumann.cli.bluesky", "report": "aumann.cli.report", "llm": "aumann.cli.llm"}
_COMMAND_MODULES = tuple(_COMMANDS.values())  # in the order of the top-level help


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``aumann`` parser with every command, or (``only``: a command's name) with that command alone
    (``""``: with none, for ``aumann --version``)."""
    parser = argparse.ArgumentParser(
        prog="aumann",
        description="Aumann–Shapley attribution of emergent macro indicators to agents and steps.",
    )
    parser.add_argument("--version", action="version", version=f"aumann {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error (default: one line on stderr, exit code 2)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES if only is None else (_COMMANDS[only],) if only else ():
        importlib.import_module(name).register(sub)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, if it is one of ours: its first word that is not an option (the top-level
    options take no value); None after a help flag (the top-level help lists them all); ``""`` for
    ``--version`` without a command (no command needed)."""
    for word in argv:
        if word in ("--", "-h", "--help"):  # the top-level help (before any command) lists every command
            return None
        if not word.startswith("-"):
            return word if word in _COMMANDS else None
    return "" if "--version" in argv else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=_command_named(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad flag or value: argparse has printed usage and the error
        if exc.code in (0, None):
            raise  # --help, --version
        return int(exc.code) if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from aumann.cli.command import invoked_with

    try:
        # the manifest records the words given here (aumann.cli.command), not sys.argv (main called from Python)
        with warnings.catch_warnings(), invoked_with(argv):  # (catch_warnings restores the previous display)
            if not args.debug:
                warnings.showwarning = _one_line_warnings(warnings.showwarning)
            io = sys.modules.get("aumann.io")
            if io is not None:  # (main called again in one process: the folders an earlier command made are its)
                io.forget_created_output_dirs()
            code = 2  # (an exception: the command failed)
            try:
                code = int(args.func(args) or 0)
                return code
            finally:  # the output folders the command locked (aumann.io.lock), free again for the next command
                lock = sys.modules.get("aumann.io.lock")
                if lock is not None:
                    lock.release_output_locks()
                io = sys.modules.get("aumann.io")
                if io is not None and code != 0:  # a failed command leaves no empty --out it made (lock files gone)
                    io.remove_unused_output_dirs()
    except AumannError as exc:
        if args.debug:
            raise
        print(f"aumann: error: {type(exc).__name__}: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except (MemoryError, ValueError) as exc:  # an input too large for this machine (e.g. --agents 1e20): one line
        if args.debug or not (isinstance(exc, MemoryError) or _too_large(exc)):
            raise
        why = one_line(str(exc)) or "allocation failed"
        print(f"aumann: error: MemoryError: not enough memory for this input ({why}); use smaller sizes",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aumann: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`aumann run --list | head -0`, quitting `less`)
        if args.debug or not _output_closed():  # a broken socket (an LLM server) is an error of its own
            raise
        return SIGPIPE_EXIT


#: the exit code when the reader of our output went away: what a shell reports for a writer SIGPIPE killed
SIGPIPE_EXIT = 141


def _output_closed() -> bool:
    """Whether stdout or stderr is a pipe whose reader has gone; each such stream is pointed at ``os.devnull``
    (Python's final flush of what is still buffered would print "Exception ignored ... BrokenPipeError")."""
    import os
    import select

    closed = False
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            poll = select.poll()
            poll.register(fd, select.POLLOUT)
            gone = any(events & select.POLLERR for _, events in poll.poll(0))
        except (AttributeError, OSError, ValueError):  # no descriptor (captured), or no poll on this system
            continue
        if gone:
            closed = True
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
    return closed


def _one_line_warnings(previous: Any) -> Any:
    """A ``warnings.showwarning`` that prints our own warnings (:class:`~aumann.errors.AumannWarning`) as one line
    on stderr, like our errors: what to do about them is in the message, not in the file and line of our code
    that raised them (``--debug`` shows those). Anyone else's warnings go to ``previous`` (Python's display)."""
    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if isinstance(category, type) and issubclass(category, AumannWarning):
            print(f"aumann: warning: {one_line(str(message))}", file=sys.stderr if file is None else file)
        else:
            previous(message, category, filename, lineno, file, line)

    return show


#: what numpy says when an array's shape or byte size cannot even be represented (before any MemoryError)
_TOO_LARGE = ("maximum allowed dimension exceeded", "array is too big", "maximum allowed size exceeded",
              "negative dimensions are not allowed")


def _too_large(exc: ValueError) -> bool:
    """Whether ``exc`` is numpy refusing an allocation for its size (an input too large, not a bug)."""
    return any(text in str(exc).lower() for text in _TOO_LARGE)


def one_line(text: str) -> str:
    """An error message on one line (pydantic and nested messages span several), with every terminal
    control character shown as its escape (:func:`aumann.cli.terminal.terminal_text`): a config key
    holding ``ESC [ 2 J`` is printed, not obeyed."""
    from aumann.cli.terminal import terminal_text

    redaction = sys.modules.get("aumann.simulators.llm.redaction")  # loaded (and keys registered) by a backend
    if redaction is not None:
        text = redaction.redact_registered(text)
    return terminal_text(" | ".join(part.strip() for part in text.splitlines() if part.strip()))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
