"""pi message lines read in one pass (turnstore.importers.pi_messages) give exactly what the general way gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from turnstore import Store
from turnstore.importers import pi as pi_module
from turnstore.importers.pi_messages import PiAssistantMessage, fast_message_line
from turnstore.importers.reading import loads_json
from turnstore.models import AssistantMessage
from turnstore.repositories.messages import dump_message

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
FILES = sorted(FIXTURES.glob("*.jsonl")) + sorted((FIXTURES / "malformed").glob("*.jsonl"))

_ENTRY = '{"type":"message","id":"e1","parentId":"e0","timestamp":"2026-03-02T09:15:00.000Z","message":'


def general(line: str) -> Any:
    """The message the general way makes of a message line."""
    entry = loads_json(line)
    return pi_module._message_node(entry["message"], "here", entry, None).message


def message_lines() -> list[str]:
    found = []
    for path in FILES:
        found += [
            line for line in path.read_text(encoding="utf-8").split("\n") if line.startswith('{"type":"message",')
        ]
    return found


def test_every_fixture_message_line_the_one_pass_takes_equals_the_general_way() -> None:
    lines = message_lines()
    taken = 0
    for line in lines:
        fast = fast_message_line(line)
        if fast is None:
            continue
        taken += 1
        expected = general(line)
        entry = loads_json(line)
        assert (fast["type"], fast["id"], fast["parentId"]) == ("message", entry["id"], entry["parentId"])
        message = fast["message"]
        assert isinstance(message, type(expected))
        assert dump_message(message) == dump_message(expected), line
        assert message.model_extra == expected.model_extra
        assert [block.model_extra for block in message.content] == [block.model_extra for block in expected.content]
    assert taken >= 30, "the one pass should take nearly every message line of the fixtures"


def test_an_assistant_line_reads_pi_spellings_into_canonical_json() -> None:
    line = (
        _ENTRY
        + json.dumps(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "thinkingSignature": "c2ln+/=="},
                    {"type": "toolCall", "id": "t1", "name": "read", "arguments": {"path": "a b", "n": 1.50}},
                ],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "usage": {
                    "input": 3,
                    "output": 4,
                    "cacheRead": 5,
                    "cacheWrite": 6,
                    "cost": {"input": 0.1, "total": 0.25},
                },
                "stopReason": "toolUse",
                "timestamp": 1772442906722,
            },
            separators=(",", ":"),
        )
        + "}"
    )
    fast = fast_message_line(line)
    assert fast is not None
    message = fast["message"]
    assert isinstance(message, PiAssistantMessage) and isinstance(message, AssistantMessage)
    assert message.content[0].signature == "c2ln+/=="
    assert message.usage.cost == 0.25 and message.usage.total_tokens == 18
    assert message.model_extra == {"api": "anthropic-messages"}
    text = dump_message(message)
    assert text == dump_message(general(line))
    assert '"signature":"c2ln+/=="' in text and "thinkingSignature" not in text


def _line(message: dict[str, Any], tail: str = "}") -> str:
    return _ENTRY + json.dumps(message, separators=(",", ":")) + tail


_USER = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
_TOOL = {"role": "toolResult", "toolCallId": "t1", "toolName": "read", "content": [], "isError": False, "timestamp": 1}
_THINKING = {
    "role": "assistant",
    "provider": "p",
    "model": "m",
    "stopReason": "stop",
    "timestamp": 1,
    "usage": {"input": 1, "output": 1},
}


@pytest.mark.parametrize(
    "line",
    [
        pytest.param('{"type":"compaction","id":"c","parentId":null,"summary":"s"}', id="another-entry-type"),
        pytest.param(_line({**_USER, "role": "bashExecution"}), id="a-coding-agent-role"),
        pytest.param(_line({**_USER, "content": "plain text"}), id="plain-string-content"),
        pytest.param(_line({**_USER, "timestamp": 1.5}), id="fractional-timestamp"),
        pytest.param(_line({k: v for k, v in _USER.items() if k != "timestamp"}), id="no-timestamp"),
        pytest.param(_line({**_TOOL, "usage": {"input": 1, "output": 2}}), id="tool-result-with-usage"),
        pytest.param(
            _line({**_THINKING, "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]}),
            id="canonical-signature-spelling",
        ),
        pytest.param(
            _line(
                {
                    **_THINKING,
                    "content": [{"type": "thinking", "thinking": "t", "signature": "s", "thinkingSignature": "p"}],
                }
            ),
            id="both-signature-spellings",
        ),
        pytest.param(_line(_USER, ',"type":"compaction"}'), id="repeated-type-key"),
        pytest.param(_line(_USER, ""), id="cut-off"),
        pytest.param(
            _ENTRY + '{"role":"user","content":[{"type":"text","text":"\\ud800"}],"timestamp":1}}', id="lone-surrogate"
        ),
        pytest.param(_line({**_USER, "role": "robot"}), id="unknown-role"),
        pytest.param('{"type":"message","id":"e1","parentId":7,"message":' + json.dumps(_USER) + "}", id="bad-parent"),
    ],
)
def test_lines_the_one_pass_leaves_go_the_general_way(line: str) -> None:
    assert fast_message_line(line) is None


def _stored(store: Store) -> list[tuple[Any, ...]]:
    rows = []
    for session in store.sessions.list():
        for stored in store.messages.records(session.session_id):
            rows.append(
                (
                    stored.session_id,
                    stored.loop_id,
                    stored.turn_index,
                    stored.seq,
                    dump_message(stored.message),
                    stored.source,
                )
            )
        rows.append(tuple(store.usage.session(session.session_id).model_dump().items()))
    return rows


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_imports_store_the_same_rows_with_and_without_the_one_pass(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path / "fast.db") as fast:
        fast_report = fast.import_("pi", path, skip_invalid=True)
        fast_rows = _stored(fast)
    monkeypatch.setattr(pi_module, "fast_message_line", lambda line: None)
    with Store(tmp_path / "general.db") as slow:
        slow_report = slow.import_("pi", path, skip_invalid=True)
        slow_rows = _stored(slow)
    assert fast_rows == slow_rows and fast_rows
    assert [(error.place, error.reason) for error in fast_report.skipped] == [
        (error.place, error.reason) for error in slow_report.skipped
    ]
