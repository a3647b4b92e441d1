"""``openai-agents``: the SQLite session databases of the OpenAI Agents SDK.

Read from the SDK's own sources (openai-agents 0.24.0):

* ``SQLiteSession`` (``agents/memory/sqlite_session.py``): ``agent_sessions
  (session_id, created_at, updated_at)`` and ``agent_messages (id, session_id,
  message_data, created_at)``; ``message_data`` is ``json.dumps`` of one
  Responses-API input item.
* ``AdvancedSQLiteSession`` (``agents/extensions/memory/advanced_sqlite_session.py``)
  adds ``message_structure`` (which rows make up each branch, in
  ``sequence_number`` order, with their ``user_turn_number``) and
  ``turn_usage`` (one row of token counts per branch and user turn).

Each session becomes one bundle:

* Items become messages: user / system / developer messages, one assistant
  message per model response (its reasoning, text and function-call items
  grouped; a response ends at the next input item), a tool result per
  ``function_call_output``; every other item type becomes an extension
  message of kind = the item type. The row's ``message_data`` is the source,
  verbatim (a grouped response keeps its rows' texts one per line).
* Loops: one per user turn (``user_turn_number``) where the structure table
  says; derived (:mod:`.derive`) for plain ``SQLiteSession`` data. Turns are
  derived within each loop.
* A branch other than ``main`` shares the rows it copied from the branch it
  was made from; they are stored once, and the branch's own rows become
  ``branch`` loops forking after the last shared message.
* ``turn_usage`` rows become the reported usage of the loop of their turn;
  items carry no usage, so assistant messages are written with unknown usage.

The mapping of every item type and usage field is in
``docs/importers/openai-agents.md``. The database is opened read-only.
"""

from __future__ import annotations

import json
import mimetypes
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..errors import InvalidRecord
from ..models import AssistantMessage, ExtensionMessage, Message, Usage
from .base import (
    ImportOptions,
    LoopRow,
    MessageRow,
    RecordError,
    SessionBundle,
    compact,
    ms_timestamp,
    parse_agent_message,
    parse_time,
)
from .derive import TurnDeriver

__all__ = ["OpenAIAgentsImporter"]

_T = TypeVar("_T")

SQLITE_HEADER = b"SQLite format 3\x00"
SESSIONS = "agent_sessions"
MESSAGES = "agent_messages"
STRUCTURE = "message_structure"
TURN_USAGE = "turn_usage"
MAIN = "main"

MODEL = "unknown"
PROVIDER = "openai"
"""Items record no model; the SDK's ``Agent.model`` is not stored in the session."""

CALL_TYPES = frozenset(
    {"function_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call", "custom_tool_call"}
)
"""Model output items that ask the app to run something: a response holding one stops with ``toolUse``."""

INPUT_TYPES = frozenset(
    {
        "function_call_output",
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "custom_tool_call_output",
        "mcp_approval_response",
        "item_reference",
        "compaction",
    }
)
"""Typed items the app sends to the model; like a message from the user, each ends the model response before it.
Every other typed item (and every ``assistant`` message) is model output."""

ROLES = frozenset({"user", "system", "developer", "assistant"})

_DATA_URL = re.compile(r"data:(?P<mime>[^;,]*)(?:;[^,]*)?;base64,(?P<data>.*)", re.DOTALL)


