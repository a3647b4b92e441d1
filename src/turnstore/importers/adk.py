"""``adk``: the SQLite session databases of Google's Agent Development Kit (ADK).

Read from ADK's own sources (google-adk 2.13.0, ``google/adk/sessions/``):

* ``DatabaseSessionService`` (SQLAlchemy, ``schemas/v1.py``) and
  ``SqliteSessionService`` (``sqlite_session_service.py``): ``sessions
  (app_name, user_id, id, state, create_time, update_time)``, ``events (id,
  app_name, user_id, session_id, invocation_id, timestamp, event_data)``,
  ``app_states``, ``user_states``; ``event_data`` is the ``Event``'s
  ``model_dump(exclude_none=True, mode="json")`` (``thought_signature`` bytes
  as URL-safe base64).
* The older ``DatabaseSessionService`` schema (``schemas/v0.py``): one
  ``events`` column per field (``content``, ``usage_metadata``,
  ``grounding_metadata``... as JSON) and ``actions`` as a **pickle**. Pickles
  run code when loaded, so this importer never unpickles: the ``actions``
  bytes are kept (base64, under ``actions_pickle``) and not read; state
  deltas of such events are not imported as such (the session's final
  ``state`` is).

Each ADK session (``app_name``, ``user_id``, ``id``) becomes one session (its
id is ADK's ``id``, or ``app_name.user_id.id`` where an ``id`` is used by more
than one user or app in the file); ``app_name``, ``user_id``, the session
``state`` and the app and user states go into its metadata. Its events, in
the order ADK appended them (``rowid``), become:

* one loop per ``invocation_id`` (each a ``default`` continuation of the one
  before), with config model = the first ``model_version`` seen, provider
  ``google``; turns derived within each loop (:mod:`.derive`);
* a ``model`` content -> one assistant message: thought parts -> thinking
  (``thought_signature`` -> ``signature``, standard base64 of the same
  bytes), text -> text, ``function_call`` -> tool call (same id, name,
  args); a signature on a text or call part -> its block's
  ``thoughtSignature``; ``usage_metadata`` -> usage; ``model_version`` ->
  model; ``error_code`` -> stop reason ``error``;
* a ``user`` content -> a tool result per ``function_response`` part (same
  id and name; ``response`` -> text and ``details``), and a user message for
  the other parts;
* an event without content (a state change, a transfer...) -> one extension
  message ``adk.event`` holding the whole event;
* non-empty ``actions`` of an event with content (``state_delta``, ``artifact_delta``,
  ``transfer_to_agent``, ``escalate``...) -> an extension message
  ``adk.actions`` after the event's messages.

The other event fields (``id``, ``author``, ``branch``, ``invocation_id``,
``finish_reason``, ``grounding_metadata``...) are kept under the extra key
``adk`` of each message; the event's row is the verbatim source of its first
message. The database is opened read-only; no ADK code is used.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidRecord
from ..models import MAX_INT, Usage
from .base import (
    ImportOptions,
    LoopRow,
    MessageRow,
    RecordError,
    SessionBundle,
    compact,
    guess_mime_type,
    parse_agent_message,
    parse_time,
)
from .derive import TurnDeriver, asked_tools, next_loop
from .reading import loads_json
from .sqlite_source import SQLITE_ERRORS, SqliteSource, open_sqlite, sqlite_accepts, table_names

__all__ = ["AdkImporter", "adk_usage"]

PROVIDER = "google"
UNKNOWN = "unknown"

_V0_JSON = (
    "content",
    "grounding_metadata",
    "custom_metadata",
    "usage_metadata",
    "citation_metadata",
    "input_transcription",
    "output_transcription",
)
"""Columns of the older schema that hold JSON."""

_OWN = {"content", "usage_metadata", "model_version", "actions", "timestamp"}
"""Event fields that map onto canonical fields or messages; the others go under the ``adk`` key."""


@dataclass(frozen=True)
class _Schema:
    """Which ``events`` layout a database has."""

    json_events: bool
    """``event_data`` column (current ``DatabaseSessionService``, ``SqliteSessionService``); else the older one."""
    app_states: bool
    user_states: bool


def _schema(connection: sqlite3.Connection) -> _Schema | None:
    tables = table_names(connection)
    if not {"sessions", "events"} <= tables:
        return None
    columns = {row[1] for row in connection.execute('PRAGMA table_xinfo("events")')}  # generated ones too
    if not {"app_name", "user_id", "session_id", "invocation_id"} <= columns:
        return None
    if "event_data" in columns:
        json_events = True
    elif {"author", "actions", "content"} <= columns:
        json_events = False
    else:
        return None
    return _Schema(json_events, "app_states" in tables, "user_states" in tables)


def _reads(schema: _Schema | None) -> list[str]:
    """The tables the importer reads."""
    if schema is None:
        return []
    states = [table for table in ("app_states", "user_states") if getattr(schema, table)]
    return ["sessions", "events", *states]


class AdkImporter:
    """Reads Google ADK ``DatabaseSessionService`` / ``SqliteSessionService`` SQLite databases."""

    format = "adk"

    def accepts(self, path: Path) -> bool:
        """SQLite files holding ADK's ``sessions`` and ``events`` tables."""
        return sqlite_accepts(path, lambda connection: _schema(connection) is not None)

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """One bundle per ADK session, in the order of their first event (sessions without events last).

        Raises:
            InvalidRecord: not a SQLite database, not ADK's tables, or a read error.
        """
        with open_sqlite(path, _schema, _reads) as (source, schema):
            if schema is None:
                raise InvalidRecord(str(path), "no ADK sessions and events tables (not a Google ADK session database)")
            try:
                keys = _session_keys(source.connection)
                ids = [key[2] for key in keys]
                note = None if schema.json_events else _pickles_note(source.connection, path)
                states: dict[tuple[str, tuple[str, ...]], tuple[dict[str, Any] | None, str | None]] = {}
                for key in keys:
                    name = key[2] if ids.count(key[2]) == 1 else ".".join(key)
                    bundle = _Session(source, schema, key, name, states).bundle()
                    if note is not None:  # once per file, with its first session
                        bundle.notes.append(note)
                        note = None
                    yield bundle
            except SQLITE_ERRORS as error:
                raise InvalidRecord(str(path), f"cannot read the session tables: {error}") from None


