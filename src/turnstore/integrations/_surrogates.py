"""Lone surrogates in what a framework hands over: kept in its source, replaced in the canonical row.

Python strings may hold surrogate code points that no UTF-8 text can (a file
name read with ``surrogateescape``, a tool's undecodable output); a
framework's own store keeps them as JSON escapes (``"\\udcff"``). An adapter
keeps the framework's record so too, byte for byte what it gets back, and
stores the canonical message with each surrogate replaced by U+FFFD, which
the database can hold and a model can be sent.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point (UTF-8 cannot encode it)."""
    return _SURROGATE.search(text) is not None


def without_surrogates(value: Any) -> Any:
    """A JSON-like value with every surrogate in its strings and keys replaced by U+FFFD (other values as they are)."""
    if isinstance(value, str):
        return _SURROGATE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {without_surrogates(key): without_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_surrogates(item) for item in value]
    return value
