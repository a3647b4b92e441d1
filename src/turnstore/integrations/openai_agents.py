"""OpenAI Agents SDK sessions stored in turnstore: :class:`TurnstoreSession`.

``TurnstoreSession`` implements the SDK's session protocol
(``agents.memory.SessionABC``), so ``Runner.run(agent, input, session=...)``
keeps its history in turnstore:

* Every item becomes one message, mapped as the ``openai-agents`` importer maps
  it (:func:`turnstore.importers.openai_agents_items.item_messages`): user,
  system and developer messages, assistant messages, tool results; every other
  item (reasoning stays an assistant message; compaction, hosted tool calls,
  item references...) an extension message of kind = the item type. The
  item's JSON is kept as the row's verbatim ``source``; ``get_items`` returns
  those sources, so it gives back exactly what was added, in order.
* The items live in one loop per session, ``"{session_id}.items"``. Each
  ``add_items`` call whose first item is a user message opens a new turn;
  any other call continues the latest turn. A loop of that id in another
  session is refused (``AlreadyExists``): a session reads and writes only its own.
* A session imported from the SDK's database (``turnstore import
  openai-agents``) goes on where it left off: its items are the imported
  ones (an imported model response's items, one per line of its source, in
  the SDK's order: hosted tool items too, whose extension messages hold no
  source of their own), and the items loop continues its last loop.
* ``await session.record_usage(result)`` stores what a run cost in a loop of
  its own (``continuation_kind="initial"``, so it is no part of the items'
  context): one ``openai_agents.request_usage`` extension message per model
  request where the SDK lists them (``request_usage_entries``), else the
  run's usage on the loop (``store.loops.end(usage=..., requests=...)``).
  Items carry no usage, so their assistant messages are stored with unknown
  usage; ``store.usage.session(session_id)`` then holds the SDK's totals.

Database calls run on an :class:`~turnstore.aio.AsyncStore`'s worker threads, or
for a :class:`~turnstore.store.Store` in the event loop's default executor (as the
SDK's ``SQLiteSession`` runs its own); a cancelled call still finishes (or never
starts) as a whole, never halfway.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, cast

from agents.memory import SessionABC
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from ..aio import AsyncStore
from ..errors import AlreadyExists, InvalidArgument, LimitExceeded, LoopNotFound, MessageNotFound, SessionNotFound
from ..importers.base import RecordError
from ..importers.openai_agents_items import Row, item_messages
from ..models import ExtensionMessage, ToolResultMessage, Usage, now_ms
from ..records import Loop, StoredMessage
from ..store import Store
from ._arguments import check_adapter_arguments
from ._stores import run_on
from ._surrogates import without_surrogates
from ._usage import inclusive_usage

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["REQUEST_USAGE", "TurnstoreSession"]

ITEMS_SUFFIX = ".items"
"""The items loop's id is the session id and this."""

REQUEST_USAGE = "openai_agents.request_usage"
"""Kind of the extension message holding one model request's usage."""

RUN_USAGE = "openai_agents.run_usage"
"""``metadata.kind`` of the loop holding one run's usage."""

IMPORTED = "openai-agents"
"""The source format of a session imported from the SDK's database: its sources are the SDK's items."""

MAIN_BRANCH = "main"
"""The branch of an ``AdvancedSQLiteSession`` a session opened again reads (the importer's loop ``metadata.branch_id``)."""


