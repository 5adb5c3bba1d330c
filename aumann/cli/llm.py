"""``aumann llm``: look at what an LLM run asked and was told.

    aumann llm show RUN_DIR                 # every prompt and reply in the run's response cache
    aumann llm show RUN_DIR --invalid       # only the replies that were not usable (the abstentions)
    aumann llm show RUN_DIR --limit 5 --json
    aumann llm backends                     # the registered decision backends (--backend NAME)

``show`` reads ``RUN_DIR/llm-cache.sqlite`` (or ``--cache PATH``) without writing to it and prints, per
stored request, its messages, the seed and scope, the reply and -- for an abstention -- why the reply
was refused. Messages and replies are printed as stored (keys never reach the cache).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from aumann.cli.args import integer, path
from aumann.cli.terminal import terminal_json, terminal_text
from aumann.errors import ConfigError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("llm", help="inspect LLM runs (prompts and replies) and list decision backends",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="llm_command", metavar="COMMAND")
    s = sub.add_parser("show", help="print the prompts and replies (valid and invalid) stored in a run's cache")
    s.add_argument("run_dir", type=path, help="a run directory written by aumann run --backend openai|local")
    s.add_argument("--cache", type=path, default=None, help="the response cache (default RUN_DIR/llm-cache.sqlite)")
    s.add_argument("--invalid", action="store_true", help="only the replies that were not usable (abstentions)")
    s.add_argument("--limit", type=integer(minimum=0), default=None, help="at most this many requests (oldest first)")
    s.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    s.set_defaults(func=show)
    b = sub.add_parser("backends", help="list the registered decision backends")
    b.set_defaults(func=backends)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def backends(args: argparse.Namespace) -> int:
    from aumann.simulators.llm.registry import describe_backends

    for name, desc in describe_backends():  # a description is the registrant's text: shown, never obeyed
        print(f"{terminal_text(name)}\t{terminal_text(desc)}")
    return 0


def _text(row: dict[str, Any], n: int) -> str:
    req = row.get("request") or {}
    head = f"[{n}] {row['key'][:12]} · {row['model']} · schema {req.get('schema', '?')}"
    if req.get("scope"):
        head += f" · scope {req['scope']}"
    if req.get("seed") is not None:
        head += f" · seed {req['seed']}"
    if row.get("damaged"):
        return head + f"\n  DAMAGED ROW: {row['damaged']}\n  reply: {row.get('reply', '')}"
    status = f"INVALID ({row['invalid']})" if row.get("invalid") else "valid"
    lines = [head + f" · {status} · {row.get('prompt_tokens', 0)}+{row.get('completion_tokens', 0)} tokens"]
    for m in req.get("messages") or []:
        if isinstance(m, dict):
            content = str(m.get("content", "")).replace("\n", "\n      ")
            lines.append(f"  {m.get('role', '?')}: {content}")
    from aumann.simulators.llm.cache import FAILED_MARK, TOO_LARGE_MARK

    why = str(row.get("invalid") or "")
    if row.get("reply") == "" and why.startswith(FAILED_MARK):
        lines.append("  → no reply: every request of this decision failed (an abstention)")
    elif row.get("reply") == "" and why.startswith(TOO_LARGE_MARK):
        lines.append("  → no reply kept: the reply was over max_response_bytes (an abstention; its text is not stored)")
    else:
        lines.append(f"  → reply: {row.get('reply', '')}")
    return "\n".join(lines)


def show(args: argparse.Namespace) -> int:
    from aumann.simulators.llm.cache import ResponseCache

    run = Path(args.run_dir)
    if args.cache is not None:
        cache_path = Path(args.cache)
    else:
        from aumann.cli.llm_options import run_dir_file

        cache_path = run_dir_file(run, "llm-cache.sqlite", "LLM response cache", sqlite=True)
    from aumann.simulators.llm.cache import not_a_file

    not_a_file(cache_path, error=ConfigError, what="--cache" if args.cache is not None else "the LLM response cache")
    if not cache_path.is_file():
        raise ConfigError(f"no LLM response cache at {str(cache_path)!r}: was {str(run)!r} written by aumann run with "
                          "an LLM backend (--backend openai|local)? Pass --cache PATH if it lives elsewhere")
    if args.limit is not None and args.limit < 0:
        raise ConfigError(f"--limit must be an int >= 0; got {args.limit}")
    cache = ResponseCache(cache_path, mode="replay")
    n = invalid = 0
    try:
        for row in cache.rows(limit=args.limit, invalid_only=args.invalid):
            n += 1
            invalid += bool(row.get("invalid"))
            if args.json:
                print(terminal_json(row))  # server text is shown, never obeyed by the terminal
            else:
                print(terminal_text(_text(row, n), keep_newlines=True))
    finally:
        cache.close()
    if not args.json:
        print(terminal_text(f"{n} request(s) shown from {cache_path} ({invalid} invalid)"), file=sys.stderr)
    return 0


__all__ = ["register"]
