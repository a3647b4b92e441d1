"""LangChain chat history kept in turnstore: ``TurnstoreChatMessageHistory(session_id, store=None, *, url=None)``.

It implements ``langchain_core.chat_history.BaseChatMessageHistory``, so it
plugs into ``RunnableWithMessageHistory`` unchanged. Each LangChain message is
stored as one canonical turnstore row, and its ``message_to_dict`` JSON is kept
as the row's verbatim ``source``: :attr:`~TurnstoreChatMessageHistory.messages`
rebuilds every message from it, so ``messages_to_dict`` of what is read equals
what was added, for every message kind (tool calls, invalid tool calls, usage
and response metadata, ids, chunks included).

Mapping: a human message becomes a user message, an AI message (or chunk) an
assistant message (text, tool calls with their ids, ``usage_metadata`` as its
usage, ``response_metadata["model_name"]`` as its model), a tool message a tool
result (named after its call, found in the same add or in the session, when it
names no tool), a system message a system message; function and generic chat messages,
which name no tool call, become extension messages of kind
``langchain.<type>``.

Each ``add_messages`` call is one loop (a ``RunnableWithMessageHistory``
exchange: the prompt and the reply). A human message opens a turn; an AI
message after tool results opens the next one, so a turn is one model call plus
the tools it ran.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._extras import missing_extra

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
except ModuleNotFoundError as error:
    raise missing_extra(error, "langchain") from error

from ..aio import AsyncStore
from ..errors import SessionNotFound
from ..models import ExtensionMessage, Message, Usage
from ..store import Store
from ._arguments import check_adapter_arguments, sync_store
from ._media import media_block
from ._stores import run_on
from ._surrogates import has_surrogates, without_surrogates
from ._usage import inclusive_usage

__all__ = ["TurnstoreChatMessageHistory", "to_turnstore_usage"]

FRAMEWORK = "langchain"

NAME = "TurnstoreChatMessageHistory"

_SOURCE_PREFIX = '{"type":'
"""How every ``message_to_dict`` JSON this adapter writes starts: tells its sources from other rows' in a session."""


class TurnstoreChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history stored in one turnstore session.

    The sync methods (``messages``, ``add_messages``, ``clear``: what LangChain's
    sync ``invoke`` calls) take a :class:`~turnstore.store.Store`; the async ones
    (``aget_messages``, ``aadd_messages``, ``aclear``: what ``ainvoke`` calls) take a
    ``Store`` (run in the event loop's executor, as LangChain runs a sync history)
    or an :class:`~turnstore.aio.AsyncStore` (run on its worker threads).

    Args:
        session_id: the turnstore session (created on the first add).
        store: the store to use; default: a ``Store`` opened on ``url`` (closed by :meth:`close`).
        url: the store's URL when no ``store`` is given; default ``$TURNSTORE_URL`` or ``./turnstore.db``.
    """

    def __init__(self, session_id: str, store: Store | AsyncStore | None = None, *, url: str | None = None) -> None:
        check_adapter_arguments(session_id, store, url, NAME)
        self.session_id = session_id
        self._owned = store is None
        self.store: Store | AsyncStore = Store(url) if store is None else store

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, in order, as added."""
        return self._read(sync_store(self.store, NAME, "history.aget_messages"))

    def _read(self, store: Store) -> list[BaseMessage]:
        try:
            rows = store.messages.rows(self.session_id)  # stored text, not parsed: only sources are read
            dicts = [json.loads(r.source) for r in rows if r.source is not None and r.source.startswith(_SOURCE_PREFIX)]
        except SessionNotFound:
            return []
        return messages_from_dict(dicts)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store ``messages`` as one loop of the session, in one transaction."""
        self._add(sync_store(self.store, NAME, "history.aadd_messages"), messages)

    def _add(self, store: Store, messages: Sequence[BaseMessage]) -> None:
        if not messages:
            return
        names = {
            call["id"]: call["name"]
            for m in messages
            if isinstance(m, AIMessage)
            for call in m.tool_calls
            if call["id"]
        }
        unnamed = {m.tool_call_id for m in messages if isinstance(m, ToolMessage) and not m.name} - names.keys()
        with store.transaction():
            store.sessions.create(self.session_id, exist_ok=True)
            names |= store.messages.tool_names(self.session_id, unnamed)  # calls an earlier add stored
            loop = store.loops.start(self.session_id, metadata={"framework": FRAMEWORK})  # a new id, never another's
            turn, after_tools = -1, False
            for message in messages:
                row = _row(message, names)
                data = message_to_dict(message)
                source = json.dumps(data, ensure_ascii=False)
                if has_surrogates(source):  # UTF-8 cannot hold them: escaped in the source, U+FFFD in the row
                    source = json.dumps(data)
                    row = type(row).model_validate(without_surrogates(row.model_dump()))
                if isinstance(message, HumanMessage) or turn < 0 or (isinstance(message, AIMessage) and after_tools):
                    turn += 1
                after_tools = isinstance(message, ToolMessage)
                store.messages.append(
                    row,
                    loop_id=loop.loop_id,
                    turn_index=None if isinstance(row, ExtensionMessage) else turn,
                    source=source,
                )
            store.loops.end(loop.loop_id)

    def clear(self) -> None:
        """Delete the session and everything in it (a later add starts it afresh)."""
        self._clear(sync_store(self.store, NAME, "history.aclear"))

    def _clear(self, store: Store) -> None:
        try:
            store.sessions.delete(self.session_id)
        except SessionNotFound:
            pass

    async def aget_messages(self) -> list[BaseMessage]:
        """:attr:`messages`, run off the event loop."""
        return await run_on(self.store, self._read)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages`, run off the event loop."""
        await run_on(self.store, self._add, messages)

    async def aclear(self) -> None:
        """:meth:`clear`, run off the event loop."""
        await run_on(self.store, self._clear)

    def close(self) -> None:
        """Close the store if this history opened it."""
        if self._owned and isinstance(self.store, Store):
            self.store.close()


def to_turnstore_usage(usage: Any) -> Usage:
    """LangChain ``usage_metadata`` as a turnstore :class:`~turnstore.models.Usage`.

    LangChain's ``input_tokens`` sum every input token type, the cache reads
    and writes of ``input_token_details`` included; canonical ``input`` leaves
    those out (they are priced apart), so they are subtracted, as the LangChain
    importer does. Reasoning comes from ``output_token_details``; ``total_tokens``
    is kept as reported (0 when missing).
    """
    inputs = usage.get("input_token_details") or {}
    return inclusive_usage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read=int(inputs.get("cache_read") or 0),
        cache_write=int(inputs.get("cache_creation") or 0),
        reasoning=int((usage.get("output_token_details") or {}).get("reasoning") or 0),
        total_tokens=int(usage.get("total_tokens") or 0),
    )


