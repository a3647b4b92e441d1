"""Media out of line (turnstore.media, repositories/media.py): stored once by SHA-256, read back byte for byte.

The codec is checked by property on odd texts (escapes, a reference-like
text of its own, the same data twice, data around the threshold); the store
on all four backends: every read returns the original text, ``omit`` and
``ref`` leave the data out, equal data is stored once across sessions, and
deleting or replacing a session frees the media no other session refers to.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, tool_result, user
from hypothesis import given, settings
from hypothesis import strategies as st

from turnstore import InvalidArgument, MediaNotFound, Store
from turnstore.media import MARK, REF_PREFIX, THRESHOLD, digests, join, split
from turnstore.repositories import parse_message
from turnstore.repositories.message_json import dump_message

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def screenshot(seed: int, size: int = 40_000) -> str:
    """Base64 of ``size`` deterministic bytes: one 'screenshot' per seed."""
    block = hashlib.sha256(str(seed).encode()).digest()
    return base64.b64encode((block * (size // 32 + 1))[:size]).decode()


def run_of(length: int, seed: int = 0) -> str:
    return "".join(B64[(seed + i * 7) % 64] for i in range(length))


# --- the codec, by property -------------------------------------------------------

_runs = st.sampled_from([THRESHOLD - 1, THRESHOLD, THRESHOLD + 1, THRESHOLD + 3]).flatmap(
    lambda length: st.integers(0, 3).map(lambda seed: run_of(length, seed))
)
_fragments = st.one_of(
    st.text(alphabet='\\/"dat:;,=bm0A+ \n\u00e9', max_size=12),
    st.just(MARK),
    st.just(MARK + "m" + "a" * 64 + MARK),  # a text that looks like a reference
    st.just('\\"'),
    _runs.map(lambda run: f'"data":"{run}"'),
    _runs.map(lambda run: f'"data": "{run}"'),
    _runs.map(lambda run: f'"data:image/png;base64,{run}"'),
    _runs.map(lambda run: f'"data":"data:audio/wav;base64,{run}="'),
    _runs.map(lambda run: f'"text":"{run}"'),  # not media: stays inline
    _runs,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_fragments, max_size=8))
def test_split_then_join_gives_the_text_back_byte_for_byte(fragments: list[str]) -> None:
    text = "".join(fragments)
    stored, found = split(text)
    assert set(digests(stored)) == set(found)
    assert join(stored, "inline", found.__getitem__) == text
    assert all(len(data) >= THRESHOLD for data in found.values())
    assert len(stored) <= len(text) + 2 * text.count(MARK) or found


@settings(max_examples=100, deadline=None)
@given(st.lists(_fragments, max_size=6))
def test_omit_and_ref_of_a_json_message_are_still_json(fragments: list[str]) -> None:
    parts = [{"type": "image", "data": run_of(THRESHOLD + len(fragments)), "mimeType": "image/png"}]
    parts += [{"type": "text", "text": fragment} for fragment in fragments]
    text = json.dumps({"role": "user", "content": parts}, separators=(",", ":"))
    stored, found = split(text)
    assert len(found) == 1
    json.loads(stored)  # valid JSON as stored (PostgreSQL's json column checks it)
    omitted = json.loads(join(stored, "omit", found.__getitem__))
    assert omitted["content"][0]["data"] == ""
    assert [part["text"] for part in omitted["content"][1:]] == fragments
    named = json.loads(join(stored, "ref", found.__getitem__))
    assert named["content"][0]["data"] == REF_PREFIX + next(iter(found))


def test_short_texts_without_the_mark_are_stored_as_they_are() -> None:
    text = '{"role":"user","content":"hi"}'
    stored, found = split(text)
    assert stored is text and found == {}
    assert split("a\\/b") == ("a\\/\\/b", {})


def test_data_below_the_threshold_stays_inline_and_above_moves_once() -> None:
    below, at = run_of(THRESHOLD - 1), run_of(THRESHOLD)
    assert split(f'{{"data":"{below}"}}')[1] == {}
    stored, found = split(f'[{{"data":"{at}"}},{{"data":"{at}"}}]')
    assert list(found.values()) == [at] and len(digests(stored)) == 2


@pytest.mark.parametrize(
    ("tail", "moved"),
    [
        ("", True),
        ("=", True),
        ("==", True),
        ("===", False),  # more padding than base64 has
        ("\u00e9", False),  # a letter outside base64 (not ASCII)
        ("\\n", False),  # a JSON escape: text, not data
        (" ", False),
        ("-_", False),  # the URL-safe alphabet is not what images carry
    ],
)
def test_only_a_whole_base64_string_is_media(tail: str, moved: bool) -> None:
    run = run_of(THRESHOLD) + tail
    text = f'{{"type":"image","data":"{run}","mimeType":"image/png"}}'
    stored, found = split(text)
    assert (found == {hashlib.sha256(run.encode()).hexdigest(): run}) is moved
    assert (stored == text) is not moved
    assert join(stored, "inline", found.__getitem__) == text


# --- the store, on every backend ---------------------------------------------------


def image_message(loop_id: str, *images: str, text: str = "look", turn: int = 0) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "image", "data": image, "mimeType": "image/png"} for image in images]
    return {
        "role": "user",
        "content": content,
        "timestamp": 5,
        "turnId": {"loopId": loop_id, "turnIndex": turn},
    }


def stored_text(message: dict[str, Any]) -> str:
    """The JSON text the store writes for ``message`` (what every read must give back)."""
    return dump_message(parse_message(message))


def ref_digest(store: Store, message_id: int) -> str:
    data = store.messages.get(message_id, media="ref").message.content[1].data  # type: ignore[union-attr]
    assert data.startswith(REF_PREFIX)
    return str(data[len(REF_PREFIX) :])


ODD_TEXTS = ["plain", "a\\/b", "\\\\/m" + "0" * 64 + "\\/", 'quote " and \\ and \u00e9 and \u2028']


@pytest.mark.parametrize("text", ODD_TEXTS)
def test_every_read_gives_the_original_text_back(store: Store, loop_id: str, session_id: str, text: str) -> None:
    image, near = screenshot(1), run_of(THRESHOLD - 1)
    message = image_message(loop_id, image, image, near, text=text)
    source = json.dumps({"image_url": "data:image/png;base64," + image, "note": text})
    message_id = store.messages.append(message, source=source)
    expected = stored_text(message)
    (row,) = store.messages.rows(session_id)
    assert row.message == expected and row.source == source
    got = store.messages.get(message_id)
    assert got.source == source and got.message.model_dump_json(by_alias=True) == expected
    (record,) = store.messages.records(session_id)
    assert record.source == source and record.message == got.message
    assert store.messages.loop(loop_id) == [got.message]
    assert store.messages.last(session_id, 5) == [got.message]
    assert store.messages.turn(loop_id, 0).messages == [got.message]
    assert store.messages.sources(loop_id)[0].source == source
    assert store.messages.sources(loop_id, last=1)[0].source == source
    assert store.messages.path(loop_id)[0].source == source
    assert store.messages.path(loop_id)[0].message == got.message
    assert store.messages.turns(loop_id)[0].messages == [got.message]
    assert store.messages.context(loop_id) == [got.message]
    assert [line for line in store.export(session_id).splitlines() if image in line]  # type: ignore[union-attr]


def test_omit_and_ref_leave_the_data_out_and_keep_the_message(store: Store, loop_id: str, session_id: str) -> None:
    image = screenshot(2)
    store.messages.append(user("take a screenshot"), loop_id=loop_id, turn_index=0)
    store.messages.append(assistant(model="claude-sonnet-4-5", provider="anthropic"), loop_id=loop_id, turn_index=0)
    message_id = store.messages.append(image_message(loop_id, image), source='{"data":"' + image + '"}')
    for read in (
        lambda mode: store.messages.last(session_id, 1, media=mode)[-1],
        lambda mode: store.messages.context(loop_id, media=mode)[-1],
        lambda mode: store.messages.loop(loop_id, media=mode)[-1],
        lambda mode: store.messages.get(message_id, media=mode).message,
        lambda mode: list(store.messages.records(session_id, media=mode))[-1].message,
    ):
        assert read("omit").content[1].data == ""
        assert read("omit").content[1].mime_type == "image/png"
        assert read("omit").content[0].text == "look"
        assert read("ref").content[1].data == REF_PREFIX + hashlib.sha256(image.encode()).hexdigest()
        assert read("inline").content[1].data == image
    assert store.messages.get(message_id, media="omit").source == '{"data":""}'
    assert list(store.messages.rows(session_id, media="omit"))[-1].message.count('"data":""') == 1
    digest = ref_digest(store, message_id)
    assert store.messages.media(digest) == image == store.messages.media(REF_PREFIX + digest)


def test_bad_media_arguments_are_refused(store: Store, loop_id: str, session_id: str) -> None:
    store.messages.append(user("x"), loop_id=loop_id, turn_index=0)
    for call in (
        lambda: store.messages.last(session_id, 1, media="none"),  # type: ignore[arg-type]
        lambda: store.messages.context(loop_id, media=None),  # type: ignore[arg-type]
        lambda: store.messages.loop(loop_id, media="OMIT"),  # type: ignore[arg-type]
        lambda: list(store.messages.records(session_id, media=1)),  # type: ignore[arg-type]
        lambda: list(store.messages.rows(session_id, media="x")),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidArgument, match="media: must be one of"):
            call()
    with pytest.raises(MediaNotFound):
        store.messages.media("0" * 64)


def test_equal_data_is_stored_once_across_sessions_and_freed_with_the_last(store: Store) -> None:
    image = screenshot(3)
    loops, ids = [], []
    for _ in range(2):
        loop = store.loops.start(store.sessions.create().session_id).loop_id
        loops.append(loop)
        ids.append(store.messages.append(image_message(loop, image, image)))
    ids.append(
        store.messages.append_turn(loops[1], 1, [tool_result("c2") for _ in range(1)], sources=['"data":"x"'])[0]
    )
    digest = ref_digest(store, ids[0])
    assert digest == ref_digest(store, ids[1])
    first, second = (store.loops.get(loop).session_id for loop in loops)
    store.sessions.delete(first)
    assert store.messages.get(ids[1]).message.content[1].data == image  # type: ignore[union-attr]
    store.sessions.delete(second)
    with pytest.raises(MediaNotFound):
        store.messages.media(digest)


def _digest(image: str) -> str:
    return hashlib.sha256(image.encode()).hexdigest()


def _kept(store: Store, image: str) -> bool:
    try:
        return store.messages.media(_digest(image)) == image
    except MediaNotFound:
        return False


def test_deleting_a_loops_tail_frees_the_media_no_message_refers_to_any_more(store: Store) -> None:
    """Media goes with the last message that refers to it: in its loop, its session's other loops, other sessions."""
    own, shared, in_source, elsewhere = (screenshot(seed) for seed in (10, 11, 12, 13))
    session = store.sessions.create().session_id
    loop = store.loops.start(session).loop_id
    other_loop = store.loops.start(session, continuation="initial").loop_id
    other_session = store.sessions.create().session_id
    foreign = store.loops.start(other_session).loop_id
    store.messages.append(image_message(foreign, shared))
    store.messages.append(image_message(other_loop, elsewhere))
    first = store.messages.append(image_message(loop, own))
    second = store.messages.append(image_message(loop, own, shared, elsewhere, turn=1))
    third = store.messages.append(user("the log"), loop_id=loop, turn_index=2, source='{"data":"' + in_source + '"}')

    assert store.messages.delete(third) == [third]
    assert not _kept(store, in_source)
    assert all(_kept(store, image) for image in (own, shared, elsewhere))
    assert store.messages.delete(second) == [second]
    assert all(
        _kept(store, image) for image in (own, shared, elsewhere)
    )  # the first, the other session, the other loop
    store.sessions.delete(other_session)
    assert not _kept(store, shared)  # this session no longer refers to it
    assert store.messages.delete(first) == [first]
    assert not _kept(store, own) and _kept(store, elsewhere)
    assert [m.content[1].data for m in store.messages.loop(other_loop)] == [elsewhere]  # type: ignore[union-attr]
    assert store.messages.loop(loop) == []


