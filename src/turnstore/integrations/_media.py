"""Images, audio and files a framework puts in a message, as canonical content blocks.

A framework hands media over as its own objects (pydantic-ai's ``BinaryContent``
and ``ImageUrl``, LangChain's image and file blocks, data URLs); written as
text they would be megabytes of base64 (or a Python ``repr``) that the next
model call reads as words and search indexes. As blocks they are what they
are: an image is an ``image`` block (sent to the model as an image, never
indexed, kept out of line once and for all sessions), audio an ``audio``
block, anything else, or media given only by URL, a ``file`` block.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[^,]*)?;base64,(?P<data>.*)", re.DOTALL)


def media_block(
    *, data: str | bytes | None = None, mime_type: str | None = None, url: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """The block of one piece of media: inline ``data`` (base64 text, or raw bytes), or a ``url``.

    A ``data:`` URL is taken as inline data. An image or audio block needs data
    that decodes and is not empty (a provider refuses anything else): other data
    is left out of the canonical block (the framework's own record keeps it). An
    image whose media type is not given is known by its first bytes (PNG, JPEG,
    GIF, WebP).
    """
    if data is None and url is not None:
        inline = _DATA_URL.fullmatch(url)
        if inline is not None:
            data, mime_type, url = inline["data"], mime_type or inline["mime"], None
    if isinstance(data, bytes):
        data = base64.b64encode(data).decode("ascii")
    if data is not None and not _decodes(data):
        data = None
    mime_type = mime_type.lower() if mime_type else (_sniffed(data) if data else None)
    kind = (mime_type or "").split("/", 1)[0]
    if data is not None and kind == "image" and mime_type:
        return {"type": "image", "data": data, "mimeType": mime_type}
    if data is not None and kind == "audio":
        return {"type": "audio", "data": data, "mimeType": mime_type}
    block: dict[str, Any] = {"type": "file"}
    for key, value in (("data", data), ("url", url), ("mimeType", mime_type), ("name", name)):
        if value is not None:
            block[key] = value
    return block


_IMAGE_STARTS = {"iVBORw0KGgo": "image/png", "/9j/": "image/jpeg", "R0lGOD": "image/gif", "UklGR": "image/webp"}
"""The base64 text an image file of each kind starts with (its magic bytes)."""


def _sniffed(data: str) -> str | None:
    return next((mime for start, mime in _IMAGE_STARTS.items() if data.startswith(start)), None)


def _decodes(data: str) -> bool:
    """Whether ``data`` is base64 of at least one byte."""
    try:
        return bool(data) and bool(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return False
