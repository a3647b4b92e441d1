"""Both engines search turnstore's words, for every Unicode character: neither folds nor splits on its own.

``turnstore.search_text`` splits and folds a message's words; SQLite's FTS5
and PostgreSQL's ``tsvector`` must index exactly those words, and a query's
words exactly as parsed. A PostgreSQL that ran its own parser and lowercasing
over them disagreed with Python's Unicode tables: Cherokee (which Python
case-folds to capitals, PostgreSQL lowercases) and hundreds of characters of
category ``No`` that Python counts as digits (which PostgreSQL's parser drops)
were never found there.

The first test walks every code point through each engine's own index
definition in one round; the second stores the characters where PostgreSQL's
own folding differs from Python's (asked of PostgreSQL itself, in one round),
and a few named ones, and searches them through the API on every backend.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import sqlalchemy as sa
from backends import postgres_reachable, postgres_server_url
from factories import assistant, user

from turnstore import Store
from turnstore import search_queries as sq
from turnstore.schema import SEARCH_VECTOR_SQL
from turnstore.search_query import parse_query
from turnstore.search_text import words

NAMED = [
    "\u13e3",  # CHEROKEE LETTER TSA: Python folds it to itself, PostgreSQL's lower() to U+ABB3
    "\uabb3",  # CHEROKEE SMALL LETTER TSA: Python folds it to U+13E3
    "\uab83",  # CHEROKEE SMALL LETTER LA: Python folds it to U+13B3
    "\u13e3\u13b3\u13a9",  # a Cherokee word (tsa la gi) in capitals
    "\uabb3\uab83\uab79",  # and in small letters
    "\u00b2",  # SUPERSCRIPT TWO (No): 2
    "\u00bd",  # VULGAR FRACTION ONE HALF (No): 1 2
    "\u2460",  # CIRCLED DIGIT ONE (No): 1
    "\u09f4",  # BENGALI CURRENCY NUMERATOR ONE (No, no decomposition): PostgreSQL's parser drops it
    "\U0001d360",  # COUNTING ROD UNIT DIGIT ONE (No)
    "\u0130stanbul",  # Turkish dotted capital I
    "\u0131\u015f\u0131k",  # Turkish dotless i
    "Stra\u00dfe",  # German sharp s: strasse
    "STRA\u1e9eE",  # capital sharp s
    "\u03bb\u03cc\u03b3\u03bf\u03c2",  # Greek final sigma
    "\u039b\u038c\u0393\u039f\u03a3",  # and in capitals
    "cafe\u0301",  # a combining accent
    "\u1e69",  # s with two marks, precomposed
    "\u6570\u636e\u5e93",  # CJK ideographs
    "\u3400",  # CJK extension A
    "\U00020000",  # CJK extension B
    "\ud55c\uad6d",  # Hangul syllables
    "\u30ab\u30bf\u30ab\u30ca",  # katakana
    "\uff21\uff22\uff23",  # fullwidth ABC: abc
]


def all_code_points() -> Iterator[str]:
    """Every Unicode scalar value (surrogates cannot be stored)."""
    for point in range(0x110000):
        if not 0xD800 <= point < 0xE000:
            yield chr(point)


@cache
def characters_with_words() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every character that has words, and its words joined as ``search_text`` stores them."""
    chars: list[str] = []
    stored: list[str] = []
    for char in all_code_points():
        found = words(char)
        if found:
            chars.append(char)
            stored.append(" ".join(found))
    return tuple(chars), tuple(stored)


@cache
def folded_apart_by_postgresql() -> tuple[str, ...]:
    """The characters whose words PostgreSQL's own parser and lowercasing (``to_tsvector('simple')``) do not
    keep as they are, on the test server (its locale decides), asked in one statement; empty without a server."""
    if postgres_reachable() is not None:
        return ()
    chars, stored = characters_with_words()
    url = sa.engine.make_url(postgres_server_url()).set(drivername="postgresql+psycopg")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sa.text(
                    "SELECT tsvector_to_array(to_tsvector('simple', t.s)) "
                    "FROM unnest(CAST(:stored AS text[])) WITH ORDINALITY AS t(s, i) ORDER BY t.i"
                ),
                {"stored": list(stored)},
            ).scalars()
            return tuple(char for char, text, lexemes in zip(chars, stored, rows) if set(lexemes) != set(text.split()))
    finally:
        engine.dispose()


