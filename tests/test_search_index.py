"""SQLite's full-text index kept in batches (``repositories/search_index.py``, migration 0008).

Messages above ``indexed_to`` (the tail) are not in the FTS5 table yet; every
search must still find them, page through them without gaps or repeats, on a
read-only store too, and the FTS5 table must stay exactly in step with the
messages it holds through deletes, reused ids, imports and migrations.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from factories import user
from hypothesis import given
from hypothesis import strategies as st
from test_large_imports import _pi_file

from turnstore import StorageError, Store, migrate
from turnstore.engine import create_engine
from turnstore.repositories import search_index
from turnstore.repositories.search_index import TAIL, merge_page


def indexed_to(path: Path) -> int:
    with sqlite3.connect(path) as connection:
        value: int = connection.execute("SELECT indexed_to FROM message_search_state").fetchone()[0]
    return value


def index_is_exact(path: Path) -> tuple[int, int]:
    """FTS5's own check of the index against the messages up to ``indexed_to``; (indexed, those with words)."""
    with sqlite3.connect(path) as connection:
        top = connection.execute("SELECT indexed_to FROM message_search_state").fetchone()[0]
        connection.execute("INSERT INTO message_search (message_search, rank) VALUES ('integrity-check', 0)")
        indexed = connection.execute("SELECT count(*) FROM message_search_docsize").fetchone()[0]
        with_words = connection.execute(
            "SELECT count(*) FROM messages WHERE id <= ? AND (search_text IS NOT NULL OR search_thinking IS NOT NULL)",
            (top,),
        ).fetchone()[0]
    return indexed, with_words


def append_words(store: Store, loop_id: str, count: int, first: int = 0) -> list[int]:
    return [
        store.messages.append(user(f"alpha word{n} {'beta ' * (n % 5)}"), loop_id=loop_id, turn_index=n)
        for n in range(first, first + count)
    ]


@pytest.fixture
def loop(sqlite_store: Store) -> str:
    return sqlite_store.loops.start(sqlite_store.sessions.create().session_id).loop_id


# --- merging a page ------------------------------------------------------------------


@given(
    st.lists(st.integers(-50, 50), max_size=60),
    st.lists(st.integers(-50, 50), max_size=20),
    st.integers(0, 90),
    st.integers(1, 30),
)
def test_merge_page_is_the_page_of_everything_sorted(main: list[int], tail: list[int], offset: int, limit: int) -> None:
    """Ranks may tie across both lists (ids never do): the page is exactly that of all hits in (rank, id) order."""
    main_hits = sorted((rank, f"m{n}") for n, rank in enumerate(main))
    tail_hits = [(rank, f"t{n}") for n, rank in enumerate(tail)]
    fetched: list[tuple[int, int]] = []

    def fetch(start: int, count: int) -> list[tuple[int, str]]:
        fetched.append((start, count))
        return main_hits[start : start + count]

    page = merge_page(fetch, tail_hits, lambda hit: hit, offset, limit)
    assert page == sorted(main_hits + tail_hits)[offset : offset + limit]
    assert fetched == [(max(0, offset - len(tail)), limit + len(tail))]  # one bounded page of the main index


# --- keeping the index --------------------------------------------------------------


def test_appends_are_indexed_in_batches_and_found_before(sqlite_store: Store, loop: str, db_path: Path) -> None:
    ids = append_words(sqlite_store, loop, TAIL - 1)
    assert indexed_to(db_path) == 0  # all in the tail
    assert len(sqlite_store.messages.search("alpha", limit=1000)) == TAIL - 1
    ids += append_words(sqlite_store, loop, 1, TAIL - 1)
    assert indexed_to(db_path) == ids[-1]  # the TAIL-th append indexed them all, itself included
    assert index_is_exact(db_path) == (TAIL, TAIL)
    ids += append_words(sqlite_store, loop, 5, TAIL)
    assert indexed_to(db_path) == ids[TAIL - 1]
    assert {hit.message_id for hit in sqlite_store.messages.search("alpha", limit=1000)} == set(ids)


