"""The deterministic benchmark workload: sessions x loops x turns of realistic agent messages.

Everything comes from one seeded ``random.Random``, so every run (and both
systems within a run) sees byte-identical messages. Each message exists twice,
built once before any timing starts:

* as a turnstore pydantic model (what an app holding models passes to turnstore);
* as the plain JSON dict of that model (what an app holding dicts passes to
  the raw-sqlite3 floor).

A turn follows docs/design.md §1 (one model call plus the tool executions it asked
for, with the prompt that precedes it): a user message (the prompt, or a
follow-up / steering message), one assistant message (thinking block with a
~200-char base64 signature, text, 0-3 tool calls with JSON arguments, usage),
then one tool result per tool call. So a turn holds 2-5 messages.

Images (``build(..., images=True)``, as the main suite builds it): one user
or tool-result message in every ``IMAGE_EVERY`` (counted across the workload
as it is built) carries a base64 PNG of 50-200 KB (the base64 text) after its
text, as a screenshot pasted into a prompt or read by a tool. Their bytes come
from a random stream of their own, so the rest of the workload is the same
with or without them.

Three message mixes (``build(..., mix=...)``, :data:`MIXES`):

* ``tool`` (the default): the tool-heavy turns above.
* ``small``: a chat without tools: a user message and an assistant reply with
  usage (no thinking), each ≈300 bytes of stored JSON.
* ``image``: a computer-use agent: the tool-heavy turns, at least one tool call
  per turn, and a screenshot (a base64 PNG of 100-500 KB) in ``SCREENSHOT_SHARE``
  of the tool results.
"""

from __future__ import annotations

import base64
import random
import string
import uuid
from dataclasses import dataclass, field
from typing import Any

from turnstore.models import (
    AssistantMessage,
    ImageContent,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
    TurnId,
    Usage,
    UserMessage,
)

SEED = 20251122
BASE_TIME_MS = 1_763_000_000_000  # 2025-11-13, fixed so the rows are identical run to run

MODELS = (
    ("claude-sonnet-4-5", "anthropic"),
    ("gpt-5", "openai"),
    ("claude-haiku-4-5", "anthropic"),
)

_WORDS = [
    "the",
    "test",
    "fails",
    "because",
    "fixture",
    "database",
    "migration",
    "schema",
    "index",
    "query",
    "session",
    "loop",
    "turn",
    "message",
    "assistant",
    "tool",
    "call",
    "result",
    "usage",
    "token",
    "cache",
    "provider",
    "model",
    "stream",
    "retry",
    "timeout",
    "error",
    "handler",
    "function",
    "module",
    "import",
    "config",
    "value",
    "default",
    "path",
    "file",
    "line",
    "column",
    "parser",
    "writer",
    "reader",
    "buffer",
    "should",
    "could",
    "would",
    "check",
    "verify",
    "compare",
    "expected",
    "actual",
    "output",
    "input",
    "return",
    "raise",
    "assert",
    "patch",
    "refactor",
    "rename",
    "extract",
    "inline",
    "move",
    "delete",
    "add",
    "update",
    "append",
    "commit",
    "rollback",
    "transaction",
    "lock",
    "thread",
    "process",
    "worker",
    "queue",
    "event",
    "callback",
    "async",
    "await",
    "future",
    "task",
    "client",
    "server",
    "request",
    "response",
    "header",
    "body",
    "status",
    "json",
    "yaml",
    "toml",
    "sqlite",
    "postgres",
    "alembic",
    "pydantic",
    "sqlalchemy",
    "pytest",
    "coverage",
    "we",
    "I",
    "it",
    "this",
    "that",
    "then",
    "so",
    "but",
    "and",
    "or",
    "if",
    "when",
    "while",
    "after",
    "before",
    "because",
    "first",
    "next",
    "finally",
]

_TOOLS = ("read_file", "grep", "bash", "edit_file", "list_dir")

IMAGE_EVERY = 60  # one user / tool-result message in this many carries an image
IMAGE_BYTES = (50_000, 200_000)  # size of the base64 text
SCREENSHOT_BYTES = (100_000, 500_000)  # the image mix's screenshots: size of the base64 text
SCREENSHOT_SHARE = 0.75  # the image mix: the share of tool results that carry a screenshot

MIXES = ("small", "tool", "image")
"""The message mixes :func:`build` makes, as the benchmarks' ``--mix`` names them."""

MIX_TITLES = {
    "small": "small chat messages (≈300 B, no tools)",
    "tool": "tool-heavy turns",
    "image": "image-heavy agent (a 100-500 KB screenshot in most tool results)",
}
_PNG_HEADER = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


def _sentence(rng: random.Random, low: int = 6, high: int = 18) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]
    return words[0].capitalize() + " " + " ".join(words[1:]) + rng.choice((".", ".", ".", "?", ":"))


