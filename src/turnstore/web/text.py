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

__all__ = ["as_json", "shown"]

_KEPT = {0x09, 0x0A}
_TABLE = {point: visible(chr(point)) for point in UNSAFE if point not in _KEPT}


def shown(value: Any) -> str:
    """``value`` as text a page may show: every control and bidi character visible, never interpreted."""
    text = value if isinstance(value, str) else str(value)
    return text.translate(_TABLE)


def as_json(value: Any) -> str:
    """A JSON value (tool arguments, extension data) indented for reading, then made visible."""
    return shown(json.dumps(value, indent=2, ensure_ascii=False))
