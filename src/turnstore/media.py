"""Media out of line: the long base64 data of a stored text, moved out and put back byte for byte.

A message row holds two texts, its JSON (``message``) and its verbatim
source record (``source``); both may carry the same screenshot as base64.
:func:`split` replaces each long base64 run in a text by a reference to the
``media`` table, where the run is kept once, keyed by its SHA-256;
:func:`join` puts the runs back. Both work on the text itself, never on
parsed JSON, so a stored text comes back exactly as written whatever it
holds (escapes, key order, duplicate keys, a source that is not JSON).

What is moved out: the run of at least :data:`THRESHOLD` base64 characters
that fills a JSON string which is the value of a ``"data"`` key (the data of
an image, audio or file part, in turnstore's format and most sources') or a
``data:<type>;base64,`` URL (OpenAI's ``image_url`` and ``file_data``); in
the URL only the payload after the comma moves.

The reference is ``\\/m<sha256 hex>\\/``: the two characters ``\\/`` (an
escaped solidus) open and close it. The text is escaped first: each ``\\/``
it already holds is doubled, so every ``\\/`` of a stored text is either
half of a doubled pair or part of a reference, and :func:`join` reads them
back unambiguously. An escaped solidus is valid inside a JSON string, so a
stored message stays valid JSON (PostgreSQL's ``json`` column checks it);
canonical JSON never writes one, so a stored message without media is
stored unchanged unless it holds a backslash right before a slash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from hashlib import sha256
from typing import Literal

__all__ = [
    "MARK",
    "MEDIA_MODES",
    "REF_PREFIX",
    "THRESHOLD",
    "MediaMode",
    "digest_of",
    "digests",
    "join",
    "split",
    "stored_string",
]

THRESHOLD = 16 * 1024
"""Shortest base64 run (characters) moved out of line: shorter data costs less inline than a lookup."""

MARK = "\\/"
"""Opens and closes a reference; doubled where a stored text holds it of its own."""

REF_PREFIX = "media:sha256:"
"""What ``media="ref"`` puts in place of a run: this prefix, then the run's SHA-256 (64 hex digits)."""

MediaMode = Literal["inline", "omit", "ref"]
"""How a read returns media kept out of line.

* ``"inline"`` (default): the original text, byte for byte.
* ``"omit"``: each moved-out run is left out: an image part reads ``"data":""``
  (a ``data:`` URL keeps its prefix, ``data:image/png;base64,``); the message
  is still valid, its media empty.
* ``"ref"``: each run is ``media:sha256:<hex>``, which ``store.messages.media()`` resolves.
"""

MEDIA_MODES: tuple[MediaMode, ...] = ("inline", "omit", "ref")

_PREFIX = re.compile(r'"data"\s*:\s*"(?:data:[^",;\\]{1,200};base64,)?|"data:[^",;\\]{1,200};base64,')
"""What opens a run: a ``"data"`` key and its string's quote, or a ``data:`` URL up to its comma."""
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_DOUBLED = MARK + MARK
_TOKEN = re.compile(r"\\/(?:\\/|m([0-9a-f]{64})\\/)")


def digest_of(data: str) -> str:
    """The key of a run in the ``media`` table: the SHA-256 (hex) of its base64 text."""
    return sha256(data.encode("ascii")).hexdigest()


def _escape(text: str) -> str:
    return text.replace(MARK, _DOUBLED) if MARK in text else text


def stored_string(value: str) -> str:
    """What a JSON function of the database (``json_extract``, ``->>``) reads back for the string ``value`` in a
    stored text: ``value`` itself unless it holds a backslash right before a slash, whose escape the text doubles.

    For comparing a stored string in SQL with one a caller gave (the search's tool-name filter).
    """
    if MARK not in (encoded := json.dumps(value, ensure_ascii=False)):
        return value
    read: str = json.loads(_escape(encoded))
    return read


def split(text: str) -> tuple[str, dict[str, str]]:
    """The text to store and the runs it refers to, by digest.

    A short text without ``\\/`` (every small message) is returned as it is,
    after two checks that cost next to nothing.
    """
    if len(text) < THRESHOLD:
        return _escape(text), {}
    found: dict[str, str] = {}
    pieces: list[str] = []
    last = 0
    for start, end, data, encoded in _runs(text):
        digest = sha256(encoded).hexdigest()  # digest_of(data), with the bytes the check already made
        found[digest] = data
        pieces.append(_escape(text[last:start]))
        pieces.append(f"{MARK}m{digest}{MARK}")
        last = end
    if not found:
        return _escape(text), found
    pieces.append(_escape(text[last:]))
    return "".join(pieces), found


def _runs(text: str) -> Iterator[tuple[int, int, str, bytes]]:
    """Where each run to move out starts and ends, the run, and its ASCII bytes: found with ``str.find``, checked
    at C speed (on the bytes, which ``bytes.translate`` scans twice as fast as ``str.translate`` the text, and which
    the digest needs anyway)."""
    at = text.find('"data')
    while at >= 0:
        opened = _PREFIX.match(text, at)
        if opened is None:
            at = text.find('"data', at + 5)
            continue
        start = opened.end()
        end = text.find('"', start)
        if end < 0:
            return
        if end - start >= THRESHOLD:
            run = text[start:end]
            if run.isascii():
                encoded = run.encode("ascii")
                body = encoded.rstrip(b"=")
                if len(encoded) - len(body) <= 2 and not body.translate(None, _BASE64_ALPHABET):
                    yield start, end, run, encoded
        at = text.find('"data', end + 1)


def digests(text: str) -> list[str]:
    """The digests a stored text refers to, in order (repeats included)."""
    return [digest for digest in (match.group(1) for match in _TOKEN.finditer(text)) if digest is not None]


def join(text: str, mode: MediaMode, fetch: Callable[[str], str]) -> str:
    """The text as written (``inline``), or with its media left out or named (``omit``, ``ref``).

    ``fetch`` gives the run of a digest (``inline`` only).
    """
    return "".join(pieces(text, mode, fetch))


def pieces(text: str, mode: MediaMode, fetch: Callable[[str], str]) -> list[str]:
    """:func:`join`'s text as the pieces it is made of (for a caller that joins many texts at once)."""
    parts: list[str] = []
    last = 0
    for match in _TOKEN.finditer(text):
        parts.append(text[last : match.start()])
        last = match.end()
        digest = match.group(1)
        if digest is None:
            parts.append(MARK)
        elif mode == "inline":
            parts.append(fetch(digest))
        elif mode == "ref":
            parts.append(REF_PREFIX + digest)
    parts.append(text[last:])
    return parts
