"""``store.messages.search``: full-text search on SQLite (FTS5) and PostgreSQL, sync and async.

Every test runs on the four backends (``store`` fixture) unless it is about
SQLite itself: the same query must find the same messages everywhere.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from factories import assistant, extension, tool_result, user
from helpers import SONNET
from test_large_imports import _pi_file

from turnstore import (
    ImageContent,
    InvalidArgument,
    InvalidQuery,
    SearchHit,
    SearchUnavailable,
    Store,
    TextContent,
    ToolCallContent,
    UserMessage,
)
from turnstore.engine import create_engine
from turnstore.repositories import search as search_module
from turnstore.repositories import staging


def found(store: Any, query: str, **filters: Any) -> list[str]:
    """The snippets of the hits, best first."""
    return [hit.snippet for hit in store.messages.search(query, **filters)]


@pytest.fixture
def chat(store: Any, session_id: str, loop_id: str) -> dict[str, Any]:
    """A session with a prompt, an answer with thinking and a tool call, the tool's result and an extension note."""
    call = assistant(
        "I will look at the deploy script.",
        thinking="The user wants the canary rollout fixed",
        signature="c2lnbmF0dXJlc2VjcmV0",
        calls=("call_1",),
    )
    ids = store.messages.append_turn(
        loop_id,
        0,
        [
            user("Why did the deploy fail on staging?"),
            call,
            tool_result("call_1", "Permission denied: /etc/deploy.conf"),
        ],
    )
    ids.append(store.messages.append(extension("note", {"summary": "rollout paused by operator"}), loop_id=loop_id))
    return {"session_id": session_id, "loop_id": loop_id, "ids": ids}


# --- syntax ----------------------------------------------------------------------------


def test_all_words_must_match_in_any_order(store: Any, chat: dict[str, Any]) -> None:
    assert found(store, "staging deploy") == ["Why did the deploy fail on staging?"]
    assert found(store, "deploy nowhere") == []


def test_a_phrase_matches_adjacent_words_in_order(store: Any, chat: dict[str, Any]) -> None:
    assert found(store, '"deploy script"') == ["I will look at the deploy script."]
    assert found(store, '"script deploy"') == []


def test_a_prefix_matches_the_start_of_a_word(store: Any, chat: dict[str, Any]) -> None:
    assert found(store, "permiss*") == ["Permission denied: /etc/deploy.conf"]
    assert found(store, "permissions*") == []
    assert found(store, '"deploy scr"*') == ["I will look at the deploy script."]


def test_an_excluded_word_or_phrase_leaves_messages_out(store: Any, chat: dict[str, Any]) -> None:
    assert sorted(found(store, "deploy -staging")) == [
        "I will look at the deploy script.",
        "Permission denied: /etc/deploy.conf",
    ]
    assert found(store, 'deploy -"deploy script" -staging') == ["Permission denied: /etc/deploy.conf"]


def test_punctuated_words_are_phrases(store: Any, chat: dict[str, Any]) -> None:
    # "deploy.conf" is the phrase "deploy conf", as it was indexed.
    assert found(store, "/etc/deploy.conf") == ["Permission denied: /etc/deploy.conf"]


# --- what is indexed --------------------------------------------------------------------


def test_tool_calls_are_found_by_name_and_arguments(store: Any, chat: dict[str, Any]) -> None:
    hits = store.messages.search("echo call_1")
    assert [(hit.role, hit.message_id) for hit in hits] == [("assistant", chat["ids"][1])]
    assert [hit.role for hit in store.messages.search("bash")] == ["assistant", "toolResult"] or sorted(
        hit.role for hit in store.messages.search("bash")
    ) == ["assistant", "toolResult"]


def test_extension_data_text_is_found(store: Any, chat: dict[str, Any]) -> None:
    [hit] = store.messages.search("operator paused")
    assert (hit.role, hit.kind, hit.message_id) == ("extension", "note", chat["ids"][3])
    assert hit.snippet == "rollout paused by operator"


def test_thinking_is_found_unless_left_out(store: Any, chat: dict[str, Any]) -> None:
    [hit] = store.messages.search("rollout fixed")
    assert hit.snippet == "The user wants the canary rollout fixed"
    assert store.messages.search("rollout fixed", thinking=False) == []
    # The message is still found by its other text, and its snippet is never the thinking.
    [hit] = store.messages.search("deploy script", thinking=False)
    assert hit.snippet == "I will look at the deploy script."
    # Excluded words are looked for in the same text: thinking left out, a word only thought is no reason to exclude.
    assert [h.role for h in store.messages.search("deploy script -canary")] == []
    assert [h.role for h in store.messages.search("deploy script -canary", thinking=False)] == ["assistant"]


