"""A realistic demo store: what an agent app's history looks like in turnstore.

Three sessions with fixed ids (so building the demo again replaces them):

* a coding session on Claude: a tool-using loop (thinking with signatures,
  a failing test run, a fix), a follow-up loop, and a branch that retries
  the follow-up on GPT-5;
* a research session on GPT-5 with an image, a provider error turn and its
  retry, and a sub-agent loop spawned by a tool call;
* a long session that was compacted: a summary loop that keeps the last turn.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import struct
import zlib
from datetime import datetime, timedelta, timezone
from typing import Any

from .models import (
    AssistantMessage,
    ImageContent,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from .store import Store

__all__ = ["DEMO_SESSIONS", "build_demo"]

DEMO_SESSIONS = (
    "demo-coding-0b5d0f0e",
    "demo-research-5c7a2e41",
    "demo-compacted-9e33d1aa",
)

CLAUDE = {"model": "claude-sonnet-4-5", "provider": "anthropic", "thinking_level": "medium"}
GPT = {"model": "gpt-5", "provider": "openai"}
START = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)

# A 1x1 PNG: the smallest image a message can carry.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000100e527d4a20000000049454e44ae426082"
    )
).decode()

SCREENSHOT_SIZE = (480, 270)
"""Width and height of the demo's screenshot, in pixels."""


@functools.lru_cache(maxsize=1)
def screenshot() -> str:
    """The research session's screenshot, base64: two chart libraries' dashboards side by side, as a user
    would paste them (a line chart with its sparkline, a bar chart), :data:`SCREENSHOT_SIZE` pixels.

    Drawn here, the same bytes every time, and small on disk (flat colours compress well).
    """
    width, height = SCREENSHOT_SIZE
    pixels = [[(246, 247, 249)] * width for _ in range(height)]

    def fill(x0: int, y0: int, x1: int, y1: int, colour: tuple[int, int, int]) -> None:
        for y in range(max(y0, 0), min(y1, height)):
            pixels[y][max(x0, 0) : min(x1, width)] = [colour] * (min(x1, width) - max(x0, 0))

    fill(0, 0, width, 24, (52, 58, 70))  # the window's title bar, with its three buttons
    for n, colour in enumerate(((237, 106, 94), (245, 191, 79), (98, 197, 84))):
        fill(10 + 16 * n, 8, 18 + 16 * n, 16, colour)
    half = width // 2
    for left, title in ((0, (66, 133, 244)), (half, (219, 68, 55))):
        fill(left + 12, 36, left + half - 12, height - 12, (255, 255, 255))  # the panel
        fill(left + 24, 46, left + 120, 54, title)  # its heading
        fill(left + 24, height - 40, left + half - 24, height - 39, (200, 204, 210))  # the x axis
    # Library A: a line chart and, beside its heading, a sparkline of the same series.
    series = [0.5 + 0.3 * math.sin(n / 9) + 0.12 * math.sin(n / 2.3) for n in range(half - 48)]
    last = None
    for n, value in enumerate(series):
        y = int(height - 44 - value * (height - 120))
        top, bottom = (y, y) if last is None else (min(y, last), max(y, last))
        fill(24 + n, top, 25 + n, bottom + 2, (66, 133, 244))  # joined to the point before: no gaps
        last = y
    for n, value in enumerate(series[::3]):
        spark = int(62 - value * 12)
        fill(132 + n, spark, 133 + n, spark + 2, (66, 133, 244))
    # Library B: a bar chart.
    for n in range(8):
        bar = int((0.35 + 0.5 * abs(math.sin(n * 1.7 + 0.4))) * (height - 120))
        x = half + 28 + n * 24
        fill(x, height - 40 - bar, x + 18, height - 40, (219, 68, 55))
    rows = b"".join(b"\x00" + bytes(channel for pixel in row for channel in pixel) for row in pixels)
    return base64.b64encode(_png(width, height, rows)).decode()


