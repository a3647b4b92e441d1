"""Telling an export turnstore wrote from its first bytes, so that importing it as another format says what it is.

A ``turnstore`` export's first line is its session line, ``{"type":"session","format":"turnstore",...}``;
a ``phi-core`` array export's first message carries :data:`~turnstore.export.SESSION_KEY`; a
``phi-core-session`` export is an object whose first key is ``session_id`` and that has phi-core's
``formation`` and ``loops``. Only the first :data:`HEAD_BYTES` of a file are read: a file whose
telling part lies further in is not told (its importer reports it as usual).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..export import SESSION_KEY

__all__ = ["HEAD_BYTES", "export_format", "wrong_format"]

HEAD_BYTES = 1 << 20
"""How much of a file is read to tell its format, at most."""

_PHI_CORE_SESSION = re.compile(r'\{\s*"session_id"\s*:')
_IMPORTED_AS = {"turnstore": "turnstore", "phi-core": "phi-core", "phi-core-session": "phi-core"}
"""Each export format -> the import format that reads it."""


def export_format(path: Path) -> str | None:
    """The export format (``turnstore``, ``phi-core``, ``phi-core-session``) of the file turnstore wrote at ``path``.

    None for any other file, one that cannot be read, and one not told from its first :data:`HEAD_BYTES`.
    """
    try:
        with path.open("rb") as file:
            head = file.read(HEAD_BYTES)
    except OSError:
        return None
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if text.startswith("["):
        first = _first_value(text, 1)
        return "phi-core" if isinstance(first, dict) and SESSION_KEY in first else None
    if text.startswith("{"):
        line = _first_value(text.partition("\n")[0], 0)
        if isinstance(line, dict) and line.get("type") == "session" and line.get("format") == "turnstore":
            return "turnstore"
        if _PHI_CORE_SESSION.match(text) and '"formation":' in text and '"loops":' in text:
            return "phi-core-session"
    return None


def wrong_format(path: Path, fmt: str) -> str | None:
    """What to say when ``path`` is an export that the import format ``fmt`` does not read, else None.

    Every other format's importer given a ``turnstore`` export says so, and every
    importer but ``phi-core`` given a ``phi-core`` one (even one that would read
    its messages, as ``yoagent`` might, losing the loops and the session id).
    """
    found = export_format(path)
    if found is None or _IMPORTED_AS[found] == fmt:
        return None
    reader = _IMPORTED_AS[found]
    return f"this is a {found} export; use `turnstore import {reader}`"


def _first_value(text: str, at: int) -> Any:
    """The JSON value that starts at ``text[at:]`` (after white space), or None when there is none whole."""
    try:
        value, _ = json.JSONDecoder().raw_decode(text, len(text) - len(text[at:].lstrip()))
    except (ValueError, RecursionError):
        return None
    return value
