"""What the store returns besides messages: sessions, loops, turns and stored rows.

These are plain pydantic models built from database rows in one place each
(the repositories); database rows never leave the library.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue, model_validator

from .deprecation import renamed
from .models import AgentMessage, Message, Usage

__all__ = [
    "ContextPage",
    "ContinuationKind",
    "Loop",
    "LoopConfig",
    "LoopStatus",
    "SearchHit",
    "Session",
    "SessionSummary",
    "StoredMessage",
    "Turn",
]


class ContinuationKind(str, Enum):
    """How a loop continues its parent (phi-core's ``ContinuationKind``)."""

    INITIAL = "initial"
    """A loop with no parent: the context starts here."""
    DEFAULT = "default"
    """The next prompt of the conversation: the parent's whole context comes first."""
    RERUN = "rerun"
    """The parent loop run again: the context is what the parent started from."""
    BRANCH = "branch"
    """An alternative continuation from a message of the parent (``fork_after``)."""
    COMPACTION = "compaction"
    """Starts with a summary that replaces the history before ``keep_from``."""

    def __str__(self) -> str:
        return self.value


class LoopStatus(str, Enum):
    """Where a loop is in its life (phi-core's ``LoopStatus``, lower-cased)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    REJECTED = "rejected"
    ABORTED = "aborted"

    def __str__(self) -> str:
        return self.value


class Record(BaseModel):
    """Base of the store's result models."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LoopConfig(BaseModel):
    """The model settings a loop ran with (phi-core's ``LoopConfigSnapshot``); extra keys are kept."""

    model_config = ConfigDict(extra="allow")

    model: str
    provider: str | None = None
    config_id: str | None = None
    thinking_level: str | None = None

    def effective_config_id(self) -> str:
        """phi-core's config segment of a loop id: ``config_id``, else ``provider.model-slug[.thinking]``."""
        if self.config_id:
            return self.config_id
        slug = "".join(c if c.isalnum() or c == "-" else "-" for c in self.model)
        thinking = ".thinking" if self.thinking_level not in (None, "off") else ""
        return f"{self.provider}.{slug}{thinking}" if self.provider else f"{slug}{thinking}"


class Session(Record):
    """One conversation."""

    session_id: str
    agent_id: str | None = None
    title: str | None = None
    metadata: dict[str, JsonValue] | None = None
    created_at: datetime
    updated_at: datetime


class SessionSummary(Session):
    """A session as listed, with how much it holds."""

    loops: int = 0
    messages: int = 0


class Loop(Record):
    """One agent run: from a prompt to a final answer."""

    loop_id: str
    session_id: str
    parent_loop_id: str | None = None
    continuation_kind: ContinuationKind = ContinuationKind.INITIAL
    fork_after: int | None = None
    """Message id in the parent after which this loop forks; None means the parent's end."""
    keep_from: int | None = None
    """Compaction loops: the first message of the parent chain kept after the summary."""
    config: dict[str, Any] | None = None
    config_id: str | None = None
    status: LoopStatus = LoopStatus.RUNNING
    started_at: datetime
    ended_at: datetime | None = None
    spawn_loop_id: str | None = None
    """Sub-agent loops: the loop whose tool call started this one."""
    spawn_tool_call_id: str | None = None
    """Sub-agent loops: the tool call that started this one."""
    reported_usage: Usage | None = None
    """Usage the source reported for the whole loop (counted only where no message carries usage)."""
    reported_requests: int | None = None
    """How many model calls ``reported_usage`` covers, where the source or app said."""
    metadata: dict[str, JsonValue] | None = None

    @property
    def model(self) -> str | None:
        """The model of the loop's config, if recorded."""
        return (self.config or {}).get("model")

    @property
    def provider(self) -> str | None:
        """The provider of the loop's config, if recorded."""
        return (self.config or {}).get("provider")


class StoredMessage(Record):
    """A message with where it is stored: its id, loop, turn and place in the loop.

    Its id is ``message_id``, as in :class:`SearchHit` (and as a session's is
    ``session_id``, a loop's ``loop_id``); ``id`` is its deprecated old name.
    """

    message_id: int
    session_id: str
    loop_id: str
    turn_index: int | None
    seq: int
    message: AgentMessage
    source: str | None = None
    """The verbatim source record, for imported messages."""

    @model_validator(mode="before")
    @classmethod
    def _old_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and "id" in data and "message_id" not in data:
            renamed("StoredMessage(id=...)", "message_id=...", stacklevel=5)
            data = {("message_id" if key == "id" else key): value for key, value in data.items()}
        return data

    @property
    def id(self) -> int:
        """Deprecated: the old name of :attr:`message_id` (warns)."""
        renamed("StoredMessage.id", "StoredMessage.message_id")
        return self.message_id


class SearchHit(Record):
    """A message that matched a full-text search: where it is, a highlighted snippet, and its rank.

    ``snippet`` is a short piece of the message's text around what matched, on
    one line (runs of whitespace are single spaces); ``highlights`` are the
    ``[start, end)`` character ranges of matched words in it. ``rank`` is
    higher for a better match (SQLite: minus FTS5's bm25; PostgreSQL:
    ``ts_rank``); ranks compare within one result list, not across backends. (On
    SQLite, the few newest messages not yet in the index, found by a read-only
    store or while another writer holds the lock, are ranked by their own
    statistics until they are indexed: docs/search.md.)
    Open the hit's turn with ``store.messages.turn(hit.loop_id, hit.turn_index)``
    (``turnstore show SESSION --turn N`` on the command line).
    """

    session_id: str
    loop_id: str
    turn_index: int | None
    message_id: int
    seq: int
    role: str
    kind: str | None = None
    """An extension message's kind, else None."""
    timestamp: int | None = None
    """Unix milliseconds."""
    snippet: str
    highlights: list[tuple[int, int]]
    rank: float


class ContextPage(Record):
    """A page of the context of a loop (``store.messages.context_page``): its messages, and where it lies.

    Offsets count the stored rows the context is built from (``store.messages.path``'s, in order), so a
    page's ``next_offset`` is the next page's ``offset`` whatever the pages hold.
    """

    messages: list[Message]
    message_ids: list[int | None]
    """The stored id of each message; None for a synthetic result (a call that has none)."""
    offset: int
    next_offset: int | None
    """Where the next page starts; None: this page is the last."""
    rows: int
    """Stored rows the whole context is built from."""


class Turn(Record):
    """One model call with the prompt before it and the tool results after it."""

    loop_id: str
    turn_index: int
    messages: list[AgentMessage]