def test_deleting_a_tail_with_later_messages_frees_their_media_at_once(store: Store, loop_id: str) -> None:
    images = [screenshot(20 + number) for number in range(3)]
    ids = [store.messages.append(image_message(loop_id, image, turn=turn)) for turn, image in enumerate(images)]
    last = store.messages.append(image_message(loop_id, images[0], turn=3))
    assert store.messages.delete(ids[1], with_later=True) == [*ids[1:], last]
    assert [_kept(store, image) for image in images] == [True, False, False]
    assert [m.content[1].data for m in store.messages.loop(loop_id)] == images[:1]  # type: ignore[union-attr]


def test_append_turn_moves_media_out_all_or_nothing(store: Store, loop_id: str, session_id: str) -> None:
    image = screenshot(4)
    bad = {"role": "user", "content": 5}
    with pytest.raises(Exception, match="content"):
        store.messages.append_turn(loop_id, 0, [image_message(loop_id, image), bad])
    ids = store.messages.append_turn(loop_id, 0, [image_message(loop_id, image), image_message(loop_id, image)])
    assert ref_digest(store, ids[0]) == ref_digest(store, ids[1])
    assert [m.content[1].data for m in store.messages.loop(loop_id)] == [image, image]  # type: ignore[union-attr]


def test_import_and_replace_move_media_out_and_free_it(store: Store, tmp_path: Path) -> None:
    old, new = screenshot(5), screenshot(6)
    session = store.sessions.create().session_id
    loop = store.loops.start(session).loop_id
    store.messages.append(image_message(loop, old), source='{"data":"' + old + '"}')
    exported = store.export(session)
    assert isinstance(exported, str)
    path = tmp_path / "session.jsonl"
    path.write_text(exported)
    old_digest = ref_digest(store, store.messages.sources(loop)[0].id)
    written = [(row.message, row.source) for row in store.messages.rows(session)]
    store.sessions.delete(session)
    store.import_("turnstore", path)
    (row,) = store.messages.sources(loop)
    assert ref_digest(store, row.id) == old_digest
    assert [(row.message, row.source) for row in store.messages.rows(session)] == written
    path.write_text(exported.replace(old, new))
    store.import_("turnstore", path, replace=True)
    (row,) = store.messages.sources(loop)
    assert store.messages.get(row.id).message.content[1].data == new  # type: ignore[union-attr]
    assert row.source == '{"data":"' + new + '"}'
    with pytest.raises(MediaNotFound):
        store.messages.media(old_digest)


