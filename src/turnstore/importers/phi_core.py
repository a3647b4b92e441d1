"""``phi-core``: a ``save_messages()`` JSON array of AgentMessage, or ``{session_id}.json`` session files.

Array files: the session is the one the first message names under
``turnstoreSessionId`` (turnstore's exports write it; the key is not stored),
else ``--session-id``, else the session part of the first ``turnId``'s loop id
(up to its first dot: phi-core's own ids are UUIDs), else the file name.
Each message's ``turnId`` gives its loop and turn; messages
without one (older records, extension messages) are placed by the derivation
rules of :mod:`turnstore.importers.derive`, continuing the loop before them.
Loops follow each other as ``default`` continuations, in order of appearance.

Session files (``Session`` with ``loops[]`` of ``LoopRecord``): every loop
keeps its id, parent, continuation kind, status, config, timestamps, reported
usage and its whole record (minus the messages, stored one per row) as source;
the session keeps its header; a sub-agent session's ``parent_spawn_ref``
becomes its loops' spawn link.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InvalidRecord
from ..export import SESSION_KEY
from ..models import Usage
from .base import (
    ImportOptions,
    LoopRow,
    MessageRow,
    RecordError,
    SessionBundle,
    compact,
    first_turn_session,
    parse_agent_message,
    parse_time,
)
from .derive import asked_tools, derive_positions, fill_configs, next_loop
from .files import EMPTY_ARRAY
from .reading import read_json

__all__ = ["PhiCoreImporter"]

_STATUS = {
    "Pending": "pending",
    "Running": "running",
    "Completed": "completed",
    "Rejected": "rejected",
    "Aborted": "aborted",
}
_KINDS = {"Initial": "initial", "Default": "default", "Rerun": "rerun", "Branch": "branch", "Compaction": "compaction"}


class PhiCoreImporter:
    """Reads phi-core message arrays and session files."""

    format = "phi-core"

    def accepts(self, path: Path) -> bool:
        return path.suffix == ".json"

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        data = read_json(path)
        if data == []:
            raise InvalidRecord(f"{path}:1", EMPTY_ARRAY)
        if isinstance(data, list):
            yield self._from_array(path, data, options)
        elif isinstance(data, dict) and isinstance(data.get("loops"), list):
            yield self._from_session(path, data, options)
        else:
            raise InvalidRecord(f"{path}:1", "not a phi-core message array or session file")

    # --- save_messages() arrays ---------------------------------------------------

    def _from_array(self, path: Path, records: list[Any], options: ImportOptions) -> SessionBundle:
        named, records = _named_session(path, records)
        parsed: list[tuple[int, Any, Any]] = []
        errors: list[RecordError] = []
        for number, record in enumerate(records, start=1):
            try:
                parsed.append((number, record, parse_agent_message(record, f"{path}: record {number}")))
            except InvalidRecord as error:
                errors.append(RecordError(error.place, error.reason))
        session_id = named or options.session_id or first_turn_session(m for _, _, m in parsed) or path.stem
        bundle = SessionBundle(session_id=session_id, origin=str(path), records=len(records), errors=errors)
        for record in records:
            bundle.add_source(compact(record))
        positions = derive_positions([(str(m.role), asked_tools(m)) for _, _, m in parsed])
        loop_of: dict[int, str] = {}  # derived loop number -> loop id
        known: set[str] = set()
        for (number, record, message), (derived_loop, derived_turn) in zip(parsed, positions):
            turn = message.turn_id()
            if turn is not None:
                loop_id, turn_index = turn.loop_id, turn.turn_index
            else:
                loop_id = loop_of.get(derived_loop) or f"{session_id}.phi-core.{derived_loop + 1}"
                turn_index = derived_turn
            loop_of.setdefault(derived_loop, loop_id)
            if loop_id not in known:
                known.add(loop_id)
                bundle.loops.append(next_loop(loop_id, bundle.loops))
            bundle.messages.append(
                MessageRow(message, loop_id, turn_index, source=compact(record), place=f"{path}: record {number}")
            )
        fill_configs(bundle)
        return bundle

    # --- session files ----------------------------------------------------------------

    def _from_session(self, path: Path, data: dict[str, Any], options: ImportOptions) -> SessionBundle:
        session_id = data.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidRecord(f"{path}:1", "session file has no session_id")
        header = {key: value for key, value in data.items() if key != "loops"}
        bundle = SessionBundle(
            session_id=session_id,
            origin=str(path),
            agent_id=data.get("agent_id") if isinstance(data.get("agent_id"), str) else None,
            title=data.get("title") if isinstance(data.get("title"), str) else None,
            created_at=parse_time(data.get("created_at")),
            updated_at=parse_time(data.get("last_active_at")),
            source=compact(header),
        )
        bundle.add_source(compact(header))
        spawn = data.get("parent_spawn_ref")
        if not isinstance(spawn, dict):
            spawn = {}
        places: dict[tuple[str, int], int] = {}  # (loop id, index among its messages) -> index in the bundle
        marked: list[tuple[LoopRow, dict[str, Any]]] = []
        numbers: list[int] = []
        for loop_number, record in enumerate(data["loops"], start=1):
            place = f"{path}: loop {loop_number}"
            bundle.records += 1
            if not isinstance(record, dict) or not isinstance(record.get("loop_id"), str):
                bundle.errors.append(RecordError(place, "loop record without a loop_id"))
                continue
            bundle.add_source(compact(record))
            marked.append((self._add_loop(bundle, record, place, spawn, places), record))
            numbers.append(loop_number)
        parents = {loop.loop_id: loop.parent_loop_id for loop in bundle.loops}
        for (loop, record), loop_number in zip(marked, numbers):
            # A turnstore export's fork point and kept-from message: {"loop_id", "index"} of a message of the file.
            key = {"branch": "fork_after", "compaction": "keep_from"}.get(loop.continuation_kind)
            if key is None or record.get(key) is None:
                continue
            found = _message_index(record[key], places, _history(loop.parent_loop_id, parents))
            if found is None:
                bundle.notes.append(
                    RecordError(
                        f"{path}: loop {loop_number}",
                        f"{key} names no message of the parent loop's history in this file; "
                        + ("the branch follows the whole parent" if key == "fork_after" else "nothing is kept"),
                    )
                )
            elif key == "fork_after":
                loop.fork_after = found
            else:
                loop.keep_from = found
        return bundle

    def _add_loop(
        self,
        bundle: SessionBundle,
        record: dict[str, Any],
        place: str,
        spawn: dict[str, Any],
        places: dict[tuple[str, int], int],
    ) -> LoopRow:
        """Add one loop record and its messages to ``bundle`` (each message's index noted in ``places``)."""
        loop_id = record["loop_id"]
        loop_source = {key: value for key, value in record.items() if key != "messages"}
        kind = _continuation(record.get("continuation_kind"))
        usage = record.get("usage")
        reported = None
        if isinstance(usage, dict):
            try:
                reported = Usage.model_validate(usage)
            except ValueError:
                bundle.errors.append(RecordError(place, "loop usage is not a phi-core Usage"))
        config = record.get("config") if isinstance(record.get("config"), dict) else None
        loop = LoopRow(
            loop_id=loop_id,
            parent_loop_id=record.get("parent_loop_id") if kind != "initial" else None,
            continuation_kind=kind if record.get("parent_loop_id") or kind == "initial" else "initial",
            config=config,
            status=_STATUS.get(str(record.get("status")), "completed"),
            started_at=parse_time(record.get("started_at")),
            ended_at=parse_time(record.get("ended_at")),
            spawn_loop_id=spawn.get("parent_loop_id") if spawn and kind == "initial" else None,
            spawn_tool_call_id=spawn.get("tool_call_id") if spawn and kind == "initial" else None,
            reported_usage=reported,
            metadata=record.get("metadata") if isinstance(record.get("metadata"), dict) else None,
            source=compact(loop_source),
        )
        bundle.loops.append(loop)
        messages = record.get("messages") or []
        if not isinstance(messages, list):
            bundle.errors.append(RecordError(place, "loop messages is not an array"))
            return loop
        parsed = []
        for number, item in enumerate(messages, start=1):
            try:
                parsed.append((item, parse_agent_message(item, f"{place} message {number}"), number))
            except InvalidRecord as error:
                bundle.errors.append(RecordError(error.place, error.reason))
        positions = derive_positions([(str(m.role), asked_tools(m)) for _, m, _ in parsed])
        for (item, message, number), (_, derived_turn) in zip(parsed, positions):
            turn = message.turn_id()
            turn_index = turn.turn_index if turn is not None and turn.loop_id == loop_id else derived_turn
            places[(loop_id, number - 1)] = len(bundle.messages)
            bundle.messages.append(
                MessageRow(message, loop_id, turn_index, source=compact(item), place=f"{place} message {number}")
            )
        return loop


def _named_session(path: Path, records: list[Any]) -> tuple[str | None, list[Any]]:
    """The session id the array's first message names (``SESSION_KEY``), and the records without that key."""
    if not records or not isinstance(records[0], dict) or SESSION_KEY not in records[0]:
        return None, records
    first = dict(records[0])
    named = first.pop(SESSION_KEY)
    if not isinstance(named, str) or not named:
        raise InvalidRecord(f"{path}: record 1", f"{SESSION_KEY} must be a non-empty string, got {named!r:.80}")
    return named, [first, *records[1:]]


def _message_index(mark: Any, places: dict[tuple[str, int], int], history: set[str]) -> int | None:
    """The bundle index of the message a ``{"loop_id": ..., "index": ...}`` mark names, if it is one of a loop of
    ``history`` (a fork point or kept message is in the parent's history); None otherwise."""
    if not isinstance(mark, dict):
        return None
    loop_id, index = mark.get("loop_id"), mark.get("index")
    if loop_id not in history or not isinstance(index, int) or isinstance(index, bool):
        return None
    return places.get((loop_id, index))


def _history(loop_id: str | None, parents: dict[str, str | None]) -> set[str]:
    """``loop_id`` and its ancestors: the loops whose messages a child of it may fork after or keep."""
    found: set[str] = set()
    while loop_id is not None and loop_id not in found:
        found.add(loop_id)
        loop_id = parents.get(loop_id)
    return found


def _continuation(value: Any) -> str:
    if value is None:
        return "initial"
    if isinstance(value, str):
        return _KINDS.get(value, "initial")
    if isinstance(value, dict) and len(value) == 1:
        return _KINDS.get(next(iter(value)), "initial")
    return "initial"
