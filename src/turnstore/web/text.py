"""Stored text made visible for the browser: control, ANSI and bidi characters become visible escapes.

HTML escaping is Jinja's (autoescape on, every template); this module does the
other half. Every character of :data:`turnstore.cli.escaping.UNSAFE` is shown as
its ``\\xNN`` / ``\\uXXXX`` escape, as the CLI shows it on a terminal (an ANSI
colour ``ESC[31m`` reads ``\\x1b[31m``, a right-to-left override ``\\u202e``).
Newlines and tabs stay: the page shows text with ``white-space: pre-wrap``.
"""

from __future__ import annotations

import json
from typing import Any

from ..cli.escaping import UNSAFE, visible

__all__ = ["SHOWN_LIMIT", "as_json", "shown"]

_KEPT = {0x09, 0x0A}
_TABLE = {point: visible(chr(point)) for point in UNSAFE if point not in _KEPT}


SHOWN_LIMIT = 100_000
"""Characters of one text a page shows; the rest is cut with a note (a 50 MB tool result would be a 50 MB page)."""


def shown(value: Any) -> str:
    """``value`` as text a page may show: every control and bidi character visible, never interpreted.

    A text over :data:`SHOWN_LIMIT` characters is cut there, with a note of how
    much was left out (``turnstore show`` and ``export`` give it whole).
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) > SHOWN_LIMIT:
        more = len(text) - SHOWN_LIMIT
        text = f"{text[:SHOWN_LIMIT]}\n[… {more:,} more characters not shown: turnstore show or export gives the whole text]"
    return text.translate(_TABLE)


def as_json(value: Any) -> str:
    """A JSON value (tool arguments, extension data) indented for reading, then made visible."""
    return shown(json.dumps(value, indent=2, ensure_ascii=False))