def test_a_staged_import_moves_media_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from turnstore.repositories import staging

    image = screenshot(7)
    with Store(tmp_path / "a.db") as first:
        session = first.sessions.create().session_id
        loop = first.loops.start(session).loop_id
        for _ in range(3):
            first.messages.append(image_message(loop, image))
        exported = first.export(session)
        first_rows = list(first.messages.rows(session))
    assert isinstance(exported, str)
    path = tmp_path / "s.jsonl"
    path.write_text(exported)
    monkeypatch.setattr(staging, "STAGED_SESSION_MESSAGES", 0)
    monkeypatch.setattr(staging, "BATCH_MESSAGES", 1)
    with Store(tmp_path / "b.db") as second:
        second.import_("turnstore", path)
        digest = hashlib.sha256(image.encode()).hexdigest()
        assert second.messages.media(digest) == image
        assert [row.message for row in second.messages.rows(session)] == [row.message for row in first_rows]
        second.import_("turnstore", path, replace=True)  # a staged replace: freed, then stored again
        assert second.messages.media(digest) == image
        second.sessions.delete(session)
        with pytest.raises(MediaNotFound):
            second.messages.media(digest)


def test_deleting_a_session_while_another_appends_the_same_media_loses_nothing(
    store: Store, backend: str, store_url: str
) -> None:
    """A delete that frees shared media races an append that refers to it; the live message keeps its bytes."""
    if backend.endswith("async"):
        pytest.skip("the race is the sync code's (the async store runs it in a worker thread)")
    keeper = store.loops.start(store.sessions.create().session_id).loop_id
    images = [screenshot(100 + number) for number in range(6)]
    for round_, image in enumerate(images):  # a new screenshot each round: the keeper holds no reference to it yet
        doomed_session = store.sessions.create().session_id
        doomed = store.loops.start(doomed_session).loop_id
        store.messages.append(image_message(doomed, image))
        with Store(store_url) as other:
            ready = threading.Barrier(2)
            errors: list[BaseException] = []

            def delete(other: Store = other, session: str = doomed_session) -> None:
                try:
                    ready.wait()
                    other.sessions.delete(session)
                except BaseException as error:
                    errors.append(error)

            thread = threading.Thread(target=delete)
            thread.start()
            if round_ % 2:
                with store.transaction():  # the append holds its media row while the delete runs
                    store.messages.append(image_message(keeper, image, turn=round_))
                    ready.wait()
                    thread.join(0.3)
            else:
                ready.wait()
                store.messages.append(image_message(keeper, image, turn=round_))
            thread.join()
            assert errors == []
        kept = [m.content[1].data for m in store.messages.loop(keeper)]  # type: ignore[union-attr]
        assert kept == images[: round_ + 1]


