"""Search queries: parsed by turnstore into terms, then written as FTS5 MATCH text or a PostgreSQL ``tsquery``.

The syntax, the same on both backends::

    deploy failed          both words, anywhere in the message (any order; or either, with match="any")
    "connection refused"   the exact phrase (words next to each other, in order)
    -staging               leave out messages with this word (or "-a phrase")
    read_fi*               a word starting with ``read_fi`` (a phrase's last word too: "tool ca"*)

Words are split and folded by :mod:`turnstore.search_text`, exactly as the
indexed text was, so ``read_file`` is the phrase ``read file`` and ``数据库``
the phrase of its three characters. What the user typed never becomes SQL:
the parsed terms hold only folded letters and digits, which the renderers
quote, and the rendered text is bound as a parameter. A query that cannot be
searched for (unbalanced quotes, nothing but exclusions, too long) raises
:class:`~turnstore.errors.InvalidQuery`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidQuery
from .search_text import words

__all__ = ["MAX_QUERY_CHARS", "MAX_TERMS", "SearchQuery", "Term", "parse_query"]

MAX_QUERY_CHARS = 1_000
"""Longest query text accepted."""

MAX_TERMS = 32
"""Most words and phrases in one query."""


@dataclass(frozen=True)
class Term:
    """One word or phrase of a query: its folded words, whether the last is a prefix, whether it is excluded."""

    words: tuple[str, ...]
    prefix: bool = False
    excluded: bool = False


@dataclass(frozen=True)
class SearchQuery:
    """A parsed query: at least one term to find, any number to leave out."""

    terms: tuple[Term, ...]

    @property
    def included(self) -> tuple[Term, ...]:
        return tuple(term for term in self.terms if not term.excluded)

    @property
    def excluded(self) -> tuple[Term, ...]:
        return tuple(term for term in self.terms if term.excluded)

    def to_fts5(self, *, thinking: bool = True, every: bool = True) -> str:
        """FTS5 MATCH text; ``thinking=False`` matches the ``search_text`` column only; ``every=False``: any term."""
        joiner = " AND " if every else " OR "
        expression = "(" + joiner.join(_fts5_term(term) for term in self.included) + ")"
        for term in self.excluded:
            expression += " NOT " + _fts5_term(term)
        return expression if thinking else f"search_text : ({expression})"

    def to_tsquery(self, *, thinking: bool = True, every: bool = True) -> str:
        """PostgreSQL ``tsquery`` text (cast, not parsed); ``thinking=False`` matches weight ``A`` (the text) only;
        ``every=False``: any term."""
        weight = "" if thinking else "A"
        joiner = " & " if every else " | "
        parts = ["(" + joiner.join(_ts_term(term, weight) for term in self.included) + ")"]
        parts.extend("!" + _ts_term(term, weight) for term in self.excluded)
        return " & ".join(parts)


def parse_query(text: object) -> SearchQuery:
    """Parse a query in the syntax above.

    Raises:
        InvalidQuery: not a string, too long, an unbalanced quote, too many
            terms, or no word to search for.
    """
    if not isinstance(text, str):
        raise InvalidQuery(f"a search query must be a string, not {type(text).__name__}")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidQuery(f"the query is {len(text)} characters long, over the limit of {MAX_QUERY_CHARS}")
    terms: list[Term] = []
    at = 0
    end = len(text)
    while at < end:
        char = text[at]
        if char.isspace():
            at += 1
            continue
        excluded = char == "-" and at + 1 < end and not text[at + 1].isspace()
        if excluded:
            at += 1
        if text[at] == '"':
            close = text.find('"', at + 1)
            if close < 0:
                raise InvalidQuery(f'unbalanced quote at character {at + 1}: close the phrase with "')
            body = text[at + 1 : close]
            at = close + 1
            prefix = at < end and text[at] == "*"
            while at < end and text[at] == "*":
                at += 1
        else:
            start = at
            while at < end and not text[at].isspace() and text[at] != '"':
                at += 1
            body = text[start:at]
            prefix = body.endswith("*")
        found = tuple(words(body))
        if found:
            terms.append(Term(found, prefix, excluded))
    if len(terms) > MAX_TERMS:
        raise InvalidQuery(f"the query has {len(terms)} words and phrases, over the limit of {MAX_TERMS}")
    if not any(not term.excluded for term in terms):
        raise InvalidQuery("the query has no word to search for (only punctuation, or only -exclusions)")
    return SearchQuery(tuple(terms))


def _fts5_term(term: Term) -> str:
    phrase = '"' + " ".join(term.words).replace('"', '""') + '"'
    return phrase + " *" if term.prefix else phrase


def _ts_term(term: Term, weight: str) -> str:
    lexemes = [_ts_lexeme(word, weight, False) for word in term.words]
    if term.prefix:
        lexemes[-1] = _ts_lexeme(term.words[-1], weight, True)
    return lexemes[0] if len(lexemes) == 1 else "(" + " <-> ".join(lexemes) + ")"


def _ts_lexeme(word: str, weight: str, prefix: bool) -> str:
    quoted = "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"
    marks = ("*" if prefix else "") + weight
    return f"{quoted}:{marks}" if marks else quoted
