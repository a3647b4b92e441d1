"""``store.messages.search``: full-text search over every stored message, on SQLite (FTS5) and PostgreSQL.

The words searched are those :mod:`turnstore.search_text` stored with each
message when it was written (every write path builds its rows with
:func:`~turnstore.repositories.rows.row_params`); the query is parsed by
:mod:`turnstore.search_query` and bound as one parameter. Staged sessions
(still being imported) are left out, like from every read. Snippets are made
here, in Python, from the matched messages' own text: the same on both
backends, and never from SQL text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from itertools import islice
from typing import Any

import sqlalchemy as sa

from .. import search_queries as sq
from ..database import Database
from ..errors import InvalidArgument, SearchUnavailable
from ..media import stored_string
from ..records import SearchHit
from ..schema import SEARCH_TABLE
from ..search_query import Term, parse_query
from ..search_text import MAX_WORD, Pieces, pieces, word_spans
from . import media as out_of_line
from . import search_index
from ._shared import check_whole
from .rows import SEARCH_MESSAGE_COLUMN, search_hit

__all__ = ["MAX_LIMIT", "ROLES", "SNIPPET_CHARS", "fts5_available", "search", "snippet"]

MAX_LIMIT = 1_000
"""Most hits one call returns."""

ROLES = frozenset({"user", "assistant", "toolResult", "extension", "system"})

SNIPPET_CHARS = 160
"""Longest snippet, in characters (an ellipsis at a cut end comes on top)."""

SCAN_CHARS = 64 * 1024
"""Most characters of one text a snippet is looked for in: a longer text (a tool's whole output) is looked
at only around the first place one of the words is found (else at its start), so a search hitting a message
of megabytes costs what one window of it does."""

FOLD_SCAN_CHARS = 256 * 1024
"""Characters of a long text searched word by word, folded as the index folds them (accents, case), for a
match that does not appear as written (``cafe`` in ``café``); beyond them the snippet starts at the text's start."""

_SPACES = re.compile(r"\s+")


def fts5_available(connection: Any) -> bool:
    """Whether the SQLite library of ``connection`` (a SQLAlchemy connection) has FTS5; migration 0007 asks."""
    return bool(connection.scalar(sa.text("SELECT sqlite_compileoption_used('ENABLE_FTS5')")))


def search(
    db: Database,
    query: str,
    filters: Mapping[str, Any],
    *,
    limit: int,
    offset: int,
    thinking: bool,
    match: str,
) -> list[SearchHit]:
    """See :meth:`turnstore.repositories.messages.MessageRepository.search`; ``filters`` holds its filter
    arguments by name (None: not given)."""
    parsed = parse_query(query)
    check_whole("limit", limit, 1, MAX_LIMIT)
    check_whole("offset", offset, 0, 2**31 - 1)
    role, since, until = filters.get("role"), filters.get("since"), filters.get("until")
    if match not in ("all", "any"):
        raise InvalidArgument("match", f'must be "all" (every word) or "any" (at least one), got {match!r}')
    if role is not None and role not in ROLES:
        raise InvalidArgument("role", f"must be one of {', '.join(sorted(ROLES))}, got {role!r}")
    texts = {name: filters.get(name) for name in ("session_id", "loop_id", "tool_name")}
    for name, value in texts.items():
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(name, f"must be a string, not {type(value).__name__}")
        if isinstance(value, str) and "\x00" in value:
            return []  # no stored id or name holds NUL (PostgreSQL cannot even compare one)
    if texts["tool_name"] is not None:
        texts["tool_name"] = stored_string(texts["tool_name"])
    params: dict[str, Any] = {
        **{name: value for name, value in texts.items() if value is not None},
        "limit": limit,
        "offset": offset,
    }
    if role is not None:
        params["role"] = role
    if since is not None:
        params["since"] = _ms("since", since)
    if until is not None:
        params["until"] = _ms("until", until)
    given = tuple(name for name in sq.SEARCH_FILTERS if name in params)
    if db.is_sqlite:
        if not _has_index(db):
            raise SearchUnavailable(
                "full-text search needs SQLite's FTS5, which the SQLite library this Python uses lacks "
                "(or the store was upgraded with one that lacked it); everything else works"
            )
        params["query"] = parsed.to_fts5(thinking=thinking, every=match == "all")
    else:
        params["query"] = parsed.to_tsquery(thinking=thinking, every=match == "all")
    if db.is_sqlite:
        batched = search_index.batched(db)
        if batched:
            search_index.index_if_free(db)
        with db.read():  # the index and its tail from one snapshot
            rows = _sqlite_hits(db, given, params, batched)
    else:
        rows = db.fetchall(sq.search_messages(True, given), params)
    if not rows:
        return []
    # As written (a stored text doubles every "\/" of its own, media.py): the snippet is cut from the text as written.
    messages = out_of_line.parse(db, [row[0] for row in rows], [row[SEARCH_MESSAGE_COLUMN] for row in rows], "omit")
    return [
        search_hit(row, *snippet(pieces(message), parsed.included, thinking=thinking))
        for row, message in zip(rows, messages)
    ]


def snippet(found: Pieces, terms: Sequence[Term], *, thinking: bool = True) -> tuple[str, list[tuple[int, int]]]:
    """The piece of text that holds the most of ``terms``' words, cut to :data:`SNIPPET_CHARS` around the first
    match, on one line; with the ``[start, end)`` ranges of the matched words in it."""
    exact = {word for term in terms for word in (term.words[:-1] if term.prefix else term.words)}
    prefixes = tuple(term.words[-1] for term in terms if term.prefix)
    texts, thought = found
    best: tuple[int, str, list[tuple[int, int]], bool, bool] = (-1, "", [], False, False)
    for text in (*texts, *thought) if thinking else texts:
        region, before, after = _region(text, exact, prefixes)
        line = _SPACES.sub(" ", region).strip()
        spans: list[tuple[int, int]] = []
        seen: set[str] = set()
        for start, end, words in word_spans(line):
            hits = [word for word in words if word in exact or (prefixes and word.startswith(prefixes))]
            if hits:
                spans.append((start, end))
                seen.update(hits)
        if len(seen) > best[0]:
            best = (len(seen), line, spans, before, after)
    _, line, spans, before, after = best
    if len(line) <= SNIPPET_CHARS and not (before or after):
        return line, spans
    start = max(0, spans[0][0] - SNIPPET_CHARS // 4) if spans else 0
    if start:
        space = line.find(" ", start, spans[0][0] if spans else start + 1)
        start = space + 1 if space >= 0 else start
    end = min(len(line), start + SNIPPET_CHARS)
    if end < len(line):
        space = line.rfind(" ", start + 1, end)
        end = space if space > start else end
    prefix = "…" if start or before else ""
    suffix = "…" if end < len(line) or after else ""
    shift = len(prefix) - start
    kept = [(a + shift, b + shift) for a, b in spans if a >= start and b <= end]
    return prefix + line[start:end] + suffix, kept


def _region(text: str, exact: set[str], prefixes: tuple[str, ...]) -> tuple[str, bool, bool]:
    """The part of ``text`` a snippet is looked for in (:data:`SCAN_CHARS` at most), and whether text was cut
    before and after it."""
    if len(text) <= SCAN_CHARS:
        return text, False, False
    found = _first_match(text, exact, prefixes)
    start = max(0, found - SNIPPET_CHARS) if found is not None else 0
    end = start + SCAN_CHARS
    return text[start:end], start > 0, end < len(text)


def _first_match(text: str, exact: set[str], prefixes: tuple[str, ...]) -> int | None:
    """Where one of the words starts in ``text``: as written, as the index splits words (a whole word; a CJK
    character alone; the start of a word longer than ``MAX_WORD``, which the index cuts), found by a regular
    expression at C speed, its first :data:`CANDIDATES` places checked; else as the index folds words, in its
    first :data:`FOLD_SCAN_CHARS`; None when neither finds one."""
    words = sorted({*exact, *prefixes}, key=len, reverse=True)  # the longest first: "needle" before "need"
    if words:
        pattern = re.compile("|".join(map(re.escape, words)), re.IGNORECASE)
        for found in islice(pattern.finditer(text), CANDIDATES):
            start, end = found.span()
            word = found.group().lower()
            alone = len(word) == 1 and not word.isascii()  # a CJK character is a word of its own
            starts = alone or start == 0 or not text[start - 1].isalnum()
            # A prefix, or a word cut to MAX_WORD as the index cuts longer ones, may go on.
            ends = alone or end == len(text) or not text[end].isalnum() or word.startswith(prefixes)
            if starts and (ends or len(word) >= MAX_WORD):
                return start
    for start, _end, folded in word_spans(text[:FOLD_SCAN_CHARS]):
        if any(word in exact or (prefixes and word.startswith(prefixes)) for word in folded):
            return start
    return None


CANDIDATES = 1_000
"""Places where a word appears as written that :func:`_first_match` checks for a whole word before it
looks word by word (``needles`` everywhere, ``needle`` wanted)."""


def _sqlite_hits(db: Database, given: tuple[str, ...], params: dict[str, Any], batched: bool) -> list[tuple[Any, ...]]:
    """The page of hits from the FTS5 index and, when there are messages not in it yet, from its tail."""
    main = sq.search_messages(False, given)
    if not (batched and search_index.tail(db)):
        return db.fetchall(main, params)
    tail = db.fetchall(sq.search_messages(False, given, tail=True), {**params, "limit": -1, "offset": 0})
    return search_index.merge_page(
        lambda offset, limit: db.fetchall(main, {**params, "offset": offset, "limit": limit}),
        tail,
        _best_first,
        params["offset"],
        params["limit"],
    )


def _best_first(row: tuple[Any, ...]) -> tuple[float, int]:
    """A search row's place in the results: best rank first, then the newer message (as the query orders them)."""
    return (-row[-1], -row[0])


def _has_index(db: Database) -> bool:
    """Whether the FTS5 table exists (one probe of ``sqlite_master``, asked on every search: an upgrade may make it)."""
    return db.scalar(sq.search_table_exists(), {"name": SEARCH_TABLE}) is not None


def _ms(name: str, value: object) -> int:
    """A time bound as unix milliseconds (a datetime, naive taken as UTC, or milliseconds)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return int(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63:
        return value
    raise InvalidArgument(name, f"must be a datetime or unix milliseconds, got {value!r}")