def test_messages_without_media_are_stored_as_given(store: Store, loop_id: str, session_id: str) -> None:
    message = {"role": "user", "content": "x" * (THRESHOLD * 2), "timestamp": 1}
    store.messages.append(message, loop_id=loop_id, turn_index=0)
    (row,) = store.messages.rows(session_id, media="omit")
    assert row.message == stored_text({**message, "turnId": {"loopId": loop_id, "turnIndex": 0}})


# --- the command line -----------------------------------------------------------------


def test_cli_show_and_export_take_a_media_mode(tmp_path: Path) -> None:
    from cli_runner import run_cli

    image = screenshot(9)
    db = tmp_path / "cli.db"
    with Store(db) as store:
        session = store.sessions.create().session_id
        loop = store.loops.start(session).loop_id
        store.messages.append(image_message(loop, image))
        full = store.export(session)
    digest = hashlib.sha256(image.encode()).hexdigest()
    shown = run_cli("--db", db, "show", session, "--json", "--media", "omit")
    assert shown.code == 0
    (message,) = shown.json()["loops"][0]["messages"]
    assert message["message"]["content"][1] == {"type": "image", "data": "", "mimeType": "image/png"}
    assert image in run_cli("--db", db, "show", session, "--json").out
    exported = run_cli("--db", db, "export", session, "--format", "turnstore", "--media", "ref")
    assert exported.code == 0 and image not in exported.out and REF_PREFIX + digest in exported.out
    assert run_cli("--db", db, "export", session, "--format", "turnstore").out == full
    refused = run_cli("--db", db, "export", session, "--media", "none")
    assert refused.code != 0 and "none" in refused.err and len(refused.err.strip().splitlines()) <= 3


