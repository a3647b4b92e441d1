"""Rows to models and models to rows: the one place that knows the column order of every select and insert.

Every read names each column it takes: a row is unpacked into names that
follow the select's column list in :mod:`turnstore.queries` (``STORED_COLUMNS``,
``SESSION_COLUMNS``, ``LOOP_COLUMNS``, ``export_messages``), never indexed by
position. Unpacking is as fast as indexing and fails loudly if a select and
its reader ever disagree on the number of columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from pydantic import ValidationError

from ..errors import InvalidMessage, StorageError
from ..models import (
    AGENT_MESSAGE,
    AGENT_MESSAGES,
    MAX_INT,
    AssistantMessage,
    ExtensionMessage,
    Message,
    Usage,
    unreadable,
)
from ..records import Loop, SearchHit, Session, SessionSummary, StoredMessage
from ..schema import PRICED_COLUMNS, USAGE_COLUMNS
from ..search_text import index_columns
from ._shared import loads

__all__ = [
    "MAX_TURN_INDEX",
    "ExportRow",
    "SessionSources",
    "SEARCH_MESSAGE_COLUMN",
    "SEARCH_PLACE",
    "SourceRow",
    "loop_from_row",
    "parse_parts",
    "parse_rows",
    "row_params",
    "search_hit",
    "session_from_row",
    "stored_message",
    "summary_from_row",
    "tool_calls",
    "usage_params",
]

LoadTime = Callable[[Any], Any]
"""The database's reader of a timestamp column (``Database.load_time``)."""

MAX_TURN_INDEX = 2**31 - 1
"""Largest turn index a row holds (``messages.turn_index`` is a 32-bit integer on PostgreSQL)."""

USAGE_FIELDS = ("input", "output", "reasoning", "cache_read", "cache_write", "total_tokens")
""":class:`~turnstore.models.Usage`'s token fields, in the order of ``schema.USAGE_COLUMNS``."""

_NO_USAGE: dict[str, Any] = dict.fromkeys((*USAGE_COLUMNS, "cost", *PRICED_COLUMNS))


# --- messages -----------------------------------------------------------------------


def parse_rows(ids: Sequence[int], texts: Sequence[str]) -> list[Any]:
    """Validate stored message JSON texts (the messages ``ids``), each once.

    Short texts are validated in one pass over one JSON array (no call per
    message); once they add up to more than :data:`JOIN_LIMIT` characters
    (images, files), each is validated on its own, so the texts are never
    copied into one large string, which costs more than the calls it saves.

    Raises:
        StorageError: a text is not a valid message, named by its id.
    """
    if sum(map(len, texts)) <= JOIN_LIMIT:
        return parse_parts(ids, texts, ["[", ",".join(texts), "]"])
    messages = []
    for message_id, text in zip(ids, texts, strict=True):
        try:
            messages.append(_VALIDATE_JSON(text))
        except ValidationError as error:
            raise unreadable(message_id, error) from None
    return messages


def tool_calls(text: str) -> Iterator[tuple[str, str]]:
    """The ``(id, name)`` of each tool call block in a stored assistant message's JSON."""
    content = loads(text).get("content")
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and block.get("type") == "toolCall":
            yield block["id"], block["name"]


JOIN_LIMIT = 128 * 1024
"""Total characters of stored texts :func:`parse_rows` still validates as one JSON array."""


def parse_parts(ids: Sequence[int], texts: Sequence[str], parts: list[str]) -> list[Any]:
    """Validate a JSON array of messages given as the pieces of its text (joined once, however many).

    The array holds the messages ``ids``, stored as ``texts`` (its pieces may
    differ from them: media put back in).

    Raises:
        StorageError: a message is not valid, named by its id.
    """
    try:
        messages: list[Any] = AGENT_MESSAGES.validate_json("".join(parts))
    except ValidationError as error:
        raise _first_unreadable(ids, texts, error) from None
    return messages


def _first_unreadable(ids: Sequence[int], texts: Sequence[str], error: ValidationError) -> StorageError:
    """The error for an array of messages that did not validate, naming the message at fault.

    The array's own error names a place in the array, or none when its JSON
    does not parse, so each text is validated again on its own (only on this
    path, which a store turnstore alone wrote never takes).
    """
    for message_id, text in zip(ids, texts, strict=True):
        try:
            _VALIDATE_JSON(text)
        except ValidationError as own:
            return unreadable(message_id, own)
    position = error.errors()[0]["loc"][:1]
    if position and isinstance(position[0], int) and position[0] < len(ids):
        return unreadable(ids[position[0]], error, in_array=True)
    return StorageError(
        f"stored messages {ids[0]} to {ids[-1]} cannot be read: {error.errors()[0]['msg']} "
        "(the database was changed outside turnstore)"
    )