def _row(message: BaseMessage, tool_names: dict[str, str]) -> Message | ExtensionMessage:
    """The canonical row of a message; ``tool_names`` (call id -> name) names a tool message that names no tool."""
    text = _text(message.content)
    if isinstance(message, HumanMessage):
        return Message.user(_blocks(message.content))
    if isinstance(message, SystemMessage):
        return Message.system(_blocks(message.content))
    if isinstance(message, ToolMessage):
        return Message.tool_result(
            message.tool_call_id,
            _blocks(message.content),
            tool_name=message.name or tool_names.get(message.tool_call_id, ""),
            is_error=message.status == "error",
        )
    if isinstance(message, AIMessage):
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks.extend(
            {"type": "toolCall", "id": call.get("id") or "", "name": call["name"], "arguments": call["args"]}
            for call in message.tool_calls
        )
        metadata = message.response_metadata or {}
        model = metadata.get("model_name") or metadata.get("model") or ""
        provider = metadata.get("model_provider") or ""
        usage = None if message.usage_metadata is None else to_turnstore_usage(message.usage_metadata)
        return Message.assistant(blocks, model=str(model), provider=str(provider), usage=usage)
    return ExtensionMessage(kind=f"{FRAMEWORK}.{message.type}")


def _blocks(content: Any) -> str | list[dict[str, Any]]:
    """A message's content as canonical blocks: text as text, image/audio/file blocks as media (``_media``)."""
    if isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for block in content:
        media = _media_of(block)
        if media is not None:
            blocks.append(media)
        elif blocks and blocks[-1]["type"] == "text":
            blocks[-1]["text"] += "\n" + _text([block])
        else:
            blocks.append({"type": "text", "text": _text([block])})
    return blocks


def _media_of(block: Any) -> dict[str, Any] | None:
    """A LangChain image, audio or file block (standard v1 and v0.3 forms, OpenAI's ``image_url``) as media."""
    if not isinstance(block, dict) or block.get("type") not in ("image", "audio", "file", "image_url"):
        return None
    if block["type"] == "image_url":
        url = block.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        return media_block(url=url) if isinstance(url, str) else None  # a data: URL names its own media type
    data = block.get("base64", block.get("data") if block.get("source_type", "base64") == "base64" else None)
    url = block.get("url")
    mime = block.get("mime_type") or block.get("mimeType")
    if not isinstance(data, str) and not isinstance(url, str):
        return None
    name = (block.get("extras") or {}).get("filename") or block.get("filename")
    return media_block(
        data=data if isinstance(data, str) else None,
        mime_type=mime if isinstance(mime, str) else None,
        url=url if isinstance(url, str) else None,
        name=name if isinstance(name, str) else None,
    )


def _text(content: Any) -> str:
    """A message's text: a string as is; content blocks' text joined, other blocks as JSON."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        else:
            parts.append(json.dumps(block, ensure_ascii=False, default=repr))
    return "\n".join(parts)