def test_export_refuses_a_bad_media_mode(store: Store, session_id: str) -> None:
    with pytest.raises(InvalidArgument, match="media"):
        store.export(session_id, media="all")  # type: ignore[arg-type]


def test_a_staged_import_that_fails_mid_way_leaves_no_media(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3
    from collections.abc import Iterator

    from turnstore.repositories import imports as writer
    from turnstore.repositories import staging

    images = [screenshot(20 + number) for number in range(3)]
    with Store(tmp_path / "a.db") as first:
        session = first.sessions.create().session_id
        loop = first.loops.start(session).loop_id
        for image in images:
            first.messages.append(image_message(loop, image))
        exported = first.export(session)
    assert isinstance(exported, str)
    path = tmp_path / "s.jsonl"
    path.write_text(exported)
    monkeypatch.setattr(staging, "STAGED_SESSION_MESSAGES", 0)
    monkeypatch.setattr(staging, "BATCH_MESSAGES", 1)
    original = writer._message_batches

    def failing(bundle: Any, limits: Any) -> Iterator[list[dict[str, Any]]]:
        for number, batch in enumerate(original(bundle, limits)):
            yield batch
            if number == 0:  # after the first batch is written (all three messages, a part at a time)
                raise KeyboardInterrupt

    monkeypatch.setattr(writer, "_message_batches", failing)
    with Store(tmp_path / "b.db") as second, pytest.raises(KeyboardInterrupt):
        second.import_("turnstore", path)
    reader = sqlite3.connect(tmp_path / "b.db")
    try:
        counts = [reader.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("media", "session_media")]
    finally:
        reader.close()
    assert counts == [0, 0]


def test_reads_of_parts_of_a_stored_text_see_it_as_written(store: Store, loop_id: str, session_id: str) -> None:
    """A stored text doubles each backslash-slash of its own; search snippets, the tool-name filter and
    tool_names() read parts of it, and must see the text as written (JSON-escaped URLs are common)."""
    url = "fetch http:\\/\\/x.com\\/api"
    store.messages.append({"role": "user", "content": url, "timestamp": 1}, loop_id=loop_id, turn_index=0)
    call = {"type": "toolCall", "id": "call\\/1", "name": "fs\\/read", "arguments": {"p": "needle"}}
    reply = {"role": "assistant", "content": [call], "stopReason": "toolUse", "model": "m", "provider": "p"}
    store.messages.append({**reply, "timestamp": 2}, loop_id=loop_id, turn_index=0)
    (hit,) = store.messages.search("fetch")
    assert hit.snippet == url
    assert len(store.messages.search("needle", tool_name="fs\\/read")) == 1
    assert store.messages.search("needle", tool_name="fs//read") == []
    assert store.messages.tool_names(session_id, ["call\\/1"]) == {"call\\/1": "fs\\/read"}
