"""What full-text search indexes of a message, as words: the one tokenizer both backends see.

A message's searchable text is what a person would look for: user and
assistant text, thinking (kept apart, so a search can leave it out), tool-call
names and arguments, tool-result text and tool names, error messages, file
names, and the strings of an extension message's data. Never base64 image,
audio or file data, and never thinking signatures.

turnstore splits that text into words itself, at write time, and stores them
folded and joined by single spaces (``messages.search_text`` and
``messages.search_thinking``); the query parser (:mod:`turnstore.search_query`)
splits query words the same way. A word is a run of letters and digits:

* folded: compatibility-decomposed (NFKD), combining marks dropped, case-folded,
  so ``Café``, ``CAFE`` and ``café`` are the same word;
* CJK ideographs, kana and Hangul syllables are words of one character each,
  so any substring of a CJK text is found as a phrase of its characters;
* at most :data:`MAX_WORD` characters (longer ones are cut: a search for the
  whole word still finds it).

Each column holds at most :data:`MAX_INDEXED_CHARS` characters of words; the
rest of a very long message is not indexed. This module alone decides what a
word is and how it folds: neither engine splits or folds the stored words
again. SQLite's FTS5 ``ascii`` tokenizer splits them at the spaces and folds
only ASCII capitals, which are never left; PostgreSQL takes them as they are
through ``turnstore_search_words`` (:data:`turnstore.schema.SEARCH_WORDS_FUNCTION`),
not through a text search parser and dictionary, whose Unicode rules follow the
database's locale. So the two backends find the same messages.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence
from typing import Any

from .models import (
    AssistantMessage,
    ExtensionMessage,
    FileContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
)

__all__ = [
    "MAX_INDEXED_CHARS",
    "MAX_WORD",
    "Pieces",
    "index_columns",
    "pieces",
    "word_spans",
    "words",
]

MAX_WORD = 64
"""Longest word stored or searched for, in characters (longer ones are cut to this)."""

MAX_INDEXED_CHARS = 50_000
"""Characters of words indexed per message and column; PostgreSQL refuses a ``tsvector`` over 1 MB."""

_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")
_ASCII_SEPARATORS = str.maketrans({chr(point): " " for point in range(128) if not chr(point).isalnum()})
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_RUN = re.compile(rf"[^\W_][^\W_{_MARKS}]*(?:[{_MARKS}]+[^\W_]*)*")
"""A run of letters and digits in original text, combining marks included (``cafe\u0301`` is one run)."""
_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f])")
"""Characters that are words on their own: kana, CJK ideographs (with extensions), Hangul syllables."""

_CJK_PART = re.compile(_CJK.pattern + r"|(?:(?!" + _CJK.pattern + r").)+")

_BASE64 = re.compile(r"[A-Za-z0-9+/=_-]{200,}")
"""A string that is one long run of base64 characters: data, not text, in an extension message or a tool argument."""

_MAX_DEPTH = 64

Pieces = tuple[list[str], list[str]]
"""A message's searchable text as written: (text pieces, thinking pieces)."""


def fold_run(run: str) -> list[str]:
    """The words of one run of letters and digits (see the module's rules)."""
    if run.isascii():
        return [run.lower()[:MAX_WORD]]
    decomposed = unicodedata.normalize("NFKD", run)
    plain = "".join(char for char in decomposed if not unicodedata.combining(char)).casefold()
    found: list[str] = []
    for word in _WORD.findall(plain):
        if _CJK.search(word):
            found.extend(part[:MAX_WORD] for part in _CJK.split(word) if part)
        else:
            found.append(word[:MAX_WORD])
    return found


def words(text: str) -> list[str]:
    """The folded words of ``text``, in order."""
    if text.isascii():
        # str.translate and split: twice as fast as a regular expression's findall (appends pay for this).
        plain = text.lower().translate(_ASCII_SEPARATORS).split()
        if plain and max(map(len, plain)) > MAX_WORD:
            return [word[:MAX_WORD] for word in plain]
        return plain
    found: list[str] = []
    for run in _RUN.findall(text):
        found.extend(fold_run(run))
    return found


def word_spans(text: str) -> Iterator[tuple[int, int, list[str]]]:
    """Each run of letters and digits of ``text``: its start, end and folded words (for highlighting)."""
    if text.isascii():
        for match in _ASCII_WORD.finditer(text):
            yield match.start(), match.end(), [match.group().lower()[:MAX_WORD]]
        return
    for match in _RUN.finditer(text):
        run = match.group()
        if not _CJK.search(run):
            yield match.start(), match.end(), fold_run(run)
            continue
        for part in _CJK_PART.finditer(run):  # a CJK character is a word of its own: highlighted alone
            folded = fold_run(part.group())
            if folded:
                yield match.start() + part.start(), match.start() + part.end(), folded


def pieces(message: Message | ExtensionMessage) -> Pieces:
    """The searchable text of a message as written: its text pieces and its thinking pieces."""
    text: list[str] = []
    thinking: list[str] = []
    if isinstance(message, ExtensionMessage):
        _strings(message.data, text)
        return text, thinking
    if isinstance(message, ToolResultMessage):
        text.append(message.tool_name)
    content: list[Any] = getattr(message, "content", [])
    for block in content:
        kind = type(block)
        if kind is TextContent:
            text.append(block.text)
        elif kind is ThinkingContent:
            thinking.append(block.thinking)
        elif kind is ToolCallContent:
            text.append(block.name)
            _strings(block.arguments, text)
        elif kind is FileContent and block.name:
            text.append(block.name)
    if isinstance(message, ToolResultMessage) and message.narration:
        text.append(message.narration)
    elif isinstance(message, AssistantMessage) and message.error_message:
        text.append(message.error_message)
    return text, thinking


def index_columns(message: Message | ExtensionMessage) -> tuple[str | None, str | None]:
    """The values of ``messages.search_text`` and ``messages.search_thinking`` for a message (None: no words)."""
    text, thinking = pieces(message)
    return _joined(text), _joined(thinking)


def _joined(texts: Sequence[str]) -> str | None:
    if not texts:
        return None
    joined = " ".join(words(texts[0] if len(texts) == 1 else "\n".join(texts)))
    if len(joined) > MAX_INDEXED_CHARS:
        cut = joined.rfind(" ", 0, MAX_INDEXED_CHARS + 1)
        joined = joined[: cut if cut > 0 else MAX_INDEXED_CHARS]
    return joined or None


def _strings(value: Any, into: list[str]) -> None:
    """Every string, key and number in a JSON value, depth first (long base64 runs left out)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if len(item) < 200 or not _BASE64.fullmatch(item):
                into.append(item)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, (int, float)):
            into.append(str(item))
        elif depth < _MAX_DEPTH and isinstance(item, dict):
            for key, inner in reversed(list(item.items())):
                stack.append((inner, depth + 1))
                stack.append((key, depth + 1))
        elif depth < _MAX_DEPTH and isinstance(item, list):
            stack.extend((inner, depth + 1) for inner in reversed(item))