class TurnstoreSession(SessionABC):
    """An OpenAI Agents SDK session kept in a turnstore store.

    Args:
        session_id: the turnstore session (created on the first ``add_items``).
        store: an open :class:`~turnstore.aio.AsyncStore` (its calls run on its worker
            threads) or :class:`~turnstore.store.Store` (its calls run in the event
            loop's default executor); default: an ``AsyncStore`` opened on ``url``
            (or the default store) and closed by :meth:`close`.
        url: the store to open when ``store`` is not given.
        session_settings: the SDK's session settings, or a dict of them (``limit``: default
            number of items ``get_items`` returns).
    """

    def __init__(
        self,
        session_id: str,
        store: AsyncStore | Store | None = None,
        *,
        url: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        check_adapter_arguments(session_id, store, url, "TurnstoreSession")
        self.session_id = session_id
        self.session_settings = (
            SessionSettings() if session_settings is None else coerce_session_settings(session_settings)
        )
        self.loop_id = f"{session_id}{ITEMS_SUFFIX}"
        """The loop the session's items are added to."""
        self._store = store
        self._url = url
        self._owned = store is None
        self._started = False
        self._opening = asyncio.Lock()

    async def store(self) -> AsyncStore | Store:
        """The store (opened on first use when the session owns it; concurrent first calls open it once)."""
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    self._store = await AsyncStore.open(self._url)
        return self._store

    async def _call(self, function: Any, *args: Any) -> Any:
        return await run_on(await self.store(), function, *args)

    # --- which loops hold the items -------------------------------------------------------

    def _own(self, store: Store) -> Loop:
        """The items loop, which must be this session's.

        Raises:
            LoopNotFound: it does not exist (yet, or any more).
            AlreadyExists: another session holds a loop of that id.
        """
        loop = store.loops.get(self.loop_id)
        if loop.session_id != self.session_id:
            raise AlreadyExists(
                f"loop {self.loop_id!r}, where session {self.session_id!r} keeps its items, belongs to session "
                f"{loop.session_id!r}; a TurnstoreSession uses only its own session's loops"
            )
        return loop

    def _head(self, store: Store) -> Loop | None:
        """The loop the session's items end in, None while there is none.

        The items loop; before it exists, in a session imported from the SDK's
        database (``turnstore import openai-agents``), the last loop of its main
        branch: the items continue the imported history.
        """
        try:
            return self._own(store)
        except LoopNotFound:
            pass
        try:
            if store.sessions.sources(self.session_id).source_format != IMPORTED:
                return None
            loops = store.loops.list(self.session_id)
        except SessionNotFound:
            return None
        main = [loop for loop in loops if _on_main_line(loop)]
        # Its end: the loop no other continues (loops started in one second are listed by id, ".10" before ".2").
        continued = {loop.parent_loop_id for loop in main}
        ends = [loop for loop in main if loop.loop_id not in continued]
        return ends[-1] if ends else None

    def _texts(self, store: Store, head: Loop) -> list[tuple[StoredMessage, list[str]]]:
        """The items' JSON texts along the path to ``head``, by the message holding them, oldest first.

        An imported model response is one message of several items (its source
        holds their texts one per line, hosted tool items in their place; the
        extension messages of those items, after it, have no source and are
        skipped); an item ``add_items`` stored is a message of its own.
        """
        return [
            (message, message.source.split("\n"))
            for message in store.messages.path(head.loop_id)
            if message.source is not None
        ]

    # --- the session protocol -------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit`` (or the settings' limit), the latest ``limit``.

        Raises:
            AlreadyExists: another session holds the items loop's id.
        """
        return cast(
            "list[TResponseInputItem]",
            await self._call(self._get, resolve_session_limit(limit, self.session_settings)),
        )

    def _get(self, store: Store, limit: int | None) -> list[Any]:
        last = (
            None if limit is None or limit < 0 else limit
        )  # a negative limit: everything, as SQLiteSession's LIMIT -1
        head = self._head(store)
        if head is None:  # nothing added yet, or cleared
            return []
        if head.loop_id == self.loop_id and head.parent_loop_id is None:  # every item in one loop, one per message
            try:
                texts = store.messages.source_texts(self.loop_id, last=last)
            except LoopNotFound:  # cleared meanwhile
                return []
        else:
            texts = [text for _, lines in self._texts(store, head) for text in lines]
            if last is not None:
                texts = texts[len(texts) - last :] if last else []
        # One parse of all the items as a JSON array: per-item json.loads calls cost twice as much.
        return cast("list[Any]", json.loads("[" + ",".join(texts) + "]"))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store items at the end of the session, all or none; a first user item opens a new turn.

        Raises:
            InvalidArgument: an item is not a JSON object.
            AlreadyExists: another session holds the items loop's id.
        """
        if not items:
            return
        texts = []
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise InvalidArgument(
                    "items",
                    f"item {index} is not a JSON object (got {type(item).__name__})",
                )
            texts.append(json.dumps(item))
        messages = _messages(cast("list[dict[str, Any]]", items), texts)
        first = cast("dict[str, Any]", items[0])
        opens = first.get("role") == "user" and first.get("type", "message") == "message"
        await self._call(self._add, messages, texts, opens)

    def _add(self, store: Store, messages: list[Any], texts: list[str], opens: bool) -> None:
        for attempt in range(2):
            self._start(store)
            try:
                with store.transaction():
                    self._own(store)
                    messages = self._name_tool_results(store, messages)
                    store.messages.append_to_turn(
                        self.loop_id, messages, new_turn=opens, sources=texts, usage_known=False
                    )
                return
            except LoopNotFound:  # the session was cleared (perhaps through another session object)
                if attempt:
                    raise
                self._started = False

    def _name_tool_results(self, store: Store, messages: list[Any]) -> list[Any]:
        """Tool results whose call an earlier ``add_items`` stored, named after it (looked up by call id)."""
        unnamed = {m.tool_call_id for m in messages if isinstance(m, ToolResultMessage) and not m.tool_name}
        if not unnamed:
            return messages
        names = store.messages.tool_names(self.session_id, unnamed)
        return [
            m.model_copy(update={"tool_name": names[m.tool_call_id]})
            if isinstance(m, ToolResultMessage) and not m.tool_name and m.tool_call_id in names
            else m
            for m in messages
        ]

    def _start(self, store: Store) -> None:
        """Create the session and its items loop if they do not exist yet (concurrent first calls agree).

        In an imported session the items loop continues its history (a ``default``
        continuation of :meth:`_head`). Outside any transaction: on PostgreSQL a
        refused insert would abort the one around it.
        """
        if self._started:
            return
        longest = store.settings.limits.max_id_length
        if len(self.loop_id) > longest:  # found before an empty session is left behind
            raise LimitExceeded(
                f"session_id is {len(self.session_id)} characters; with its items loop's suffix "
                f"{ITEMS_SUFFIX!r} it may be at most {longest - len(ITEMS_SUFFIX)}",
                [("session_id", "too long")],
            )
        store.sessions.create(session_id=self.session_id, exist_ok=True)
        head = self._head(store)
        if head is None or head.loop_id != self.loop_id:
            try:  # under the session's lock: a concurrent first call's loop is seen, not written twice
                store.loops.start(
                    self.session_id,
                    loop_id=self.loop_id,
                    parent_loop_id=None if head is None else head.loop_id,
                    continuation_kind="initial" if head is None else "default",
                )
            except AlreadyExists:
                self._own(store)  # a concurrent first call's, or another session's: refused
        self._started = True

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it; None when the session is empty.

        Raises:
            AlreadyExists: another session holds the items loop's id.
        """
        return cast("TResponseInputItem | None", await self._call(self._pop))

    def _pop(self, store: Store) -> Any:
        tried: list[int] = []
        while True:
            try:
                return self._pop_newest(store, tried)
            except (MessageNotFound, InvalidArgument):
                # On PostgreSQL another pop took the newest item, or an add came after it, since it was
                # read: read the newest again. The same newest refused twice is refused for good.
                if len(tried) > 1 and tried[-1] == tried[-2]:
                    raise

    def _pop_newest(self, store: Store, tried: list[int]) -> Any:
        """Remove and return the newest item, in one transaction; ``tried`` gets the id of the message deleted."""
        emptied_own_loop = False
        with store.transaction():
            head = self._head(store)
            if head is None:
                return None
            if head.loop_id == self.loop_id and head.parent_loop_id is None:
                newest = store.messages.sources(self.loop_id, last=1)
                if not newest:
                    return None
                message_id, _turn, source = newest[0]
                tried.append(message_id)
                store.messages.delete(message_id)
                return json.loads(source) if source is not None else None
            held = self._texts(store, head)
            if not held:
                return None
            message, lines = held[-1]
            loop = head
            while loop.loop_id != message.loop_id:  # loops the pops emptied stand between it and the end
                store.loops.delete(loop.loop_id)
                emptied_own_loop = emptied_own_loop or loop.loop_id == self.loop_id
                loop = store.loops.get(cast(str, loop.parent_loop_id))
            tried.append(message.message_id)
            # with the source-less extension messages of its hosted tool items after it
            store.messages.delete(message.message_id, with_later=True)
            if len(lines) > 1:  # the rest of an imported model response: each item a message of its own
                rest = lines[:-1]
                store.messages.append_turn(
                    message.loop_id,
                    message.turn_index or 0,
                    _messages([json.loads(text) for text in rest], rest),
                    sources=rest,
                    usage_known=False,
                )
        if emptied_own_loop:
            self._started = False
        return json.loads(lines[-1])

    async def clear_session(self) -> None:
        """Remove the session: its items and the usage recorded for it."""
        await self._call(self._clear)

    def _clear(self, store: Store) -> None:
        try:
            store.sessions.delete(self.session_id)
        except SessionNotFound:
            pass
        self._started = False

    # --- usage -------------------------------------------------------------------------

    async def record_usage(self, result: Any, *, model: str | None = None) -> str:
        """Store the usage of a run (a ``RunResult``, or anything with ``context_wrapper.usage``); returns its loop id.

        One extension message of kind :data:`REQUEST_USAGE` per model request where
        the SDK lists them, else the run's totals on the loop. ``model`` (what the
        usage is priced as) defaults to the model the run's last agent names: its
        ``model`` when that is a string, or a model object's ``model`` string. A run
        whose model is named nowhere has usage but no cost.

        Raises:
            InvalidArgument: ``model`` is not a string, or a token count is negative.
        """
        if model is not None and not isinstance(model, str):
            raise InvalidArgument("model", f"must be a model name (a string), got {type(model).__name__}")
        usage = result.context_wrapper.usage
        entries = list(getattr(usage, "request_usage_entries", None) or [])
        totals = _usage(usage)
        counted = [(entry, _usage(entry)) for entry in entries]
        return cast(str, await self._call(self._record, usage, totals, counted, model or _run_model(result)))

    def _record(
        self, store: Store, usage: Any, totals: Usage, entries: list[tuple[Any, Usage]], model: str | None
    ) -> str:
        self._started = False
        self._start(store)
        with store.transaction():
            loop = store.loops.start(
                self.session_id,
                parent_loop_id=None,
                continuation_kind="initial",
                config={"model": model} if model else None,
                metadata={"kind": RUN_USAGE},
            )
            if entries:
                for entry, counts in entries:
                    store.messages.append(
                        ExtensionMessage(kind=REQUEST_USAGE, data=_usage_data(entry)),
                        loop_id=loop.loop_id,
                        usage=counts,
                        model=model,
                    )
                # Requests the SDK counted but listed no usage for (a response that reported no tokens):
                # each a request of zero tokens, so requests equal the SDK's too.
                for _ in range(int(usage.requests or 0) - len(entries)):
                    store.messages.append(
                        ExtensionMessage(kind=REQUEST_USAGE, data={"unlisted": True}),
                        loop_id=loop.loop_id,
                        usage=Usage(input=0, output=0),
                        model=model,
                    )
                store.loops.end(loop.loop_id)
            else:
                store.loops.end(loop.loop_id, usage=totals, requests=int(usage.requests))
        return loop.loop_id

    async def close(self) -> None:
        """Close the store if the session opened it."""
        if self._owned and isinstance(self._store, AsyncStore):
            await self._store.close()
            self._store = None


def _messages(items: list[dict[str, Any]], texts: list[str]) -> list[Any]:
    """One canonical message per item (its JSON text in ``texts``), as the importer maps items.

    A lone surrogate is kept in the source as its JSON escape; the canonical row gets U+FFFD.
    An item the mapping refuses is kept as an extension message of kind = its type.
    """
    stamp = now_ms()
    rows = [
        Row(
            index,
            text,
            cast("dict[str, Any]", without_surrogates(item) if "\\ud" in text else item),
            f"item {index}",
            stamp,
        )
        for index, (text, item) in enumerate(zip(texts, items))
    ]
    errors: list[RecordError] = []
    made = item_messages(rows, errors)
    return [
        message if message is not None else ExtensionMessage(kind=str(row.item.get("type", "item")), data=row.item)
        for message, row in zip(made, rows)
    ]


def _on_main_line(loop: Loop) -> bool:
    """Whether an imported loop holds items of the SDK session's main branch (not a run's usage, not another branch)."""
    metadata = loop.metadata or {}
    return metadata.get("kind") != RUN_USAGE and metadata.get("branch_id", MAIN_BRANCH) == MAIN_BRANCH


def _run_model(result: Any) -> str | None:
    """The model a run's last agent names: ``Agent.model`` as a string, or a ``Model`` object's ``model``."""
    named = getattr(getattr(result, "last_agent", None), "model", None)
    if not isinstance(named, str):
        named = getattr(named, "model", None)
    return named if isinstance(named, str) and named else None


def _usage(usage: Any) -> Usage:
    """turnstore usage of an SDK ``Usage`` or ``RequestUsage``, as the importer maps ``turn_usage``: OpenAI's
    ``input_tokens`` include the cached reads and cache writes that canonical ``input`` leaves out."""
    details = getattr(usage, "input_tokens_details", None)
    return inclusive_usage(
        input_tokens=int(usage.input_tokens),
        output_tokens=int(usage.output_tokens),
        cache_read=int(getattr(details, "cached_tokens", 0) or 0),
        cache_write=int(getattr(details, "cache_write_tokens", 0) or 0),
        reasoning=int(getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", 0) or 0),
        total_tokens=int(usage.total_tokens),
    )


def _usage_data(entry: Any) -> dict[str, Any]:
    """A ``RequestUsage`` as JSON, field for field as the SDK reports it."""
    data: dict[str, Any] = {
        "input_tokens": int(entry.input_tokens),
        "output_tokens": int(entry.output_tokens),
        "total_tokens": int(entry.total_tokens),
    }
    for name in ("input_tokens_details", "output_tokens_details"):
        details = getattr(entry, name, None)
        if details is not None and hasattr(details, "model_dump"):
            data[name] = details.model_dump(mode="json")
    return data
