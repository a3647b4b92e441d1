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
  verbatim (a grouped response keeps its rows' texts one per line, in row
  order: its hosted tool items' too, whose extension messages, placed
  after the assistant message, then have no source of their own).
* Loops: one per user turn (``user_turn_number``) where the structure table
  says; derived (:mod:`.derive`) for plain ``SQLiteSession`` data. Turns are
  derived within each loop.
* A branch other than ``main`` shares the rows it copied from the branch it
  was made from; they are stored once, and the branch's own rows become
  ``branch`` loops forking after the last shared message.
* ``turn_usage`` rows become the reported usage of the loop of their turn;
  items carry no usage, so assistant messages are written with unknown usage.

What each item becomes is in :mod:`turnstore.importers.openai_agents_items`;
this module reads the tables and places the messages. The mapping of every
item type and usage field is in ``docs/importers/openai-agents.md``. The
database is opened read-only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidRecord
from ..models import MAX_INT, AssistantMessage, ExtensionMessage, Usage
from .base import (
    ImportOptions,
    LoopRow,
    MessageRow,
    RecordError,
    SessionBundle,
    compact,
    ms_timestamp,
    parse_time,
)
from .derive import TurnDeriver
from .openai_agents_items import MODEL, PROVIDER, ItemConverter, Piece, Row, guard, parse_item
from .sqlite_source import SQLITE_ERRORS, SqliteSource, open_sqlite, sqlite_accepts, table_names
from .token_usage import usage_from_inclusive_input

__all__ = ["OpenAIAgentsImporter"]

SESSIONS = "agent_sessions"
MESSAGES = "agent_messages"
STRUCTURE = "message_structure"
TURN_USAGE = "turn_usage"
MAIN = "main"


class OpenAIAgentsImporter:
    """Reads the SQLite databases of the OpenAI Agents SDK's ``SQLiteSession`` and ``AdvancedSQLiteSession``."""

    format = "openai-agents"

    def accepts(self, path: Path) -> bool:
        """SQLite files holding the SDK's ``agent_sessions`` and ``agent_messages`` tables."""
        return sqlite_accepts(path, lambda connection: {SESSIONS, MESSAGES} <= table_names(connection))

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """One bundle per session of the database, in the order the SDK created them.

        Raises:
            InvalidRecord: not a SQLite database, no ``agent_sessions`` /
                ``agent_messages`` tables, or a read error.
        """
        with open_sqlite(path, table_names, _reads) as (database, tables):
            if not {SESSIONS, MESSAGES} <= tables:
                raise InvalidRecord(
                    str(path), f"no {SESSIONS} and {MESSAGES} tables (not an OpenAI Agents SDK session database)"
                )
            source = _Source(database, STRUCTURE in tables, TURN_USAGE in tables)
            try:
                for session_id in source.session_ids():
                    yield source.bundle(session_id)
            except SQLITE_ERRORS as error:
                raise InvalidRecord(str(path), f"cannot read the session tables: {error}") from None


# --- reading the database -------------------------------------------------------------


def _reads(tables: set[str]) -> list[str]:
    """The tables the importer reads, of those the database has."""
    return [table for table in (SESSIONS, MESSAGES, STRUCTURE, TURN_USAGE) if table in tables]


@dataclass
class _Line:
    """One branch of a session: its rows in order, each with its ``user_turn_number`` (None when unknown)."""

    branch_id: str
    entries: list[tuple[Row, int | None]]


