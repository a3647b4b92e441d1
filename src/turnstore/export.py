"""Writing a stored session back out: phi-core's forms, and turnstore's own lossless JSONL.

* ``phi-core`` — a flat JSON array of AgentMessage (phi-core's
  ``save_messages`` form), in order. A session imported from phi-core gives
  back its source records (equal by value); anything else is mapped to the
  nearest form phi-core can load (see :func:`to_phi_core`). The first message
  carries the session id under :data:`SESSION_KEY`.
* ``phi-core-session`` — phi-core's ``Session`` file, with ``loops[]`` of
  ``LoopRecord``.
* ``turnstore`` — one JSON object per line: the session, each loop, each
  message with its place, usage and verbatim source record. Importing it
  (``turnstore import turnstore``) rebuilds the session exactly.

Every form names its session (see :data:`SESSION_KEY` for the flat array).
:func:`write_export` puts an export in a file all at once, owner-only.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .errors import ExportFailed, InvalidArgument, StorageError
from .media import MediaMode
from .records import LoopConfig
from .repositories._shared import loads
from .repositories.media import check_mode
from .repositories.rows import USAGE_FIELDS, ExportRow

if TYPE_CHECKING:
    from .store import Store

__all__ = [
    "DEFAULT_FORMAT",
    "EXPORT_FORMATS",
    "SESSION_KEY",
    "TURNSTORE_FORMAT_VERSION",
    "iter_export",
    "to_phi_core",
    "write_export",
]

EXPORT_FORMATS = ("phi-core", "phi-core-session", "turnstore")
DEFAULT_FORMAT = "turnstore"
"""The format an export is written in when none is named (``store.export``, ``turnstore export``): the lossless one."""
TURNSTORE_FORMAT_VERSION = 1

SESSION_KEY = "turnstoreSessionId"
"""The key that names the session on the first message of a ``phi-core`` array export.

A flat message array has no place for a session id, and the session part of
a loop id (``{session_id}.{config_id}.{N}``) cannot be told from its config
part when the session id holds dots. phi-core ignores keys it does not know,
so the first message carries the id verbatim; the ``phi-core`` importer
takes the session id from it and removes the key (nothing else is stored).
An empty session's array has no message to carry it.
"""

_STATUS = {
    "pending": "Pending",
    "running": "Running",
    "completed": "Completed",
    "rejected": "Rejected",
    "aborted": "Aborted",
}


def to_phi_core(message: dict[str, Any]) -> dict[str, Any]:
    """Map a canonical message to the nearest form phi-core loads (``docs/wire-format.md``).

    ======================  ==============================================
    turnstore               phi-core
    ======================  ==============================================
    stop reason refusal     ``guardRail``
    ``system`` message      extension message of kind ``system``
    audio / file block      text block naming it (``[audio audio/wav]``)
    other extra fields      kept as extra keys (phi-core ignores them)
    ======================  ==============================================
    """
    role = message.get("role")
    if role == "assistant" and message.get("stopReason") == "refusal":
        message = {**message, "stopReason": "guardRail"}
    if role == "system":
        data = {key: value for key, value in message.items() if key != "role"}
        return {"role": "extension", "kind": "system", "data": data}
    content = message.get("content")
    if isinstance(content, list) and any(block.get("type") in _NOT_PHI_CORE for block in content):
        message = {**message, "content": [_block_to_phi_core(block) for block in content]}
    return message


_NOT_PHI_CORE = {"audio", "file"}


def _block_to_phi_core(block: dict[str, Any]) -> dict[str, Any]:
    if block.get("type") not in _NOT_PHI_CORE:
        return block
    label = " ".join(str(part) for part in (block.get("mimeType"), block.get("name") or block.get("url")) if part)
    return {"type": "text", "text": f"[{block['type']}{' ' + label if label else ''}]"}


class _Exporter:
    """One session being exported, read through the store's repositories: its rows, loops and sources."""

    def __init__(self, store: Store, session_id: str, media: MediaMode = "inline") -> None:
        self.store = store
        self.session_id = session_id
        self.media = media
        self.session = store.sessions.get(session_id)
        self.sources = store.sessions.sources(session_id)
        self.source_format = self.sources.source_format

    def rows(self) -> Iterator[ExportRow]:
        return self.store.messages.rows(self.session_id, media=self.media)

    def phi_core_message(self, row: ExportRow) -> dict[str, Any]:
        # The canonical JSON of an imported phi-core record equals the record by value;
        # records in other spellings (yoagent's) come out in phi-core's.
        return to_phi_core(stored_json(row))


