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
import re
from typing import Any

_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[^,]*)?;base64,(?P<data>.*)", re.DOTALL)


def media_block(
    *, data: str | bytes | None = None, mime_type: str | None = None, url: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """The block of one piece of media: inline ``data`` (base64 text, or raw bytes), or a ``url``.

    A ``data:`` URL is taken as inline data.
    """
    if data is None and url is not None:
        inline = _DATA_URL.fullmatch(url)
        if inline is not None:
            data, mime_type, url = inline["data"], mime_type or inline["mime"], None
    if isinstance(data, bytes):
        data = base64.b64encode(data).decode("ascii")
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