class OpenAIAgentsImporter:
    """Reads the SQLite databases of the OpenAI Agents SDK's ``SQLiteSession`` and ``AdvancedSQLiteSession``."""

    format = "openai-agents"

    def accepts(self, path: Path) -> bool:
        """SQLite files holding the SDK's ``agent_sessions`` and ``agent_messages`` tables."""
        try:
            with path.open("rb") as file:
                if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                    return False
            connection = _connect(path)
        except (OSError, InvalidRecord):
            return False
        try:
            return {SESSIONS, MESSAGES} <= _tables(connection)
        except sqlite3.Error:
            return False
        finally:
            connection.close()

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """One bundle per session of the database, in the order the SDK created them.

        Raises:
            InvalidRecord: not a SQLite database, no ``agent_sessions`` /
                ``agent_messages`` tables, or a read error.
        """
        connection = _connect(path)
        try:
            try:
                tables = _tables(connection)
            except sqlite3.Error as error:
                raise InvalidRecord(str(path), f"not a readable SQLite database: {error}") from None
            if not {SESSIONS, MESSAGES} <= tables:
                raise InvalidRecord(
                    str(path), f"no {SESSIONS} and {MESSAGES} tables (not an OpenAI Agents SDK session database)"
                )
            source = _Source(connection, path, STRUCTURE in tables, TURN_USAGE in tables)
            try:
                for session_id in source.session_ids():
                    yield source.bundle(session_id)
            except sqlite3.Error as error:
                raise InvalidRecord(str(path), f"cannot read the session tables: {error}") from None
        finally:
            connection.close()


# --- reading the database -------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    """Open the database read-only (an ``?mode=ro`` URI), never creating or changing it."""
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise InvalidRecord(str(path), f"cannot open as SQLite: {error}") from None
    connection.row_factory = sqlite3.Row
    return connection


def _tables(connection: sqlite3.Connection) -> set[str]:
    return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@dataclass
class _Row:
    """One ``agent_messages`` row: its verbatim ``message_data`` and the item parsed from it."""

    id: int
    text: str
    item: dict[str, Any]
    place: str
    timestamp: int
    """Unix ms of the row's ``created_at`` (when the SDK stored the item; 0 when missing)."""


@dataclass
class _Line:
    """One branch of a session: its rows in order, each with its ``user_turn_number`` (None when unknown)."""

    branch_id: str
    entries: list[tuple[_Row, int | None]]


class _Source:
    """The tables of one SDK database, read one session at a time."""

    def __init__(self, connection: sqlite3.Connection, path: Path, structured: bool, usage: bool) -> None:
        self.connection = connection
        self.path = path
        self.structured = structured
        self.usage = usage

    def session_ids(self) -> list[str]:
        """Sessions in ``agent_sessions`` order, then any that only the other tables name."""
        queries = [f'SELECT session_id FROM "{SESSIONS}" ORDER BY rowid',
                   f'SELECT session_id FROM "{MESSAGES}" GROUP BY session_id ORDER BY MIN(id)']
        if self.usage:
            queries.append(f'SELECT session_id FROM "{TURN_USAGE}" GROUP BY session_id ORDER BY MIN(id)')
        seen: dict[str, None] = {}
        for query in queries:
            for (session_id,) in self.connection.execute(query):
                if session_id is not None:
                    seen.setdefault(str(session_id), None)
        return list(seen)

    def bundle(self, session_id: str) -> SessionBundle:
        """The session's loops and messages; malformed rows go into ``bundle.errors``."""
        header = self.connection.execute(f'SELECT * FROM "{SESSIONS}" WHERE session_id = ?', (session_id,)).fetchone()
        record = _record(header) if header is not None else None
        bundle = SessionBundle(
            session_id=session_id,
            origin=f"{self.path}: {SESSIONS} session_id={session_id}",
            created_at=parse_time(record.get("created_at")) if record else None,
            updated_at=parse_time(record.get("updated_at")) if record else None,
            source=compact(record) if record else None,
        )
        bundle.add_source(bundle.source or "")
        rows = self._rows(bundle)
        structure = self._structure(session_id, bundle) if self.structured else []
        lines = _lines(rows, structure)
        if structure:
            bundle.metadata = {"branches": list(dict.fromkeys(branch for _, branch, _ in structure))}
        builder = _Builder(bundle, _tool_names(rows), turns_known=bool(structure))
        builder.build(lines)
        if self.usage:
            builder.attach_usage(self._usage(session_id), self.path)
        return bundle

    def _rows(self, bundle: SessionBundle) -> list[_Row]:
        rows = []
        query = f'SELECT id, message_data, created_at FROM "{MESSAGES}" WHERE session_id = ? ORDER BY id'
        for row_id, data, created in self.connection.execute(query, (bundle.session_id,)):
            place = f"{self.path}: {MESSAGES} id={row_id}"
            bundle.records += 1
            text = _plain(data)
            bundle.add_source(compact([row_id, text, created]))
            try:
                rows.append(_Row(row_id, text, _item(text, place), place, ms_timestamp(created)))
            except InvalidRecord as error:
                bundle.errors.append(RecordError(error.place, error.reason))
        return rows

    def _structure(self, session_id: str, bundle: SessionBundle) -> list[tuple[int, str, int | None]]:
        """``(message_id, branch_id, user_turn_number)`` of the session, branches in creation order."""
        query = (
            f'SELECT message_id, branch_id, user_turn_number, sequence_number, id FROM "{STRUCTURE}" '
            "WHERE session_id = ? ORDER BY id"
        )
        rows = [tuple(_plain(value) for value in row) for row in self.connection.execute(query, (session_id,))]
        for row in rows:
            bundle.add_source(compact(list(row)))
        rows.sort(key=lambda row: (row[3] if isinstance(row[3], int) else 0, row[4]))  # sequence order
        return [(row[0], str(row[1]), row[2] if isinstance(row[2], int) else None) for row in rows]

    def _usage(self, session_id: str) -> list[dict[str, Any]]:
        query = f'SELECT * FROM "{TURN_USAGE}" WHERE session_id = ? ORDER BY id'
        return [_record(row) for row in self.connection.execute(query, (session_id,))]