def test_an_append_whose_indexing_fails_afterwards_still_succeeds(
    sqlite_store: Store, loop: str, db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A one-message append commits before the batch is indexed: a failure then is the index's, logged, not raised."""
    append_words(sqlite_store, loop, TAIL - 1)

    def fails(db: Any) -> int:
        raise StorageError("disk I/O error")

    monkeypatch.setattr(search_index, "catch_up", fails)
    with caplog.at_level("WARNING", logger="turnstore.repositories.search_index"):
        newest = sqlite_store.messages.append(user("theta committed"), loop_id=loop, turn_index=TAIL)
    assert "could not take the newest messages yet: disk I/O error" in caplog.text
    assert [hit.message_id for hit in sqlite_store.messages.search("theta")] == [newest]
    assert indexed_to(db_path) == 0
    monkeypatch.undo()
    sqlite_store.messages.append(user("iota"), loop_id=loop, turn_index=TAIL + 1)  # the next write indexes them all
    assert indexed_to(db_path) == newest + 1


def test_a_whole_turn_counts_towards_the_batch(sqlite_store: Store, loop: str, db_path: Path) -> None:
    ids = sqlite_store.messages.append_turn(loop, 0, [user(f"gamma {n}") for n in range(TAIL + 3)])
    assert indexed_to(db_path) == ids[-1]
    assert index_is_exact(db_path) == (TAIL + 3, TAIL + 3)


def test_the_tail_stays_short_with_two_writers(db_path: Path) -> None:
    """Each store remembers the indexed_to it last saw; one that is stale indexes early, never late."""
    with Store(db_path) as first, Store(db_path) as second:
        loops = [store.loops.start(store.sessions.create().session_id).loop_id for store in (first, second)]
        for n in range(3 * TAIL):
            writer = (first, second)[n % 3 == 0]
            newest = writer.messages.append(user(f"delta {n}"), loop_id=loops[n % 3 == 0])
            assert newest - indexed_to(db_path) < TAIL
    assert index_is_exact(db_path)[0] == indexed_to(db_path)


def test_pages_run_across_the_index_and_its_tail_without_gaps(sqlite_store: Store, loop: str, db_path: Path) -> None:
    """A read-only store cannot index the tail before it searches: it merges the index's hits with the tail's."""
    ids = append_words(sqlite_store, loop, TAIL + 60)  # 128 indexed, 60 in the tail
    with Store(db_path, read_only=True) as reader:
        everything = [hit.message_id for hit in reader.messages.search("alpha", limit=1000)]
        assert sorted(everything) == ids
        for limit in (1, 7, 50):
            paged = [
                hit.message_id
                for offset in range(0, len(ids), limit)
                for hit in reader.messages.search("alpha", limit=limit, offset=offset)
            ]
            assert paged == everything
        ranks = [hit.rank for hit in reader.messages.search("alpha beta", match="any", limit=1000)]
        assert ranks == sorted(ranks, reverse=True)
    assert indexed_to(db_path) == ids[TAIL - 1]


def test_every_filter_applies_to_the_tail(sqlite_store: Store, loop: str, db_path: Path) -> None:
    other = sqlite_store.loops.start(sqlite_store.sessions.create().session_id).loop_id
    sqlite_store.messages.append(user("epsilon here"), loop_id=loop)
    sqlite_store.messages.append(user("epsilon there"), loop_id=other)
    with Store(db_path, read_only=True) as reader:
        assert [hit.snippet for hit in reader.messages.search("epsilon", loop_id=other)] == ["epsilon there"]
        assert reader.messages.search("epsilon", role="assistant") == []
        assert reader.messages.search("epsilon -there")[0].snippet == "epsilon here"
    assert indexed_to(db_path) == 0


def test_a_search_indexes_the_tail_first_when_it_may(sqlite_store: Store, loop: str, db_path: Path) -> None:
    """Then the newest messages are ranked like the others: the same text, the same rank."""
    append_words(sqlite_store, loop, TAIL)  # indexed
    sqlite_store.messages.append(user("alpha word0 "), loop_id=loop)  # the same words as the first, in the tail
    hits = sqlite_store.messages.search("word0")
    assert indexed_to(db_path) == TAIL + 1
    assert len(hits) == 2 and hits[0].rank == pytest.approx(hits[1].rank)


def test_a_search_never_waits_for_a_writer(sqlite_store: Store, loop: str, db_path: Path) -> None:
    """Another connection holds the write lock: the search matches the tail itself, at once."""
    ids = append_words(sqlite_store, loop, 5)
    holder = sqlite3.connect(db_path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        assert sorted(hit.message_id for hit in sqlite_store.messages.search("alpha")) == ids
        assert time.monotonic() - started < 2  # busy_timeout is 5 s
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert indexed_to(db_path) == 0
    sqlite_store.messages.search("alpha")
    assert indexed_to(db_path) == ids[-1]


def test_a_search_inside_a_transaction_leaves_the_tail(sqlite_store: Store, loop: str, db_path: Path) -> None:
    ids = append_words(sqlite_store, loop, 3)
    with sqlite_store.transaction():
        assert len(sqlite_store.messages.search("alpha")) == 3
    assert indexed_to(db_path) == 0 < ids[-1]


def test_a_rolled_back_write_does_not_stop_the_batches(sqlite_store: Store, loop: str, db_path: Path) -> None:
    """The store remembers the indexed_to a write saw; a rollback undoes it, and the next ids show it."""
    with pytest.raises(RuntimeError), sqlite_store.transaction():
        sqlite_store.messages.append_turn(loop, 0, [user(f"kappa {n}") for n in range(3 * TAIL)])
        raise RuntimeError("undo")
    assert indexed_to(db_path) == 0
    for n in range(TAIL + 5):
        newest = sqlite_store.messages.append(user(f"lambda {n}"), loop_id=loop, turn_index=n)
        assert newest - indexed_to(db_path) < TAIL


def test_indexed_to_comes_down_when_the_newest_messages_go(db_path: Path) -> None:
    """After the newest indexed messages are deleted, new ones are indexed in batches again, not one by one."""
    with Store(db_path) as store:
        loop_id = store.loops.start(store.sessions.create().session_id).loop_id
        kept = append_words(store, loop_id, 3)
        session_id = store.sessions.create().session_id
        append_words(store, store.loops.start(session_id).loop_id, 2 * TAIL)
        assert indexed_to(db_path) == 2 * TAIL
        store.sessions.delete(session_id)
        first = store.messages.append(user("mu"), loop_id=loop_id)
        assert first == len(kept) + 1 == indexed_to(db_path)  # brought down at once, to the newest
        more = append_words(store, loop_id, TAIL, 3)
        assert indexed_to(db_path) == more[-1]  # one batch of TAIL, as appends should
        assert index_is_exact(db_path) == (TAIL + 4, TAIL + 4)
        assert len(store.messages.search("alpha", limit=1000)) == TAIL + len(kept)


def test_a_downgrade_while_a_store_is_open_leaves_search_working(sqlite_store: Store, loop: str, db_path: Path) -> None:
    ids = append_words(sqlite_store, loop, 3)
    engine = create_engine(str(db_path))
    try:
        migrate.downgrade(engine, "0007")  # the tail is indexed; 0007's triggers index every message
    finally:
        engine.dispose()
    # Reads only: the store's appends write the cost columns that 0010 added, which the downgrade removed.
    assert sorted(hit.message_id for hit in sqlite_store.messages.search("alpha")) == ids
    assert [hit.message_id for hit in sqlite_store.messages.search("word1")] == [ids[1]]


def test_a_read_only_store_finds_the_tail_and_writes_nothing(db_path: Path) -> None:
    with Store(db_path) as store:
        loop_id = store.loops.start(store.sessions.create().session_id).loop_id
        ids = append_words(store, loop_id, TAIL + 10)
    before = db_path.read_bytes()
    with Store(db_path, read_only=True) as reader:
        assert sorted(hit.message_id for hit in reader.messages.search("alpha", limit=1000)) == ids
        assert reader.messages.search("word137")[0].message_id == ids[137]
    assert db_path.read_bytes() == before
    assert indexed_to(db_path) == ids[TAIL - 1]


def test_ids_reused_after_the_newest_messages_go_are_indexed_at_once(db_path: Path) -> None:
    """SQLite gives a new row the id after the newest: below indexed_to once the newest indexed ones are deleted."""
    with Store(db_path) as store:
        session_id = store.sessions.create().session_id
        ids = append_words(store, store.loops.start(session_id).loop_id, TAIL + 2)
        store.sessions.delete(session_id)
        assert indexed_to(db_path) == ids[TAIL - 1]
        loop_id = store.loops.start(store.sessions.create().session_id).loop_id
        again = store.messages.append(user("zeta reused"), loop_id=loop_id)
        assert again == ids[0]  # the table was emptied: ids start over, below indexed_to
        assert index_is_exact(db_path) == (1, 1)
        assert [hit.message_id for hit in store.messages.search("zeta")] == [again]
        assert store.messages.search("alpha") == []


def test_deleting_messages_of_the_tail_leaves_the_index_exact(sqlite_store: Store, loop: str, db_path: Path) -> None:
    ids = append_words(sqlite_store, loop, TAIL + 5)
    sqlite_store.messages.delete(ids[TAIL + 2], with_later=True)  # a loop's tail from here: three unindexed messages
    sqlite_store.messages.delete(ids[TAIL - 3], with_later=True)  # and now indexed ones too
    assert index_is_exact(db_path) == (TAIL - 3, TAIL - 3)
    assert sorted(hit.message_id for hit in sqlite_store.messages.search("alpha", limit=1000)) == ids[: TAIL - 3]


def test_imports_leave_nothing_in_the_tail(sqlite_store: Store, loop: str, db_path: Path, tmp_path: Path) -> None:
    append_words(sqlite_store, loop, 3)
    sqlite_store.import_("pi", _pi_file(tmp_path / "big.jsonl", ["imported words"] * 5))
    with sqlite3.connect(db_path) as connection:
        newest = connection.execute("SELECT max(id) FROM messages").fetchone()[0]
    assert indexed_to(db_path) == newest
    assert index_is_exact(db_path)[0] == index_is_exact(db_path)[1] > 3


def test_a_store_without_the_index_is_never_asked_again(postgres: Any) -> None:
    """PostgreSQL keeps its GIN index itself: keep_up never opens a transaction there."""
    with Store(postgres.new_database()) as store:
        loop_id = store.loops.start(store.sessions.create().session_id).loop_id
        store.messages.append(user("eta"), loop_id=loop_id)
        assert store.messages._indexed_to == search_index.NOTHING_TO_INDEX
        assert [hit.snippet for hit in store.messages.search("eta")] == ["eta"]


# --- migration 0008 -------------------------------------------------------------------


def test_0008_downgrades_with_the_tail_indexed_and_upgrades_from_a_full_index(db_path: Path) -> None:
    with Store(db_path) as store:
        append_words(store, store.loops.start(store.sessions.create().session_id).loop_id, 40)
    assert indexed_to(db_path) == 0  # all forty in the tail
    engine = create_engine(str(db_path))
    try:
        migrate.downgrade(engine, "0007")
        with sqlite3.connect(db_path) as connection:
            assert (
                connection.execute("SELECT name FROM sqlite_master WHERE name = 'message_search_state'").fetchall()
                == []
            )
            connection.execute("INSERT INTO message_search (message_search, rank) VALUES ('integrity-check', 1)")
            assert connection.execute("SELECT count(*) FROM message_search_docsize").fetchone()[0] == 40
        migrate.upgrade(engine)  # 0007 kept every message indexed: the state starts at the newest
        assert migrate.check(engine) == []
    finally:
        engine.dispose()
    assert indexed_to(db_path) == 40
    assert index_is_exact(db_path) == (40, 40)
    with Store(db_path, auto_upgrade=False) as store:
        assert len(store.messages.search("alpha", limit=100)) == 40
