"""``appam``: the SQLite ``session_history`` table of appam (``data/sessions.db``), and its web server's ``sessions`` table.

Each row is one whole session: its ``messages`` column holds the session's
``Vec<ChatMessage>`` as one JSON array. Every row becomes one session with
ONE loop (``{id}.appam.1``); turns are derived (:mod:`.derive`), numbered on
across the user prompts of the session, because appam has no loops or turns.

appam records no usage per message, only the session totals in the ``usage``
column (``AggregatedUsage``). They become the loop's reported usage, and the
assistant messages are written with unknown usage (NULL columns), so the
session totals are exactly the column (docs/design.md §7, "Usage that counts"):

* ``input = total_input_tokens + total_compaction_input_tokens``
* ``output = total_output_tokens + total_compaction_output_tokens``
* ``cache_read = total_cache_read_tokens``, ``cache_write = total_cache_creation_tokens``
* ``reasoning = total_reasoning_tokens`` (a part of ``output``)
* ``total_tokens = input + output + cache_read + cache_write``; ``cost = total_cost_usd``

What each ChatMessage becomes is in :mod:`turnstore.importers.appam_messages`.
The mapping of every field is in ``docs/importers/appam.md``. The database is
opened read-only; nothing in it is changed.
"""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidRecord
from ..models import MAX_INT, Usage
from .appam_messages import wire_message
from .base import (
    ImportOptions,
    LoopRow,
    MessageRow,
    RecordError,
    SessionBundle,
    compact,
    parse_agent_message,
    parse_time,
)
from .derive import TurnDeriver
from .reading import json_problem
from .sqlite_source import SQLITE_ERRORS, SqliteSource, open_sqlite, sqlite_accepts, table_names

__all__ = ["AppamImporter", "infer_provider"]


@dataclass(frozen=True)
class _Table:
    """One appam table that holds whole sessions, one per row."""

    name: str
    started: str
    """Column with the session's start time."""
    required: frozenset[str]
    """Columns that identify the table as appam's."""


HISTORY = _Table(
    "session_history",
    "started_at",
    frozenset({"id", "agent_name", "model", "messages", "started_at", "updated_at"}),
)
"""``src/agent/history.rs`` (``SessionHistory``)."""

WEB = _Table("sessions", "created_at", frozenset({"id", "agent_name", "model", "messages", "created_at", "updated_at"}))
"""``src/web/session.rs`` (the web server's ``SessionStore``): no usage, no end time."""

_SESSION_KEYS = ("agent_name", "model", "ended_at", "turn_count", "tool_call_count", "metadata")
"""Row columns kept in the session's metadata (when the table has them)."""

_USAGE_COUNTS = (
    "total_input_tokens",
    "total_output_tokens",
    "total_cache_creation_tokens",
    "total_cache_read_tokens",
    "total_reasoning_tokens",
    "total_compaction_input_tokens",
    "total_compaction_output_tokens",
    "request_count",
)


def infer_provider(model: str | None) -> str:
    """The provider a model name belongs to: appam rows record the model, never the provider.

    ``vendor/model`` (OpenRouter style) -> ``vendor``; ``claude*`` or a name
    holding ``anthropic`` (Bedrock ids) -> ``anthropic``; ``gpt*``,
    ``chatgpt*``, ``o1``/``o3``/``o4``… -> ``openai``; ``gemini*`` -> ``google``;
    anything else -> ``unknown``.
    """
    name = (model or "").strip().lower()
    vendor, slash, rest = name.partition("/")
    if slash and vendor and rest:
        return vendor
    if name.startswith("claude") or "anthropic" in name:
        return "anthropic"
    if name.startswith(("gpt", "chatgpt")) or re.match(r"o[134](\b|-)", name):
        return "openai"
    if name.startswith("gemini"):
        return "google"
    return "unknown"


class AppamImporter:
    """Reads appam's SQLite session databases."""

    format = "appam"

    def accepts(self, path: Path) -> bool:
        """SQLite files holding appam's ``session_history`` table (or its web ``sessions`` table)."""
        return sqlite_accepts(path, lambda connection: bool(_tables(connection)))

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """One bundle per row of each appam table in the database, in insertion order.

        Raises:
            InvalidRecord: not a SQLite database, no appam table, a row without
                an id (reported after the other rows are read), or a read error.
        """
        with open_sqlite(path, _tables, lambda tables: [table.name for table in tables]) as (source, tables):
            if not tables:
                raise InvalidRecord(str(path), "no appam session_history (or web sessions) table")
            for table in tables:
                yield from _table_bundles(source, table)


# --- reading the database -------------------------------------------------------------