def _record(row: sqlite3.Row) -> dict[str, Any]:
    """A table row as a JSON-ready dict (BLOBs decoded as UTF-8)."""
    return {key: _plain(value) for key, value in zip(row.keys(), row)}


def _plain(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _item(text: Any, place: str) -> dict[str, Any]:
    """The Responses-API item of one row.

    Raises:
        InvalidRecord: not JSON, not an object, or an item with neither a
            ``type`` nor a known ``role``.
    """
    if not isinstance(text, str):
        raise InvalidRecord(place, "message_data is not text")
    try:
        item = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:
        raise InvalidRecord(place, f"invalid JSON: {error}") from None
    if not isinstance(item, dict):
        raise InvalidRecord(place, f"expected a JSON object, got {type(item).__name__}")
    kind, role = item.get("type"), item.get("role")
    if kind in (None, "message"):
        if role is None:
            raise InvalidRecord(place, "item has neither a type nor a role")
        if role not in ROLES:
            raise InvalidRecord(place, f"unknown message role {role!r}")
    elif not isinstance(kind, str):
        raise InvalidRecord(place, f"item type must be a string, got {type(kind).__name__}")
    return item


def _lines(rows: list[_Row], structure: list[tuple[int, str, int | None]]) -> list[_Line]:
    """The session's branches: ``main`` first, then the others in the order they were made.

    Without structure rows (plain ``SQLiteSession``) the rows in id order are
    the one line. Rows no structure row names (written by a plain session
    into an advanced database) join ``main`` at their id's position.
    """
    if not structure:
        return [_Line(MAIN, [(row, None) for row in rows])]
    by_id = {row.id: row for row in rows}
    branches: dict[str, list[tuple[_Row, int | None]]] = {MAIN: []}
    named: set[int] = set()
    for message_id, branch_id, turn in structure:
        named.add(message_id)
        row = by_id.get(message_id)
        if row is not None:  # a structure row of a malformed or vanished message row has nothing to place
            branches.setdefault(branch_id, []).append((row, turn))
    orphans = [row for row in rows if row.id not in named]
    main: list[tuple[_Row, int | None]] = []
    taken = 0
    for row, turn in branches[MAIN]:
        while taken < len(orphans) and orphans[taken].id < row.id:
            main.append((orphans[taken], None))
            taken += 1
        main.append((row, turn))
    branches[MAIN] = main + [(row, None) for row in orphans[taken:]]
    return [_Line(branch_id, entries) for branch_id, entries in branches.items() if entries or branch_id == MAIN]


def _tool_names(rows: Iterable[_Row]) -> dict[str, str]:
    """``call_id -> name`` of the session's function calls, for naming their outputs."""
    names = {}
    for row in rows:
        item = row.item
        call_id, name = item.get("call_id"), item.get("name")
        if item.get("type") == "function_call" and isinstance(call_id, str) and isinstance(name, str):
            names[call_id] = name
    return names


# --- lines into loops ---------------------------------------------------------------------


@dataclass
class _Piece:
    """One message to be: from one row, or from the rows of one model response."""

    message: Message | ExtensionMessage
    rows: list[_Row]
    nodes: list[int]
    """Trie nodes (row positions in the session's branch tree) the message holds."""
    turn_number: int | None
    asks_tools: bool = False
    in_response: bool = False
    """An extension item of the model response whose assistant message comes just before it."""


@dataclass
class _OpenLoop:
    """The loop a line is filling and how its turns are counted."""

    row: LoopRow
    turn_number: int | None
    deriver: TurnDeriver = field(default_factory=TurnDeriver)


class _Builder:
    """Turns the branches of one session into loops and messages; rows shared by branches are stored once."""

    def __init__(self, bundle: SessionBundle, tool_names: dict[str, str], *, turns_known: bool) -> None:
        self.bundle = bundle
        self.tool_names = tool_names
        self.turns_known = turns_known
        self.message_of: dict[int, int] = {}
        """Trie node -> index in ``bundle.messages`` of the message holding it."""
        self.turn_loops: dict[tuple[str, int], str] = {}
        """``(branch_id, user_turn_number)`` -> the loop holding that turn's first message."""

    def build(self, lines: list[_Line]) -> None:
        """Place every line: its rows after the part shared with an earlier line become new loops."""
        paths, shared = _trie(lines)
        forks = {path[count - 1] for path, count in zip(paths, shared) if 0 < count < len(path)}
        for line, path, count in zip(lines, paths, shared):
            self._place(line, path, count, forks)
            for (_, turn), node in zip(line.entries, path):
                if turn is not None and node in self.message_of:
                    loop_id = self.bundle.messages[self.message_of[node]].loop_id
                    self.turn_loops.setdefault((line.branch_id, turn), loop_id)

    def _place(self, line: _Line, path: list[int], shared: int, forks: set[int]) -> None:
        """Put the line's own rows (after the ``shared`` ones) into loops: a new loop at each new user
        turn where turns are known, else where a user prompt follows a final answer."""
        placed = [self.message_of[node] for node in path[:shared] if node in self.message_of]
        fork_after = placed[-1] if placed else None
        loop: _OpenLoop | None = None
        response_turn: int | None = None
        for piece in self._pieces(line.entries[shared:], path[shared:], forks):
            role = piece.message.ROLE
            number = piece.turn_number or None  # turn 0 (items before the first user message) opens no loop
            if loop is not None and self._new_turn(loop, number):
                loop = self._open(line, number, previous=loop.row)
            if loop is None:
                loop = self._open(line, number, fork_after=fork_after)
            opens, turn = loop.deriver.step(role, piece.asks_tools)
            if opens:
                loop = self._open(line, number, previous=loop.row)
                _, turn = loop.deriver.step(role, piece.asks_tools)
            elif loop.turn_number is None and number is not None:
                loop.turn_number = number
                if loop.row.metadata is not None:
                    loop.row.metadata["user_turn_number"] = number
            if piece.in_response and response_turn is not None:
                turn = response_turn  # a hosted tool item shares its response's turn
            elif role == "assistant":
                response_turn = turn
            else:
                response_turn = None
            self._append(piece, loop.row.loop_id, turn)

    def _new_turn(self, loop: _OpenLoop, number: int | None) -> bool:
        """Whether a message of user turn ``number`` starts a new loop after ``loop``."""
        return self.turns_known and None not in (loop.turn_number, number) and number != loop.turn_number

    def _open(
        self, line: _Line, number: int | None, *, previous: LoopRow | None = None, fork_after: int | None = None
    ) -> _OpenLoop:
        """A new loop: a ``default`` continuation of ``previous``, a ``branch`` forking after message
        ``fork_after``, or else an ``initial`` loop."""
        loop = LoopRow(
            loop_id=f"{self.bundle.session_id}.openai-agents.{len(self.bundle.loops) + 1}",
            config={"model": MODEL, "provider": PROVIDER},
            metadata={"branch_id": line.branch_id, "user_turn_number": number} if self.turns_known else None,
        )
        if previous is not None:
            loop.parent_loop_id, loop.continuation_kind = previous.loop_id, "default"
        elif fork_after is not None:
            loop.parent_loop_id, loop.continuation_kind = self.bundle.messages[fork_after].loop_id, "branch"
            loop.fork_after = fork_after
        self.bundle.loops.append(loop)
        return _OpenLoop(loop, number)

    def _append(self, piece: _Piece, loop_id: str, turn: int | None) -> None:
        for node in piece.nodes:
            self.message_of[node] = len(self.bundle.messages)
        message = piece.message
        self.bundle.messages.append(
            MessageRow(
                message=message,
                loop_id=loop_id,
                turn_index=turn,
                source="\n".join(row.text for row in piece.rows),
                timestamp=piece.rows[0].timestamp if isinstance(message, ExtensionMessage) else None,
                usage_known=not isinstance(message, AssistantMessage),
            )
        )

    # --- rows into messages ---------------------------------------------------------------

    def _pieces(self, entries: list[tuple[_Row, int | None]], nodes: list[int], forks: set[int]) -> list[_Piece]:
        """The messages of a run of rows: model output items grouped per response, every other row alone.

        A response also ends at a fork point, so a branch never starts inside a message.
        """
        pieces: list[_Piece] = []
        response: list[tuple[_Row, int | None, int]] = []
        for (row, turn), node in zip(entries, nodes):
            if _is_model_output(row.item):
                response.append((row, turn, node))
            else:
                pieces += self._response(response)
                response = []
                piece = self._guard(self._input, row, turn, node)
                if piece is not None:
                    pieces.append(piece)
            if node in forks:
                pieces += self._response(response)
                response = []
        return pieces + self._response(response)

    def _guard(self, build: Callable[..., _T], *args: Any) -> _T | None:
        """``build(*args)``, or None with the malformed row reported."""
        try:
            return build(*args)
        except InvalidRecord as error:
            self.bundle.errors.append(RecordError(error.place, error.reason))
            return None

    def _input(self, row: _Row, turn: int | None, node: int) -> _Piece:
        """A user / system / developer message, a tool result, or another input item (an extension message)."""
        item, place = row.item, row.place
        role = item.get("role")
        if role in ("user", "system", "developer"):
            data: dict[str, Any] = {
                "role": "user" if role == "user" else "system",
                "content": _content(item.get("content"), place),
                "timestamp": row.timestamp,
            }
        elif item.get("type") == "function_call_output":
            call_id = _need_text(item, "call_id", place)
            data = {
                "role": "toolResult",
                "toolCallId": call_id,
                "toolName": self.tool_names.get(call_id, ""),
                "content": _tool_output(item.get("output"), place),
                "isError": False,
                "timestamp": row.timestamp,
            }
        else:
            data = {"role": "extension", "kind": item["type"], "data": item}
        return _Piece(parse_agent_message(data, place), [row], [node], turn)

    def _response(self, members: list[tuple[_Row, int | None, int]]) -> list[_Piece]:
        """One model response: an assistant message of its reasoning, text and function-call items,
        followed by its other items (hosted tool calls...) as extension messages."""
        blocks: list[dict[str, Any]] = []
        held: list[tuple[_Row, int | None, int]] = []
        others: list[_Piece] = []
        refused = incomplete = False
        for row, turn, node in members:
            item = row.item
            if item.get("role") == "assistant" or item.get("type") in ("reasoning", "function_call"):
                converted = self._guard(_output_blocks, item, row.place)
                if converted:
                    blocks += converted
                    held.append((row, turn, node))
                    refused = refused or any(block.get("refusal") is True for block in converted)
                    incomplete = incomplete or item.get("status") == "incomplete"
            else:
                data = {"role": "extension", "kind": item["type"], "data": item}
                extension = self._guard(parse_agent_message, data, row.place)
                if extension is not None:
                    others.append(_Piece(extension, [row], [node], turn))
        if not held:
            return others
        asks = any(row.item.get("type") in CALL_TYPES for row, _, _ in members)
        first, first_turn, _ = held[0]
        data = {
            "role": "assistant",
            "content": blocks,
            "stopReason": "refusal" if refused else "toolUse" if asks else "length" if incomplete else "stop",
            "model": MODEL,
            "provider": PROVIDER,
            "usage": {"input": 0, "output": 0},
            "timestamp": first.timestamp,
        }
        message = self._guard(parse_agent_message, data, first.place)
        if message is None:
            return others
        for piece in others:
            piece.in_response = True
        assistant = _Piece(message, [row for row, _, _ in held], [node for _, _, node in held], first_turn, asks)
        return [assistant, *others]

    # --- turn_usage into loops ------------------------------------------------------------------

    def attach_usage(self, records: list[dict[str, Any]], path: Path) -> None:
        """Each ``turn_usage`` row becomes reported usage of the loop of its branch and user turn.

        A loop reached by several rows (a branch's usage row for a turn it
        shares) reports their sum; its source is the list of those rows.
        """
        found: dict[str, list[tuple[dict[str, Any], Usage]]] = {}
        for record in records:
            place = f"{path}: {TURN_USAGE} id={record.get('id')}"
            self.bundle.records += 1
            self.bundle.add_source(compact(record))
            usage = self._guard(_turn_usage, record, place)
            if usage is None:
                continue
            branch, turn = str(record.get("branch_id")), record.get("user_turn_number")
            loop_id = self.turn_loops.get((branch, turn)) if isinstance(turn, int) else None
            if loop_id is None:
                self.bundle.errors.append(RecordError(place, f"branch {branch!r} has no user turn {turn!r}"))
                continue
            found.setdefault(loop_id, []).append((record, usage))
        for loop in self.bundle.loops:
            reported = found.get(loop.loop_id)
            if not reported:
                continue
            total = reported[0][1]
            for _, usage in reported[1:]:
                total = total + usage
            loop.reported_usage = total
            loop.source = compact([record for record, _ in reported])
            requests = sum(_count(record.get("requests")) for record, _ in reported)
            loop.metadata = {**(loop.metadata or {}), "requests": requests}


def _trie(lines: list[_Line]) -> tuple[list[list[int]], list[int]]:
    """Each line's rows as nodes of one tree, and how many leading rows each shares with earlier lines.

    A branch copies the rows before its fork from the branch it was made from
    (same message ids, same order), so shared history is a common prefix.
    """
    nodes: dict[tuple[int, int], int] = {}
    paths: list[list[int]] = []
    shared: list[int] = []
    for line in lines:
        parent, count = -1, 0
        path: list[int] = []
        for row, _ in line.entries:
            key = (parent, row.id)
            if key in nodes and count == len(path):
                count += 1
            else:
                nodes.setdefault(key, len(nodes))
            parent = nodes[key]
            path.append(parent)
        paths.append(path)
        shared.append(count)
    return paths, shared


def _is_model_output(item: dict[str, Any]) -> bool:
    """Assistant messages and every typed item the app does not send (see :data:`INPUT_TYPES`)."""
    if item.get("type") in (None, "message"):
        return item.get("role") == "assistant"
    return item["type"] not in INPUT_TYPES


# --- content ----------------------------------------------------------------------------------


def _output_blocks(item: dict[str, Any], place: str) -> list[dict[str, Any]]:
    """The canonical blocks of one ``reasoning``, ``function_call`` or assistant ``message`` item."""
    kind = item.get("type")
    item_id = {"itemId": item["id"]} if isinstance(item.get("id"), str) else {}
    if kind == "reasoning":
        return [_thinking(item, place, item_id)]
    if kind == "function_call":
        call: dict[str, Any] = {
            "type": "toolCall",
            "id": _need_text(item, "call_id", place),
            "name": _need_text(item, "name", place),
            **_arguments(item.get("arguments"), place),
            **item_id,
        }
        return [call]
    content = item.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content, **item_id}]
    if not isinstance(content, list):
        raise InvalidRecord(place, "assistant message content must be a string or a list of parts")
    blocks = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("output_text", "input_text"):
            block = {"type": "text", "text": _need_text(part, "text", place), **item_id}
            if part.get("annotations"):
                block["annotations"] = part["annotations"]
            blocks.append(block)
        elif kind == "refusal":
            blocks.append({"type": "text", "text": _need_text(part, "refusal", place), "refusal": True, **item_id})
        else:
            raise InvalidRecord(place, f"unknown assistant content part type {kind!r}")
    return blocks