def _prose(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    size = 0
    while size < chars:
        sentence = _sentence(rng)
        if rng.random() < 0.15:
            sentence += "\n\n"
        parts.append(sentence)
        size += len(sentence) + 1
    return " ".join(parts)[:chars].rstrip()


def _code(rng: random.Random, chars: int) -> str:
    lines: list[str] = []
    size = 0
    while size < chars:
        name = rng.choice(_WORDS)
        kind = rng.random()
        if kind < 0.3:
            line = f"def {name}_{rng.choice(_WORDS)}(self, {rng.choice(_WORDS)}: str) -> int:"
        elif kind < 0.6:
            line = f"    {name} = {rng.choice(_WORDS)}.{rng.choice(_WORDS)}({rng.randint(0, 99)})"
        elif kind < 0.8:
            line = f'    raise ValueError("{_sentence(rng, 3, 7)}")'
        else:
            line = f"{rng.randint(1, 400):>4}: {name} {rng.choice(_WORDS)} = {{'{rng.choice(_WORDS)}': {rng.random():.3f}}}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:chars]


def _path(rng: random.Random) -> str:
    return f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}_{rng.choice(_WORDS)}.py"


def _arguments(rng: random.Random, tool: str) -> dict[str, Any]:
    if tool == "read_file":
        return {"path": _path(rng), "offset": rng.randint(0, 400), "limit": rng.choice((50, 100, 200))}
    if tool == "grep":
        return {
            "pattern": f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}\\(",
            "path": "src/",
            "max_results": 20,
            "case_sensitive": rng.random() < 0.5,
        }
    if tool == "bash":
        return {"command": f"cd /repo && python -m pytest tests/test_{rng.choice(_WORDS)}.py -x -q", "timeout": 120}
    if tool == "edit_file":
        return {"path": _path(rng), "old": _code(rng, rng.randint(60, 200)), "new": _code(rng, rng.randint(60, 260))}
    return {"path": f"src/{rng.choice(_WORDS)}", "recursive": False}


def _tool_call_id(rng: random.Random) -> str:
    return "toolu_" + "".join(rng.choices(string.ascii_letters + string.digits, k=24))