def _tables(connection: sqlite3.Connection) -> list[_Table]:
    """The appam tables of a database: those whose columns include appam's."""
    names = table_names(connection)
    found = []
    for table in (HISTORY, WEB):
        if table.name in names:
            columns = {row[1] for row in connection.execute(f'PRAGMA table_xinfo("{table.name}")')}
            if table.required <= columns:
                found.append(table)
    return found


def _table_bundles(source: SqliteSource, table: _Table) -> Iterator[SessionBundle]:
    path = source.path
    nameless: list[int] = []
    try:
        rows = source.rows(table.name, source.columns(table.name), "ORDER BY rowid", rowid=_ROWID)
        for row, problem in rows:
            record = {key: value for key, value in row.items() if key != _ROWID}
            if not isinstance(record.get("id"), str) or not record["id"]:
                nameless.append(row[_ROWID])
                continue
            if problem is not None:
                yield _refused(path, table, record["id"], problem)
                continue
            yield _session(path, table, record)
    except SQLITE_ERRORS as error:
        raise InvalidRecord(f"{path}: {table.name}", f"cannot read the table: {error}") from None
    if nameless:
        raise InvalidRecord(
            f"{path}: {table.name} rowid={nameless[0]}",
            f"{len(nameless)} row(s) without an id cannot be imported",
        )


# --- one row: one session ---------------------------------------------------------------

_ROWID = "appam rowid"
"""The key a row's ``rowid`` is read under (no column of appam's has a space)."""


def _refused(path: Path, table: _Table, session_id: str, problem: str) -> SessionBundle:
    """The session of a row holding a value over the limit: nothing in it is read; it is an invalid record."""
    place = f"{path}: {table.name} id={session_id}"
    bundle = SessionBundle(session_id=session_id, origin=place, records=1)
    bundle.add_source(problem)
    bundle.errors.append(RecordError(place, problem))
    return bundle


def _session(path: Path, table: _Table, record: dict[str, Any]) -> SessionBundle:
    """The session, loop and messages of one row; malformed parts go into ``bundle.errors``."""
    session_id: str = record["id"]
    place = f"{path}: {table.name} id={session_id}"
    header = {key: value for key, value in record.items() if key != "messages"}
    model = record.get("model")
    if not isinstance(model, str):
        model = ""
    provider = infer_provider(model)
    bundle = SessionBundle(
        session_id=session_id,
        origin=place,
        agent_id=record.get("agent_name") if isinstance(record.get("agent_name"), str) else None,
        metadata=_session_metadata(record),
        created_at=parse_time(record.get(table.started)),
        updated_at=parse_time(record.get("updated_at")),
        source=compact(_jsonable(header)),
        records=1,
    )
    bundle.add_source(bundle.source or "")
    ended = parse_time(record.get("ended_at"))
    usage_text = _text(record.get("usage"))
    loop = LoopRow(
        loop_id=f"{session_id}.appam.1",
        config={"model": model, "provider": provider},
        status="completed" if ended else "running",
        started_at=bundle.created_at,
        ended_at=ended,
        source=usage_text,
    )
    _add_usage(bundle, loop, usage_text, f"{place} usage")
    bundle.loops.append(loop)
    elements = _elements(bundle, record.get("messages"), place)
    _add_messages(bundle, loop.loop_id, elements, model, provider, place)
    return bundle


def _session_metadata(record: dict[str, Any]) -> dict[str, Any]:
    metadata = {key: record[key] for key in _SESSION_KEYS if key in record}
    if isinstance(metadata.get("metadata"), (str, bytes)):
        try:
            metadata["metadata"] = json.loads(metadata["metadata"])
        except (ValueError, RecursionError):
            metadata["metadata"] = _text(metadata["metadata"])
    return _jsonable(metadata)


