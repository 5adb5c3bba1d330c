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
    return args.func(args)