def _png(width: int, height: int, rows: bytes) -> bytes:
    """A PNG of 8-bit RGB ``rows`` (each a filter byte, 0, then its pixels), zlib-compressed."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


class _Clock:
    """Message timestamps that advance like a real conversation."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def tick(self, seconds: float) -> int:
        self.now += timedelta(seconds=seconds)
        return int(self.now.timestamp() * 1000)


def _usage(input: int, output: int, cache_read: int = 0, cache_write: int = 0, reasoning: int = 0) -> Usage:
    return Usage(
        input=input,
        output=output,
        reasoning=reasoning,
        cache_read=cache_read,
        cache_write=cache_write,
        total_tokens=input + output + cache_read + cache_write,
    )


def _signature(seed: str) -> str:
    return base64.b64encode(("sig:" + seed).encode() * 6).decode()


def _assistant(
    clock: _Clock,
    config: dict[str, str],
    usage: Usage,
    *,
    thinking: str | None = None,
    text: str | None = None,
    calls: list[tuple[str, str, dict[str, Any]]] = (),  # type: ignore[assignment]
    stop: StopReason | None = None,
    error: str | None = None,
) -> AssistantMessage:
    content: list[Any] = []
    if thinking:
        content.append(ThinkingContent(thinking=thinking, signature=_signature(thinking)))
    if text:
        content.append(TextContent(text=text))
    for call_id, name, arguments in calls:
        content.append(ToolCallContent(id=call_id, name=name, arguments=arguments))
    return AssistantMessage(
        content=content,
        stop_reason=stop or (StopReason.TOOL_USE if calls else StopReason.STOP),
        model=config["model"],
        provider=config["provider"],
        usage=usage,
        timestamp=clock.tick(4),
        error_message=error,
    )


def _result(clock: _Clock, call_id: str, name: str, text: str, *, error: bool = False) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id,
        tool_name=name,
        content=[TextContent(text=text)],
        is_error=error,
        timestamp=clock.tick(1.5),
    )


def _user(clock: _Clock, text: str, image: bool = False) -> UserMessage:
    content: list[Any] = [TextContent(text=text)]
    if image:
        content.append(ImageContent(data=screenshot(), mime_type="image/png"))
    return UserMessage(content=content, timestamp=clock.tick(20))


def build_demo(store: Store) -> list[str]:
    """Write the demo sessions into ``store`` (replacing earlier demo sessions); returns their ids."""
    for session_id in DEMO_SESSIONS:
        if store.sessions.exists(session_id):
            store.sessions.delete(session_id)
    _coding(store)
    _research(store)
    _compacted(store)
    return list(DEMO_SESSIONS)