def test_signatures_and_image_data_are_not_indexed(store: Any, loop_id: str, chat: dict[str, Any]) -> None:
    data = "QUJD" * 100
    image = UserMessage(
        content=[TextContent(text="see the screenshot"), ImageContent(data=data, mime_type="image/png")], timestamp=5
    )
    store.messages.append(image, loop_id=loop_id, turn_index=1)
    assert found(store, "c2lnbmF0dXJlc2VjcmV0") == []
    assert found(store, data) == []
    assert found(store, "QUJD*") == []
    assert found(store, "screenshot") == ["see the screenshot"]


def test_base64_in_tool_arguments_is_not_indexed_but_the_rest_is(store: Any, loop_id: str) -> None:
    blob = "iVBORw0KGgo" * 40
    call = assistant(None, calls=())
    call.content.append(ToolCallContent(id="c", name="upload", arguments={"name": "shot.png", "bytes": blob}))
    store.messages.append(call, loop_id=loop_id, turn_index=0)
    assert [hit.role for hit in store.messages.search("upload shot png")] == ["assistant"]
    assert found(store, "iVBORw0KGgo*") == []


# --- unicode -------------------------------------------------------------------------------


def test_case_and_accents_are_ignored(store: Any, loop_id: str) -> None:
    store.messages.append(user("Le CAFÉ est fermé; naïve approach"), loop_id=loop_id, turn_index=0)
    store.messages.append(user("na\u0131\u0308ve decomposed nai\u0308ve"), loop_id=loop_id, turn_index=0)
    assert found(store, "cafe ferme") == ["Le CAFÉ est fermé; naïve approach"]
    assert found(store, "Café FERMÉ") == ["Le CAFÉ est fermé; naïve approach"]
    assert len(found(store, "naive")) == 2
    [hit] = store.messages.search("ferme")
    assert hit.snippet[slice(*hit.highlights[0])] == "fermé"


def test_a_cjk_substring_is_found_on_every_backend(store: Any, loop_id: str) -> None:
    store.messages.append(user("数据库连接失败，请检查配置"), loop_id=loop_id, turn_index=0)
    store.messages.append(user("データベースの接続"), loop_id=loop_id, turn_index=0)
    store.messages.append(user("연결 실패"), loop_id=loop_id, turn_index=0)
    assert found(store, "连接失败") == ["数据库连接失败，请检查配置"]
    assert found(store, "据库") == ["数据库连接失败，请检查配置"]
    assert found(store, "库据") == []
    assert found(store, "ベース") == ["データベースの接続"]
    assert found(store, "실패") == ["연결 실패"]
    [hit] = store.messages.search("检查")
    assert [hit.snippet[a:b] for a, b in hit.highlights] == ["检", "查"]


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("Καλημέρα κόσμε, ΣΦΑΛΜΑ σύνδεσης", "σφαλμα"),
        ("Ошибка соединения с БАЗОЙ данных", "базой"),
        ("خطأ في الاتصال بقاعدة البيانات", "البيانات"),
        ("שגיאה בחיבור למסד הנתונים", "הנתונים"),
        ("डेटाबेस कनेक्शन विफल", "कनेक्शन"),
        ("Straße GROSS", "strasse"),
    ],
)
def test_words_of_other_scripts_are_found_on_every_backend(store: Any, loop_id: str, text: str, query: str) -> None:
    store.messages.append(user(text), loop_id=loop_id, turn_index=0)
    store.messages.append(user("unrelated words"), loop_id=loop_id, turn_index=0)
    assert found(store, query) == [text]


# --- filters, paging, ranking --------------------------------------------------------------------


def test_filters_by_session_loop_role_and_tool(store: Any, chat: dict[str, Any]) -> None:
    other = store.sessions.create(title="other").session_id
    other_loop = store.loops.start(other, config=SONNET).loop_id
    store.messages.append(user("deploy again"), loop_id=other_loop, turn_index=0)
    assert len(store.messages.search("deploy")) == 4
    assert found(store, "deploy", session_id=other) == ["deploy again"]
    assert found(store, "deploy", loop_id=other_loop) == ["deploy again"]
    assert len(store.messages.search("deploy", session_id=chat["session_id"])) == 3
    assert sorted(found(store, "deploy", role="user")) == ["Why did the deploy fail on staging?", "deploy again"]
    assert [hit.role for hit in store.messages.search("deploy", tool_name="bash")] in (
        ["assistant", "toolResult"],
        ["toolResult", "assistant"],
    )
    assert store.messages.search("deploy", tool_name="read") == []
    # The tool filter narrows the match, never widens it: the call of bash does not hold "permission".
    assert [hit.role for hit in store.messages.search("permission", tool_name="bash")] == ["toolResult"]
    assert store.messages.search("deploy", session_id="missing\x00") == []