def iter_export(
    store: Store, session_id: str, fmt: str = DEFAULT_FORMAT, *, media: MediaMode = "inline"
) -> Iterator[str]:
    """The export of one session as chunks of text, streamed (a session is never held whole).

    ``media``: how media kept out of line is written (:data:`turnstore.MediaMode`).

    Raises:
        SessionNotFound: no such session.
        InvalidArgument: an unknown format, or ``media`` is not a media mode.
    """
    if fmt not in EXPORT_FORMATS:
        raise InvalidArgument("format", f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    check_mode(media)
    exporter = _Exporter(store, session_id, media)
    if fmt == "phi-core":
        return _phi_core_array(exporter)
    if fmt == "phi-core-session":
        return iter([json.dumps(_phi_core_session(exporter), ensure_ascii=False, indent=2) + "\n"])
    return _turnstore_lines(exporter)


def _phi_core_array(exporter: _Exporter) -> Iterator[str]:
    yield "["
    first = True
    for row in exporter.rows():
        message = exporter.phi_core_message(row)
        if first:
            message = {**message, SESSION_KEY: exporter.session_id}
        yield ("" if first else ",") + _dumps(message)
        first = False
    yield "]\n"


def _phi_core_session(exporter: _Exporter) -> dict[str, Any]:
    session = exporter.session
    loops = exporter.store.loops.list(exporter.session_id)
    sources = exporter.sources.loops
    header_source = exporter.sources.source
    by_loop: dict[str, list[dict[str, Any]]] = {loop.loop_id: [] for loop in loops}
    # A loop whose messages carry no usage reports its run usage (loops.end), as the totals count it.
    usage: dict[str, list[int]] = {
        loop.loop_id: [getattr(loop.reported_usage, name, 0) for name in USAGE_FIELDS] for loop in loops
    }
    with_usage: set[str] = set()
    place: dict[int, dict[str, Any]] = {}  # message id -> its loop and index in that loop's exported messages
    for row in exporter.rows():
        exported = by_loop.setdefault(row.loop_id, [])
        place[row.id] = {"loop_id": row.loop_id, "index": len(exported)}
        exported.append(exporter.phi_core_message(row))
        if row.input_tokens is not None:
            if row.loop_id not in with_usage:
                with_usage.add(row.loop_id)
                usage[row.loop_id] = [0] * 6
            totals = usage[row.loop_id]
            for index, value in enumerate(row.usage_tokens()):
                totals[index] += int(value or 0)
    children: dict[str, list[str]] = {}
    for loop in loops:
        if loop.parent_loop_id:
            children.setdefault(loop.parent_loop_id, []).append(loop.loop_id)
    records = []
    for loop in loops:
        source = loads(sources.get(loop.loop_id)) if exporter.source_format == "phi-core" else None
        if isinstance(source, dict):
            record = {**source, "messages": by_loop.get(loop.loop_id, [])}
        else:
            record = _loop_record(loop, session.agent_id, by_loop.get(loop.loop_id, []), usage[loop.loop_id])
            record["children_loop_ids"] = children.get(loop.loop_id, [])
        # phi-core has no fork point or kept-from message; turnstore reads these keys back (phi-core ignores them).
        # Named from the stored ids, never copied from a source: its places may not be this file's.
        for key, message_id in (("fork_after", loop.fork_after), ("keep_from", loop.keep_from)):
            record.pop(key, None)
            if message_id in place:
                record[key] = place[message_id]
        records.append(record)
    header = loads(header_source) if exporter.source_format == "phi-core" else None
    if not isinstance(header, dict):
        header = {
            "session_id": session.session_id,
            "agent_id": session.agent_id,
            "created_at": _rfc3339(session.created_at),
            "last_active_at": _rfc3339(session.updated_at),
            "formation": {"Explicit": {"timestamp": _rfc3339(session.created_at)}},
            "parent_spawn_ref": None,
            "scope": "persistent",
        }
    # The stored id, even when a source header said otherwise: the file names the session it holds.
    named = {"session_id": session.session_id}
    if session.title is not None:
        named["title"] = session.title  # phi-core's Session has no title; it ignores the key, turnstore reads it back
    return {**header, **named, "loops": records}


def _loop_record(loop: Any, agent_id: str | None, messages: list[dict[str, Any]], usage: list[int]) -> dict[str, Any]:
    kind = loop.continuation_kind.value
    tag = _rfc3339(loop.started_at)
    continuation: Any = {
        "initial": "Initial",
        "default": "Default",
        "compaction": "Compaction",
        "rerun": {"Rerun": {"tag": tag}},
        "branch": {"Branch": {"tag": tag}},
    }[kind]
    config = dict(loop.config) if loop.config else None
    if config is not None and "model" in config:
        config.setdefault("provider", "")
        config.setdefault("config_id", LoopConfig(**config).effective_config_id())
    return {
        "loop_id": loop.loop_id,
        "session_id": loop.session_id,
        "agent_id": agent_id,
        "parent_loop_id": loop.parent_loop_id,
        "continuation_kind": continuation,
        "started_at": tag,
        "ended_at": _rfc3339(loop.ended_at) if loop.ended_at else None,
        "status": _STATUS[loop.status.value],
        "rejection": None,
        "config": config,
        "messages": messages,
        "turns": [],
        "usage": dict(zip(USAGE_FIELDS, usage)),
        "metadata": loop.metadata,
        "events": [],
        "children_loop_ids": [],
        "child_loop_refs": [],
        "parallel_group": None,
    }


def _turnstore_lines(exporter: _Exporter) -> Iterator[str]:
    session = exporter.session
    header = {
        "type": "session",
        "format": "turnstore",
        "version": TURNSTORE_FORMAT_VERSION,
        "session_id": session.session_id,
        "agent_id": session.agent_id,
        "title": session.title,
        "metadata": session.metadata,
        "created_at": _rfc3339(session.created_at),
        "updated_at": _rfc3339(session.updated_at),
        "source": exporter.sources.source,
        "source_format": exporter.source_format,
    }
    yield _dumps(header) + "\n"
    sources = exporter.sources.loops
    for loop in exporter.store.loops.list(session.session_id):
        loop_record = {"type": "loop", **loop.model_dump(mode="json"), "source": sources.get(loop.loop_id)}
        yield _dumps(loop_record) + "\n"
    for row in exporter.rows():
        record: dict[str, Any] = {
            "type": "message",
            "id": row.id,
            "loop_id": row.loop_id,
            "turn_index": row.turn_index,
            "seq": row.seq,
            "message": stored_json(row),
        }
        if row.role != "assistant" and row.input_tokens is not None:
            record["usage"] = {**dict(zip(USAGE_FIELDS, (int(v or 0) for v in row.usage_tokens()))), "cost": row.cost}
            record["priced_as"] = {"model": row.model, "provider": row.provider}
        if row.role == "assistant" and row.input_tokens is None:
            record["usage_known"] = False  # the source recorded no usage for it: counted at loop level
        if "timestamp" not in record["message"] and row.timestamp is not None:
            record["timestamp"] = row.timestamp
        if row.source is not None:
            record["source"] = row.source
        yield _dumps(record) + "\n"


def stored_json(row: ExportRow) -> Any:
    """A row's stored message text as JSON; text that is not JSON (changed outside turnstore) is a StorageError."""
    try:
        return json.loads(row.message)
    except ValueError as error:
        raise StorageError(
            f"stored message {row.id} cannot be read: {error} (the database was changed outside turnstore)"
        ) from None


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _rfc3339(value: datetime) -> str:
    """``0005-01-02T03:04:05.000000Z``: the year always four digits (``strftime`` drops leading zeros)."""
    return value.astimezone(timezone.utc).replace(tzinfo=None).isoformat("T", "microseconds") + "Z"


_WRITE_BATCH = 1 << 20
"""Bytes gathered before each write to the temporary file."""


def write_export(path: str | os.PathLike[str], chunks: Iterable[str]) -> None:
    """Write ``chunks`` to ``path`` as one whole: into a temporary file beside it, renamed over it when complete.

    The file is the owner's only (mode 0600) whatever the umask. A file that
    was at ``path`` is replaced by the new one, so it does not keep a wider
    mode it had (nor its owner or links: a symlink at ``path`` is replaced,
    not followed). When anything fails, ``path`` is left as it was and the
    temporary file is removed; a reader never sees a half-written export.

    Raises:
        ExportFailed: the file could not be written (the message names it and the system's reason).
    """
    target = os.path.expanduser(os.fspath(path))  # ~ is the home folder, as in a shell
    folder, name = os.path.split(target)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{name[:64]}.", suffix=".part", dir=folder or ".")
    except OSError as error:
        raise _failed(target, error) from None
    try:
        try:
            os.chmod(temp, 0o600)  # mkstemp's 0600 less the umask: a umask such as 0277 would leave 0400
            _write_all(fd, chunks)
            os.fsync(fd)  # the data is on disk before the name points at it
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException as error:
        try:
            os.unlink(temp)
        except OSError:
            pass
        if isinstance(error, OSError):
            raise _failed(target, error) from None
        raise


def _write_all(fd: int, chunks: Iterable[str]) -> None:
    batch: list[bytes] = []
    size = 0
    for chunk in chunks:
        data = chunk.encode("utf-8")
        batch.append(data)
        size += len(data)
        if size >= _WRITE_BATCH:
            _write_bytes(fd, b"".join(batch))
            batch, size = [], 0
    _write_bytes(fd, b"".join(batch))


def _write_bytes(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _failed(target: str, error: OSError) -> ExportFailed:
    reason = error.strerror or str(error) or type(error).__name__
    return ExportFailed(f"cannot write the export to {target!r}: {reason}")
