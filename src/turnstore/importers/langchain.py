"""``langchain``: the ``message_store`` table of LangChain's ``SQLChatMessageHistory`` (SQLite).

Read from the package's own sources (``langchain_community.chat_message_histories.sql``
and ``langchain_core.messages``): the table is ``message_store (id INTEGER
PRIMARY KEY, session_id TEXT, message TEXT)``; ``message`` is ``json.dumps`` of
``message_to_dict(message)``: ``{"type": ..., "data": {...}}``, ``data`` being
the message's fields (``content``, ``additional_kwargs``, ``response_metadata``,
``name``, ``id``, and per kind ``tool_calls``, ``invalid_tool_calls``,
``usage_metadata``, ``tool_call_id``, ``artifact``, ``status``).

Each ``session_id`` becomes one session, its rows in ``id`` order:

* ``human`` -> user message; ``system`` -> system message;
* ``ai`` -> assistant message: its content, then one tool call per
  ``tool_calls`` entry (same id, name and args); ``usage_metadata`` -> usage;
  ``response_metadata.model_name`` / ``model_provider`` -> model and provider
  (``unknown`` when absent);
* ``tool`` -> tool result of its ``tool_call_id``, named after the call it
  answers; ``status == "error"`` marks an error; ``artifact`` -> ``details``;
* any other type (``chat``, ``function``, ``remove``...) -> an extension
  message of kind ``langchain.TYPE`` holding ``data``.

The other fields (``additional_kwargs``, ``response_metadata``, ``id``,
``name``, ``invalid_tool_calls``...) are kept as extra keys of the message,
and each row's ``message`` text is its verbatim source. The source records no
times and no loops: timestamps are 0 and loops and turns are derived
(:mod:`.derive`). The database is opened read-only; no LangChain code is used.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InvalidRecord
from ..models import MAX_INT, Usage
from .base import ImportOptions, MessageRow, RecordError, SessionBundle, compact, parse_agent_message
from .derive import add_derived, fill_configs
from .reading import loads_json
from .sqlite_source import SQLITE_ERRORS, SqliteSource, open_sqlite, sqlite_accepts, table_names
from .token_usage import usage_from_inclusive_input

__all__ = ["LangChainImporter", "langchain_usage"]

TABLE = "message_store"
UNKNOWN = "unknown"
_DATA_URL = re.compile(r"data:(?P<mime>[^;,]*)(?:;[^;,]*)*;base64,(?P<data>.*)", re.DOTALL | re.IGNORECASE)

_KIND_OF = {"human": "user", "ai": "assistant", "tool": "toolResult", "system": "system"}
"""LangChain message types (chunk types lose their ``Chunk`` suffix) -> canonical roles."""

_CHUNKS = {
    "AIMessageChunk": "ai",
    "HumanMessageChunk": "human",
    "ToolMessageChunk": "tool",
    "SystemMessageChunk": "system",
    "ChatMessageChunk": "chat",
    "FunctionMessageChunk": "function",
}

_MAPPED = {
    "user": {"content", "type"},
    "system": {"content", "type"},
    "assistant": {"content", "type", "tool_calls", "usage_metadata"},
    "toolResult": {"content", "type", "tool_call_id", "status", "artifact"},
}
"""The ``data`` fields each role maps onto canonical fields; every other field is kept as an extra key."""


class LangChainImporter:
    """Reads the ``message_store`` table of LangChain's ``SQLChatMessageHistory`` SQLite databases."""

    format = "langchain"

    def accepts(self, path: Path) -> bool:
        """SQLite files holding a ``message_store`` table."""
        return sqlite_accepts(path, lambda connection: TABLE in table_names(connection))

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """One bundle per ``session_id``, in the order of their first row.

        Raises:
            InvalidRecord: not a SQLite database, no ``message_store`` table, or a read error.
        """
        with open_sqlite(path, table_names, lambda tables: [TABLE]) as (source, tables):
            if TABLE not in tables:
                raise InvalidRecord(str(path), f"no {TABLE} table (not a LangChain SQLChatMessageHistory database)")
            try:
                query = f'SELECT session_id FROM "{TABLE}" GROUP BY session_id ORDER BY MIN(id)'
                session_ids = [row[0] for row in source.connection.execute(query).fetchall()]
                for session_id in session_ids:
                    yield _bundle(source, session_id)
            except SQLITE_ERRORS as error:
                raise InvalidRecord(str(path), f"cannot read the {TABLE} table: {error}") from None