def _pickles_note(connection: sqlite3.Connection, path: Path) -> RecordError | None:
    """What the report says of a file of the older schema: its pickled ``actions`` kept, never unpickled."""
    pickled = connection.execute("SELECT count(*) FROM events WHERE typeof(actions) != 'null'").fetchone()[0]
    if not pickled:
        return None
    return RecordError(
        f"{path}: events.actions",
        f"{pickled} event(s) hold their actions as a Python pickle: kept byte for byte (base64, "
        "adk.actions_pickle), never unpickled; the state and artifact deltas inside are not imported",
    )


def _session_keys(connection: sqlite3.Connection) -> list[tuple[str, str, str]]:
    seen: dict[tuple[str, str, str], None] = {}
    queries = (
        "SELECT app_name, user_id, session_id FROM events GROUP BY app_name, user_id, session_id ORDER BY MIN(rowid)",
        "SELECT app_name, user_id, id FROM sessions ORDER BY rowid",
    )
    for query in queries:
        for app, user, session in connection.execute(query):
            seen.setdefault((str(app), str(user), str(session)), None)
    return list(seen)


class _Session:
    """One ADK session read into a bundle."""

    def __init__(
        self,
        source: SqliteSource,
        schema: _Schema,
        key: tuple[str, str, str],
        name: str,
        states: dict[tuple[str, tuple[str, ...]], tuple[dict[str, Any] | None, str | None]],
    ) -> None:
        self.source, self.path, self.schema, self.key = source, source.path, schema, key
        self.states = states
        """The app and user state rows read so far (read once for all the sessions that share them)."""
        self.bundle_ = SessionBundle(session_id=name, origin=f"{source.path}: sessions id={key[2]}")
        self.loops: dict[str, tuple[LoopRow, TurnDeriver]] = {}

    def _first(self, table: str, where: str, params: tuple[str, ...]) -> tuple[dict[str, Any] | None, str | None]:
        """The first row of ``table`` matching ``where`` (every column), and what keeps it from being read."""
        found = self.source.rows(table, self.source.columns(table), f"WHERE {where}", params)
        return next(found, (None, None))

    def bundle(self) -> SessionBundle:
        bundle = self.bundle_
        app, user, _ = self.key
        header, problem = self._first("sessions", "app_name = ? AND user_id = ? AND id = ?", self.key)
        metadata: dict[str, Any] = {"app_name": app, "user_id": user}
        if header is not None and problem is None:
            record = _record(header)
            bundle.source = compact(record)
            bundle.created_at = parse_time(record.get("create_time"))
            bundle.updated_at = parse_time(record.get("update_time"))
            metadata["state"] = _json_or_text(record.get("state"))
        bundle.add_source(bundle.source or "")
        if problem is not None:
            bundle.add_source(problem)
            bundle.errors.append(RecordError(f"{self.path}: sessions id={self.key[2]}", problem))
        for table, where, params, name in (
            ("app_states", "app_name = ?", (app,), "app_state"),
            ("user_states", "app_name = ? AND user_id = ?", (app, user), "user_state"),
        ):
            if getattr(self.schema, table):
                cached = self.states.get((table, params))
                if cached is None:
                    cached = self.states[(table, params)] = self._first(table, where, params)
                row, problem = cached
                if problem is not None:
                    bundle.add_source(problem)
                    bundle.errors.append(RecordError(f"{self.path}: {table} app_name={app}", problem))
                elif row is not None:
                    record = _record(row)
                    bundle.add_source(compact(record))
                    metadata[name] = _json_or_text(record.get("state"))
        bundle.metadata = metadata
        found = self.source.rows(
            "events",
            self.source.columns("events"),
            "WHERE app_name = ? AND user_id = ? AND session_id = ? ORDER BY rowid",
            self.key,
            rowid="adk_rowid",
        )
        for row, problem in found:
            place = f"{self.path}: events rowid={row['adk_rowid']}"
            bundle.records += 1
            if problem is not None:
                bundle.add_source(problem)
                bundle.errors.append(RecordError(place, problem))
                continue
            try:
                source, event = self._event(row, place)
            except InvalidRecord as error:
                bundle.add_source(compact(_record(row)))
                bundle.errors.append(RecordError(error.place, error.reason))
                continue
            bundle.add_source(source)
            try:
                rows = _messages(event, source, place)
            except InvalidRecord as error:
                bundle.errors.append(RecordError(error.place, error.reason))
                continue
            self._place(str(row["invocation_id"]), event, rows)
        return bundle

    def _event(self, row: dict[str, Any], place: str) -> tuple[str, dict[str, Any]]:
        """The event's verbatim source text and the event as a dict (with the row's own columns)."""
        if self.schema.json_events:
            text = row["event_data"]
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            if not isinstance(text, str):
                raise InvalidRecord(place, "event_data must be JSON text")
            try:
                event = loads_json(text)
            except (ValueError, RecursionError):
                raise InvalidRecord(place, "event_data is not valid JSON") from None
            if not isinstance(event, dict):
                raise InvalidRecord(place, "event_data must be a JSON object")
            event.setdefault("id", row["id"])
            event.setdefault("invocation_id", row["invocation_id"])
            if event.get("timestamp") is None:
                event["timestamp"] = row["timestamp"]
            return text, event
        record = _record(row)
        record.pop("adk_rowid", None)
        event = dict(record)
        for column in _V0_JSON:
            value = event.get(column)
            if isinstance(value, str):
                try:
                    event[column] = json.loads(value)
                except (ValueError, RecursionError):
                    raise InvalidRecord(place, f"{column} is not valid JSON") from None
        ids = event.pop("long_running_tool_ids_json", None)
        if isinstance(ids, str):
            try:
                event["long_running_tool_ids"] = json.loads(ids)
            except (ValueError, RecursionError):
                raise InvalidRecord(place, "long_running_tool_ids_json is not valid JSON") from None
        event.pop("actions", None)
        event["actions_pickle"] = record.get("actions")  # base64 of the pickle, never loaded
        event = {key: value for key, value in event.items() if value is not None}
        return compact(record), event

    def _place(self, invocation: str, event: dict[str, Any], rows: list[MessageRow]) -> None:
        bundle = self.bundle_
        entry = self.loops.get(invocation)
        if entry is None:
            loop = next_loop(f"{bundle.session_id}.adk.{len(bundle.loops) + 1}", bundle.loops)
            loop.metadata = {"invocation_id": invocation}
            loop.started_at = parse_time(event.get("timestamp"))
            entry = self.loops[invocation] = (loop, TurnDeriver())
            bundle.loops.append(loop)
        loop, deriver = entry
        ended = parse_time(event.get("timestamp"))
        if ended is not None:
            loop.ended_at = ended
        for row in rows:
            message = row.message
            role = str(message.role)
            _, turn = deriver.step(role, asked_tools(message))  # a loop is an invocation: opens none of its own
            row.loop_id, row.turn_index = loop.loop_id, turn
            model = getattr(message, "model", None)
            if role == "assistant" and loop.config is None and model != UNKNOWN:
                loop.config = {"model": model, "provider": PROVIDER}
            bundle.messages.append(row)