def _add_usage(bundle: SessionBundle, loop: LoopRow, text: str | None, place: str) -> None:
    """The ``usage`` column (``AggregatedUsage``) as the loop's reported usage, and its request count."""
    if text is None:
        return
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        bundle.errors.append(RecordError(place, "usage is not valid JSON"))
        return
    if data is None:
        return
    if not isinstance(data, dict):
        bundle.errors.append(RecordError(place, f"usage is a JSON {type(data).__name__}, not an object"))
        return
    counts = {key: data.get(key, 0) for key in _USAGE_COUNTS}
    bad = [key for key, value in counts.items() if isinstance(value, bool) or not isinstance(value, int) or value < 0]
    cost = data.get("total_cost_usd")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, (int, float)) or not 0 <= cost < float("inf")
    ):
        bad.append("total_cost_usd")
    if bad:
        bundle.errors.append(RecordError(place, f"usage has invalid {', '.join(bad)}"))
        return
    input = counts["total_input_tokens"] + counts["total_compaction_input_tokens"]
    output = counts["total_output_tokens"] + counts["total_compaction_output_tokens"]
    cache_read, cache_write = counts["total_cache_read_tokens"], counts["total_cache_creation_tokens"]
    try:
        loop.reported_usage = Usage(
            input=input,
            output=output,
            reasoning=counts["total_reasoning_tokens"],
            cache_read=cache_read,
            cache_write=cache_write,
            total_tokens=input + output + cache_read + cache_write,
            cost=None if cost is None else float(cost),
        )
    except ValueError:
        bundle.errors.append(RecordError(place, "usage counts are too large for a 64-bit column"))
        return
    loop.metadata = {"request_count": counts["request_count"]}
    if counts["request_count"] <= MAX_INT:  # else unknown: no column holds it (it stays in the metadata)
        loop.reported_requests = counts["request_count"]


def _elements(bundle: SessionBundle, value: Any, place: str) -> list[Any]:
    """The ``messages`` column as a list; bad JSON or a non-array is one error for the whole column."""
    text = _text(value)
    if text is None:
        bundle.errors.append(RecordError(place, "messages is missing or not UTF-8 text"))
        return []
    try:
        elements = json.loads(text)
    except (ValueError, RecursionError) as error:
        bundle.add_source(text)
        bundle.errors.append(RecordError(place, f"messages: {json_problem(error)}"))
        return []
    if not isinstance(elements, list):
        bundle.add_source(text)
        bundle.errors.append(RecordError(place, f"messages is a JSON {type(elements).__name__}, not an array"))
        return []
    return elements


def _add_messages(
    bundle: SessionBundle, loop_id: str, elements: list[Any], model: str, provider: str, place: str
) -> None:
    """Convert every element; place the good ones in turns of the session's one loop."""
    converted: list[tuple[Any, Any]] = []
    tool_names: dict[str, str] = {}
    for number, element in enumerate(elements, start=1):
        bundle.records += 1
        source = compact(element)
        bundle.add_source(source)
        where = f"{place} message {number}"
        try:
            wire = wire_message(element, model, provider, tool_names, where)
            message = parse_agent_message(wire, where)
        except InvalidRecord as error:
            bundle.errors.append(RecordError(error.place, error.reason))
            continue
        converted.append((element, message))
        bundle.messages.append(MessageRow(message, loop_id, None, source=source, usage_known=False, place=where))
    for row, turn in zip(bundle.messages, _turns(converted)):
        row.turn_index = turn


def _turns(converted: list[tuple[dict[str, Any], Any]]) -> list[int | None]:
    """Turn index per message, by the derivation rules, numbered on across derived loops (one loop here).

    appam writes an assistant's visible text as its own message just before
    the tool-call message of the same model call (when the provider gave no
    raw blocks); such a pair is one model call, so one turn.
    """
    deriver = TurnDeriver()
    turns: list[int | None] = []
    offset, last = 0, -1
    for index, (element, message) in enumerate(converted):
        if index and _continues_call(converted[index - 1][0], element):
            turns.append(turns[-1])
            continue
        role = str(message.role)
        tools = role == "assistant" and (
            any(block.type == "toolCall" for block in message.content)
            or (index + 1 < len(converted) and _continues_call(element, converted[index + 1][0]))
        )
        new_loop, turn = deriver.step(role, tools)
        if new_loop:
            offset = last + 1
        if turn is not None:
            turn += offset
            last = max(last, turn)
        turns.append(turn)
    return turns


def _continues_call(previous: dict[str, Any], element: dict[str, Any]) -> bool:
    """``element`` is the tool-call half of the model call whose text ``previous`` holds."""
    return (
        previous.get("role") == "assistant"
        and element.get("role") == "assistant"
        and bool(previous.get("content"))
        and not previous.get("tool_calls")
        and previous.get("raw_content_blocks") is None
        and bool(element.get("tool_calls"))
        and element.get("content") is None
        and element.get("raw_content_blocks") is None
    )


def _text(value: Any) -> str | None:
    """A column value as text: TEXT as is, a BLOB decoded as UTF-8; anything else (or bad UTF-8) is None."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    """Column values ready for JSON: a BLOB becomes its UTF-8 text, or base64 when it is not UTF-8."""
    ready = {}
    for key, value in data.items():
        if isinstance(value, bytes):
            text = _text(value)
            value = text if text is not None else base64.b64encode(value).decode("ascii")
        ready[key] = value
    return ready