def stored_message(row: Iterable[Any]) -> StoredMessage:
    """A :class:`StoredMessage` from a row of ``queries.STORED_COLUMNS`` plus ``source``.

    Built without a second validation pass: the row's columns already have the
    model's types (the schema holds them), and only the message JSON needs
    validating. A whole-session read builds thousands, and the cyclic garbage
    collector walks every container each one allocates, so each is built with
    the fewest: its field dict, and one fields set shared by every stored
    message (pydantic copies it before any change, as in ``model_copy``).
    """
    message_id, session_id, loop_id, turn_index, seq, text, source = row
    try:
        message = _VALIDATE_JSON(text)
    except ValidationError as error:
        raise unreadable(message_id, error) from None
    stored = _NEW(StoredMessage)
    _SET(
        stored,
        "__dict__",
        {
            "message_id": message_id,
            "session_id": session_id,
            "loop_id": loop_id,
            "turn_index": turn_index,
            "seq": seq,
            "message": message,
            "source": source,
        },
    )
    _SET(stored, "__pydantic_fields_set__", _STORED_FIELDS)
    _SET(stored, "__pydantic_extra__", None)
    _SET(stored, "__pydantic_private__", None)
    return stored


def path_stored_message(row: Iterable[Any]) -> StoredMessage:
    """A :class:`StoredMessage` from a row of ``queries.path_messages`` (``PATH_COLUMNS`` then the place)."""
    message_id, loop_id, _role, _kind, text, session_id, turn_index, seq, source = row
    return stored_message((message_id, session_id, loop_id, turn_index, seq, text, source))


_NEW = object.__new__
_SET = object.__setattr__
_VALIDATE_JSON = AGENT_MESSAGE.validate_json
_STORED_FIELDS = set(StoredMessage.model_fields)
"""Every field of a stored message is set: one set, shared (never changed in place: pydantic copies before updating)."""


SEARCH_MESSAGE_COLUMN = 8
"""Where a row of ``search_queries.search_messages`` holds the message JSON (parsed with the others in one pass)."""


SEARCH_PLACE = ("message_id", "session_id", "loop_id", "turn_index", "seq", "role", "kind", "timestamp")
"""The first columns of a ``search_queries.search_messages`` row, by :class:`SearchHit` field name (then message and rank)."""


def search_hit(row: Iterable[Any], snippet: str, highlights: list[tuple[int, int]]) -> SearchHit:
    """A :class:`SearchHit` from a row of ``search_queries.search_messages`` and the snippet made from its message."""
    *place, _message, rank = row
    if len(place) != len(SEARCH_PLACE):
        raise ValueError(f"a search row has {len(place) + 2} columns, not {len(SEARCH_PLACE) + 2}")
    return SearchHit(**dict(zip(SEARCH_PLACE, place)), snippet=snippet, highlights=highlights, rank=float(rank))


class SessionSources(NamedTuple):
    """What an import kept of a session's source: the records as read, and the format they came in."""

    source: str | None
    """The session's verbatim source header (JSON text), or None."""
    source_format: str | None
    """The format of the import the session came from (``phi-core``, ``pi``, ...), or None if it was not imported."""
    loops: dict[str, str | None]
    """Each loop's verbatim source record (JSON text, or None), by loop id, in the session's loop order."""


class SourceRow(NamedTuple):
    """A message of a loop as :meth:`~turnstore.repositories.messages.MessageRepository.sources` gives it."""

    id: int
    turn_index: int | None
    source: str | None
    """The verbatim record the message was made from (JSON text), or None."""


class ExportRow(NamedTuple):
    """A row of ``queries.export_messages``, by column name."""

    id: int
    session_id: str
    loop_id: str
    turn_index: int | None
    seq: int
    message: str
    source: str | None
    role: str
    input_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    total_tokens: int | None
    cost: float | None
    model: str | None
    provider: str | None
    timestamp: int | None

    def usage_tokens(self) -> tuple[int | None, ...]:
        """The typed token columns, in :data:`USAGE_FIELDS` order (None: the row holds no usage)."""
        return (
            self.input_tokens,
            self.output_tokens,
            self.reasoning_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.total_tokens,
        )