def _coding(store: Store) -> None:
    sid = DEMO_SESSIONS[0]
    clock = _Clock(START)
    store.sessions.create(sid, agent_id="demo-coder", title="Fix the failing date parser test", created_at=clock.now)
    loop = store.loops.start(sid, config=CLAUDE, started_at=clock.now)
    lid = loop.loop_id
    store.messages.append_turn(
        lid,
        0,
        [
            _user(clock, "The CI run fails in tests/test_dates.py. Can you fix it?"),
            _assistant(
                clock,
                CLAUDE,
                _usage(2_310, 164, cache_write=4_096, reasoning=58),
                thinking="Run the failing test first to see the assertion.",
                calls=[("toolu_01", "bash", {"command": "pytest -x tests/test_dates.py"})],
            ),
            _result(
                clock,
                "toolu_01",
                "bash",
                "FAILED tests/test_dates.py::test_parse_rfc3339 - AssertionError: 2026-01-01 00:00:00 != "
                "2026-01-01 00:00:00+00:00",
                error=True,
            ),
        ],
    )
    store.messages.append_turn(
        lid,
        1,
        [
            _assistant(
                clock,
                CLAUDE,
                _usage(412, 96, cache_read=6_406, reasoning=40),
                thinking="The parser drops the timezone. Read the parser.",
                calls=[("toolu_02", "read_file", {"path": "src/dates.py"})],
            ),
            _result(
                clock,
                "toolu_02",
                "read_file",
                "def parse(text):\n    return datetime.fromisoformat(text.rstrip('Z'))\n",
            ),
        ],
    )
    store.messages.append_turn(
        lid,
        2,
        [
            _assistant(
                clock,
                CLAUDE,
                _usage(380, 210, cache_read=6_818, reasoning=72),
                thinking="Replace the trailing Z with +00:00 instead of stripping it.",
                calls=[
                    (
                        "toolu_03",
                        "edit_file",
                        {"path": "src/dates.py", "old": "text.rstrip('Z')", "new": "text.replace('Z', '+00:00')"},
                    ),
                    ("toolu_04", "bash", {"command": "pytest -x tests/test_dates.py"}),
                ],
            ),
            _result(clock, "toolu_03", "edit_file", "edited src/dates.py (1 line)"),
            _result(clock, "toolu_04", "bash", "1 passed in 0.04s"),
        ],
    )
    store.messages.append_turn(
        lid,
        3,
        [
            _assistant(
                clock,
                CLAUDE,
                _usage(296, 118, cache_read=7_190),
                text="Fixed: `parse` now keeps the UTC offset instead of dropping the trailing Z. The test passes.",
            ),
        ],
    )
    store.loops.end(lid, ended_at=clock.now)

    follow = store.loops.start(sid, config=CLAUDE, started_at=clock.now)
    follow_ids = store.messages.append_turn(
        follow.loop_id,
        0,
        [
            _user(clock, "Add a regression test for offsets other than UTC."),
            _assistant(
                clock,
                CLAUDE,
                _usage(188, 240, cache_read=7_604, reasoning=64),
                thinking="Add a parametrized case with +02:00.",
                calls=[
                    (
                        "toolu_05",
                        "edit_file",
                        {"path": "tests/test_dates.py", "append": "@pytest.mark.parametrize(...)"},
                    )
                ],
            ),
            _result(clock, "toolu_05", "edit_file", "edited tests/test_dates.py (+9 lines)"),
        ],
    )
    store.messages.append_turn(
        follow.loop_id,
        1,
        [
            _assistant(
                clock,
                CLAUDE,
                _usage(240, 60, cache_read=8_012),
                text="Added `test_parse_offsets` covering +02:00 and -05:30.",
            ),
        ],
    )
    store.loops.end(follow.loop_id, ended_at=clock.now)

    # The same follow-up, retried on another model from the user's prompt.
    branch = store.loops.start(
        sid,
        config=GPT,
        parent_loop_id=follow.loop_id,
        continuation_kind="branch",
        fork_after=follow_ids[0],
        started_at=clock.now,
    )
    store.messages.append_turn(
        branch.loop_id,
        0,
        [
            _assistant(
                clock,
                GPT,
                _usage(8_120, 388, cache_read=6_144, reasoning=256),
                calls=[("call_a1", "edit_file", {"path": "tests/test_dates.py", "append": "def test_offsets(): ..."})],
            ),
            _result(clock, "call_a1", "edit_file", "edited tests/test_dates.py (+12 lines)"),
        ],
    )
    store.messages.append_turn(
        branch.loop_id,
        1,
        [
            _assistant(
                clock, GPT, _usage(8_610, 95, cache_read=8_064), text="Added offset tests (+02:00, -05:30, +05:45)."
            ),
        ],
    )
    store.loops.end(branch.loop_id, ended_at=clock.now)


