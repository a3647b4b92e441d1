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
  any other call continues the latest turn.
* ``await session.record_usage(result)`` stores what a run cost in a loop of
  its own (``continuation="initial"``, so it is no part of the items'
  context): one ``openai_agents.request_usage`` extension message per model
  request where the SDK lists them (``request_usage_entries``), else the
  run's usage on the loop (``store.loops.end(usage=..., requests=...)``).
  Items carry no usage, so their assistant messages are stored with unknown
  usage; ``store.usage.session(session_id)`` then holds the SDK's totals.

Database calls run on the :class:`~turnstore.aio.AsyncStore`'s worker threads;
a cancelled call still finishes (or never starts) as a whole, never halfway.
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
from ._arguments import check_adapter_arguments
from ._surrogates import without_surrogates

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

    from ..store import Store

__all__ = ["REQUEST_USAGE", "TurnstoreSession"]

ITEMS_SUFFIX = ".items"
"""The items loop's id is the session id and this."""

REQUEST_USAGE = "openai_agents.request_usage"
"""Kind of the extension message holding one model request's usage."""


class TurnstoreSession(SessionABC):
    """An OpenAI Agents SDK session kept in a turnstore store.

    Args:
        session_id: the turnstore session (created on the first ``add_items``).
        store: an open :class:`~turnstore.aio.AsyncStore`; default: one opened on
            ``url`` (or the default store) and closed by :meth:`close`.
        url: the store to open when ``store`` is not given.
        session_settings: the SDK's session settings, or a dict of them (``limit``: default
            number of items ``get_items`` returns).
    """

    def __init__(
        self,
        session_id: str,
        store: AsyncStore | None = None,
        *,
        url: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        if store is not None and url is not None:
            raise InvalidArgument("url", "give a store or a url, not both")
        check_adapter_arguments(
            session_id,
            store,
            AsyncStore,
            "TurnstoreSession(session_id, store) takes an AsyncStore (await AsyncStore.open(url))",
        )
        self.session_id = session_id
        self.session_settings = (
            SessionSettings() if session_settings is None else coerce_session_settings(session_settings)
        )
        self.loop_id = f"{session_id}{ITEMS_SUFFIX}"
        """The loop holding the session's items."""
        self._store = store
        self._url = url
        self._owned = store is None
        self._started = False
        self._opening = asyncio.Lock()

    async def store(self) -> AsyncStore:
        """The store (opened on first use when the session owns it; concurrent first calls open it once)."""
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    self._store = await AsyncStore.open(self._url)
        return self._store

    async def _call(self, function: Any, *args: Any) -> Any:
        store = await self.store()
        return await store.run(function, *args)

    # --- the session protocol -------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit`` (or the settings' limit), the latest ``limit``."""
        return cast(
            "list[TResponseInputItem]",
            await self._call(self._get, resolve_session_limit(limit, self.session_settings)),
        )

    def _get(self, store: Store, limit: int | None) -> list[Any]:
        last = (
            None if limit is None or limit < 0 else limit
        )  # a negative limit: everything, as SQLiteSession's LIMIT -1
        try:
            texts = store.messages.source_texts(self.loop_id, last=last)
        except LoopNotFound:  # nothing added yet, or cleared
            return []
        # One parse of all the items as a JSON array: per-item json.loads calls cost twice as much.
        return cast("list[Any]", json.loads("[" + ",".join(texts) + "]"))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store items at the end of the session, all or none; a first user item opens a new turn.

        Raises:
            InvalidArgument: an item is not a JSON object.
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
        stamp = now_ms()
        rows = [
            # The source keeps a lone surrogate as its JSON escape; the canonical row gets U+FFFD.
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
        messages = [
            message if message is not None else ExtensionMessage(kind=str(row.item.get("type", "item")), data=row.item)
            for message, row in zip(made, rows)
        ]
        first = rows[0].item
        opens = first.get("role") == "user" and first.get("type", "message") == "message"
        await self._call(self._add, messages, texts, opens)

    def _add(self, store: Store, messages: list[Any], texts: list[str], opens: bool) -> None:
        for attempt in range(2):
            self._start(store)
            try:
                with store.transaction():
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

        Outside any transaction: on PostgreSQL a refused insert would abort the one around it."""
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
        if not any(loop.loop_id == self.loop_id for loop in store.loops.list(self.session_id)):
            try:  # under the session's lock: a concurrent first call's loop is seen, not written twice
                store.loops.start(self.session_id, loop_id=self.loop_id, parent_loop_id=None, continuation="initial")
            except AlreadyExists:
                pass
        self._started = True

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it; None when the session is empty."""
        return cast("TResponseInputItem | None", await self._call(self._pop))

    def _pop(self, store: Store) -> Any:
        tried = None
        while True:
            with store.transaction():
                try:
                    newest = store.messages.sources(self.loop_id, last=1)
                except LoopNotFound:
                    return None
                if not newest:
                    return None
                message_id, _turn, source = newest[0]
                try:
                    store.messages.delete(message_id)
                except (MessageNotFound, InvalidArgument):
                    # On PostgreSQL another pop took it, or an add came after it, since it was read:
                    # read the newest again. The same newest refused twice is refused for good.
                    if message_id == tried:
                        raise
                    tried = message_id
                    continue
            return json.loads(source) if source is not None else None

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
            InvalidArgument: ``model`` is not a string.
        """
        if model is not None and not isinstance(model, str):
            raise InvalidArgument("model", f"must be a model name (a string), got {type(model).__name__}")
        usage = result.context_wrapper.usage
        entries = list(getattr(usage, "request_usage_entries", None) or [])
        return cast(str, await self._call(self._record, usage, entries, model or _run_model(result)))

    def _record(self, store: Store, usage: Any, entries: list[Any], model: str | None) -> str:
        self._started = False
        self._start(store)
        with store.transaction():
            loop = store.loops.start(
                self.session_id,
                parent_loop_id=None,
                continuation="initial",
                config={"model": model} if model else None,
                metadata={"kind": "openai_agents.run_usage"},
            )
            if entries:
                for entry in entries:
                    store.messages.append(
                        ExtensionMessage(kind=REQUEST_USAGE, data=_usage_data(entry)),
                        loop_id=loop.loop_id,
                        usage=_usage(entry),
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
                store.loops.end(loop.loop_id, usage=_usage(usage), requests=int(usage.requests))
        return loop.loop_id

    async def close(self) -> None:
        """Close the store if the session opened it."""
        if self._owned and self._store is not None:
            await self._store.close()
            self._store = None


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
    cached = int(getattr(details, "cached_tokens", 0) or 0)
    written = int(getattr(details, "cache_write_tokens", 0) or 0)
    reasoning = int(getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", 0) or 0)
    return Usage(
        input=int(usage.input_tokens) - cached - written,
        output=int(usage.output_tokens),
        reasoning=reasoning,
        cache_read=cached,
        cache_write=written,
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