def _usage(rng: random.Random, turn_index: int) -> Usage:
    prompt = 2_000 + 900 * turn_index + rng.randint(0, 1_500)
    cache_read = int(prompt * rng.uniform(0.6, 0.95)) if turn_index else 0
    cache_write = rng.randint(200, 1_500)
    input_tokens = max(prompt - cache_read - cache_write, 50)
    output = rng.randint(80, 1_200)
    reasoning = rng.randint(0, output // 2)
    return Usage(
        input=input_tokens,
        output=output,
        reasoning=reasoning,
        cache_read=cache_read,
        cache_write=cache_write,
        total_tokens=input_tokens + output + cache_read + cache_write,
    )


@dataclass
class Turn:
    """One turn: its messages as models and as the same JSON dicts."""

    session_id: str
    loop_id: str
    turn_index: int
    models: list[Any]
    dicts: list[dict[str, Any]]


@dataclass
class LoopPlan:
    session_id: str
    loop_id: str
    parent_loop_id: str | None
    model: str
    provider: str


@dataclass
class Workload:
    """Sessions, their loops, and the turns in the order an app would append them."""

    session_ids: list[str] = field(default_factory=list)
    loops: list[LoopPlan] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return sum(len(turn.models) for turn in self.turns)

    def messages_of(self, session_id: str) -> int:
        return sum(len(turn.models) for turn in self.turns if turn.session_id == session_id)


class _Images:
    """Places and draws the workload's images.

    Every IMAGE_EVERY-th user or tool-result message gets one (``enabled``);
    with ``screenshots``, SCREENSHOT_SHARE of the tool results get a larger one instead.
    """

    def __init__(self, seed: int, enabled: bool, screenshots: bool = False) -> None:
        self.rng = random.Random(seed ^ 0x1A6E)
        self.enabled = enabled
        self.screenshots = screenshots
        self.count = 0

    def content(self, text: str, tool_result: bool = False) -> list[Any]:
        self.count += 1
        blocks: list[Any] = [TextContent(text=text)]
        if self.screenshots:
            if tool_result and self.rng.random() < SCREENSHOT_SHARE:
                blocks.append(self._image(SCREENSHOT_BYTES))
        elif self.enabled and self.count % IMAGE_EVERY == IMAGE_EVERY // 2:
            blocks.append(self._image(IMAGE_BYTES))
        return blocks

    def _image(self, sizes: tuple[int, int]) -> ImageContent:
        size = self.rng.randint(*sizes) // 4 * 3  # raw bytes whose base64 text is that long
        data = base64.b64encode(_PNG_HEADER + self.rng.randbytes(size - len(_PNG_HEADER))).decode()
        return ImageContent(data=data, mime_type="image/png")


class _Clock:
    def __init__(self) -> None:
        self.now = BASE_TIME_MS

    def tick(self, rng: random.Random, low: int, high: int) -> int:
        self.now += rng.randint(low, high)
        return self.now


def _make_turn(
    rng: random.Random,
    clock: _Clock,
    images: _Images,
    plan: LoopPlan,
    turn_index: int,
    first: bool,
    mix: str = "tool",
) -> Turn:
    turn_id = TurnId(loop_id=plan.loop_id, turn_index=turn_index)
    if mix == "small":
        return _small_turn(rng, clock, plan, turn_id)
    models: list[Any] = []
    prompt = _prose(rng, rng.randint(120, 500) if first else rng.randint(40, 220))
    models.append(UserMessage(content=images.content(prompt), timestamp=clock.tick(rng, 500, 20_000), turn=turn_id))

    counts = (1, 2, 3) if mix == "image" else (0, 1, 2, 3)  # a computer-use agent acts every turn
    weights = (4, 2, 1) if mix == "image" else (3, 4, 2, 1)
    calls = [
        ToolCallContent(id=_tool_call_id(rng), name=tool, arguments=_arguments(rng, tool))
        for tool in (rng.choice(_TOOLS) for _ in range(rng.choices(counts, weights=weights)[0]))
    ]
    signature = base64.b64encode(rng.randbytes(150)).decode()  # 200 characters
    content: list[Any] = [
        ThinkingContent(thinking=_prose(rng, rng.randint(250, 1_000)), signature=signature),
        TextContent(text=_prose(rng, rng.randint(120, 900))),
        *calls,
    ]
    models.append(
        AssistantMessage(
            content=content,
            stop_reason=StopReason.TOOL_USE if calls else StopReason.STOP,
            model=plan.model,
            provider=plan.provider,
            usage=_usage(rng, turn_index),
            timestamp=clock.tick(rng, 2_000, 30_000),
            turn=turn_id,
        )
    )
    for call in calls:
        output = _code(rng, rng.randint(150, 1_400)) if call.name != "bash" else _prose(rng, rng.randint(100, 900))
        models.append(
            ToolResultMessage(
                tool_call_id=call.id,
                tool_name=call.name,
                content=images.content(output, tool_result=True),
                is_error=rng.random() < 0.05,
                timestamp=clock.tick(rng, 50, 3_000),
                turn=turn_id,
            )
        )
    dicts = [model.model_dump(mode="json") for model in models]
    return Turn(plan.session_id, plan.loop_id, turn_index, models, dicts)


def _small_turn(rng: random.Random, clock: _Clock, plan: LoopPlan, turn_id: TurnId) -> Turn:
    """A chat turn without tools: a short prompt and a short reply with usage, ≈300 bytes each as stored."""
    models: list[Any] = [
        UserMessage(
            content=[TextContent(text=_prose(rng, rng.randint(20, 150)))],
            timestamp=clock.tick(rng, 500, 20_000),
            turn=turn_id,
        ),
        AssistantMessage(
            content=[TextContent(text=_prose(rng, rng.randint(10, 90)))],
            stop_reason=StopReason.STOP,
            model=plan.model,
            provider=plan.provider,
            usage=_usage(rng, turn_id.turn_index),
            timestamp=clock.tick(rng, 2_000, 30_000),
            turn=turn_id,
        ),
    ]
    dicts = [model.model_dump(mode="json") for model in models]
    return Turn(plan.session_id, plan.loop_id, turn_id.turn_index, models, dicts)


def build(
    sessions: int,
    loops_per_session: int,
    turns_per_loop: int,
    *,
    seed: int = SEED,
    prefix: str = "",
    min_messages_per_session: int = 0,
    images: bool = False,
    mix: str = "tool",
) -> Workload:
    """A workload of ``sessions`` x ``loops_per_session`` x ``turns_per_loop`` turns.

    Turns are ordered as concurrent sessions would append them: round-robin
    over the sessions, each session's loops one after another. With
    ``min_messages_per_session``, a session's last loop keeps getting turns
    until the session holds at least that many messages. With ``images``,
    one user or tool-result message in ``IMAGE_EVERY`` carries a base64 image
    (the tool mix only). ``mix`` is one of :data:`MIXES`.
    """
    if mix not in MIXES:
        raise ValueError(f"unknown message mix {mix!r}: one of {', '.join(MIXES)}")
    rng = random.Random(seed)
    clock = _Clock()
    drawer = _Images(seed, enabled=images and mix == "tool", screenshots=mix == "image")
    work = Workload()
    per_session: list[list[Turn]] = []
    for s in range(sessions):
        session_id = prefix + str(uuid.UUID(int=rng.getrandbits(128), version=4))
        work.session_ids.append(session_id)
        turns: list[Turn] = []
        count = 0
        parent: str | None = None
        for n in range(loops_per_session):
            model, provider = MODELS[(s + n) % len(MODELS)]
            plan = LoopPlan(session_id, f"{session_id}.bench.{n + 1}", parent, model, provider)
            work.loops.append(plan)
            parent = plan.loop_id
            k = 0
            last_loop = n == loops_per_session - 1
            while k < turns_per_loop or (last_loop and count < min_messages_per_session):
                turn = _make_turn(rng, clock, drawer, plan, k, first=k == 0, mix=mix)
                turns.append(turn)
                count += len(turn.models)
                k += 1
        per_session.append(turns)
    # Round-robin over sessions, as one app process serving several conversations would write.
    longest = max((len(turns) for turns in per_session), default=0)
    for i in range(longest):
        for turns in per_session:
            if i < len(turns):
                work.turns.append(turns[i])
    return work
