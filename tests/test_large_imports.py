"""Large imports in bounded memory: sources read line by line, digests hashed as they are read, and the
messages of a large session spilled to a temporary file (turnstore.importers.spill) and written from it.

A spilled session must be stored exactly as a session held in memory is: the
tests lower the spill threshold to 0 and compare every row, loop and report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from turnstore import Store
from turnstore.errors import InvalidRecord
from turnstore.importers import clark, get_importer, pi, reading
from turnstore.importers import spill as spill_module
from turnstore.importers.base import ImportOptions, SessionBundle, SpilledMessage
from turnstore.importers.reading import read_jsonl, read_lines
from turnstore.limits import Limits
from turnstore.repositories.imports import row_values
from turnstore.repositories.messages import dump_message

FIXTURES = Path(__file__).parent / "fixtures"
PI_FILES = sorted((FIXTURES / "pi").glob("*.jsonl")) + sorted((FIXTURES / "pi" / "malformed").glob("*.jsonl"))
CLARK_FILES = [FIXTURES / "clark" / "conversation-42.jsonl", FIXTURES / "clark" / "malformed" / "broken.jsonl"]
SOURCES = [("pi", path) for path in PI_FILES] + [("clark", path) for path in CLARK_FILES]


@pytest.fixture
def spill_everything(monkeypatch: pytest.MonkeyPatch) -> list[spill_module.Spill]:
    """Spill every session, whatever its size; the spills made are listed."""
    made: list[spill_module.Spill] = []

    class Recorded(spill_module.Spill):
        def __init__(self, limits: Limits, values: Any) -> None:
            super().__init__(limits, values)
            made.append(self)

    for module in (pi, clark):
        monkeypatch.setattr(module, "SPILL_AFTER_MESSAGES", 0)
        monkeypatch.setattr(module, "Spill", Recorded)
    return made


def stored(store: Any) -> list[Any]:
    """Every session's messages, loops and usage, without database-assigned ids."""
    found: list[Any] = []
    for session in sorted(store.sessions.list(), key=lambda s: s.session_id):
        found.append((session.session_id, session.title, session.created_at, session.updated_at, session.metadata))
        for loop in store.loops.list(session.session_id):
            found.append(loop.model_dump(exclude={"fork_after", "keep_from"}))
            found.append((loop.fork_after is None, loop.keep_from is None))
        for record in store.messages.records(session.session_id):
            found.append((record.loop_id, record.turn_index, record.seq, dump_message(record.message), record.source))
        found.append(store.usage.session(session.session_id).model_dump())
    return found


def report_of(report: Any) -> dict[str, Any]:
    return report.as_dict()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("fmt", "path"), SOURCES, ids=[f"{fmt}-{path.name}" for fmt, path in SOURCES])