def row_params(
    model: Message | ExtensionMessage,
    text: str,
    loop_id: str,
    turn_index: int | None,
    usage: Usage | None = None,
    source: str | None = None,
    priced_as: tuple[str | None, str | None] = (None, None),
    timestamp: int | None = None,
    usage_known: bool = True,
) -> dict[str, Any]:
    """The column values of one message row (the seq is the database's to assign).

    ``priced_as`` is the (model, provider) of ``usage`` on a non-assistant
    message; ``timestamp`` dates a message that has no timestamp of its own
    (extension messages), so usage by day can place it; ``usage_known=False``
    leaves an assistant message's usage columns NULL (its source recorded none).

    Raises:
        InvalidMessage: a value no column of every backend can hold: a turn index
            over :data:`MAX_TURN_INDEX`, a timestamp beyond 64 bits, NUL in the
            kind, model or provider (PostgreSQL text refuses it; SQLite is held
            to the same rule so that both accept the same messages).
    """
    role = str(model.role)
    stop_reason: str | None = None
    model_name: str | None
    provider: str | None
    if isinstance(model, AssistantMessage):
        usage = model.usage if usage_known else None
        model_name, provider = model.model, model.provider
        stop_reason = model.stop_reason.value
    else:
        model_name, provider = priced_as if usage is not None else (None, None)
    kind = model.kind if isinstance(model, ExtensionMessage) else None
    stamp = getattr(model, "timestamp", timestamp)
    if turn_index is not None and not 0 <= turn_index <= MAX_TURN_INDEX:
        raise InvalidMessage(
            f"turn index {turn_index} is over the largest, {MAX_TURN_INDEX}", [("turn_index", "too large")]
        )
    if stamp is not None and not -MAX_INT - 1 <= stamp <= MAX_INT:
        raise InvalidMessage(f"timestamp {stamp} does not fit 64 bits", [("timestamp", "too large")])
    if (
        (isinstance(kind, str) and "\x00" in kind)
        or (isinstance(model_name, str) and "\x00" in model_name)
        or (isinstance(provider, str) and "\x00" in provider)
    ):
        for name, value in (("kind", kind), ("model", model_name), ("provider", provider)):
            if isinstance(value, str) and "\x00" in value:
                raise InvalidMessage(
                    f"{name} holds a NUL character (U+0000), which a database text column cannot store",
                    [(name, "NUL")],
                )
    params = usage_params(usage)
    params["loop_id"] = loop_id
    params["turn_index"] = turn_index
    params["role"] = role
    params["kind"] = kind
    params["message"] = text
    params["model"] = model_name
    params["provider"] = provider
    params["stop_reason"] = stop_reason
    params["timestamp"] = stamp
    params["source"] = source
    params["search_text"], params["search_thinking"] = index_columns(model)
    return params


def usage_params(usage: Usage | None) -> dict[str, Any]:
    """The typed usage columns for ``usage`` (all NULL when there is none)."""
    if usage is None:
        return _NO_USAGE.copy()
    return {
        "input_tokens": usage.input,
        "output_tokens": usage.output,
        "reasoning_tokens": usage.reasoning,
        "cache_read_tokens": usage.cache_read,
        "cache_write_tokens": usage.cache_write,
        "total_tokens": usage.total_tokens,
        "cost": usage.cost,
        # Filled by Pricing.price_row before the row is written.
        "priced_cost": None,
        "cost_source": None,
        "price_version": None,
    }


# --- sessions -----------------------------------------------------------------------


def _session_fields(row: Iterable[Any], load_time: LoadTime) -> dict[str, Any]:
    session_id, agent_id, title, metadata, created_at, updated_at = row
    return {
        "session_id": session_id,
        "agent_id": agent_id,
        "title": title,
        "metadata": loads(metadata),
        "created_at": load_time(created_at),
        "updated_at": load_time(updated_at),
    }


def session_from_row(row: Iterable[Any], load_time: LoadTime) -> Session:
    """A :class:`Session` from a row of ``queries.SESSION_COLUMNS``."""
    return Session(**_session_fields(row, load_time))


def summary_from_row(row: Iterable[Any], load_time: LoadTime) -> SessionSummary:
    """A :class:`SessionSummary` from a row of ``queries.SESSION_COLUMNS`` plus its loop and message counts."""
    *columns, loops, messages = row
    return SessionSummary(**_session_fields(columns, load_time), loops=int(loops), messages=int(messages))


# --- loops --------------------------------------------------------------------------


def loop_from_row(row: Iterable[Any], load_time: LoadTime) -> Loop:
    """A :class:`Loop` from a row of ``queries.LOOP_COLUMNS``."""
    (
        loop_id,
        session_id,
        parent_loop_id,
        continuation_kind,
        fork_after,
        keep_from,
        config,
        config_id,
        status,
        started_at,
        ended_at,
        spawn_loop_id,
        spawn_tool_call_id,
        input_tokens,
        output_tokens,
        reasoning_tokens,
        cache_read_tokens,
        cache_write_tokens,
        total_tokens,
        cost,
        metadata,
        requests,
    ) = row
    reported = None
    if input_tokens is not None:
        tokens = (input_tokens, output_tokens, reasoning_tokens, cache_read_tokens, cache_write_tokens, total_tokens)
        reported = Usage(**{field: int(value or 0) for field, value in zip(USAGE_FIELDS, tokens)}, cost=cost)
    return Loop(
        loop_id=loop_id,
        session_id=session_id,
        parent_loop_id=parent_loop_id,
        continuation_kind=continuation_kind,
        fork_after=fork_after,
        keep_from=keep_from,
        config=loads(config),
        config_id=config_id,
        status=status,
        started_at=load_time(started_at),
        ended_at=load_time(ended_at),
        spawn_loop_id=spawn_loop_id,
        spawn_tool_call_id=spawn_tool_call_id,
        reported_usage=reported,
        reported_requests=requests,
        metadata=loads(metadata),
    )
