"""``pi``: pi-mono coding-agent session files (``~/.pi/agent/sessions/--<cwd>--/<ts>_<id>.jsonl``).

A file is one session: a ``{"type":"session"}`` header line, then one entry
per line. Versions 1 to 3 are read as pi itself reads them after its
``migrateSessionEntries``:

* **v1** (no ``version``): entries carry no ``id``/``parentId``; they form one
  line, each the child of the one before. A compaction names its first kept
  entry by ``firstKeptEntryIndex``, an index into the file's parsed lines
  (the header is 0). The header may carry ``provider``/``modelId``/``thinkingLevel``.
* **v2**: entries form a tree by ``id``/``parentId``; extension messages have
  the role ``hookMessage`` (renamed ``custom`` in v3).
* **v3**: the current format.

Each entry becomes one row of a loop tree (:func:`turnstore.importers.tree.build_loops`):
``message`` entries become canonical messages (``docs/importers/pi.md`` has the
field mapping); a ``compaction`` entry opens a ``compaction`` loop starting with a
``compaction_summary`` extension message and keeping from ``firstKeptEntryId``
(newer pi: its ``retainedTail`` copies become the rows after the summary); a
``branch_summary`` entry opens a ``branch`` loop; ``session_info`` entries name the
session and are kept in its metadata; every other entry becomes an extension
message of kind = its entry type. Every line is kept verbatim as its row's source.
Usage recorded on assistant messages, tool results (newer pi), compactions and
branch summaries counts; tool-result, compaction and branch usage is priced at
the model in force there.

A malformed line fails its session (or, skipping, loses only itself: its
children hang from its parent).
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import InvalidMessage, InvalidRecord
from ..models import (
    AssistantMessage,
    ExtensionMessage,
    Message,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from .base import ImportOptions, RecordError, SessionBundle, parse_time, path_stem, path_text, time_ms
from .compact_tree import CompactTree, build_compact_loops
from .pi_messages import canonical_usage, fast_message_line
from .reading import read_jsonl
from .spill import SPILL_AFTER_MESSAGES, Spill, spill_from_start
from .tree import Node, build_loops, resolve_skipped, skip_unparsed

__all__ = ["PiImporter"]

CURRENT_VERSION = 3

_BASE_KEYS = frozenset({"type", "id", "parentId", "timestamp"})
"""Keys every entry has; the rest of an entry is its extension message's ``data``."""

_SIDE_ENTRIES = frozenset({"model_change", "thinking_level_change", "custom", "custom_message", "label"})
"""Entry types that become an extension message of kind = the entry type."""

_EXTENSION_ROLES = {
    "bashExecution": "bashExecution",
    "custom": "custom",
    "hookMessage": "custom",  # v2 spelling of ``custom``
    "branchSummary": "branch_summary",
    "compactionSummary": "compaction_summary",
}
"""Coding-agent message roles -> extension kind."""

_MOVED_KEYS = frozenset({"usage", "retainedTail"})
"""Summary-entry keys stored elsewhere than the extension message: the usage columns, and rows."""

_ENTRY_START = re.compile(r'\{"type":"[^"\\]*","id":"(?P<id>[^"\\]+)","parentId":(?:"(?P<parent>[^"\\]+)"|null)')
"""The start of a line as pi's ``JSON.stringify`` writes message, compaction and setting entries."""

_TAIL = "~retainedTail."
"""Infix of the ids given to a compaction's ``retainedTail`` messages (pi ids never hold ``~``)."""

_VALIDATE = {
    cls.ROLE: cls.__pydantic_validator__.validate_python for cls in (UserMessage, AssistantMessage, ToolResultMessage)
}
"""The canonical LLM roles pi shares, and their validators (called directly: this is the hot path)."""

Config = dict[str, Any]


class PiImporter:
    """Reads pi-mono session files, versions 1 to 3."""

    format = "pi"

    def accepts(self, path: Path) -> bool:
        return path.suffix == ".jsonl"

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        yield _SessionFile(path, options).read()