def _research(store: Store) -> None:
    sid = DEMO_SESSIONS[1]
    clock = _Clock(START + timedelta(hours=3))
    store.sessions.create(sid, agent_id="demo-researcher", title="Compare two chart libraries", created_at=clock.now)
    loop = store.loops.start(sid, config=GPT, started_at=clock.now)
    lid = loop.loop_id
    store.messages.append_turn(
        lid,
        0,
        [
            _user(
                clock, "Which of these two chart libraries fits a dashboard better? Screenshot attached.", image=True
            ),
            _assistant(
                clock,
                GPT,
                _usage(0, 0),
                stop=StopReason.ERROR,
                error="503 upstream overloaded: the server had an error while processing your request",
            ),
        ],
    )
    store.messages.append_turn(
        lid,
        1,
        [
            _assistant(
                clock,
                GPT,
                _usage(3_904, 412, reasoning=320),
                calls=[
                    ("call_r1", "web_search", {"query": "chart library dashboard comparison 2026"}),
                    ("call_r2", "research_agent", {"task": "summarize bundle sizes"}),
                ],
            ),
            _result(
                clock,
                "call_r1",
                "web_search",
                json.dumps([{"title": "Benchmarks", "url": "https://example.org/charts"}]),
            ),
        ],
    )
    # The research_agent tool ran a sub-agent loop of its own.
    sub = store.loops.start(
        sid,
        config={"model": "gpt-5-mini", "provider": "openai"},
        continuation_kind="initial",
        spawn_loop_id=lid,
        spawn_tool_call_id="call_r2",
        started_at=clock.now,
    )
    store.messages.append_turn(
        sub.loop_id,
        0,
        [
            _user(clock, "Summarize the bundle sizes of both libraries."),
            _assistant(
                clock,
                {"model": "gpt-5-mini", "provider": "openai"},
                _usage(2_048, 180, reasoning=96),
                text="Library A: 48 kB gzipped; library B: 112 kB gzipped.",
            ),
        ],
    )
    store.loops.end(sub.loop_id, ended_at=clock.now)
    store.messages.append(
        _result(clock, "call_r2", "research_agent", "A: 48 kB, B: 112 kB (gzipped)"), loop_id=lid, turn_index=1
    )
    store.messages.append_turn(
        lid,
        2,
        [
            _assistant(
                clock,
                GPT,
                _usage(4_630, 520, cache_read=3_840, reasoning=210),
                text="Library A: smaller (48 kB) and renders the screenshot's sparkline natively. Pick A.",
            ),
        ],
    )
    store.loops.end(lid, ended_at=clock.now)


def _compacted(store: Store) -> None:
    sid = DEMO_SESSIONS[2]
    clock = _Clock(START + timedelta(days=1))
    store.sessions.create(sid, agent_id="demo-coder", title="Migrate the settings module", created_at=clock.now)
    loop = store.loops.start(sid, config=CLAUDE, started_at=clock.now)
    lid = loop.loop_id
    kept = None
    for turn in range(6):
        messages: list[Any] = [_user(clock, "Start migrating settings.py to pydantic-settings.")] if turn == 0 else []
        call = (f"toolu_m{turn}", "edit_file", {"path": f"src/settings/part{turn}.py", "rewrite": True})
        messages += [
            _assistant(
                clock,
                CLAUDE,
                _usage(900 + 150 * turn, 300, cache_read=9_000 + 2_500 * turn, reasoning=90),
                thinking=f"Port part {turn} of the settings.",
                calls=[call],
            ),
            _result(clock, call[0], "edit_file", f"rewrote src/settings/part{turn}.py"),
        ]
        ids = store.messages.append_turn(lid, turn, messages)
        if turn == 5:
            kept = ids[0]
    store.loops.end(lid, ended_at=clock.now)
    compacted = store.loops.compact(
        lid,
        "Ported settings parts 0-4 to pydantic-settings; part 5 is in progress. Tests not run yet.",
        keep_from=kept,
        tokens_before=48_200,
        usage=_usage(21_500, 640, cache_read=0),
        config=CLAUDE,
        started_at=clock.now,
    )
    store.messages.append_turn(
        compacted.loop_id,
        0,
        [
            _user(clock, "Continue, then run the tests."),
            _assistant(
                clock,
                CLAUDE,
                _usage(1_400, 150, cache_read=2_200),
                calls=[("toolu_t1", "bash", {"command": "pytest -q"})],
            ),
            _result(clock, "toolu_t1", "bash", "42 passed in 1.9s"),
        ],
    )
    store.messages.append_turn(
        compacted.loop_id,
        1,
        [
            _assistant(
                clock, CLAUDE, _usage(1_650, 90, cache_read=2_400), text="All six parts are migrated; 42 tests pass."
            ),
        ],
    )
    store.loops.end(compacted.loop_id, ended_at=clock.now)