def test_filters_by_time(store: Any, loop_id: str) -> None:
    for stamp in (1_000, 2_000, 3_000):
        store.messages.append(user(f"tick at {stamp}", timestamp=stamp), loop_id=loop_id, turn_index=0)
    assert found(store, "tick", since=2_000) in (["tick at 2000", "tick at 3000"], ["tick at 3000", "tick at 2000"])
    assert found(store, "tick", until=2_000) == ["tick at 1000"]
    since = datetime.fromtimestamp(2.5, tz=timezone.utc)
    assert found(store, "tick", since=since) == ["tick at 3000"]
    assert found(store, "tick", since=since.replace(tzinfo=None)) == ["tick at 3000"]


def test_limit_and_offset_page_through_the_hits(store: Any, loop_id: str) -> None:
    for n in range(5):
        store.messages.append(user(f"page item {n}"), loop_id=loop_id, turn_index=0)
    everything = [hit.message_id for hit in store.messages.search("page item", limit=10)]
    assert len(everything) == 5
    pages = [hit.message_id for start in (0, 2, 4) for hit in store.messages.search("page", limit=2, offset=start)]
    assert pages == everything
    # Equal ranks: the newer message first.
    assert everything == sorted(everything, reverse=True)


def test_a_message_matching_densely_ranks_above_one_matching_in_passing(store: Any, loop_id: str) -> None:
    filler = " ".join(f"word{n}" for n in range(60))
    passing = store.messages.append(user(f"deploy {filler} config"), loop_id=loop_id, turn_index=0)
    dense = store.messages.append(user("deploy config: the deploy config"), loop_id=loop_id, turn_index=0)
    hits = store.messages.search("deploy config")
    assert [hit.message_id for hit in hits] == [dense, passing]
    assert hits[0].rank > hits[1].rank


def test_a_message_with_every_word_ranks_above_one_with_fewer(store: Any, loop_id: str) -> None:
    # By default every word must match; match="any" finds messages with some of them, those with more first.
    one = store.messages.append(user("the rollback went fine today"), loop_id=loop_id, turn_index=0)
    every = store.messages.append(user("deploy config rollback went fine"), loop_id=loop_id, turn_index=0)
    two = store.messages.append(user("the config rollback went fine"), loop_id=loop_id, turn_index=0)
    store.messages.append(user("nothing relevant here at all"), loop_id=loop_id, turn_index=0)
    assert [hit.message_id for hit in store.messages.search("deploy config rollback")] == [every]
    hits = store.messages.search("deploy config rollback", match="any")
    assert [hit.message_id for hit in hits] == [every, two, one]
    assert hits[0].rank > hits[1].rank > hits[2].rank
    assert [hit.message_id for hit in store.messages.search("deploy config rollback -today", match="any")] == [
        every,
        two,
    ]
    with pytest.raises(InvalidArgument, match="match"):
        store.messages.search("deploy", match="some")


def test_hits_say_where_the_message_is(store: Any, chat: dict[str, Any]) -> None:
    [hit] = store.messages.search("permission")
    assert isinstance(hit, SearchHit)
    assert (hit.session_id, hit.loop_id, hit.turn_index, hit.message_id, hit.seq, hit.role) == (
        chat["session_id"],
        chat["loop_id"],
        0,
        chat["ids"][2],
        2,
        "toolResult",
    )
    assert hit.timestamp == 3_000
    turn = store.messages.turn(hit.loop_id, hit.turn_index)
    assert turn.messages[hit.seq].text() == "Permission denied: /etc/deploy.conf"


def test_snippets_are_cut_around_the_match_and_highlight_it(store: Any, loop_id: str) -> None:
    before = " ".join(f"alpha{n}" for n in range(60))
    after = " ".join(f"omega{n}" for n in range(60))
    store.messages.append(user(f"{before}\n\n  needle   found\there {after}"), loop_id=loop_id, turn_index=0)
    [hit] = store.messages.search("needle here")
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    assert len(hit.snippet) <= 162
    assert "\n" not in hit.snippet and "\t" not in hit.snippet
    assert [hit.snippet[a:b] for a, b in hit.highlights] == ["needle", "here"]