def _record(row: dict[str, Any]) -> dict[str, Any]:
    """A table row as a JSON-ready dict (BLOBs as base64: an ADK pickle is never loaded)."""
    return {
        key: base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value
        for key, value in row.items()
    }


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


# --- events into messages ---------------------------------------------------------------


def _messages(event: dict[str, Any], source: str, place: str) -> list[MessageRow]:
    """The messages of one event: its content's message(s), then its actions."""
    timestamp = _ms(event.get("timestamp"))
    adk = {key: value for key, value in event.items() if key not in _OWN}
    content = event.get("content")
    wires: list[dict[str, Any]] = []
    usage_known = True
    if content is None:
        wires.append({"role": "extension", "kind": "adk.event", "data": event})
    else:
        if not isinstance(content, dict):
            raise InvalidRecord(place, "content must be a JSON object")
        parts = content.get("parts") or []
        if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
            raise InvalidRecord(place, "content.parts must be a list of objects")
        if content.get("role") == "model":
            wires.append(_assistant(event, parts, timestamp, place))
            usage_known = event.get("usage_metadata") is not None
        else:
            others = [part for part in parts if "function_response" not in part]
            for part in parts:
                if "function_response" in part:
                    wires.append(_tool_result(part["function_response"], timestamp, place))
            if others or not wires:
                wires.append({"role": "user", "content": _blocks(others, place), "timestamp": timestamp})
            if event.get("usage_metadata") is not None:  # usage on a non-model event: kept, not counted
                adk["usage_metadata"] = event["usage_metadata"]
    actions = event.get("actions")
    if content is None:
        pass  # the adk.event message holds the whole event, its actions included
    elif isinstance(actions, dict) and any(value not in (None, {}, [], False) for value in actions.values()):
        wires.append(
            {
                "role": "extension",
                "kind": "adk.actions",
                "data": {"event_id": event.get("id"), "author": event.get("author"), "actions": actions},
            }
        )
    elif actions is not None:
        adk["actions"] = actions
    rows = []
    for index, wire in enumerate(wires):
        if wire["role"] != "extension":
            wire["adk"] = adk
        message = parse_agent_message(wire, place)
        rows.append(
            MessageRow(
                message=message,
                loop_id="",
                turn_index=None,
                source=source if index == 0 else None,
                timestamp=timestamp if wire["role"] == "extension" else None,
                usage_known=usage_known if wire["role"] == "assistant" else True,
                place=place,
            )
        )
    return rows