class _SessionFile:
    """One session file being read: its header, its entries as tree nodes, and what is in force where."""

    def __init__(self, path: Path, options: ImportOptions) -> None:
        self.path = path
        self.options = options
        self.version = CURRENT_VERSION
        self.nodes: list[Node] = []
        self.config_at: dict[str, Config | None] = {}
        """Entry id -> model settings in force after it (pi's buildSessionContext: model_change,
        thinking_level_change and assistant messages along the path)."""
        self.moved: dict[str, str | None] = {}
        """Entry id -> the id its children hang from instead (a skipped entry's parent; a compaction's
        last retained-tail message)."""
        self.line_numbers = array("i")
        """v1: the line number of each parsed line, by index (the header is 0); its id is ``line{number}``."""
        self.tail_ids: set[str] = set()
        self.session_info: list[dict[str, Any]] = []
        self.previous: str | None = None
        """v1: the id of the last entry, the parent of the next."""
        self.header_config: Config | None = None
        """v1 headers name the model and thinking level a session starts with."""
        self.spill: Spill | None = None
        self.compact: CompactTree | None = None
        """A large session's entries (:mod:`turnstore.importers.compact_tree`), once it is spilled: from
        then on :attr:`nodes` and :attr:`config_at` stay empty."""

    # --- the file -------------------------------------------------------------------

    def read(self) -> SessionBundle:
        """The session bundle of the file.

        Raises:
            InvalidRecord: the file does not start with a pi session header
                (or holds a version this importer does not know).
        """
        try:
            return self._read()
        finally:
            if self.compact is not None:
                self.compact.close()

    def _read(self) -> SessionBundle:
        lines = read_jsonl(self.path, fast_message_line)
        first = next(lines, None)
        if first is None:
            raise InvalidRecord(f"{self.path}:1", "empty file: a pi session starts with a session header")
        bundle = self._header(*first)
        if spill_from_start(self.path):
            self._spill()
        origin = bundle.origin
        add_source = bundle.add_source
        errors = bundle.errors
        entry = self._entry
        v1 = self.version == 1
        records = 0
        for number, line, value in lines:
            records += 1
            add_source(line)
            if isinstance(value, InvalidRecord):
                errors.append(RecordError(value.place, value.reason))
                self._unparsed(line)
                continue
            if v1:
                self.line_numbers.append(number)  # pi counts parsed lines only
            try:
                entry(value, line, f"{origin}:{number}")
            except InvalidRecord as error:
                errors.append(RecordError(error.place, error.reason))
            if self.compact is None and len(self.nodes) > SPILL_AFTER_MESSAGES:
                self._spill()
        bundle.records += records
        bundle.spill = self.spill
        if self.compact is not None:
            _, row_of = build_compact_loops(bundle, self.compact, f"{bundle.session_id}.pi")
            self._finish_compact(bundle, self.compact, row_of)
            self.compact.release()
            return bundle
        build_loops(bundle, self.nodes, f"{bundle.session_id}.pi")
        self._finish(bundle)
        return bundle

    def _spill(self) -> None:
        """From now on keep the session's rows on disk (:mod:`turnstore.importers.spill`) and its entries
        in a :class:`~turnstore.importers.compact_tree.CompactTree`, those read so far included."""
        limits, row_values = self.options.limits, self.options.row_values
        if limits is None or row_values is None:
            return
        self.spill = Spill(limits, row_values)
        self.compact = CompactTree(path_text(str(self.path)))  # the prefix of the places (the bundle's origin)
        nodes, config_at = self.nodes, self.config_at
        self.nodes, self.config_at = [], {}
        for node in nodes:
            self._compact_keep(node, config_at.get(node.id), node.id in self.tail_ids)

    def _compact_keep(self, node: Node, raw: Config | None, tail: bool) -> None:
        """Spill a node's row and keep its entry in the compact tree.

        A retained-tail copy keeps neither usage nor source (see :meth:`_finish`).
        """
        assert self.spill is not None and self.compact is not None
        stub = self.spill.keep(
            node.message,
            source=None if tail else node.source,
            usage=None if tail else node.usage,
            priced_as=node.priced_as,
            timestamp=node.timestamp,
            usage_known=not tail,
        )
        self.compact.add(node, stub, raw)

    def _config_after(self, entry_id: str) -> Config | None:
        """The settings in force after entry ``entry_id`` (pi's buildSessionContext)."""
        if self.compact is not None:
            return self.compact.config_after(entry_id)
        return self.config_at.get(entry_id)

    def _header(self, number: int, line: str, value: Any) -> SessionBundle:
        place = f"{self.path}:{number}"
        if isinstance(value, InvalidRecord):
            raise value
        if not isinstance(value, dict) or value.get("type") != "session":
            raise InvalidRecord(place, 'a pi session file starts with a {"type":"session"} header line')
        version = value.get("version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= CURRENT_VERSION:
            raise InvalidRecord(place, f"unsupported pi session version {version!r} (this importer reads 1 to 3)")
        self.version = version
        self.line_numbers.append(0)  # the header is parsed line 0
        model = _config(None, value.get("modelId"), value.get("provider"))
        self.header_config = _after_setting(value, "thinking_level_change", model)
        session_id = value.get("id")
        if not isinstance(session_id, str) or not session_id:
            session_id = self.options.session_id or _id_from_file_name(self.path)
        bundle = SessionBundle(
            session_id=session_id,
            origin=str(self.path),
            metadata={key: item for key, item in value.items() if key not in ("type", "id", "timestamp")},
            created_at=parse_time(value.get("timestamp")),
            source=line,
            hash_format=PiImporter.format,
        )
        bundle.add_source(line)
        return bundle

    def _finish(self, bundle: SessionBundle) -> None:
        """Report entries the tree walk could not reach; mark the retained tail; name the session."""
        placed = {row.ref for row in bundle.messages}
        reported = {error.place for error in bundle.errors}
        for node in self.nodes:
            if node.id not in placed and node.place not in reported:
                reason = "not imported: an ancestor entry is missing, malformed or its own descendant"
                bundle.errors.append(RecordError(node.place, reason))
                reported.add(node.place)
        self._loop_configs(bundle)
        if self.tail_ids:
            for row in bundle.messages:
                if row.ref in self.tail_ids:
                    # Copies of messages already counted where they first appeared.
                    row.usage_known, row.usage, row.source = False, None, None
        self._name(bundle)

    def _name(self, bundle: SessionBundle) -> None:
        for info in self.session_info:
            name = info.get("name")
            if isinstance(name, str) and name.strip():
                bundle.title = name.strip()
        if self.session_info:
            bundle.metadata = {**(bundle.metadata or {}), "session_info": self.session_info}

    def _finish_compact(self, bundle: SessionBundle, tree: CompactTree, row_of: Any) -> None:
        """:meth:`_finish` for a session kept in a compact tree (its retained tail was spilled without usage)."""
        reported = {error.place for error in bundle.errors}
        parent = tree.parent
        for index in range(len(tree)):
            if row_of[index] < 0 and parent[index] != -4:  # not a duplicate: one with its id is placed
                place = tree.place(index)
                if place not in reported:
                    reason = "not imported: an ancestor entry is missing, malformed or its own descendant"
                    bundle.errors.append(RecordError(place, reason))
                    reported.add(place)
        duplicated = any(value == -4 for value in parent)
        first = bundle.messages.first_entries("assistant")  # type: ignore[attr-defined]
        for loop in bundle.loops:
            entry = first.get(loop.loop_id)
            config = _loop_config(tree.raw_of_id(entry, duplicated)) if entry is not None else None
            if config is not None:
                loop.config = tree.shared(config)
        self._name(bundle)

    def _loop_configs(self, bundle: SessionBundle) -> None:
        """A loop runs with the settings in force at its first model call (a session's opening
        model_change and thinking_level_change entries come before it, inside the loop)."""
        first: dict[str, str] = {}
        for row in bundle.messages:
            if row.message.role == "assistant" and row.loop_id not in first and row.ref is not None:
                first[row.loop_id] = row.ref
        for loop in bundle.loops:
            ref = first.get(loop.loop_id)
            config = _loop_config(self.config_at.get(ref)) if ref is not None else None
            if config is not None:
                loop.config = dict(config)

    # --- entries --------------------------------------------------------------------

    def _entry(self, entry: Any, line: str, place: str) -> None:
        """Turn one entry into its node(s)."""
        if not isinstance(entry, dict):
            raise InvalidRecord(place, f"expected a JSON object, got {type(entry).__name__}")
        entry_id, parent_id = self._tree_place(entry, place)
        kind = entry.get("type")
        if kind == "session_info":  # session data, not a row: its children hang from its parent
            self.session_info.append(entry)
            self.moved[entry_id] = parent_id
            return
        before = self._config_after(parent_id) if parent_id is not None else self.header_config
        config = before
        try:
            if kind == "message":
                node, config = self._message(entry, place, before)
            elif kind == "compaction":
                node = self._compaction(entry, place, before)
            elif kind == "branch_summary":
                node = self._summary(entry, "branch_summary", place, before)
                node.opens = "branch_summary"
            elif isinstance(kind, str) and kind in _SIDE_ENTRIES:
                node = self._side(entry, kind, place)
                config = _after_setting(entry, kind, before)
            else:
                raise InvalidRecord(place, f"unknown entry type {kind!r}")
        except InvalidRecord:
            self.moved[entry_id] = parent_id  # its children hang from its parent instead
            raise
        node.id, node.parent_id, node.source = entry_id, parent_id, line
        node.config = config if config is not None and "model" in config else None  # _loop_config(config)
        if self.compact is not None:
            self._compact_keep(node, config, False)
        else:
            self.config_at[entry_id] = config
            self.nodes.append(node)
        if kind == "compaction" and isinstance(entry.get("retainedTail"), list):
            self._retained_tail(entry, node, place, config)

    def _tree_place(self, entry: dict[str, Any], place: str) -> tuple[str, str | None]:
        """``(id, parent id)`` of an entry: its own (v2+), or the line's (v1)."""
        if self.version == 1:  # a line: each entry the child of the one before
            entry_id = f"line{self.line_numbers[-1]}"
            parent_id, self.previous = self.previous, entry_id
        else:
            given = entry.get("id")
            parent_id = entry.get("parentId")
            if not isinstance(given, str) or not given:
                raise InvalidRecord(place, "entry without an id")
            entry_id = given
            if parent_id is not None and not isinstance(parent_id, str):
                raise InvalidRecord(place, f"parentId must be a string or null, got {type(parent_id).__name__}")
        return entry_id, resolve_skipped(self.moved, parent_id)

    def _message(self, entry: dict[str, Any], place: str, before: Config | None) -> tuple[Node, Config | None]:
        message = entry.get("message")
        if isinstance(message, Message):  # read by fast_message_line, already validated
            node = Node(id="", parent_id=None, message=message, source="", place=place)
        elif isinstance(message, dict):
            node = _message_node(message, place, entry, before)
        else:
            raise InvalidRecord(place, "message entry without a message object")
        if node.message.role == "assistant":
            model = node.message
            return node, _config(before, model.model, model.provider)  # type: ignore[union-attr]
        return node, before

    def _compaction(self, entry: dict[str, Any], place: str, before: Config | None) -> Node:
        node = self._summary(entry, "compaction_summary", place, before)
        node.opens = "compaction"
        if isinstance(entry.get("retainedTail"), list):
            return node  # newer pi: the retained messages are copied into the entry (see _retained_tail)
        index = entry.get("firstKeptEntryIndex")
        if self.version == 1 and isinstance(index, int) and 0 <= index < len(self.line_numbers):
            node.keep_from_id = f"line{self.line_numbers[index]}" if index else None
        elif isinstance(entry.get("firstKeptEntryId"), str):
            node.keep_from_id = entry["firstKeptEntryId"]
        return node

    def _summary(self, entry: dict[str, Any], kind: str, place: str, before: Config | None) -> Node:
        """A compaction or branch summary: the extension message pi's context renders, with the entry's usage.

        ``data`` is the entry's own fields, with its time as unix ms (as pi's
        CompactionSummaryMessage / BranchSummaryMessage carry it); the usage
        goes to the row's usage columns and a retained tail to rows of its own.
        """
        data = {key: value for key, value in entry.items() if key not in _BASE_KEYS and key not in _MOVED_KEYS}
        data["timestamp"] = _entry_ms(entry)
        usage = _usage(entry["usage"], place) if entry.get("usage") is not None else None
        return _node(_extension(kind, data, place), place, usage=usage, priced_as=_priced(before, usage))

    def _side(self, entry: dict[str, Any], kind: str, place: str) -> Node:
        data = {key: value for key, value in entry.items() if key not in _BASE_KEYS}
        return _node(_extension(kind, data, place), place, timestamp=_entry_ms(entry))

    def _unparsed(self, line: str) -> None:
        """A line that is not JSON loses only itself: when it starts as pi writes entries
        (``{"type":…,"id":…,"parentId":…``), its children hang from its parent instead."""
        if self.version > 1:
            skip_unparsed(self.moved, _ENTRY_START, line)

    def _retained_tail(self, entry: dict[str, Any], compaction: Node, place: str, config: Config | None) -> None:
        """Newer pi copies the messages kept after a compaction into ``retainedTail``; its context is the
        summary, those copies, then what follows. They become rows right after the summary (all or
        none of them), and the compaction's children hang from the last of them."""
        nodes: list[Node] = []
        parent = compaction.id
        for index, message in enumerate(entry["retainedTail"]):
            where = f"{place} retainedTail[{index}]"
            if not isinstance(message, dict):
                raise InvalidRecord(where, "expected a message object")
            node = _message_node(message, where, entry, config)
            node.id, node.parent_id, node.config = f"{compaction.id}{_TAIL}{index}", parent, compaction.config
            nodes.append(node)
            parent = node.id
        self.tail_ids.update(node.id for node in nodes)
        if self.compact is not None:
            for node in nodes:
                self._compact_keep(node, None, True)
        else:
            self.nodes.extend(nodes)
        if nodes:
            self.moved[compaction.id] = parent
            if self.compact is not None:
                self.compact.set_raw(parent, config)
            else:
                self.config_at[parent] = config


# --- messages ---------------------------------------------------------------------------


def _message_node(message: dict[str, Any], place: str, entry: dict[str, Any], before: Config | None) -> Node:
    """The node of one pi AgentMessage (``message`` is parsed JSON of our own: it is changed in place)."""
    role = message.get("role")
    validate = _VALIDATE.get(role) if isinstance(role, str) else None
    if validate is None:
        kind = _EXTENSION_ROLES.get(role) if isinstance(role, str) else None
        if kind is None:
            raise InvalidRecord(place, f"unknown message role {role!r}")
        data = {key: value for key, value in message.items() if key != "role"}
        stamp = message.get("timestamp")
        timestamp = stamp if isinstance(stamp, int) and not isinstance(stamp, bool) else _entry_ms(entry)
        return _node(_extension(kind, data, place), place, timestamp=timestamp)
    usage = None
    content = message.get("content")
    if role == "assistant":
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and "thinkingSignature" in block and block.get("type") == "thinking":
                    block["signature"] = block.pop("thinkingSignature")
        if isinstance(message.get("usage"), dict):
            canonical_usage(message["usage"])
    else:
        if isinstance(content, str):  # pi allows a plain string; canonical content is a list of blocks
            message["content"] = [{"type": "text", "text": content}]
        if role == "toolResult" and "usage" in message:  # newer pi: a tool's own model calls
            usage = _usage(message.pop("usage"), place)
    stamp = message.get("timestamp")
    if type(stamp) is not int:  # parsed JSON: not an integer, or a boolean
        message["timestamp"] = _ms(stamp, entry)
    try:
        model = validate(message, by_alias=True, by_name=False)
    except ValidationError as error:
        raise InvalidRecord(place, str(InvalidMessage.from_pydantic(error))) from None
    if usage is None:
        return Node(id="", parent_id=None, message=model, source="", place=place)
    return Node(
        id="", parent_id=None, message=model, source="", place=place, usage=usage, priced_as=_priced(before, usage)
    )


def _node(message: Any, place: str, **fields: Any) -> Node:
    """A node for ``message``; its tree place, source and config are filled in by the caller."""
    return Node(id="", parent_id=None, message=message, source="", place=place, **fields)


def _ms(stamp: Any, entry: dict[str, Any]) -> int:
    """A message time that is not an integer: pi writes unix ms, so a number with a fraction is
    still ms; a message without one takes its entry's time (never invented)."""
    if isinstance(stamp, float) and math.isfinite(stamp) and stamp >= 0:
        return round(stamp)
    return _entry_ms(entry)


def _usage(raw: Any, place: str) -> Usage:
    if not isinstance(raw, dict):
        raise InvalidRecord(place, f"usage must be an object, got {type(raw).__name__}")
    try:
        usage: Usage = Usage.model_validate(canonical_usage(dict(raw)))
        return usage
    except ValidationError as error:
        raise InvalidRecord(place, str(InvalidMessage.from_pydantic(error, "usage"))) from None


def _extension(kind: str, data: dict[str, Any], place: str) -> ExtensionMessage:
    try:
        return ExtensionMessage(kind=kind, data=data)
    except ValidationError as error:
        raise InvalidRecord(place, str(InvalidMessage.from_pydantic(error))) from None


# --- what is in force ---------------------------------------------------------------------


def _config(before: Config | None, model: Any, provider: Any) -> Config | None:
    """The settings after a model switch (or an assistant reply, which names the model that served it)."""
    if not isinstance(model, str):
        return before
    if before is not None and before.get("model") == model and before.get("provider") == provider:
        return before  # shared, not copied: most entries change nothing
    config: Config = {**(before or {}), "model": model}
    config["provider"] = provider if isinstance(provider, str) else None
    return config


def _after_setting(entry: dict[str, Any], kind: str, before: Config | None) -> Config | None:
    """The settings after a ``model_change`` or ``thinking_level_change`` entry (or a v1 header)."""
    if kind == "model_change":
        return _config(before, entry.get("modelId"), entry.get("provider"))
    if kind == "thinking_level_change" and isinstance(entry.get("thinkingLevel"), str):
        return {**(before or {}), "thinking_level": entry["thinkingLevel"]}
    return before


def _loop_config(config: Config | None) -> Config | None:
    """A loop's config needs a model; settings without one leave it to the loop's first reply."""
    return config if config is not None and "model" in config else None


def _priced(config: Config | None, usage: Usage | None) -> tuple[str | None, str | None]:
    """(model, provider) to price ``usage`` at: the model in force where it was recorded."""
    if config is None or usage is None:
        return None, None
    return config.get("model"), config.get("provider")


# --- small helpers ------------------------------------------------------------------------------


def _entry_ms(entry: dict[str, Any]) -> int:
    """An entry's ISO timestamp as unix ms (0 when it has none)."""
    return time_ms(entry.get("timestamp"))


def _id_from_file_name(path: Path) -> str:
    """pi names files ``<ISO time>_<session id>.jsonl``; the id is after the last ``_`` (else the stem)."""
    stem = path_stem(path)
    head, _, tail = stem.rpartition("_")
    return tail if head and tail else stem