def test_a_snippet_of_a_huge_text_looks_only_around_the_first_match(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool's output of megabytes: the snippet is found in one window around the first match (never word
    by word through all of it), cut with an ellipsis at both ends, the match highlighted."""
    sync_store.sessions.create("s")
    loop = sync_store.loops.start("s")
    before, after = "lorem ipsum " * 2_000, "dolor sit " * 50_000  # 24,000 and 500,000 characters of other words
    sync_store.messages.append(user(f"{before}the Needle sits here {after}"), loop_id=loop.loop_id, turn_index=0)
    monkeypatch.setattr(search_module, "SCAN_CHARS", 4_000)
    longest: list[int] = []
    spans = search_module.word_spans
    monkeypatch.setattr(search_module, "word_spans", lambda text: (longest.append(len(text)), spans(text))[1])

    [hit] = sync_store.messages.search("needle")

    assert max(longest) <= search_module.SCAN_CHARS
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…") and len(hit.snippet) <= 162
    assert [hit.snippet[a:b] for a, b in hit.highlights] == ["Needle"]


@pytest.mark.parametrize(
    ("written", "query", "highlighted"),
    [
        ("needles everywhere needlesome then the needle itself", "needle", ["needle"]),  # whole words only
        ("the cafébeta here", "cafebeta", ["cafébeta"]),  # folded as the index folds it
        ("über die Übergrößenträger", "ubergrossentrager", ["Übergrößenträger"]),
        ("in 東京タワー today", "東京", ["東", "京"]),  # each CJK character a word of its own
        ("id " + "a" * 70 + "z end", "a" * 70 + "z", ["a" * 70 + "z"]),  # longer than the index keeps of a word
    ],
)
def test_a_snippet_of_a_huge_text_finds_the_word_the_index_matched(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch, written: str, query: str, highlighted: list[str]
) -> None:
    """The window of a long text is placed at the word the index matched, not at a longer word that starts
    with it, nor missed when only the folded form matches."""
    sync_store.sessions.create("s")
    loop = sync_store.loops.start("s")
    filler = "lorem ipsum " * 2_000
    sync_store.messages.append(user(f"{filler}{written} {filler}"), loop_id=loop.loop_id, turn_index=0)
    monkeypatch.setattr(search_module, "SCAN_CHARS", 4_000)
    if written.isascii() or "東" in written:  # found as written: the folded scan must not be what finds it
        monkeypatch.setattr(search_module, "FOLD_SCAN_CHARS", 1_000)

    [hit] = sync_store.messages.search(query)

    assert [hit.snippet[a:b] for a, b in hit.highlights] == highlighted


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    ["'); DROP TABLE messages; --", "deploy' OR 1=1 --", "NOT AND OR", "col:deploy", "{search_text}: x", "a\\b"],
)
def test_hostile_queries_are_searched_for_as_words(store: Any, chat: dict[str, Any], query: str) -> None:
    assert isinstance(store.messages.search(query), list)
    assert len(store.messages.search("deploy")) == 3  # the table is still there


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ('"unbalanced', "unbalanced quote"),
        ('deploy "script', "unbalanced quote"),
        ("", "no word"),
        ("   ", "no word"),
        ("-deploy", "no word"),
        ("'); --", "no word"),
        ("x " * 40, "over the limit"),
        ("y" * 1001, "over the limit"),
    ],
)
def test_queries_that_cannot_be_searched_are_refused(store: Any, chat: dict[str, Any], query: str, reason: str) -> None:
    with pytest.raises(InvalidQuery, match=reason) as raised:
        store.messages.search(query)
    assert isinstance(raised.value, InvalidArgument) and raised.value.argument == "query"
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": True}, "limit"),
        ({"offset": -1}, "offset"),
        ({"role": "robot"}, "role"),
        ({"since": "yesterday"}, "since"),
        ({"until": 2**70}, "until"),
        ({"session_id": 5}, "session_id"),
    ],
)
def test_bad_arguments_are_refused(store: Any, chat: dict[str, Any], arguments: dict[str, Any], name: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        store.messages.search("deploy", **arguments)
    assert raised.value.argument == name


def test_a_query_that_is_not_a_string_is_refused(store: Any) -> None:
    with pytest.raises(InvalidQuery, match="must be a string"):
        store.messages.search(None)


# --- writes keep the index -----------------------------------------------------------------------


def test_deleted_sessions_and_messages_vanish_from_results(store: Any, chat: dict[str, Any]) -> None:
    last = store.messages.append(user("undo this deploy"), loop_id=chat["loop_id"], turn_index=1)
    assert "undo this deploy" in found(store, "deploy")
    store.messages.delete(last)
    assert found(store, "undo") == []
    store.sessions.delete(chat["session_id"])
    assert found(store, "deploy") == []
    assert found(store, "rollout") == []


def test_a_rolled_back_append_leaves_nothing_to_find(store: Any, loop_id: str) -> None:
    store.loops.end(loop_id)
    with pytest.raises(InvalidArgument):
        store.messages.append(user("never stored"), loop_id=loop_id)
    assert found(store, "never stored") == []


def test_imports_are_searchable_right_after_they_return(store: Any, tmp_path: Path) -> None:
    source = _pi_file(tmp_path / "big.jsonl", ["the quarterly report", "ship the migration"])
    report = store.import_("pi", source)
    assert report.sessions_written == ["big"]
    assert [(hit.session_id, hit.role) for hit in store.messages.search("quarterly")] in (
        [("big", "user"), ("big", "assistant")],
        [("big", "assistant"), ("big", "user")],
    )
    # A replace takes the old words away with the old messages.
    _pi_file(source, ["a different story"])
    store.import_("pi", source, replace=True)
    assert found(store, "quarterly") == []
    assert len(found(store, "different story")) == 2


def test_a_staged_import_is_hidden_until_published_then_found(
    store: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "STAGED_SESSION_MESSAGES", 0)
    monkeypatch.setattr(staging, "BATCH_MESSAGES", 1)
    source = _pi_file(tmp_path / "big.jsonl", ["staged words one", "staged words two"])
    assert store.import_("pi", source).sessions_written == ["big"]
    assert len(found(store, "staged words")) == 4
    # A session marked staged (being written) is left out of every search.
    engine = create_engine(store_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.text("INSERT INTO staging (session_id, owner, heartbeat_at) VALUES ('big', 'x', :now)"),
                {"now": datetime.now(timezone.utc)},
            )
        assert found(store, "staged words") == []
        with engine.begin() as connection:
            connection.execute(sa.text("DELETE FROM staging"))
    finally:
        engine.dispose()
    assert len(found(store, "staged words")) == 4
    _pi_file(source, ["restaged text"])
    store.import_("pi", source, replace=True)
    assert found(store, "staged words") == [] and len(found(store, "restaged")) == 2


# --- SQLite without FTS5 ---------------------------------------------------------------------------


def test_without_fts5_search_raises_and_everything_else_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_module, "fts5_available", lambda connection: False)
    with Store(tmp_path / "plain.db") as store:
        session_id = store.sessions.create().session_id
        loop_id = store.loops.start(session_id, config=SONNET).loop_id
        ids = store.messages.append_turn(loop_id, 0, [user("hello there"), assistant("general kenobi")])
        with pytest.raises(SearchUnavailable, match="FTS5"):
            store.messages.search("hello")
        store.messages.delete(ids[-1])
        assert [m.text() for m in store.messages.loop(loop_id)] == ["hello there"]
        assert store.import_("pi", _pi_file(tmp_path / "big.jsonl", ["imported"])).sessions_written == ["big"]
        store.sessions.delete(session_id)
        assert store.sessions.count() == 1


def test_the_index_holds_exactly_the_stored_messages(sqlite_store: Store, tmp_path: Path) -> None:
    """The FTS5 table agrees with the messages after appends, deletes, imports and replaces (its own check)."""
    store = sqlite_store
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id, config=SONNET).loop_id
    ids = store.messages.append_turn(loop_id, 0, [user("one two"), assistant("three", thinking="four")])
    store.messages.delete(ids[-1])
    source = _pi_file(tmp_path / "big.jsonl", ["five six"])
    store.import_("pi", source)
    _pi_file(source, ["seven"])
    store.import_("pi", source, replace=True)
    with store.engine.begin() as connection:
        connection.exec_driver_sql("INSERT INTO message_search (message_search, rank) VALUES ('integrity-check', 1)")
        indexed = connection.exec_driver_sql("SELECT count(*) FROM message_search").scalar()
        stored = connection.exec_driver_sql("SELECT count(*) FROM messages WHERE search_text IS NOT NULL").scalar()
    assert indexed == stored == 3
    assert json.dumps([hit.snippet for hit in store.messages.search("seven")]) == '["seven", "seven"]'


def test_a_very_long_message_is_stored_and_its_first_words_indexed(store: Any, loop_id: str) -> None:
    words = [f"w{n:06d}q{chr(0x4E00 + n % 20_000)}" for n in range(15_000)]  # distinct words, CJK among them
    text = " ".join(words)
    message = assistant(text, thinking=text)
    store.messages.append(message, loop_id=loop_id, turn_index=0)
    assert [hit.role for hit in store.messages.search(words[0][:8])] == ["assistant"]
    assert store.messages.search(words[-1][:8]) == []  # past the indexed part
    assert store.messages.get(1).message.text() == text