def test_a_spilled_session_is_stored_as_a_held_one(
    fmt: str,
    path: Path,
    store: Any,
    tmp_path: Path,
    spill_everything: list[spill_module.Spill],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spilled_report = store.import_(fmt, path, skip_invalid=True)
    spilled_rows = stored(store)
    assert spill_everything, "the session should have been spilled"
    for module in (pi, clark):
        monkeypatch.setattr(module, "SPILL_AFTER_MESSAGES", 10**9)
    with Store(tmp_path / "held.db") as held:
        held_report = held.import_(fmt, path, skip_invalid=True)
        held_rows = stored(held)
    assert spilled_rows == held_rows and spilled_rows
    assert report_of(spilled_report) == report_of(held_report)


def test_a_spilled_bundle_holds_no_message_models(tmp_path: Path, spill_everything: list[spill_module.Spill]) -> None:
    options = ImportOptions(limits=Limits(), row_values=row_values)
    (bundle,) = get_importer("pi").bundles(PI_FILES[0], options)
    assert bundle.messages and bundle.spill is spill_everything[0]
    assert all(type(row.message) is SpilledMessage and not row.source for row in bundle.messages)
    bundle.spill.close()


def _pi_file(path: Path, texts: list[str]) -> Path:
    """A pi v3 session: one user prompt and one answer per text."""
    lines = [{"type": "session", "version": 3, "id": "big", "timestamp": "2026-03-02T09:15:00.000Z", "cwd": "/"}]
    parent = None
    for index, text in enumerate(texts):
        for role in ("user", "assistant"):
            content = [{"type": "text", "text": text}]
            message: dict[str, Any] = {"role": role, "content": content, "timestamp": 1000 + index}
            if role == "assistant":
                message.update(provider="p", model="m", stopReason="stop", usage={"input": 1, "output": 2})
            entry_id = f"{role[0]}{index}"
            lines.append(
                {
                    "type": "message",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": "2026-03-02T09:15:01.000Z",
                    "message": message,
                }
            )
            parent = entry_id
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("skip", [False, True])
def test_an_unstorable_message_of_a_spilled_session_is_reported_with_its_place(
    skip: bool, tmp_path: Path, spill_everything: list[spill_module.Spill], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _pi_file(tmp_path / "big.jsonl", ["short", "x" * 5000, "short again"])
    limits = Limits(max_message_bytes=2000)
    with Store(tmp_path / "spilled.db", limits=limits) as spilled:
        spilled_report = spilled.import_("pi", source, skip_invalid=skip)
        spilled_rows = stored(spilled)
    monkeypatch.setattr(pi, "SPILL_AFTER_MESSAGES", 10**9)
    with Store(tmp_path / "held.db", limits=limits) as held:
        held_report = held.import_("pi", source, skip_invalid=skip)
        held_rows = stored(held)
    problems = spilled_report.skipped if skip else spilled_report.errors
    assert [error.place for error in problems] == [f"{source}:4", f"{source}:5"]
    assert all("\n" not in str(error) for error in problems)
    assert report_of(spilled_report) == report_of(held_report)
    assert spilled_rows == held_rows
    assert bool(spilled_rows) is skip  # nothing of a failed session is written
    assert all(made._file.closed for made in spill_everything)


def test_a_spilled_session_imported_again_is_unchanged_and_replace_rewrites_it(
    store: Any, tmp_path: Path, spill_everything: list[spill_module.Spill]
) -> None:
    source = _pi_file(tmp_path / "big.jsonl", ["one", "two"])
    assert store.import_("pi", source).sessions_written == ["big"]
    before = stored(store)
    again = store.import_("pi", source)
    assert again.sessions_unchanged == ["big"] and stored(store) == before
    _pi_file(source, ["one", "two", "three"])
    refused = store.import_("pi", source)
    assert refused.sessions_failed == ["big"] and "--replace" in str(refused.errors[0])
    dry = store.import_("pi", source, dry_run=True, replace=True)
    assert dry.sessions_written == ["big"] and stored(store) == before
    replaced = store.import_("pi", source, replace=True)
    assert replaced.sessions_written == ["big"] and replaced.messages == 6
    assert len(list(store.messages.records("big"))) == 6
    assert all(made._file.closed for made in spill_everything)


def test_records_hashed_as_they_are_read_give_the_digest_of_records_kept() -> None:
    lines = ['{"type":"session"}', "second \u2028 line", "caf\u00e9", "\ud800 lone surrogate"]
    streamed = SessionBundle(session_id="s", origin="o", hash_format="pi")
    kept = SessionBundle(session_id="s", origin="o")
    for line in lines:
        streamed.add_source(line)
        kept.add_source(line)
    assert streamed.digest("pi") == kept.digest("pi")
    assert streamed.digest_parts == []
    assert streamed.digest("pi") != SessionBundle(session_id="s", origin="o", hash_format="pi").digest("pi")
    with pytest.raises(ValueError, match="hashed as 'pi'"):
        streamed.digest("clark")


def test_lines_are_read_from_the_file_split_on_newline_only(tmp_path: Path) -> None:
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a":"x\xe2\x80\xa8y"}\r\n\n{"b":"\xc2\x85"}\n{"c":1}')
    assert list(read_lines(path)) == [(1, '{"a":"x\u2028y"}'), (2, ""), (3, '{"b":"\x85"}'), (4, '{"c":1}')]
    assert [(number, value) for number, _, value in read_jsonl(path)] == [
        (1, {"a": "x\u2028y"}),
        (3, {"b": "\x85"}),
        (4, {"c": 1}),
    ]


def test_a_line_that_is_not_utf8_names_its_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":2}\n{"c":"\xff"}\n')
    with pytest.raises(InvalidRecord) as raised:
        list(read_lines(path))
    assert str(raised.value) == f"{path}:3: invalid UTF-8 at byte 22"
    with Store(tmp_path / "s.db") as store:
        report = store.import_("clark", path)
    assert [str(error) for error in report.errors] == [f"{path}:3: invalid UTF-8 at byte 22"]
    assert store_is_empty(tmp_path / "s.db")


def store_is_empty(path: Path) -> bool:
    with Store(path) as store:
        return store.sessions.count() == 0


def test_a_whole_file_json_source_over_the_bound_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi", "timestamp": 1}] * 20), encoding="utf-8")
    monkeypatch.setattr(reading, "MAX_WHOLE_FILE_BYTES", 100)
    with Store(tmp_path / "s.db") as store:
        report = store.import_("clark", path)
        assert store.sessions.count() == 0
    (error,) = report.errors
    size = path.stat().st_size
    assert str(error) == f"{path}:1: file is {size} bytes; a whole-file JSON source is read only up to 100 bytes"
    monkeypatch.setattr(reading, "MAX_WHOLE_FILE_BYTES", size)
    with Store(tmp_path / "s.db") as store:
        assert store.import_("clark", path).messages == 20


def test_spilled_rows_come_back_in_batches_bounded_in_bytes(
    tmp_path: Path, spill_everything: list[spill_module.Spill], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Screenshot-heavy rows are read back a few at a time, so an import's memory does not grow with its media."""
    image = {"type": "image", "data": "A" * 40_000, "mimeType": "image/png"}
    header = {"type": "session", "id": "s-bytes", "timestamp": "2025-11-20T14:02:11.512Z", "cwd": "/x"}
    lines = [json.dumps(header)]
    for i in range(12):
        message = {"role": "user", "content": [{"type": "text", "text": f"shot {i}"}, image], "timestamp": 1 + i}
        lines.append(json.dumps({"type": "message", "timestamp": "2025-11-20T14:02:20.519Z", "message": message}))
    source = tmp_path / "2025-11-20T14-02-11-512Z_s-bytes.jsonl"
    source.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(spill_module, "READ_BATCH_BYTES", 100_000)
    sizes: list[int] = []
    batches = spill_module.Spill.batches

    def recorded(self: spill_module.Spill, stubs: Any) -> Any:
        for batch in batches(self, stubs):
            sizes.append(len(batch))
            yield batch

    monkeypatch.setattr(spill_module.Spill, "batches", recorded)
    with Store(tmp_path / "store.db") as store:
        assert store.import_("pi", source).ok
        assert len(list(store.messages.records("s-bytes"))) == 12
    assert spill_everything and sum(sizes) == 12 and max(sizes) <= 3  # rows of over 40 KB: 100,000 bytes in three
