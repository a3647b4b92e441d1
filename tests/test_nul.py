"""One rule for the NUL character (U+0000) on every backend.

PostgreSQL's text and ``jsonb`` columns cannot hold NUL; SQLite can. So that
a value accepted on one backend is accepted on all, ids, titles, agent ids,
model and provider names, session metadata and loop config and metadata
holding NUL are refused everywhere, with a one-line ``InvalidMessage`` naming
the field, and nothing is written. Message content is JSON text, where NUL is
the escape ``\\u0000``: it round-trips on every backend, through exports too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, extension, usage, user
from helpers import TABLES, table_counts

from turnstore import (
    AssistantMessage,
    InvalidMessage,
    SessionNotFound,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    UserMessage,
)

NUL = "a\x00b"
CONFIG = {"model": "claude-sonnet-4-5", "provider": "anthropic"}


REFUSED: dict[str, tuple[str, Callable[[Any], object]]] = {
    "session id": ("session_id", lambda s: s.sessions.create(NUL)),
    "title": ("title", lambda s: s.sessions.create("s", title=NUL)),
    "renamed title": ("title", lambda s: s.sessions.rename("base", NUL)),
    "agent id": ("agent_id", lambda s: s.sessions.create("s", agent_id=NUL)),
    "metadata key": ("metadata", lambda s: s.sessions.create("s", metadata={NUL: 1})),
    "nested metadata value": ("metadata.a[1].b", lambda s: s.sessions.create("s", metadata={"a": [1, {"b": NUL}]})),
    "loop id": ("loop_id", lambda s: s.loops.start("base", loop_id=NUL)),
    "spawn loop id": ("spawn_loop_id", lambda s: s.loops.start("base", spawn_loop_id=NUL)),
    "spawn tool call id": ("spawn_tool_call_id", lambda s: s.loops.start("base", spawn_tool_call_id=NUL)),
    "config model": ("model", lambda s: s.loops.start("base", config={**CONFIG, "model": NUL})),
    "config provider": ("provider", lambda s: s.loops.start("base", config={**CONFIG, "provider": NUL})),
    "config other": ("config['a key']", lambda s: s.loops.start("base", config={**CONFIG, "a key": NUL})),
    "loop metadata": ("metadata.note", lambda s: s.loops.start("base", metadata={"note": NUL})),
    "assistant model": ("model", lambda s: s.messages.append(assistant(model=NUL), loop_id="base-loop", turn_index=0)),
    "assistant provider": (
        "provider", lambda s: s.messages.append(assistant(provider=NUL), loop_id="base-loop", turn_index=0),
    ),
    "extension kind": ("kind", lambda s: s.messages.append(extension(NUL), loop_id="base-loop")),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSED))
def test_nul_in_ids_and_names_is_refused_naming_the_field(store: Any, case: str) -> None:
    field, write = REFUSED[case]
    store.sessions.create("base", title="kept")
    store.loops.start("base", loop_id="base-loop")
    before = table_counts(store)

    with pytest.raises(InvalidMessage) as caught:
        write(store)

    message = str(caught.value)
    assert message.startswith((f"{field} holds a NUL", f"a key of {field} holds a NUL"))
    assert "\n" not in message and "U+0000" in message
    assert table_counts(store) == before
    assert store.sessions.get("base").title == "kept"


def session_line(**fields: Any) -> dict[str, Any]:
    return {"type": "session", "format": "turnstore", "version": 1, "session_id": "imported", **fields}


IMPORTS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "session id": ("session_id", [session_line(session_id=NUL)]),
    "title": ("title", [session_line(title=NUL)]),
    "agent id": ("agent_id", [session_line(agent_id=NUL)]),
    "metadata": ("metadata.k", [session_line(metadata={"k": NUL})]),
    "loop id": ("loop_id", [session_line(), {"type": "loop", "loop_id": NUL}]),
    "loop config": ("model", [session_line(), {"type": "loop", "loop_id": "l", "config": {**CONFIG, "model": NUL}}]),
    "loop metadata": ("metadata.k", [session_line(), {"type": "loop", "loop_id": "l", "metadata": {"k": NUL}}]),
}


@pytest.mark.parametrize("case", list(IMPORTS))
def test_nul_in_an_imported_id_or_name_fails_the_session(store: Any, tmp_path: Path, case: str) -> None:
    field, lines = IMPORTS[case]
    path = tmp_path / "nul.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

    report = store.import_("turnstore", path)

    assert not report.ok and report.sessions_written == []
    assert [(error.place, f"{field} holds a NUL" in error.reason) for error in report.errors] == [(str(path), True)]
    assert table_counts(store) == dict.fromkeys(TABLES, 0)


def nul_messages() -> list[Any]:
    """NUL in text, thinking, a signature, tool call ids and arguments (keys and values), and an unknown key."""
    prompt = UserMessage.model_validate(
        {"role": "user", "content": [{"type": "text", "text": NUL}], "timestamp": 1, "note\x00": NUL}
    )
    reply = AssistantMessage(
        content=[
            ThinkingContent(thinking=NUL, signature=NUL),
            TextContent(text=NUL),
            ToolCallContent(id=NUL, name=NUL, arguments={NUL: [NUL, {"k": NUL}]}),
        ],
        stop_reason=StopReason.TOOL_USE,
        model="m",
        provider="p",
        usage=usage(),
        timestamp=2,
    )
    return [prompt, reply]


def test_nul_in_message_content_round_trips_through_store_and_export(store: Any, tmp_path: Path) -> None:
    store.sessions.create("s")
    loop = store.loops.start("s", config=CONFIG)
    written = [*nul_messages(), user("plain")]
    store.messages.append_turn(loop.loop_id, 0, written)
    expected = [m.model_dump(mode="json") for m in store.messages.loop(loop.loop_id)]
    assert [m["content"] for m in expected] == [m.model_dump(mode="json")["content"] for m in written]
    assert expected[0]["note\x00"] == NUL
    path = tmp_path / "export.jsonl"
    store.export("s", "turnstore", path)
    store.sessions.delete("s")

    report = store.import_("turnstore", path)

    assert report.ok and report.sessions_written == ["s"]
    assert [m.model_dump(mode="json") for m in store.messages.loop(loop.loop_id)] == expected


@pytest.mark.parametrize("fmt", ["phi-core", "phi-core-session", "turnstore"])
def test_a_session_id_holding_nul_is_not_found(store: Any, tmp_path: Path, fmt: str) -> None:
    store.sessions.create("a")
    folder = tmp_path / "exports"
    folder.mkdir()

    assert store.sessions.exists(NUL) is False
    with pytest.raises(SessionNotFound):
        store.sessions.get(NUL)
    with pytest.raises(SessionNotFound):
        store.export(NUL, fmt, folder / "never.json")
    assert list(folder.iterdir()) == []
