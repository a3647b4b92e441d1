"""Work an import hands to a helper thread: the source digest, and freeing a written session's models.

What is checked is that nothing changes for the caller: the same digest, the
same rows and the same report as doing it inline, errors still raised where
they were, on every backend for the imports.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, extension, tool_result, user

from turnstore import Store
from turnstore.importers import writer
from turnstore.importers.background import Background
from turnstore.importers.base import BACKGROUND_DIGEST_CHARS, SessionBundle


def test_background_returns_the_result() -> None:
    assert Background(sum, [1, 2, 3]).result() == 6


def test_background_raises_the_error_where_the_result_is_taken() -> None:
    def fail() -> None:
        raise ValueError("no")

    work = Background(fail)
    with pytest.raises(ValueError, match="no"):
        work.result()


def inline_digest(fmt: str, parts: list[str]) -> str:
    hasher = hashlib.sha256(fmt.encode())
    if parts:
        hasher.update(("\x1e" + "\x1e".join(parts)).encode("utf-8", "surrogatepass"))
    return hasher.hexdigest()


def big_bundle() -> SessionBundle:
    bundle = SessionBundle(session_id="s", origin="here")
    for index in range(40):
        bundle.add_source(f"record {index} é \ud800 " + "x" * (BACKGROUND_DIGEST_CHARS // 30))
    return bundle


def test_digest_started_on_a_helper_thread_equals_the_inline_digest() -> None:
    bundle = big_bundle()
    bundle.start_digest("pi")
    assert bundle._hashing  # large enough: started
    assert bundle.digest("pi") == inline_digest("pi", bundle.digest_parts)
    assert bundle.digest("turnstore") == inline_digest("turnstore", bundle.digest_parts)


def test_digest_of_records_added_after_the_start_counts_them() -> None:
    bundle = big_bundle()
    bundle.start_digest("pi")
    bundle.add_source("one more")
    assert bundle.digest("pi") == inline_digest("pi", bundle.digest_parts)


def test_small_sources_are_hashed_inline() -> None:
    bundle = SessionBundle(session_id="s", origin="here")
    bundle.add_source("short")
    bundle.start_digest("pi")
    assert not bundle._hashing
    assert bundle.digest("pi") == inline_digest("pi", ["short"])


def write_export(path: Path, messages: int) -> Path:
    """A turnstore export of one session with ``messages`` messages (every kind), written by hand."""
    loop_id = "big.1"
    lines = [
        {"type": "session", "session_id": "big", "version": 1},
        {"type": "loop", "loop_id": loop_id, "config": {"model": "claude-sonnet-4-5", "provider": "anthropic"}},
    ]
    kinds = [
        lambda i: user(f"question {i}", timestamp=i),
        lambda i: assistant(f"answer {i}", calls=(f"c{i}",), timestamp=i),
        lambda i: tool_result(f"c{i - 1}", f"output {i}", timestamp=i),
        lambda i: extension("note", {"i": i}),
    ]
    for index in range(messages):
        message = kinds[index % 4](index)
        lines.append({"type": "message", "loop_id": loop_id, "turn_index": index // 4,
                      "message": message.model_dump(mode="json")})
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("messages", [writer.BACKGROUND_FREE_MESSAGES - 1, writer.BACKGROUND_FREE_MESSAGES + 3])
def test_large_and_small_sessions_import_the_same(store: Any, tmp_path: Path, messages: int) -> None:
    path = write_export(tmp_path / "big.jsonl", messages)

    report = store.import_("turnstore", path)

    assert report.ok and report.sessions_written == ["big"]
    assert report.messages == messages and report.loops == 1
    quarter = messages // 4
    assert report.by_role["user"] + report.by_role["assistant"] + report.by_role["toolResult"] == messages - quarter
    assert report.by_role["extension"] == quarter and report.by_kind == {"note": quarter}
    stored = list(store.messages.records("big"))
    assert len(stored) == messages
    assert [record.seq for record in stored] == list(range(messages))
    assert stored[-1].message.model_dump(mode="json") == json.loads(path.read_text().splitlines()[-1])["message"]
    again = store.import_("turnstore", path)
    assert again.sessions_unchanged == ["big"]


def test_writing_lets_the_bundles_messages_go(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as store:
        bundle = SessionBundle(session_id="s", origin="here")
        bundle.loops.append(writer.LoopRow(loop_id="s.1"))
        bundle.messages.extend(writer.MessageRow(user(str(i)), "s.1", 0) for i in range(writer.BACKGROUND_FREE_MESSAGES))
        status = writer.write_bundle(store._db, bundle, "turnstore", replace=False, limits=store.settings.limits,
                                     report={})
        assert status == writer.WRITTEN
        assert bundle.messages == []
        assert len(list(store.messages.records("s"))) == writer.BACKGROUND_FREE_MESSAGES