def _assistant(event: dict[str, Any], parts: list[dict[str, Any]], timestamp: int, place: str) -> dict[str, Any]:
    blocks = _blocks(parts, place)
    model = event.get("model_version")
    wire: dict[str, Any] = {
        "role": "assistant",
        "content": blocks,
        "model": model if isinstance(model, str) and model else UNKNOWN,
        "provider": PROVIDER,
        "stopReason": "toolUse" if any(block["type"] == "toolCall" for block in blocks) else "stop",
        "timestamp": timestamp,
    }
    if event.get("error_code") is not None or event.get("error_message") is not None:
        wire["stopReason"] = "error"
        wire["errorMessage"] = str(event.get("error_message") or event.get("error_code"))
    if event.get("usage_metadata") is not None:
        wire["usage"] = adk_usage(event["usage_metadata"], place).model_dump(mode="json")
    return wire


def _blocks(parts: list[dict[str, Any]], place: str) -> list[dict[str, Any]]:
    """Content parts as canonical blocks (see the module docstring)."""
    blocks: list[dict[str, Any]] = []
    for part in parts:
        signature = part.get("thought_signature")
        if signature is not None:
            signature = _signature(signature, place)
        rest = {
            key: value
            for key, value in part.items()
            if key not in ("text", "thought", "thought_signature", "function_call", "inline_data")
        }
        if isinstance(part.get("text"), str) and part.get("thought"):
            block: dict[str, Any] = {"type": "thinking", "thinking": part["text"]}
            if signature is not None:
                block["signature"] = signature
        elif isinstance(part.get("text"), str):
            block = {"type": "text", "text": part["text"]}
            if signature is not None:
                block["thoughtSignature"] = signature
        elif isinstance(part.get("function_call"), dict):
            call = part["function_call"]
            call_id, name = call.get("id"), call.get("name")
            if not isinstance(name, str):
                raise InvalidRecord(place, "function_call needs a string name")
            block = {
                "type": "toolCall",
                "id": call_id if isinstance(call_id, str) else "",
                "name": name,
                "arguments": call.get("args") if call.get("args") is not None else {},
            }
            extra = {key: value for key, value in call.items() if key not in ("id", "name", "args")}
            if extra:
                block["adkCall"] = extra
            if signature is not None:
                block["thoughtSignature"] = signature
        elif isinstance(part.get("inline_data"), dict):
            blob = part["inline_data"]
            mime = blob.get("mime_type") if isinstance(blob.get("mime_type"), str) else ""
            data = _standard_base64(blob.get("data"), place, "inline_data.data")
            kind = "image" if mime.startswith("image/") else "audio" if mime.startswith("audio/") else "file"
            block = {"type": kind, "data": data, "mimeType": mime}
            if blob.get("display_name") is not None:
                block["name" if kind == "file" else "displayName"] = blob["display_name"]
        elif isinstance(part.get("file_data"), dict):
            data = part["file_data"]
            uri = data.get("file_uri")
            block = {
                "type": "file",
                "url": uri if isinstance(uri, str) else None,
                "mimeType": data.get("mime_type") or guess_mime_type(uri or ""),
            }
            block = {key: value for key, value in block.items() if value is not None}
            rest.pop("file_data", None)
        else:
            block = {"type": "text", "text": compact(part), "adkPart": True}
            rest = {}
        if part.get("thought") is not None and block["type"] != "thinking":
            block["thought"] = part["thought"]
        if rest:
            block["adk"] = rest
        blocks.append(block)
    return blocks