def _thinking(item: dict[str, Any], place: str, item_id: dict[str, str]) -> dict[str, Any]:
    """A reasoning item: its summary texts (else its reasoning texts) joined by blank lines; the
    ``encrypted_content`` as the signature, byte for byte."""
    texts = []
    for key in ("summary", "content"):
        parts = item.get(key) or []
        if not isinstance(parts, list):
            raise InvalidRecord(place, f"reasoning {key} must be a list")
        texts = [_need_text(part, "text", place) for part in parts if isinstance(part, dict)]
        if texts:
            break
    block: dict[str, Any] = {"type": "thinking", "thinking": "\n\n".join(texts), **item_id}
    signature = item.get("encrypted_content")
    if signature is not None:
        if not isinstance(signature, str):
            raise InvalidRecord(place, "reasoning encrypted_content must be a string")
        block["signature"] = signature
    return block


def _arguments(raw: Any, place: str) -> dict[str, Any]:
    """A function call's ``arguments`` JSON string, parsed; a string that does not parse is kept as it is,
    flagged with ``invalidArguments``."""
    if isinstance(raw, (dict, list)):
        return {"arguments": raw}
    if not isinstance(raw, str):
        raise InvalidRecord(place, "function_call arguments must be a JSON string")
    try:
        return {"arguments": json.loads(raw, parse_constant=_reject_constant)}
    except (ValueError, RecursionError):
        return {"arguments": raw, "invalidArguments": True}


