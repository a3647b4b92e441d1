"""``yoagent``: session entry trees (``.jsonl``) and saved message arrays (``.json``).

yoagent (``yologdev/yoagent``, the project phi-core was forked from) writes
phi-core's message shapes with its own spellings: camelCase usage
(``cacheRead``, ``cacheWrite``, ``totalTokens``; snake_case before 0.13),
``errorMessage``, stop reason ``refusal``, ``providerMetadata`` on tool calls
and ``redacted`` thinking, and no ``turnId``. The canonical models read those
spellings as they are, so each message is validated directly; the one change
is a usage without a total, whose ``total_tokens`` becomes the sum of its
counts. The source record is kept verbatim beside every row.

Session files (``Session::to_jsonl``) hold one entry per line,
``{"id":"e<N>","parent_id":<id|null>,"message":<AgentMessage>,"timestamp":<ms>,"label"?}``
(the last line may lack its newline). The tree becomes a loop tree through
:mod:`turnstore.importers.tree`: shared history is stored once and a branch is
a ``branch`` loop forking after its parent entry. The entry's ``timestamp``
dates extension messages, which have none of their own. yoagent resumes a
session at its last line (the head) and seeks to checkpoints by ``label``;
both are listed in the session metadata under ``"yoagent"`` with the loop and
seq of the message they point at, so the current branch can be found
without reading the source records.

Message arrays (``Agent::messages()`` saved as JSON) have no tree: loops and
turns are derived by :mod:`turnstore.importers.derive`.

Loop ids are ``{session_id}.yoagent.{N}``. The session id is
``--session-id`` if given, else the session part of the first ``turnId``
(yoagent writes none, data touched by phi-core may carry one), else the file
stem.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InvalidRecord
from ..models import ExtensionMessage, Message
from .base import (
    ImportOptions,
    MessageRow,
    RecordError,
    SessionBundle,
    compact,
    first_turn_session,
    parse_agent_message,
    path_stem,
)
from .derive import add_derived, fill_configs
from .files import EMPTY_ARRAY
from .reading import read_json, read_jsonl
from .tree import Node, build_loops, resolve_skipped

__all__ = ["YoagentImporter", "parse_message"]

ROLES = ("user", "assistant", "toolResult", "extension")
"""The roles yoagent writes: its three LLM messages and the custom (extension) message."""


class YoagentImporter:
    """Reads yoagent session files (entry trees) and saved message arrays."""

    format = "yoagent"

    def accepts(self, path: Path) -> bool:
        return path.suffix in {".jsonl", ".json"}

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """One session per file: ``.json`` is a message array, anything else a JSONL entry tree."""
        if path.suffix == ".json":
            yield self._from_array(path, options)
        else:
            yield self._from_entries(path, options)

    # --- Session::to_jsonl() entry trees ----------------------------------------------

    def _from_entries(self, path: Path, options: ImportOptions) -> SessionBundle:
        nodes: list[Node] = []
        labels: dict[str, str] = {}
        errors: list[RecordError] = []
        lines: list[str] = []
        skipped: dict[str, str | None] = {}  # malformed entry id -> its parent id
        for number, line, value in read_jsonl(path):
            lines.append(line)
            try:
                if isinstance(value, InvalidRecord):
                    raise value
                node, label = _entry(value, line, f"{path}:{number}")
            except InvalidRecord as error:
                errors.append(RecordError(error.place, error.reason))
                _remember_skipped(value, skipped)
                continue
            nodes.append(node)
            if label is not None:
                labels[node.id] = label
        for node in nodes:  # so that one bad line does not cut off the rest of its branch (--skip-invalid)
            node.parent_id = resolve_skipped(skipped, node.parent_id)
        session_id = options.session_id or first_turn_session(node.message for node in nodes) or path_stem(path)
        bundle = SessionBundle(session_id=session_id, origin=str(path), records=len(lines), errors=errors)
        for line in lines:
            bundle.add_source(line)
        build_loops(bundle, nodes, f"{session_id}.yoagent")
        bundle.metadata = _session_state(bundle, nodes, labels)
        return bundle

    # --- Agent::messages() arrays -----------------------------------------------------

    def _from_array(self, path: Path, options: ImportOptions) -> SessionBundle:
        records = read_json(path)
        if not isinstance(records, list):
            raise InvalidRecord(f"{path}:1", "expected a JSON array of yoagent messages")
        if not records:
            raise InvalidRecord(f"{path}:1", EMPTY_ARRAY)
        parsed: list[tuple[Any, Message | ExtensionMessage, str]] = []
        errors: list[RecordError] = []
        for number, record in enumerate(records, start=1):
            try:
                parsed.append((record, parse_message(record, f"{path}: record {number}"), f"{path}: record {number}"))
            except InvalidRecord as error:
                errors.append(RecordError(error.place, error.reason))
        session_id = options.session_id or first_turn_session(message for _, message, _ in parsed) or path_stem(path)
        bundle = SessionBundle(session_id=session_id, origin=str(path), records=len(records), errors=errors)
        for record in records:
            bundle.add_source(compact(record))
        rows = [MessageRow(message, "", None, source=compact(record), place=place) for record, message, place in parsed]
        add_derived(bundle, f"{session_id}.yoagent", rows)
        fill_configs(bundle)
        return bundle


def parse_message(data: Any, place: str) -> Message | ExtensionMessage:
    """Validate one yoagent AgentMessage as a canonical message.

    A usage without ``totalTokens`` (or ``total_tokens``) gets the sum of its
    counts as its total; the source record itself is not changed.

    Raises:
        InvalidRecord: not a message yoagent writes (unknown role, wrong types), naming ``place``.
    """
    if isinstance(data, dict):
        role = data.get("role")
        if role is None:
            raise InvalidRecord(place, "message has no role")
        if role not in ROLES:
            raise InvalidRecord(place, f"unknown role {role!r}; yoagent writes {', '.join(ROLES)}")
        data = _with_total(data)
    return parse_agent_message(data, place)


def _entry(value: Any, line: str, place: str) -> tuple[Node, str | None]:
    """A session entry as a tree node, and its checkpoint label."""
    if not isinstance(value, dict):
        raise InvalidRecord(place, f"expected a session entry object, got {type(value).__name__}")
    ident, parent, stamp, label = (value.get(key) for key in ("id", "parent_id", "timestamp", "label"))
    if not isinstance(ident, str) or not ident:
        raise InvalidRecord(place, "entry has no id (a non-empty string)")
    if parent is not None and not isinstance(parent, str):
        raise InvalidRecord(place, f"entry {ident}: parent_id must be a string or null")
    if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int) or stamp < 0):
        raise InvalidRecord(place, f"entry {ident}: timestamp must be unix milliseconds (a non-negative integer)")
    if label is not None and not isinstance(label, str):
        raise InvalidRecord(place, f"entry {ident}: label must be a string")
    if "message" not in value:
        raise InvalidRecord(place, f"entry {ident} has no message")
    message = parse_message(value["message"], place)
    return Node(id=ident, parent_id=parent, message=message, source=line, place=place, timestamp=stamp), label


def _remember_skipped(value: Any, skipped: dict[str, str | None]) -> None:
    """Note a malformed entry's id and parent, so its children can hang from its parent instead.

    Children of a line that is not even JSON cannot be placed: its id is unknown.
    """
    if isinstance(value, dict) and isinstance(value.get("id"), str):
        parent = value.get("parent_id")
        skipped[value["id"]] = parent if isinstance(parent, str) else None


def _with_total(message: dict[str, Any]) -> dict[str, Any]:
    """The message with ``usage.total_tokens`` = input + output + cache read + cache write when the usage has no total."""
    usage = message.get("usage")
    if message.get("role") != "assistant" or not isinstance(usage, dict):
        return message
    if "totalTokens" in usage or "total_tokens" in usage:
        return message
    counts = [
        usage.get("input", 0),
        usage.get("output", 0),
        usage.get("cache_read", usage.get("cacheRead", 0)),
        usage.get("cache_write", usage.get("cacheWrite", 0)),
    ]
    if not all(isinstance(count, int) and not isinstance(count, bool) for count in counts):
        return message  # validation reports the bad count
    return {**message, "usage": {**usage, "total_tokens": sum(counts)}}


def _session_state(bundle: SessionBundle, nodes: list[Node], labels: dict[str, str]) -> dict[str, Any] | None:
    """yoagent's head (the last imported entry) and checkpoints (labelled entries), with where they were stored.

    Each is ``{"entry": <entry id>, "loop_id", "seq"}``; ``seq`` is the
    message's position in its loop, as the writer numbers bundle rows.
    """
    places: dict[str, dict[str, Any]] = {}
    seqs: dict[str, int] = {}
    for row in bundle.messages:
        seq = seqs[row.loop_id] = seqs.get(row.loop_id, -1) + 1
        if row.ref is not None:
            places[row.ref] = {"entry": row.ref, "loop_id": row.loop_id, "seq": seq}
    head = next((places[node.id] for node in reversed(nodes) if node.id in places), None)
    if head is None:
        return None
    checkpoints = [{"label": label, **places[ident]} for ident, label in labels.items() if ident in places]
    return {"yoagent": {"head": head, "checkpoints": checkpoints}}
