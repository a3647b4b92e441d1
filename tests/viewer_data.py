"""The store the viewer's tests look at: the demo, a hostile session and a long loop."""

from __future__ import annotations

import base64
from typing import Any

from factories import assistant, extension, usage, user

from turnstore import ImageContent, Message, TextContent, ToolCallContent, UserMessage
from turnstore.demo import PIXEL, build_demo

HOSTILE = "hostile-\u202esession"
HOSTILE_TITLE = '<b>bold</b> "quoted" \x1b[31mred\x1b[0m'
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
ANSI = "\x1b[31mred alert\x1b[0m"
HOSTILE_TEXT = f"{SCRIPT} {IMG} {ANSI} \u202eevil"
LONG = "long-session"
LONG_TURNS = 45
SVG = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(3)</script></svg>').decode()
PNG_BYTES = base64.b64decode(PIXEL)


def build_viewer_store(store: Any) -> dict[str, str]:
    """Fill ``store`` (a fresh one); the ids the tests need."""
    build_demo(store)
    ids = {"coding": "demo-coding-0b5d0f0e", "research": "demo-research-5c7a2e41"}
    store.sessions.create(session_id=HOSTILE, title=HOSTILE_TITLE, agent_id="agent-\x1b]0;x\x07")
    loop = store.loops.start(HOSTILE, config={"model": "model<i>", "provider": "anthropic"})
    call = ToolCallContent(id='call"><script>alert(4)</script>', name=f"tool{IMG}", arguments={"html": SCRIPT})
    images = [
        TextContent(text=HOSTILE_TEXT),
        ImageContent(data=PIXEL, mime_type="image/png"),
        ImageContent(data=SVG, mime_type="image/svg+xml"),
        ImageContent(data="not base64!!", mime_type="image/png"),
    ]
    reply = assistant(HOSTILE_TEXT, thinking=f"thinking {SCRIPT}", u=usage(1000, 100, cache_read=3000))
    reply = reply.model_copy(update={"content": [*reply.content, call]})
    store.messages.append_turn(
        loop.loop_id,
        0,
        [
            UserMessage(content=images, timestamp=1_000),
            reply,
            Message.tool_result(call, [TextContent(text=f"result {SCRIPT}")]),
            extension("note<script>", {"html": SCRIPT}),
        ],
    )
    ids["hostile"] = HOSTILE
    ids["hostile_loop"] = loop.loop_id
    store.sessions.create(session_id=LONG, title="A long loop")
    loop = store.loops.start(LONG, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    for k in range(LONG_TURNS):
        store.messages.append_turn(loop.loop_id, k, [user(f"prompt {k}"), assistant(f"answer {k}")])
    ids["long"] = LONG
    ids["long_loop"] = loop.loop_id
    return ids