def _tool_result(response: Any, timestamp: int, place: str) -> dict[str, Any]:
    if not isinstance(response, dict) or not isinstance(response.get("name"), str):
        raise InvalidRecord(place, "function_response must be an object with a string name")
    result = response.get("response")
    text = result if isinstance(result, str) else compact(result)
    wire: dict[str, Any] = {
        "role": "toolResult",
        "toolCallId": response["id"] if isinstance(response.get("id"), str) else "",
        "toolName": response["name"],
        "content": [{"type": "text", "text": text}],
        "isError": isinstance(result, dict) and "error" in result,
        "timestamp": timestamp,
        "details": result,
    }
    extra = {key: value for key, value in response.items() if key not in ("id", "name", "response")}
    if extra:
        wire["adkResponse"] = extra
    return wire


def _signature(value: Any, place: str) -> str:
    """An ADK ``thought_signature`` (URL-safe base64 in ADK's JSON) as standard base64 of the same bytes."""
    return _standard_base64(value, place, "thought_signature")


def _standard_base64(value: Any, place: str, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidRecord(place, f"{field} must be base64 text")
    try:
        raw = (
            base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
            if ("-" in value or "_" in value)
            else base64.b64decode(value, validate=True)
        )
    except (binascii.Error, ValueError):
        raise InvalidRecord(place, f"{field} is not valid base64") from None
    return base64.b64encode(raw).decode("ascii")


def _ms(value: Any) -> int:
    """An ADK timestamp (epoch seconds as float, or a datetime column's text) as unix milliseconds; 0 if unknown."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0, round(value * 1000)) if math.isfinite(value) and abs(value) < 2**53 else 0
    parsed = parse_time(value)
    return max(0, int(parsed.timestamp() * 1000)) if parsed is not None else 0


def adk_usage(raw: Any, place: str) -> Usage:
    """An ADK / Gemini ``usage_metadata`` as canonical usage.

    Gemini's ``prompt_token_count`` includes ``cached_content_token_count``;
    ``candidates_token_count`` excludes ``thoughts_token_count``:
    ``input = prompt - cached + tool_use_prompt``, ``output = candidates +
    thoughts``, ``reasoning = thoughts``, ``cache_read = cached``,
    ``total_tokens = total_token_count`` (the sum when absent).

    Raises:
        InvalidRecord: not an object, a count that is not a non-negative integer,
            or cached tokens beyond the prompt.
    """
    if not isinstance(raw, dict):
        raise InvalidRecord(place, "usage_metadata must be a JSON object")
    prompt = _tokens(raw, "prompt_token_count", place)
    cached = _tokens(raw, "cached_content_token_count", place)
    tool_prompt = _tokens(raw, "tool_use_prompt_token_count", place)
    candidates = _tokens(raw, "candidates_token_count", place)
    thoughts = _tokens(raw, "thoughts_token_count", place)
    total = _tokens(raw, "total_token_count", place)
    if cached > prompt:
        raise InvalidRecord(place, f"cached_content_token_count ({cached}) exceeds prompt_token_count ({prompt})")
    if prompt + tool_prompt + candidates + thoughts > MAX_INT:
        raise InvalidRecord(place, "token counts do not fit a 64-bit integer")
    return Usage(
        input=prompt - cached + tool_prompt,
        output=candidates + thoughts,
        reasoning=thoughts,
        cache_read=cached,
        cache_write=0,
        total_tokens=total or prompt + tool_prompt + candidates + thoughts,
    )


def _tokens(data: dict[str, Any], key: str, place: str) -> int:
    value = data.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise InvalidRecord(place, f"{key} must be a non-negative 64-bit integer, got {value!r:.40}")
    return value
