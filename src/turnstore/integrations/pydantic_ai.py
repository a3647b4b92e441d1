"""pydantic-ai message history kept in turnstore: ``TurnstoreHistory(session_id, store=None, *, url=None)``.

pydantic-ai hands an app its messages (``ModelRequest`` / ``ModelResponse``)
and takes them back as ``message_history=``. This adapter stores each run as
one turnstore loop and each pydantic-ai message as canonical rows, so the
store's turns, context and SQL usage totals work on them, while the original
message is kept as the row's verbatim ``source``: :meth:`TurnstoreHistory.load`
rebuilds the history from those sources, and its ``ModelMessagesTypeAdapter``
JSON is byte for byte what was saved.

Mapping (one pydantic-ai message gives one or more rows; the first carries the source):

* ``ModelRequest``: a system prompt part becomes a system message, a user prompt
  part a user message, a tool return part a tool result (marked as an error when
  its outcome is not ``success``), retry feedback a user message (a retry prompt
  of older pydantic-ai: an error tool result, or a user message when it names no tool).
* ``ModelResponse``: one assistant message (text, thinking with its signature,
  tool calls with their ids), with the response's usage, model and provider.
* A message with no part turnstore models (a request holding only parts of
  other kinds) is one extension message of kind ``pydantic-ai``.

Turns: a request holding a user prompt opens a turn, and the response that
follows is that turn's model call. pydantic-ai sends tool returns in the *next*
request; turnstore files them in the turn of the response that asked for them
(a turn is one model call plus the tools it ran), and the response after them
opens the next turn.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, overload

from ._extras import missing_extra

try:
    import pydantic_ai.messages as _messages
    from pydantic_ai.messages import (
        BinaryContent,
        FileUrl,
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
except ModuleNotFoundError as error:
    raise missing_extra(error, "pydantic-ai") from error

from typing_extensions import deprecated

from ..aio import AsyncStore
from ..errors import SessionNotFound
from ..models import ExtensionMessage, Message, Usage
from ..store import Store
from ._arguments import check_adapter_arguments, old_order, sync_store
from ._media import media_block
from ._stores import run_on
from ._usage import inclusive_usage

__all__ = ["TurnstoreHistory", "to_turnstore_usage"]

NAME = "TurnstoreHistory"

KIND = "pydantic-ai"
"""The kind of the extension message that stands for a pydantic-ai message turnstore has no row for."""

_RETRY_FEEDBACK: type[Any] | None = getattr(_messages, "RetryFeedbackPart", None)
"""Retry feedback that answers no tool call (newer pydantic-ai; older ones send a ``RetryPromptPart``)."""

_SOURCE_PREFIX = '{"parts":'
"""How the JSON of every pydantic-ai message starts: tells this adapter's sources from other rows' in a session."""


class TurnstoreHistory:
    """A pydantic-ai conversation stored in one turnstore session.

    pydantic-ai runs an agent both ways (``run_sync``, ``await run``), so both are
    here: :meth:`load`, :meth:`save` and :meth:`append` take a
    :class:`~turnstore.store.Store`; :meth:`aload`, :meth:`asave` and :meth:`aappend`
    take a ``Store`` (run in the event loop's executor) or an
    :class:`~turnstore.aio.AsyncStore` (run on its worker threads).

    Args:
        session_id: the turnstore session (created on the first save).
        store: the store to use; default: a ``Store`` opened on ``url`` (closed by :meth:`close`).
        url: the store's URL when no ``store`` is given; default ``$TURNSTORE_URL`` or ``./turnstore.db``.

    Example::

        history = TurnstoreHistory("chat-1", store)
        result = agent.run_sync("hi", message_history=history.load())
        history.save(result)

    The old order, ``TurnstoreHistory(store, session_id)``, still works for this
    release, with a ``DeprecationWarning``.
    """

    @overload
    def __init__(self, session_id: str, store: Store | AsyncStore | None = None, *, url: str | None = None) -> None: ...

    @overload
    @deprecated("TurnstoreHistory(store, session_id) is deprecated: use TurnstoreHistory(session_id, store)")
    def __init__(self, session_id: Store | AsyncStore, store: str) -> None: ...

    def __init__(self, session_id: Any, store: Any = None, *, url: str | None = None) -> None:
        session_id, store = old_order(session_id, store, NAME)
        check_adapter_arguments(session_id, store, url, NAME)
        self.session_id: str = session_id
        self._owned = store is None
        self.store: Store | AsyncStore = Store(url) if store is None else store

    def load(self) -> list[ModelMessage]:
        """The session's pydantic-ai messages, in order, as saved (what to pass as ``message_history=``)."""
        return self._load(sync_store(self.store, NAME, "history.aload"))

    async def aload(self) -> list[ModelMessage]:
        """:meth:`load`, off the event loop."""
        return await run_on(self.store, self._load)

    def _load(self, store: Store) -> list[ModelMessage]:
        try:
            rows = store.messages.rows(self.session_id)  # stored text, not parsed: only sources are read
            sources = [r.source for r in rows if r.source is not None and r.source.startswith(_SOURCE_PREFIX)]
        except SessionNotFound:
            return []
        if not sources:
            return []
        return ModelMessagesTypeAdapter.validate_json("[" + ",".join(sources) + "]")

    def save(self, result: Any) -> str:
        """Store the new messages of a run (``result.new_messages()``) as one loop; returns its id."""
        return self.append(result.new_messages())

    async def asave(self, result: Any) -> str:
        """:meth:`save`, off the event loop."""
        return await self.aappend(result.new_messages())

    async def aappend(self, messages: Sequence[ModelMessage], *, usage: Any = None) -> str:
        """:meth:`append`, off the event loop."""
        return await run_on(self.store, self._append, list(messages), usage)

    def close(self) -> None:
        """Close the store if this history opened it."""
        if self._owned and isinstance(self.store, Store):
            self.store.close()

    def append(self, messages: Sequence[ModelMessage], *, usage: Any = None) -> str:
        """Store ``messages`` as one loop of the session, in one transaction; returns the loop's id.

        Each response's own usage is recorded on its assistant message.
        ``usage`` (a pydantic-ai ``RunUsage``, or a turnstore ``Usage``) is the
        run's, given to ``loops.end``: it counts only if no response carried usage
        (a response pydantic-ai could not measure carries none), priced as the model
        of the run's last response.
        """
        return self._append(sync_store(self.store, NAME, "history.aappend"), messages, usage)

    def _append(self, store: Store, messages: Sequence[ModelMessage], usage: Any) -> str:
        run_usage, requests = _run_usage(usage)
        # The run's model (its last response's): what the run's usage is priced as, where it counts.
        last = next((m for m in reversed(messages) if isinstance(m, ModelResponse) and m.model_name), None)
        config = {"model": last.model_name, "provider": last.provider_name} if last is not None else None
        with store.transaction():
            store.sessions.create(self.session_id, exist_ok=True)
            loop = store.loops.start(  # a new id, never another session's loop
                self.session_id, config=config, metadata={"framework": KIND}
            )
            turn = -1
            responded = False
            for message in messages:
                text = ModelMessagesTypeAdapter.dump_json([message])[1:-1].decode()
                rows: list[tuple[int, Message | ExtensionMessage]] = []
                if isinstance(message, ModelResponse):
                    if turn < 0 or responded:
                        turn += 1
                    responded = True
                    rows.append((turn, _assistant(message)))
                else:
                    opens = any(isinstance(part, UserPromptPart) for part in message.parts)
                    if opens or turn < 0:
                        turn, responded = turn + 1, False
                    rows.extend((turn, row) for row in _request_rows(message))
                if not rows:
                    rows.append((max(turn, 0), ExtensionMessage(kind=KIND)))
                for index, (turn_index, row) in enumerate(rows):
                    store.messages.append(
                        row,
                        loop_id=loop.loop_id,
                        turn_index=None if isinstance(row, ExtensionMessage) else turn_index,
                        timestamp=_ms(getattr(message, "timestamp", None)),
                        source=text if index == 0 else None,
                    )
            store.loops.end(loop.loop_id, usage=run_usage, requests=requests)
        return loop.loop_id


def to_turnstore_usage(usage: Any) -> Usage:
    """A pydantic-ai ``RequestUsage`` or ``RunUsage`` as a turnstore :class:`~turnstore.models.Usage`.

    pydantic-ai's ``input_tokens`` count every input token once, cache reads
    and writes included; canonical ``input`` leaves those out (they are priced
    apart), so they are subtracted. ``reasoning`` is its
    ``output_reasoning_tokens``; ``total_tokens`` is kept as reported
    (0 when missing).
    """
    return inclusive_usage(
        input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
        cache_read=int(getattr(usage, "cache_read_tokens", 0) or 0),
        cache_write=int(getattr(usage, "cache_write_tokens", 0) or 0),
        reasoning=int(getattr(usage, "output_reasoning_tokens", 0) or 0),
        total_tokens=int(getattr(usage, "total_tokens", 0) or 0),
    )


def _run_usage(usage: Any) -> tuple[Usage | None, int | None]:
    if usage is None:
        return None, None
    if isinstance(usage, Usage):
        return usage, None
    requests = getattr(usage, "requests", None)
    return to_turnstore_usage(usage), requests if isinstance(requests, int) else None


def _request_rows(request: ModelRequest) -> list[Message | ExtensionMessage]:
    rows: list[Message | ExtensionMessage] = []
    for part in request.parts:
        stamp = _ms(getattr(part, "timestamp", None))
        if isinstance(part, SystemPromptPart):
            rows.append(Message.system(part.content, timestamp=stamp))
        elif isinstance(part, UserPromptPart):
            rows.append(Message.user(_user_blocks(part.content), timestamp=stamp))
        elif isinstance(part, ToolReturnPart):
            failed = getattr(part, "outcome", "success") != "success"
            rows.append(
                Message.tool_result(
                    part.tool_call_id,
                    part.model_response_str(),
                    tool_name=part.tool_name,
                    is_error=failed,
                    timestamp=stamp,
                )
            )
        elif _RETRY_FEEDBACK is not None and isinstance(part, _RETRY_FEEDBACK):  # answers no tool call
            rows.append(Message.user(str(part.model_response()), timestamp=stamp))
        elif isinstance(part, RetryPromptPart):  # older pydantic-ai: both kinds of retry
            if part.tool_name is None:
                rows.append(Message.user(part.model_response(), timestamp=stamp))
            else:
                rows.append(
                    Message.tool_result(
                        part.tool_call_id,
                        part.model_response(),
                        tool_name=part.tool_name,
                        is_error=True,
                        timestamp=stamp,
                    )
                )
    return rows


def _assistant(response: ModelResponse) -> Message:
    blocks: list[dict[str, Any]] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.content})
        elif isinstance(part, ThinkingPart):
            block: dict[str, Any] = {"type": "thinking", "thinking": part.content}
            if part.signature is not None:
                block["signature"] = part.signature
            blocks.append(block)
        elif isinstance(part, ToolCallPart):
            blocks.append(
                {"type": "toolCall", "id": part.tool_call_id, "name": part.tool_name, "arguments": _arguments(part)}
            )
    return Message.assistant(
        blocks,
        model=response.model_name or "",
        provider=response.provider_name or "",
        # A request pydantic-ai could not measure: unknown usage, not zeros (the run's usage stands in).
        usage=None if getattr(response.usage, "unmeasured_requests", 0) else to_turnstore_usage(response.usage),
        timestamp=_ms(response.timestamp),
    )


def _arguments(part: ToolCallPart) -> Any:
    """A call's arguments as a JSON object; arguments the model sent as malformed JSON, as their text."""
    try:
        return part.args_as_dict()
    except ValueError:
        return part.args


def _user_blocks(content: Any) -> str | list[dict[str, Any]]:
    """A user prompt's content as canonical blocks: text as text, ``BinaryContent`` and file URLs as media."""
    if isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, BinaryContent):
            blocks.append(
                media_block(data=item.data, mime_type=item.media_type)  # its identifier is a hash, not a name
            )
        elif isinstance(item, FileUrl):
            blocks.append(media_block(url=item.url, mime_type=_media_type(item)))
        else:
            blocks.append({"type": "text", "text": item if isinstance(item, str) else _describe(item)})
    return blocks


def _media_type(item: FileUrl) -> str | None:
    """A file URL's media type, where pydantic-ai can tell it (it raises for an extension it does not know)."""
    try:
        return str(item.media_type)
    except ValueError:
        return None


def _describe(item: Any) -> str:
    try:
        return json.dumps(item, default=repr)
    except (TypeError, ValueError):
        return repr(item)


def _ms(when: datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)