def test_each_engine_indexes_every_character_exactly_as_python_folds_it(sync_store: Store) -> None:
    """Every code point with words: the engine's index holds exactly turnstore's words for it in both columns
    (none split, dropped or folded again), and on PostgreSQL the parsed query for the character finds it (FTS5
    parses a query's quoted words with the index's own tokenizer)."""
    chars, stored = characters_with_words()
    unfound: list[str] = []
    with sync_store.engine.begin() as connection:
        if sync_store.dialect == "postgresql":
            vector = SEARCH_VECTOR_SQL.replace("search_text", "t.s").replace("search_thinking", "t.s")
            queries = [parse_query(char) for char in chars]
            rows = connection.execute(
                sa.text(
                    "SELECT tsvector_to_array(v.v), v.v @@ CAST(t.q AS tsquery), v.v @@ CAST(t.a AS tsquery) "
                    "FROM unnest(CAST(:stored AS text[]), CAST(:query AS text[]), CAST(:text_only AS text[])) "
                    f"WITH ORDINALITY AS t(s, q, a, i), LATERAL (SELECT {vector} AS v) AS v ORDER BY t.i"
                ),
                {
                    "stored": list(stored),
                    "query": [query.to_tsquery() for query in queries],
                    "text_only": [query.to_tsquery(thinking=False) for query in queries],
                },
            ).all()
            indexed = {index: sorted(lexemes) for index, (lexemes, _, _) in enumerate(rows, 1)}
            expected = {index: sorted(set(text.split(" "))) for index, text in enumerate(stored, 1)}
            unfound = [char for char, (_, found, text_found) in zip(chars, rows) if not (found and text_found)]
        else:
            connection.execute(sq.create_search_tail())  # the words go through the tail's FTS5 table...
            tokenizers = {
                re.sub(r".*(tokenize\s*=\s*'[^']*').*", r"\1", sql, flags=re.S)
                for (sql,) in connection.exec_driver_sql(
                    "SELECT sql FROM sqlite_master WHERE name = 'message_search' "
                    "UNION ALL SELECT sql FROM sqlite_temp_master WHERE name = 'message_search_tail'"
                )
            }
            assert tokenizers == {"tokenize='ascii'"}  # ...tokenized as the store's own
            connection.execute(sq.clear_search_tail())
            connection.execute(
                sa.text(
                    "INSERT INTO temp.message_search_tail (rowid, search_text, search_thinking) VALUES (:i, :s, :s)"
                ),
                [{"i": index, "s": text} for index, text in enumerate(stored, 1)],
            )
            connection.exec_driver_sql(
                "CREATE VIRTUAL TABLE temp.search_terms USING fts5vocab(temp, message_search_tail, instance)"
            )
            terms: dict[int, dict[str, list[str]]] = {}
            for index, column, term in connection.exec_driver_sql(
                'SELECT doc, col, term FROM temp.search_terms ORDER BY doc, col, "offset"'
            ):
                terms.setdefault(index, {}).setdefault(column, []).append(term)
            indexed = {index: sorted(found.items()) for index, found in terms.items()}
            expected = {
                index: [("search_text", text.split(" ")), ("search_thinking", text.split(" "))]
                for index, text in enumerate(stored, 1)
            }
    differing = [chars[index - 1] for index in expected if indexed.get(index) != expected[index]]
    assert len(chars) > 130_000
    assert (len(differing), differing[:20], unfound[:20]) == (0, [], [])


@pytest.fixture
def stored_chars(store: Any, loop_id: str) -> dict[str, int]:
    """One message for each character PostgreSQL's own folding treats apart and each named text: its id."""
    texts = list(dict.fromkeys([*folded_apart_by_postgresql(), *NAMED]))
    ids = store.messages.append_turn(loop_id, 0, [user(text) for text in texts])
    return dict(zip(texts, ids))


def python_finds(message_words: list[str], phrase: tuple[str, ...]) -> bool:
    """Whether the phrase's words come one after the other in a message's words (what both engines must do)."""
    width = len(phrase)
    return any(tuple(message_words[at : at + width]) == phrase for at in range(len(message_words) - width + 1))


def test_the_same_query_finds_the_same_messages_on_every_backend(store: Any, stored_chars: dict[str, int]) -> None:
    """Each character (or named text), as a query: exactly the messages whose words hold its words, as Python
    folds them; 32 terms a query (match="any"), so all of them in a few searches per backend."""
    texts = list(stored_chars)
    folded = {text: words(text) for text in texts}
    assert len(texts) >= len(NAMED)
    mismatched = []
    for start in range(0, len(texts), 32):
        batch = texts[start : start + 32]
        terms = [parse_query(text).terms[0].words for text in batch]
        expected = {stored_chars[text] for text in texts if any(python_finds(folded[text], term) for term in terms)}
        hits = store.messages.search(" ".join(batch), match="any", limit=1000)
        found = {hit.message_id for hit in hits}
        mismatched.extend(text for text in texts if stored_chars[text] in found ^ expected)
    assert mismatched == []
    assert {hit.snippet for hit in store.messages.search("\uabb3")} == {"\u13e3", "\uabb3"}
    assert {hit.snippet for hit in store.messages.search("\uabb3\uab83\uab79")} == {
        "\uabb3\uab83\uab79",
        "\u13e3\u13b3\u13a9",
    }
    assert [hit.snippet for hit in store.messages.search("\u09f4")] == ["\u09f4"]
    assert {hit.snippet for hit in store.messages.search("strasse")} == {"Stra\u00dfe", "STRA\u1e9eE"}
    assert {hit.snippet for hit in store.messages.search("\u03bb\u03bf\u03b3\u03bf\u03c3")} == {
        "\u03bb\u03cc\u03b3\u03bf\u03c2",
        "\u039b\u038c\u0393\u039f\u03a3",
    }


def test_a_phrase_does_not_run_from_the_text_into_the_thinking(store: Any, loop_id: str) -> None:
    """Each column is matched apart on both backends: the text's last word and the thinking's first are not a
    phrase (PostgreSQL's tsvector joins the two, numbering the thinking on from the text)."""
    store.messages.append(assistant("the answer alpha", thinking="beta reasoning"), loop_id=loop_id, turn_index=0)
    assert store.messages.search('"alpha beta"') == []
    assert [hit.snippet for hit in store.messages.search('"answer alpha"')] == ["the answer alpha"]
    assert [hit.snippet for hit in store.messages.search('"beta reasoning"')] == ["beta reasoning"]
    assert len(store.messages.search("alpha beta")) == 1