def _content(content: Any, place: str) -> list[dict[str, Any]]:
    """A user / system / developer message's content: a string, or a list of input parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InvalidRecord(place, "message content must be a string or a list of parts")
    return [_input_part(part, place) for part in content]


def _tool_output(output: Any, place: str) -> list[dict[str, Any]]:
    """A ``function_call_output``'s output: text, or a list of input parts."""
    if isinstance(output, str):
        return [{"type": "text", "text": output}]
    if isinstance(output, list):
        return [_input_part(part, place) for part in output]
    raise InvalidRecord(place, "function_call_output output must be a string or a list of parts")


def _input_part(part: Any, place: str) -> dict[str, Any]:
    """One Responses-API input part (``input_text``, ``input_image``, ``input_file``, ``input_audio``)."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "input_text":
        return {"type": "text", "text": _need_text(part, "text", place)}
    if kind == "input_image":
        extras = {"detail": part["detail"]} if isinstance(part.get("detail"), str) else {}
        if isinstance(part.get("file_id"), str):
            extras["fileId"] = part["file_id"]
        url = part.get("image_url")
        if isinstance(url, str) and (inline := _DATA_URL.fullmatch(url)):
            return {"type": "image", "data": inline["data"], "mimeType": inline["mime"], **extras}
        if isinstance(url, str):
            return {"type": "image", "data": "", "mimeType": _guess(url) or "", "url": url, **extras}
        if "fileId" in extras:
            return {"type": "image", "data": "", "mimeType": "", **extras}
        raise InvalidRecord(place, "input_image has neither an image_url nor a file_id")
    if kind == "input_file":
        block: dict[str, Any] = {"type": "file"}
        name = part.get("filename")
        if isinstance(name, str):
            block["name"] = name
        data, url = part.get("file_data"), part.get("file_url")
        if isinstance(data, str):
            inline = _DATA_URL.fullmatch(data)
            block["data"] = inline["data"] if inline else data
            if inline and inline["mime"]:
                block["mimeType"] = inline["mime"]
        if isinstance(url, str):
            block["url"] = url
        if isinstance(part.get("file_id"), str):
            block["fileId"] = part["file_id"]
        if "mimeType" not in block and (guessed := _guess(name or url or "")):
            block["mimeType"] = guessed
        return block
    if kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict):
            raise InvalidRecord(place, "input_audio part without input_audio data")
        audio_format = audio.get("format")
        mime = f"audio/{audio_format}" if isinstance(audio_format, str) else ""
        return {"type": "audio", "data": _need_text(audio, "data", place), "mimeType": mime}
    raise InvalidRecord(place, f"unknown content part type {kind!r}")


def _guess(url: str) -> str | None:
    return mimetypes.guess_type(url.split("?")[0])[0] if url else None


def _need_text(data: Any, key: str, place: str) -> str:
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, str):
        raise InvalidRecord(place, f"{key} must be a string")
    return value


# --- usage -------------------------------------------------------------------------------------


def _turn_usage(record: dict[str, Any], place: str) -> Usage:
    """One ``turn_usage`` row as canonical usage.

    OpenAI's ``input_tokens`` include the cached reads and cache writes that
    ``input_tokens_details`` break out; canonical ``input`` excludes them:
    ``input = input_tokens - cached_tokens - cache_write_tokens``,
    ``cache_read = cached_tokens``, ``cache_write = cache_write_tokens``,
    ``reasoning = output_tokens_details.reasoning_tokens`` (a part of output),
    ``total_tokens`` as recorded (the sum when 0).

    Raises:
        InvalidRecord: a count that is not a non-negative integer, details
            that are not JSON objects, or cached tokens beyond the input.
    """
    input_tokens = _tokens(record, "input_tokens", place)
    output_tokens = _tokens(record, "output_tokens", place)
    total = _tokens(record, "total_tokens", place)
    input_details = _details(record.get("input_tokens_details"), "input_tokens_details", place)
    output_details = _details(record.get("output_tokens_details"), "output_tokens_details", place)
    cached = _tokens(input_details, "cached_tokens", place)
    written = _tokens(input_details, "cache_write_tokens", place)
    reasoning = _tokens(output_details, "reasoning_tokens", place)
    if cached + written > input_tokens:
        raise InvalidRecord(
            place, f"cached ({cached}) and cache-write ({written}) tokens exceed input_tokens ({input_tokens})"
        )
    return Usage(
        input=input_tokens - cached - written,
        output=output_tokens,
        reasoning=reasoning,
        cache_read=cached,
        cache_write=written,
        total_tokens=total or input_tokens + output_tokens,
        cost=None,
    )


def _details(raw: Any, column: str, place: str) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, RecursionError):
        raise InvalidRecord(place, f"{column} is not valid JSON") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRecord(place, f"{column} must be a JSON object")
    return value


def _tokens(data: dict[str, Any], key: str, place: str) -> int:
    value = data.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRecord(place, f"{key} must be a non-negative integer, got {value!r}")
    return value


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
