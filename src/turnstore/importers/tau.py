"""``tau``: Tau (and Operator-Use) session histories: JSONL session files and Tau's SQLite ``entries`` table.

A Tau session is a pi-style entry tree. A JSONL file holds one session: a
header line (``{"type":"session"}``; Operator-Use's early ``session_header``
is accepted too), then one entry per line with an ``id`` and a ``parent_id``
(absent or ``null`` on a root). Tau's SQLite backend (``sessions.db``, one per
project) keeps the same JSON lines as ``payload`` rows of an ``entries``
table, ordered by ``seq``, one session per ``session_id``.

Every entry becomes a tree node (:mod:`turnstore.importers.tree` turns the
tree into loops, turns and branches):

* ``message`` entries become messages (:mod:`turnstore.importers.tau_messages`);
  a ``tool`` message with several results becomes one node per result, chained.
* ``compaction`` opens a compaction loop (summary first, history kept from
  ``first_kept_entry_id``); ``branch_summary`` opens a branch loop. Both carry
  the usage of the model call that wrote the summary, when recorded.
* ``session_info`` names the session (the last one wins, as in Tau) and is
  kept in the session metadata; it is transparent in the tree: its children
  hang from its parent.
* Every other entry (``leaf``, ``label``, ``model_change``,
  ``thinking_level_change``, ``custom``, ``custom_message``, ``channel``)
  becomes an extension message of kind = its type, data = the entry as written.

Assistant messages do not name their model: it is the last ``model_change``
on the entry's path (else ``unknown``). Each source line is kept verbatim on
the rows it became. A malformed record is reported as ``file:LINE`` (or
``file: entries seq=N``); when its id is readable its children are re-linked
to its parent, so ``--skip-invalid`` loses only that record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import InvalidMessage, InvalidRecord
from ..models import ExtensionMessage
from .base import ImportOptions, RecordError, SessionBundle, parse_time
from .files import open_source
from .reading import json_problem, read_lines
from .sqlite_source import SQLITE_ERRORS, SqliteSource, connect_read_only, is_sqlite
from .tau_messages import BadRecord, convert_message, convert_usage, ms, tool_call_names
from .tree import BRANCH_SUMMARY, COMPACTION, Node, build_loops, resolve_skipped, skip_unparsed

__all__ = ["TauImporter"]

HEADER_TYPES = frozenset({"session", "session_header"})
EXTENSION_ENTRIES = frozenset(
    {"leaf", "label", "model_change", "thinking_level_change", "custom", "custom_message", "channel"}
)
SQLITE_SUFFIXES = frozenset({".db", ".sqlite", ".sqlite3"})
UNKNOWN = "unknown"
_LINK = re.compile(
    r'^\{"id":"(?P<id>[^"\\]+)","timestamp":[-+.0-9eE]+'
    r'(?:,"parent_id":(?:"(?P<parent>[^"\\]+)"|null)[,}]|(?!,"parent_id")[,}])'
)
"""The envelope Tau writes first on every entry line: enough to re-link the children of a line that is not JSON."""


class TauImporter:
    """Reads Tau / Operator-Use JSONL session files and Tau ``sessions.db`` databases."""

    format = "tau"

    def accepts(self, path: Path) -> bool:
        """``*.jsonl`` session files, and SQLite files that have an ``entries`` table.

        A ``.db`` file that cannot be read at all is taken too: it may be a
        ``sessions.db``, and the import reports why it cannot be read rather
        than passing it over in silence.
        """
        if path.suffix == ".jsonl":
            return True
        if path.suffix not in SQLITE_SUFFIXES:
            return False
        if is_sqlite(path):
            return _has_entries_table(path)
        return not _readable(path)

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """One bundle for a JSONL file; one per ``session_id`` for a SQLite database."""
        if is_sqlite(path):
            yield from _database_bundles(path)
        else:
            yield _file_bundle(path)


# --- sources ----------------------------------------------------------------------


@dataclass
class _Record:
    """One source line or row, before conversion."""

    place: str
    text: str
    value: Any
    """The parsed JSON, or the :class:`InvalidRecord` it failed with."""


def _file_bundle(path: Path) -> SessionBundle:
    """The session of one JSONL file; a file without a header cannot be placed and raises."""
    records = [_Record(f"{path}:{number}", line, _parse(line, f"{path}:{number}")) for number, line in _lines(path)]
    if not records:
        raise InvalidRecord(f"{path}:1", "empty file: no Tau session header")
    header = records[0]
    if isinstance(header.value, InvalidRecord):
        raise header.value
    if not _is_header(header.value) or not isinstance(header.value.get("id"), str) or not header.value["id"]:
        raise InvalidRecord(header.place, "a Tau session file starts with a session header that has an id")
    bundle = _new_bundle(header.value["id"], str(path), header)
    _fill(bundle, records[1:])
    return bundle


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, verbatim line)`` of each non-blank line.

    Lines are split on ``\\n`` only: Tau (pydantic) writes U+2028 and other
    Unicode line separators raw inside JSON strings.
    """
    for number, line in read_lines(path):
        if line.strip():
            yield number, line


