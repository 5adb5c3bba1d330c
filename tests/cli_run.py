"""``aumann run`` invoked in-process through its own parser, exceptions left to propagate (``aumann.cli.main``
turns them into exit codes and messages): what the tests that drive the command share."""

from __future__ import annotations

import argparse


def invoke_run(*argv: str) -> int:
    """``aumann run ARGV…`` in this process; its exit code."""
    from aumann.cli import run as run_cmd

    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", *argv])
    try:
        return args.func(args)
    finally:  # as aumann.cli.main does: the output folder the command locked is free again when it returns
        from aumann.io import release_output_locks

        release_output_locks()
