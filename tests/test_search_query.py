"""The search query parser (turnstore.search_query) and the words it shares with the index (turnstore.search_text).

Property tests: any string either parses into terms of plain folded words, which
render into FTS5 and ``tsquery`` text made of those words and the syntax only,
or raises :class:`~turnstore.InvalidQuery`; and, against a real SQLite store,
any string either searches or raises that error, never a database error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import user
from helpers import SONNET
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnstore import InvalidQuery, Store
from turnstore.search_query import MAX_TERMS, SearchQuery, Term, parse_query
from turnstore.search_text import MAX_WORD, index_columns, word_spans, words

QUERY_TEXT = st.lists(
    st.one_of(
        st.sampled_from([*"\"'-*(){}:;^+ \t\n\\%_.,/", "AND", "OR", "NOT", "NEAR", " "]),
        st.text(max_size=8),
    ),
    max_size=20,
).map("".join)


def plain(word: str) -> bool:
    return bool(word) and len(word) <= MAX_WORD and all(char.isalnum() for char in word) and word == word.casefold()


@given(QUERY_TEXT)
@settings(max_examples=400)
def test_any_string_parses_into_plain_words_or_is_refused(text: str) -> None:
    try:
        query = parse_query(text)
    except InvalidQuery as error:
        assert error.argument == "query" and "\n" not in str(error)
        return
    assert query.included and len(query.terms) <= MAX_TERMS
    for term in query.terms:
        assert term.words and all(plain(word) for word in term.words)
    for rendered in (query.to_fts5(), query.to_fts5(thinking=False), query.to_tsquery(), query.to_tsquery(every=False)):
        # Nothing of the user's text but its words: the rest is the renderer's own syntax.
        known = {word for term in query.terms for word in term.words} | {"AND", "OR", "NOT", "search", "text", "A"}
        assert set(re.findall(r"[^\W_]+", rendered)) <= known, (text, rendered)
        assert set(re.sub(r"[^\W_]+", "", rendered)) <= set(" ()\"*:!&|<->'_"), (text, rendered)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path: Path = tmp_path_factory.mktemp("search") / "store.db"
    with Store(path) as store:
        loop_id = store.loops.start(store.sessions.create().session_id, config=SONNET).loop_id
        store.messages.append(user('AND OR NOT near quoted "text" with (parens) and a-b'), loop_id=loop_id)
        yield store


@given(QUERY_TEXT)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_string_searches_or_raises_the_typed_error(searched: Store, text: str) -> None:
    for match in ("all", "any"):
        try:
            hits = searched.messages.search(text, match=match)
        except InvalidQuery:
            continue
        assert isinstance(hits, list)


def test_the_syntax() -> None:
    query = parse_query('Deploy "Read_File now"* -staging -"two words" café*  数据')
    assert query == SearchQuery(
        (
            Term(("deploy",)),
            Term(("read", "file", "now"), prefix=True),
            Term(("staging",), excluded=True),
            Term(("two", "words"), excluded=True),
            Term(("cafe",), prefix=True),
            Term(("数", "据")),
        )
    )
    assert query.to_fts5() == (
        '("deploy" AND "read file now" * AND "cafe" * AND "数 据") NOT "staging" NOT "two words"'
    )
    assert query.to_tsquery(thinking=False) == (
        "('deploy':A & ('read':A <-> 'file':A <-> 'now':*A) & 'cafe':*A & ('数':A <-> '据':A))"
        " & !'staging':A & !('two':A <-> 'words':A)"
    )
    assert parse_query("a b").to_fts5(every=False, thinking=False) == 'search_text : (("a" OR "b"))'


def test_a_lone_dash_or_star_is_not_a_word() -> None:
    assert parse_query("- deploy *").terms == (Term(("deploy",)),)


def test_words_are_folded_and_cut() -> None:
    assert words("ÉCOLE Straße ﬁle ①") == ["ecole", "strasse", "file", "1"]
    assert words("x" * 100) == ["x" * MAX_WORD]
    assert words("é" * 100) == ["e" * MAX_WORD]
    assert [span[2] for span in word_spans("naïve, 東京")] == [["naive"], ["東"], ["京"]]


def test_what_is_indexed_of_a_message() -> None:
    text, thinking = index_columns(user("Hello, World!"))
    assert (text, thinking) == ("hello world", None)
    assert index_columns(user("...")) == (None, None)