class _Source:
    """The tables of one SDK database, read one session at a time."""

    def __init__(self, database: SqliteSource, structured: bool, usage: bool) -> None:
        self.database = database
        self.connection = database.connection
        self.path = database.path
        self.structured = structured
        self.usage = usage

    def session_ids(self) -> list[str]:
        """Sessions in ``agent_sessions`` order, then any that only the other tables name."""
        queries = [
            f'SELECT session_id FROM "{SESSIONS}" ORDER BY rowid',
            f'SELECT session_id FROM "{MESSAGES}" GROUP BY session_id ORDER BY MIN(id)',
        ]
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
        found = self.database.rows(SESSIONS, self.database.columns(SESSIONS), "WHERE session_id = ?", (session_id,))
        header, problem = next(found, (None, None))
        record = _record(header) if header is not None and problem is None else None
        bundle = SessionBundle(
            session_id=session_id,
            origin=f"{self.path}: {SESSIONS} session_id={session_id}",
            created_at=parse_time(record.get("created_at")) if record else None,
            updated_at=parse_time(record.get("updated_at")) if record else None,
            source=compact(record) if record else None,
        )
        bundle.add_source(bundle.source or "")
        if problem is not None:
            bundle.add_source(problem)
            bundle.errors.append(RecordError(f"{self.path}: {SESSIONS} session_id={session_id}", problem))
        rows = self._rows(bundle)
        structure = self._structure(session_id, bundle) if self.structured else []
        lines = _lines(rows, structure)
        if structure:
            bundle.metadata = {"branches": list(dict.fromkeys(branch for _, branch, _ in structure))}
        builder = _Builder(bundle, rows, turns_known=bool(structure))
        builder.build(lines)
        if self.usage:
            builder.attach_usage(self._usage(session_id, bundle), self.path)
        return bundle

    def _rows(self, bundle: SessionBundle) -> list[Row]:
        rows = []
        found = self.database.rows(
            MESSAGES, ("id", "message_data", "created_at"), "WHERE session_id = ? ORDER BY id", (bundle.session_id,)
        )
        for values, problem in found:
            row_id = values["id"]
            place = f"{self.path}: {MESSAGES} id={row_id}"
            bundle.records += 1
            text, created = _plain(values["message_data"]), _plain(values["created_at"])
            bundle.add_source(compact([row_id, text, created, problem] if problem else [row_id, text, created]))
            if problem is not None:
                bundle.errors.append(RecordError(place, problem))
                continue
            try:
                rows.append(Row(row_id, text, parse_item(text, place), place, ms_timestamp(created)))
            except InvalidRecord as error:
                bundle.errors.append(RecordError(error.place, error.reason))
        return rows

    def _structure(self, session_id: str, bundle: SessionBundle) -> list[tuple[int, str, int | None]]:
        """``(message_id, branch_id, user_turn_number)`` of the session, branches in creation order."""
        columns = ("message_id", "branch_id", "user_turn_number", "sequence_number", "id")
        found = self._select(STRUCTURE, columns, "WHERE session_id = ? ORDER BY id", (session_id,), bundle)
        rows = [tuple(_plain(row[column]) for column in columns) for row in found]
        for row in rows:
            bundle.add_source(compact(list(row)))
        structure = []
        for message_id, branch_id, user_turn, sequence, row_id in rows:
            order = (sequence if isinstance(sequence, int) else 0, row_id)
            structure.append((order, (message_id, str(branch_id), user_turn if isinstance(user_turn, int) else None)))
        structure.sort(key=lambda entry: entry[0])  # sequence order
        return [entry for _, entry in structure]

    def _usage(self, session_id: str, bundle: SessionBundle) -> list[dict[str, Any]]:
        found = self._select(TURN_USAGE, None, "WHERE session_id = ? ORDER BY id", (session_id,), bundle)
        return [_record(row) for row in found]

    def _select(
        self, table: str, columns: Sequence[str] | None, rest: str, params: tuple[Any, ...], bundle: SessionBundle
    ) -> Iterator[dict[str, Any]]:
        """The rows of ``table`` (every column when ``columns`` is None); one with a value over the
        limit is reported in ``bundle`` at its place (``table id=...``) instead."""
        for values, problem in self.database.rows(table, columns or self.database.columns(table), rest, params):
            if problem is None:
                yield values
                continue
            bundle.records += 1
            bundle.add_source(problem)
            bundle.errors.append(RecordError(f"{self.path}: {table} id={values.get('id')}", problem))


def _record(row: dict[str, Any]) -> dict[str, Any]:
    """A table row as a JSON-ready dict (BLOBs decoded as UTF-8)."""
    return {key: _plain(value) for key, value in row.items()}


def _plain(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _lines(rows: list[Row], structure: list[tuple[int, str, int | None]]) -> list[_Line]:
    """The session's branches: ``main`` first, then the others in the order they were made.

    Without structure rows (plain ``SQLiteSession``) the rows in id order are
    the one line. Rows no structure row names (written by a plain session
    into an advanced database) join ``main`` at their id's position.
    """
    if not structure:
        return [_Line(MAIN, [(row, None) for row in rows])]
    by_id = {row.id: row for row in rows}
    branches: dict[str, list[tuple[Row, int | None]]] = {MAIN: []}
    named: set[int] = set()
    for message_id, branch_id, turn in structure:
        named.add(message_id)
        row = by_id.get(message_id)
        if row is not None:  # a structure row of a malformed or vanished message row has nothing to place
            branches.setdefault(branch_id, []).append((row, turn))
    orphans = [row for row in rows if row.id not in named]
    main: list[tuple[Row, int | None]] = []
    taken = 0
    for row, turn in branches[MAIN]:
        while taken < len(orphans) and orphans[taken].id < row.id:
            main.append((orphans[taken], None))
            taken += 1
        main.append((row, turn))
    branches[MAIN] = main + [(row, None) for row in orphans[taken:]]
    return [_Line(branch_id, entries) for branch_id, entries in branches.items() if entries or branch_id == MAIN]


# --- lines into loops ---------------------------------------------------------------------


@dataclass
class _OpenLoop:
    """The loop a line is filling and how its turns are counted."""

    row: LoopRow
    turn_number: int | None
    deriver: TurnDeriver = field(default_factory=TurnDeriver)


class _Builder:
    """Turns the branches of one session into loops and messages; rows shared by branches are stored once."""

    def __init__(self, bundle: SessionBundle, rows: list[Row], *, turns_known: bool) -> None:
        self.bundle = bundle
        self.items = ItemConverter(bundle.errors, rows)
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
        for piece in self.items.pieces(line.entries[shared:], path[shared:], forks):
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

    def _append(self, piece: Piece, loop_id: str, turn: int | None) -> None:
        for node in piece.nodes:
            self.message_of[node] = len(self.bundle.messages)
        message = piece.message
        self.bundle.messages.append(
            MessageRow(
                message=message,
                loop_id=loop_id,
                turn_index=turn,
                source=None if piece.in_response else "\n".join(row.text for row in piece.rows),
                timestamp=piece.rows[0].timestamp if isinstance(message, ExtensionMessage) else None,
                usage_known=not isinstance(message, AssistantMessage),
                place=piece.rows[0].place,
            )
        )

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
            usage = guard(self.bundle.errors, _turn_usage, record, place)
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
            loop.reported_requests = requests if requests <= MAX_INT else None  # a count no column holds: unknown


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
    return usage_from_inclusive_input(
        place,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total=total,
        cached=cached,
        written=written,
        reasoning=reasoning,
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
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise InvalidRecord(place, f"{key} must be a non-negative 64-bit integer, got {value!r:.40}")
    return value


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
