"""Strings from models, databases and users as a terminal may show them: control characters escaped.

A model's input named ``"\\x1b]0;title\\x07"``, or an error message that quotes it, would otherwise retitle,
recolour or hide text on the screen of whoever lists the results. Sweep files refuse control characters
(orchestrator/spec/checks.py) and so does model intake (workers/onnx_model.py); this is for what was stored
before, or comes from elsewhere (a team's database, a compiler's message).
"""

from __future__ import annotations

import unicodedata

#: Bidirectional formatting characters (Unicode category Cf, not Cc): an override such as U+202E in a name
#: shows the rest of its line right to left in a bidi-aware terminal, the numbers beside it reversed
#: ("0.25 ms" reads "sm 52.0"). Sweep files and model intake refuse them like control characters.
BIDI_CONTROLS = frozenset((0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)))


def unprintable(text: str) -> str | None:
    """The first control character or bidi control in ``text`` (None when there is none)."""
    if text.isprintable() and not any(ord(c) in BIDI_CONTROLS for c in text):
        return None
    return next((c for c in text if unicodedata.category(c) == "Cc" or ord(c) in BIDI_CONTROLS), None)


def printable(text: str) -> str:
    """``text`` with each control character but newline and tab written as its Python escape (``\\x1b``)."""
    if text.isprintable() or all(c in "\n\t" or unicodedata.category(c) != "Cc" for c in text):
        return text
    return "".join(
        c if c in "\n\t" or unicodedata.category(c) != "Cc" else c.encode("unicode_escape").decode() for c in text
    )


def shortened(text: str, keep: int = 30) -> str:
    """``text`` as one readable line: its first and last ``keep`` characters and its length when longer."""
    return text if len(text) <= 2 * keep + 3 else f"{text[:keep]}...{text[-keep:]} ({len(text)} characters)"
