"""What reaches the terminal: text from outside (config keys, file names, agent ids, server text) is shown,
never executed by the terminal.

A control character in an error message or a path (``ESC [ 2 J`` clears the screen, ``ESC ] 0 ; … BEL``
retitles the window, ``ESC ] 8 ;;`` makes a hidden link, a backspace or carriage return overwrites what
was printed, a bidirectional override reorders it) is replaced by its visible escape (``\\x1b``,
``\\u202e``). :func:`terminal_text` is applied to every error line the CLI prints and to outside text
that commands echo; ``markup=False`` (default) also escapes Rich markup (``[bold]``, ``[link=…]``) for
text printed through a Rich console.
"""

from __future__ import annotations

import re

#: C0 controls (tab and newline kept where asked), DEL, C1 controls, bidirectional overrides and isolates
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_ALL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal_text(text: object, *, keep_newlines: bool = False, rich: bool = False) -> str:
    """``text`` with every terminal control character shown as its escape (``\\x1b``); with ``rich=True``
    Rich markup is escaped too (for ``console.print``). Newlines and tabs stay with ``keep_newlines``.

    >>> terminal_text("key\\x1b[31m=1")
    'key\\\\x1b[31m=1'
    """
    out = (_CONTROL if keep_newlines else _CONTROL_ALL).sub(_visible, str(text))
    if rich:
        from rich.markup import escape

        out = escape(out)
    return out


def terminal_json(obj: object) -> str:
    """``obj`` as one line of JSON that is safe on a terminal: ``json.dumps`` leaves C1 controls and
    bidirectional overrides raw (and, with non-ASCII kept, so would any writer); here every character
    :func:`terminal_text` escapes is written as its JSON escape (``\\u009b``), so the line stays valid
    JSON that parses back to the same value.

    >>> terminal_json({"reply": "\\u202eevil\\x1b[2J"})
    '{"reply": "\\\\u202eevil\\\\u001b[2J"}'
    """
    import json

    return _CONTROL_ALL.sub(lambda m: f"\\u{ord(m.group(0)):04x}", json.dumps(obj, ensure_ascii=False, sort_keys=True))


__all__ = ["terminal_json", "terminal_text"]