def _bundle(source: SqliteSource, session_id: Any) -> SessionBundle:
    name = str(session_id)
    path = source.path
    bundle = SessionBundle(session_id=name, origin=f"{path}: {TABLE} session_id={name}")
    rows: list[MessageRow] = []
    call_names: dict[str, str] = {}
    for values, problem in source.rows(TABLE, ("id", "message"), "WHERE session_id IS ? ORDER BY id", (session_id,)):
        row_id, text = values["id"], values["message"]
        place = f"{path}: {TABLE} id={row_id}"
        bundle.records += 1
        if problem is not None:
            bundle.add_source(f"{row_id}:{problem}")
            bundle.errors.append(RecordError(place, problem))
            continue
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        bundle.add_source(f"{row_id}:{text}")  # the id, then the row's text as written (no re-encoding)
        try:
            rows.append(_row(text, place, call_names))
        except InvalidRecord as error:
            bundle.errors.append(RecordError(error.place, error.reason))
    add_derived(bundle, f"{name}.langchain", rows)
    fill_configs(bundle, unknown_models=(UNKNOWN,))
    return bundle


def _row(text: Any, place: str, call_names: dict[str, str]) -> MessageRow:
    """One ``message_store`` row as a message row (its loop and turn set later)."""
    if not isinstance(text, str):
        raise InvalidRecord(place, f"message must be text, got {type(text).__name__}")
    try:
        record = loads_json(text)
    except (ValueError, RecursionError):
        raise InvalidRecord(place, "message is not valid JSON") from None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("type"), str)
        or not isinstance(record.get("data"), dict)
    ):
        raise InvalidRecord(place, 'message must be a JSON object {"type": str, "data": object}')
    name: str = record["type"]
    kind = _CHUNKS.get(name, name)
    data: dict[str, Any] = record["data"]
    role = _KIND_OF.get(kind)
    if role is None:
        message = parse_agent_message({"role": "extension", "kind": f"langchain.{kind}", "data": data}, place)
        return MessageRow(message=message, loop_id="", turn_index=None, source=text, timestamp=0, place=place)
    wire: dict[str, Any] = {"role": role, "content": _content(data.get("content"), place), "timestamp": 0}
    usage_known = True
    if role == "assistant":
        calls = data.get("tool_calls") or []
        if not isinstance(calls, list):
            raise InvalidRecord(place, "tool_calls must be a list")
        for call in calls:
            if (
                not isinstance(call, dict)
                or not isinstance(call.get("id"), str)
                or not isinstance(call.get("name"), str)
            ):
                raise InvalidRecord(place, "each tool call needs a string id and name")
            call_names[call["id"]] = call["name"]
            block = {"type": "toolCall", "id": call["id"], "name": call["name"], "arguments": call.get("args", {})}
            extra = {key: value for key, value in call.items() if key not in ("id", "name", "args")}
            wire["content"].append({**block, "langchain": extra} if extra else block)
        metadata = data.get("response_metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        model = metadata.get("model_name") or metadata.get("model")
        provider = metadata.get("model_provider")
        wire["model"] = model if isinstance(model, str) and model else UNKNOWN
        wire["provider"] = provider if isinstance(provider, str) and provider else UNKNOWN
        wire["stopReason"] = "toolUse" if calls else "stop"
        raw_usage = data.get("usage_metadata")
        usage_known = raw_usage is not None
        if usage_known:
            wire["usage"] = langchain_usage(raw_usage, place).model_dump(mode="json")
    elif role == "toolResult":
        call_id = data.get("tool_call_id")
        if not isinstance(call_id, str):
            raise InvalidRecord(place, "a tool message needs a string tool_call_id")
        wire["toolCallId"] = call_id
        wire["toolName"] = call_names.get(call_id) or (data.get("name") if isinstance(data.get("name"), str) else "")
        wire["isError"] = data.get("status") == "error"
        if data.get("artifact") is not None:
            wire["details"] = data["artifact"]
    extras = {key: value for key, value in data.items() if key not in _MAPPED[role] and value not in (None, {}, [])}
    if extras:
        wire["langchain"] = extras
    message = parse_agent_message(wire, place)
    return MessageRow(message=message, loop_id="", turn_index=None, source=text, usage_known=usage_known, place=place)


def _content(content: Any, place: str) -> list[dict[str, Any]]:
    """LangChain content (a string, or a list of strings and typed blocks) as canonical blocks.

    Text blocks become text; ``thinking`` / ``reasoning`` blocks thinking (with
    their ``signature``); ``image_url`` data URLs and base64 ``image`` blocks
    images; any other block is kept whole as a text block of its compact JSON
    with the original under ``langchainBlock``.
    """
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRecord(place, f"content must be a string or a list, got {type(content).__name__}")
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            blocks.append({"type": "text", "text": part})
            continue
        if not isinstance(part, dict):
            raise InvalidRecord(place, f"a content block must be a string or an object, got {type(part).__name__}")
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            blocks.append({**part, "type": "text"})
        elif kind in ("thinking", "reasoning") and isinstance(part.get(kind), str):
            block = {"type": "thinking", "thinking": part[kind]}
            if isinstance(part.get("signature"), str):
                block["signature"] = part["signature"]
            rest = {key: value for key, value in part.items() if key not in ("type", kind, "signature")}
            blocks.append({**rest, **block, **({"langchainType": kind} if kind != "thinking" else {})})
        elif kind == "image_url" and _data_url(part.get("image_url")) is not None:
            mime, data = _data_url(part.get("image_url")) or ("", "")
            blocks.append({"type": "image", "data": data, "mimeType": mime, "langchainType": kind})
        else:
            blocks.append({"type": "text", "text": compact(part), "langchainBlock": True})
    return blocks


def _data_url(value: Any) -> tuple[str, str] | None:
    """``(mime type, base64 data)`` of an ``image_url`` holding a base64 data URL; None for any other."""
    url = value.get("url") if isinstance(value, dict) else value
    found = _DATA_URL.fullmatch(url) if isinstance(url, str) else None
    return (found.group("mime"), found.group("data")) if found else None


def langchain_usage(raw: Any, place: str) -> Usage:
    """LangChain ``usage_metadata`` as canonical usage.

    LangChain's ``input_tokens`` include ``input_token_details.cache_read``
    and ``cache_creation``; canonical ``input`` excludes them.
    ``reasoning = output_token_details.reasoning`` (a part of output);
    ``total_tokens`` as recorded (the sum when 0 or absent).

    Raises:
        InvalidRecord: not an object, a count that is not a non-negative
            integer, or cached tokens beyond the input.
    """
    if not isinstance(raw, dict):
        raise InvalidRecord(place, "usage_metadata must be a JSON object")
    input_details = raw.get("input_token_details") or {}
    output_details = raw.get("output_token_details") or {}
    if not isinstance(input_details, dict) or not isinstance(output_details, dict):
        raise InvalidRecord(place, "usage_metadata token details must be JSON objects")
    input_tokens = _tokens(raw, "input_tokens", place)
    output_tokens = _tokens(raw, "output_tokens", place)
    total = _tokens(raw, "total_tokens", place)
    cached = _tokens(input_details, "cache_read", place)
    written = _tokens(input_details, "cache_creation", place)
    reasoning = _tokens(output_details, "reasoning", place)
    return usage_from_inclusive_input(
        place,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total=total,
        cached=cached,
        written=written,
        reasoning=reasoning,
        names=("cache_read", "cache_creation"),
    )


def _tokens(data: dict[str, Any], key: str, place: str) -> int:
    value = data.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise InvalidRecord(place, f"{key} must be a non-negative 64-bit integer, got {value!r:.40}")
    return value