def _parse(text: str, place: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        return InvalidRecord(place, json_problem(error))


def _database_bundles(path: Path) -> Iterator[SessionBundle]:
    """One bundle per ``session_id`` of a Tau ``entries`` table (in order of first write), rows in ``seq`` order.

    Sessions are read one at a time through Tau's ``(session_id, seq)`` index,
    so a large project database is never held in memory whole.
    """
    try:
        with closing(connect_read_only(path)) as connection:
            source = SqliteSource(connection, path)
            source.refuse_computed(["entries"])
            query = "SELECT session_id FROM entries GROUP BY session_id ORDER BY MIN(seq)"
            for (session_id,) in connection.execute(query).fetchall():
                rows = source.rows(
                    "entries",
                    ("seq", "payload"),
                    "WHERE session_id = ? ORDER BY seq",
                    (session_id,),
                    as_blob={"payload"},  # as bytes, so a payload that is not UTF-8 is reported for its own row
                )
                records = [
                    _row_record(f"{path}: entries seq={row['seq']}", row["payload"], problem) for row, problem in rows
                ]
                yield _database_bundle(str(session_id), f"{path}#{session_id}", records)
    except SQLITE_ERRORS as error:
        raise InvalidRecord(str(path), f"not a Tau sessions database ({error})") from None


def _database_bundle(session_id: str, origin: str, records: list[_Record]) -> SessionBundle:
    """One session of the database; its ``session_id`` column names it (the header's ``id`` normally agrees)."""
    header = records[0]
    if _is_header(header.value):
        bundle = _new_bundle(session_id, origin, header)
        _fill(bundle, records[1:])
        return bundle
    # Tau itself reads such a session as empty; report it, and keep what can be kept.
    bundle = SessionBundle(session_id=session_id, origin=origin)
    bundle.errors.append(RecordError(header.place, "the session does not start with a session header"))
    _fill(bundle, records)
    return bundle


def _row_record(place: str, payload: Any, problem: str | None = None) -> _Record:
    """A ``payload`` column value as a record (Tau writes text; a BLOB is read as UTF-8); ``problem``
    says why the payload was not read (a value over the limit)."""
    if problem is not None:
        return _Record(place, problem, InvalidRecord(place, problem))
    if isinstance(payload, bytes):
        try:
            payload = payload.decode("utf-8")
        except UnicodeDecodeError:
            return _Record(place, payload.decode("utf-8", "replace"), InvalidRecord(place, "payload is not UTF-8"))
    if not isinstance(payload, str):
        return _Record(place, str(payload), InvalidRecord(place, "payload is not text"))
    return _Record(place, payload, _parse(payload, place))


def _readable(path: Path) -> bool:
    """Whether the file can be opened for reading (it is, and stays, unread)."""
    try:
        open_source(path).close()
    except OSError:
        return False
    return True


def _has_entries_table(path: Path) -> bool:
    try:
        with closing(connect_read_only(path)) as connection:
            query = "SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = 'entries'"
            return connection.execute(query).fetchone() is not None
    except SQLITE_ERRORS:
        return False


def _is_header(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("type"), str) and value["type"] in HEADER_TYPES


def _new_bundle(session_id: str, origin: str, header: _Record) -> SessionBundle:
    data = header.value
    metadata = {key: data[key] for key in ("cwd", "parent_session", "version") if data.get(key) is not None}
    bundle = SessionBundle(
        session_id=session_id,
        origin=origin,
        created_at=parse_time(data.get("timestamp")),
        metadata=metadata or None,
        source=header.text,
        records=1,
    )
    bundle.add_source(header.text)
    return bundle


# --- entries -> tree nodes ------------------------------------------------------------


@dataclass
class _Entry:
    """A readable entry: its record, id, parent and the parsed object."""

    index: int
    """Position among the session's records (errors are reported in source order)."""
    record: _Record
    id: str
    parent: str | None
    data: dict[str, Any]


class _Session:
    """Conversion state of one session: nodes made so far, and how entry ids map onto them."""

    def __init__(self, bundle: SessionBundle) -> None:
        self.bundle = bundle
        self.nodes: list[tuple[Node, str | None]] = []
        """Each node with its entry's ``parent_id`` (resolved to a node once every entry is read)."""
        self.last_node: dict[str, str] = {}
        """Entry id -> id of the last node it became (its children hang from it)."""
        self.skipped: dict[str, str | None] = {}
        """Entries that became no node (session_info, malformed): their children hang from their parent."""
        self.tool_names: dict[str, str] = {}
        self.session_info: list[dict[str, Any]] = []
        self.errors: list[tuple[int, RecordError]] = []

    def error(self, index: int, place: str, reason: str) -> None:
        self.errors.append((index, RecordError(place, reason)))

    def resolve(self, entry_id: str | None) -> str | None:
        """The node a child of ``entry_id`` hangs from."""
        entry_id = resolve_skipped(self.skipped, entry_id)
        if entry_id is None:
            return None
        return self.last_node.get(entry_id, entry_id)


def _fill(bundle: SessionBundle, records: list[_Record]) -> None:
    """Convert a session's entry records into loops and messages of ``bundle``."""
    session = _Session(bundle)
    entries = _read_entries(session, records)
    settings = _path_settings(entries, dict(session.skipped))
    for entry in entries:
        try:
            _convert(session, entry, settings.get(entry.id, {}))
        except BadRecord as error:
            session.error(entry.index, entry.record.place, str(error))
            session.skipped[entry.id] = entry.parent
        except ValidationError as error:
            session.error(entry.index, entry.record.place, str(InvalidMessage.from_pydantic(error)))
            session.skipped[entry.id] = entry.parent
    bundle.errors.extend(error for _, error in sorted(session.errors, key=lambda item: item[0]))
    nodes = []
    for node, parent_entry in session.nodes:
        if node.parent_id is None:  # the first node of an entry; later ones are chained already
            node.parent_id = session.resolve(parent_entry)
        nodes.append(node)
    if session.session_info:
        bundle.title = _text_or_none(session.session_info[-1].get("name"))
        bundle.metadata = {**(bundle.metadata or {}), "session_info": session.session_info}
    build_loops(bundle, nodes, f"{bundle.session_id}.tau")


def _read_entries(session: _Session, records: list[_Record]) -> list[_Entry]:
    """Count and digest every record; keep the readable entries, report the rest."""
    entries: list[_Entry] = []
    for index, record in enumerate(records):
        session.bundle.records += 1
        session.bundle.add_source(record.text)
        value = record.value
        if isinstance(value, InvalidRecord):
            session.error(index, value.place, value.reason)
            skip_unparsed(session.skipped, _LINK, record.text)  # when its id is readable, children hang from its parent
            continue
        if not isinstance(value, dict):
            session.error(index, record.place, f"an entry is a JSON object, not {type(value).__name__}")
            continue
        entry_id, parent = value.get("id"), value.get("parent_id")
        if not isinstance(entry_id, str) or not entry_id:
            session.error(index, record.place, "entry without an id")
            continue
        if parent is not None and not isinstance(parent, str):
            session.error(index, record.place, f"entry parent_id {parent!r} is not an id")
            continue
        entries.append(_Entry(index, record, entry_id, parent, value))
    return entries


def _path_settings(entries: list[_Entry], unreadable: dict[str, str | None]) -> dict[str, dict[str, str]]:
    """For each entry, the model, provider and thinking level last set on its path (root to entry).

    ``unreadable`` links the ids of lines that are not JSON to their parents, so
    the path runs through them.
    """
    parent_of: dict[str, str | None] = {**unreadable, **{entry.id: entry.parent for entry in entries}}
    data_of = {entry.id: entry.data for entry in entries}
    settings: dict[str, dict[str, str]] = {}
    for entry in entries:
        chain: list[str] = []
        walked: set[str] = set()
        current: str | None = entry.id
        while current is not None and current in parent_of and current not in settings and current not in walked:
            chain.append(current)
            walked.add(current)
            current = parent_of[current]
        inherited = settings.get(current, {}) if current is not None else {}
        for link in reversed(chain):
            inherited = _apply_setting(inherited, data_of.get(link, {}))
            settings[link] = inherited
    return settings


def _apply_setting(inherited: dict[str, str], data: dict[str, Any]) -> dict[str, str]:
    kind = data.get("type")
    if kind == "model_change" and isinstance(data.get("model_id"), str):
        provider = data.get("provider_id")
        return {**inherited, "model": data["model_id"], "provider": provider if isinstance(provider, str) else UNKNOWN}
    if kind == "thinking_level_change" and isinstance(data.get("thinking_level"), str):
        return {**inherited, "thinking_level": data["thinking_level"]}
    return inherited


def _convert(session: _Session, entry: _Entry, setting: dict[str, str]) -> None:
    """Turn one entry into its node(s), or into session data."""
    data, kind = entry.data, entry.data.get("type")
    timestamp = ms(data.get("timestamp"))
    config: dict[str, object] | None = dict(setting) if "model" in setting else None
    priced_as = (setting.get("model"), setting.get("provider"))

    def node(message: Any, **extra: Any) -> Node:
        return Node(
            id=entry.id,
            parent_id=None,
            message=message,
            source=entry.record.text,
            place=entry.record.place,
            timestamp=timestamp,
            config=config,
            **extra,
        )

    if kind == "message":
        messages = convert_message(
            data.get("message"),
            model=setting.get("model", UNKNOWN),
            provider=setting.get("provider", UNKNOWN),
            tool_names=session.tool_names,
            fallback_ms=timestamp,
        )
        if isinstance(data.get("message"), dict) and data["message"].get("role") == "assistant":
            session.tool_names.update(tool_call_names(data["message"]))
        _add_chain(session, entry, [node(message) for message in messages])
    elif kind == COMPACTION:
        first_kept = data.get("first_kept_entry_id")
        if first_kept is not None and not isinstance(first_kept, str):
            raise BadRecord("compaction first_kept_entry_id is not an entry id")
        message = ExtensionMessage(kind="compaction_summary", data=data)
        _add_chain(
            session,
            entry,
            [node(message, opens=COMPACTION, keep_from_id=first_kept, usage=_summary_usage(data), priced_as=priced_as)],
        )
    elif kind == BRANCH_SUMMARY:
        message = ExtensionMessage(kind="branch_summary", data=data)
        _add_chain(
            session, entry, [node(message, opens=BRANCH_SUMMARY, usage=_summary_usage(data), priced_as=priced_as)]
        )
    elif isinstance(kind, str) and kind in EXTENSION_ENTRIES:
        _add_chain(session, entry, [node(ExtensionMessage(kind=kind, data=data))])
    elif kind == "session_info":
        session.session_info.append(data)
        session.skipped[entry.id] = entry.parent
    elif isinstance(kind, str) and kind in HEADER_TYPES:
        raise BadRecord("a second session header inside the session")
    else:
        raise BadRecord(f"unknown entry type {kind!r}")


def _add_chain(session: _Session, entry: _Entry, nodes: list[Node]) -> None:
    """Add the nodes one entry became, chained: the first keeps the entry id, the rest follow it."""
    for index, node in enumerate(nodes):
        if index == 0:
            session.nodes.append((node, entry.parent))
        else:
            node.id = f"{entry.id}#{index}"
            node.parent_id = nodes[index - 1].id
            session.nodes.append((node, None))
    session.last_node[entry.id] = nodes[-1].id


def _summary_usage(data: dict[str, Any]) -> Any:
    usage = data.get("usage")
    return convert_usage(usage) if usage is not None else None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
