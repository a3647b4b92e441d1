"""Reading ``store.messages``: by turn, loop or window, the context of the next model call, streams and search.

How ``last()`` reads a path backwards is :mod:`.message_tail`; rows become models in :mod:`.rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from .. import context as ctx
from .. import queries as q
from ..database import Database
from ..errors import InvalidArgument, InvalidMessage, LoopNotFound, MessageNotFound, TurnNotFound
from ..media import REF_PREFIX, MediaMode
from ..models import ExtensionMessage, Message
from ..records import ContextPage, SearchHit, StoredMessage, Turn
from . import media as out_of_line
from ._shared import check_whole, require_loop, require_session
from .loops import is_message_id
from .media import check_mode
from .message_common import MessageRepositoryBase, check_loop_id
from .message_tail import newest_tail, path_tail
from .rows import MAX_TURN_INDEX, ExportRow, SourceRow, path_stored_message, stored_message, tool_calls
from .search import search as search_messages

__all__ = ["CONTEXT_PAGE", "NAMES_BATCH", "STREAM_BATCH", "MessageReads"]

CONTEXT_PAGE = 500
"""Stored rows :meth:`MessageRepository.context_page` builds a page from by default."""


class MessageReads(MessageRepositoryBase):
    """The reads of :class:`~.messages.MessageRepository`."""

    def turn(self, loop_id: str, turn_index: int) -> Turn:
        """The messages of one turn, in order.

        Raises:
            LoopNotFound: no such loop.
            TurnNotFound: the loop has no message in that turn.
        """
        check_loop_id(loop_id)
        if not isinstance(turn_index, int) or isinstance(turn_index, bool):
            raise InvalidArgument("turn_index", f"must be an integer, got {turn_index!r}")
        if not 0 <= turn_index <= MAX_TURN_INDEX:  # no stored turn (and no 64-bit value, past a point)
            require_loop(self._db, loop_id)
            raise TurnNotFound(f"loop {loop_id!r} has no turn {turn_index}")
        rows = self._db.fetchall(q.turn_messages(), {"loop_id": loop_id, "turn_index": turn_index})
        if not rows:
            require_loop(self._db, loop_id)
            raise TurnNotFound(f"loop {loop_id!r} has no turn {turn_index}")
        messages = out_of_line.parse_texts_of(self._db, rows)
        return Turn(loop_id=loop_id, turn_index=turn_index, messages=messages)

    def turns(
        self,
        loop_id: str,
        start: int = 0,
        stop: int | None = None,
        *,
        skip: int = 0,
        limit: int | None = None,
        media: MediaMode = "inline",
    ) -> list[Turn]:
        """Turns ``start <= k < stop`` of a loop (``stop=None``: to the end), in order.

        ``skip`` and ``limit`` bound what is read, for a reader that pages through
        turns of any size (one turn may hold hundreds of thousands of messages):
        the range's first ``skip`` messages are left out and at most ``limit``
        are read. The first and last turns returned may then hold only part of
        their messages; :meth:`turn_lengths` tells how many each holds.

        ``media``: as in :meth:`last` (``"omit"``: media data left out, never read).

        Raises:
            LoopNotFound: no such loop.
            InvalidArgument: ``skip`` is not a non-negative integer, or ``limit`` not a positive one;
                ``media`` is not a media mode.
        """
        mode = check_mode(media)
        params: dict[str, Any] = {"loop_id": loop_id, "start": start}
        if stop is not None:
            params["stop"] = stop
        paged = bool(skip) or limit is not None
        if paged:
            check_whole("skip", skip, 0, MAX_ROWS)
            if limit is not None:
                check_whole("limit", limit, 1, MAX_ROWS)
            params.update(skip=skip, limit=limit if limit is not None else MAX_ROWS)  # no LIMIT NULL on SQLite
        rows = self._db.fetchall(q.turn_range_messages(stop is not None, paged), params)
        if not rows:
            require_loop(self._db, loop_id)
            return []
        parsed = out_of_line.parse_texts_of(self._db, rows, mode)
        turns: list[Turn] = []
        current: list[Any] = []
        for (_id, index, _text), message in zip(rows, parsed):
            if current and index != current[0]:
                turns.append(Turn(loop_id=loop_id, turn_index=current[0], messages=current[1:]))
                current = []
            if not current:
                current = [index]
            current.append(message)
        turns.append(Turn(loop_id=loop_id, turn_index=current[0], messages=current[1:]))
        return turns

    def turn_lengths(self, loop_id: str, start: int = 0, stop: int | None = None) -> dict[int, int]:
        """How many messages each turn ``start <= k < stop`` of a loop holds (``stop=None``: to the end).

        A count, nothing read or parsed: with :meth:`turns`' ``skip`` and ``limit``,
        what a reader needs to say how much of a turn it has not shown.

        Raises:
            LoopNotFound: no such loop.
        """
        params: dict[str, Any] = {"loop_id": loop_id, "start": start}
        if stop is not None:
            params["stop"] = stop
        rows = self._db.fetchall(q.turn_range_lengths(stop is not None), params)
        if not rows:
            require_loop(self._db, loop_id)
        return {int(turn_index): int(count) for turn_index, count in rows}

    def loop(self, loop_id: str, *, media: MediaMode = "inline") -> list[Message | ExtensionMessage]:
        """Every message of a loop, in order (extension messages included).

        ``media``: ``"inline"`` (default) returns every message as written; ``"omit"`` or
        ``"ref"`` leave the data of media kept out of line out (see :data:`turnstore.MediaMode`).

        Raises:
            LoopNotFound: no such loop.
            InvalidArgument: ``media`` is not a media mode.
        """
        mode = check_mode(media)
        rows = self._db.fetchall(q.loop_messages(), {"loop_id": loop_id})
        if not rows:
            require_loop(self._db, loop_id)
        return out_of_line.parse_texts_of(self._db, rows, mode)

    def last(
        self,
        session_id: str,
        n: int,
        *,
        loop_id: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        media: MediaMode = "inline",
    ) -> list[Message]:
        """The last ``n`` messages of the session's current path, oldest first, ready to send.

        The path is that of the loop written most recently (the loop of the
        session's newest message), or of ``loop_id``: the result is the tail
        of ``context(loop_id, model=model, provider=provider)``, without a
        tool result cut from its call at the front (so it may hold fewer
        than ``n``). Reads the path backwards, only as far as the tail needs.

        ``media="omit"`` leaves the data of media kept out of line out (an image part
        reads ``"data":""``) and never reads it: a screenshot-heavy history costs what
        its text costs. ``"ref"`` names each by digest (see :data:`turnstore.MediaMode`).

        Raises:
            InvalidArgument: ``n`` is not a non-negative integer; ``provider`` without ``model``;
                ``media`` is not a media mode.
            SessionNotFound: no such session.
            LoopNotFound: ``loop_id`` is not a loop of that session.
        """
        _check_count(n)
        _check_model(model, provider)
        mode = check_mode(media)
        if loop_id is None and n > 0:
            messages = newest_tail(self._db, session_id, n, mode)
            if messages is not None:
                return ctx.for_model(ctx.tail(messages, n), model, provider)
        with self._db.read():
            tree: list[tuple[Any, ...]] = []
            newest = None
            for node_id, parent_loop_id, kind, fork_after, keep_from, newest in self._db.fetchall(  # noqa: B007 - every row repeats the session's newest loop; kept from the last
                q.loop_tree_and_newest(), {"session_id": session_id}
            ):
                tree.append((node_id, parent_loop_id, kind, fork_after, keep_from))
            if loop_id is None:
                loop_id = newest
                if loop_id is None:
                    require_session(self._db, session_id)
                    return []
            elif not any(node_id == loop_id for node_id, *_shape in tree):
                require_session(self._db, session_id)
                raise LoopNotFound(f"loop {loop_id!r} not found in session {session_id!r}")
            if n == 0:
                return []
            messages = path_tail(self._db, session_id, ctx.path_pieces(tuple(tree), loop_id), n, mode)
        return ctx.for_model(ctx.tail(messages, n), model, provider)

    def context(
        self, loop_id: str, *, model: str | None = None, provider: str | None = None, media: MediaMode = "inline"
    ) -> list[Message]:
        """What the next model call of ``loop_id`` should see, in a form every provider accepts.

        The ancestors' messages up to each fork point, then the loop's own;
        a compaction replaces what it summarised; extension messages are left
        out (compaction and branch summaries become user text). As pi sends
        history: an assistant message that stopped with ``error`` or
        ``aborted`` is left out with its results; a tool call that was never
        answered gets a synthetic error result (``No result provided``, not
        stored); a tool result without its call is left out.

        With ``model`` (and optionally ``provider``), the history is prepared
        for that model: assistant messages another model wrote keep their
        thinking as text and lose that model's signatures; messages of the
        same model are returned byte for byte. See ``docs/context.md``.

        ``media``: as in :meth:`last` (``"omit"``: media data left out, never read).

        Raises:
            LoopNotFound: no such loop.
            InvalidArgument: ``provider`` without ``model``, or either not a string;
                ``media`` is not a media mode.
        """
        _check_model(model, provider)
        mode = check_mode(media)
        with self._db.read():
            session_id, segments, min_id = self._locate(loop_id)
            rows = self._db.fetchall(q.context_messages(), {"session_id": session_id, "min_id": min_id})
            chosen = self._restore(ctx.choose(ctx.pieces(segments), rows), (4,), mode)
        return ctx.for_model(ctx.provider_safe(ctx.to_messages(chosen)), model, provider)

    def context_page(
        self,
        loop_id: str,
        offset: int = 0,
        limit: int = CONTEXT_PAGE,
        *,
        model: str | None = None,
        provider: str | None = None,
        media: MediaMode = "inline",
    ) -> ContextPage:
        """A page of :meth:`context`: the messages built from its stored rows ``offset`` on, about ``limit`` of
        them, reading only those (and the few its edges need) however long the context.

        The page ends where a run of a call and its results ends (a run longer than
        ``limit`` is read whole), so its messages are those :meth:`context` returns
        from these rows: a result stays with its call, a synthetic one is where the
        whole context has it. ``next_offset`` of one page is the ``offset`` of the next.

        Raises:
            LoopNotFound: no such loop.
            InvalidArgument: ``offset`` or ``limit`` is not a whole number (``limit`` at least 1);
                ``provider`` without ``model``; ``media`` is not a media mode.
        """
        check_whole("offset", offset, 0, MAX_ROWS)
        check_whole("limit", limit, 1, MAX_ROWS)
        _check_model(model, provider)
        mode = check_mode(media)
        with self._db.read():
            session_id, segments, min_id = self._locate(loop_id)
            shapes = ctx.choose(
                ctx.pieces(segments),
                self._db.fetchall(q.context_shapes(), {"session_id": session_id, "min_id": min_id}),
            )
            start = min(offset, len(shapes))
            stop = ctx.run_edge(shapes, min(start + limit, len(shapes)), 1)
            first = ctx.run_edge(shapes, start, -1)
            wanted = [row for row in shapes[first:stop] if row[2] != "extension" or row[3] in ctx.SUMMARY_KINDS]
            texts: dict[int, Any] = {}
            for at in range(0, len(wanted), q.ID_BATCH):
                ids = [row[0] for row in wanted[at : at + q.ID_BATCH]]
                params = {f"id{n}": ids[n] if n < len(ids) else -1 for n in range(q.ID_BATCH)}
                rows = self._restore(self._db.fetchall(q.path_rows_by_id(), params), (4,), mode)
                texts.update((row[0], row) for row in rows)
        place = {row[0]: first + i for i, row in enumerate(shapes[first:stop])}
        chosen = [texts[row[0]] for row in wanted]
        parsed = ctx.to_messages(chosen)
        stored = {id(message) for message in parsed}
        placed = ctx.provider_safe_placed(zip([row[0] for row in chosen], parsed))
        kept = [(key, message) for key, message in placed if start <= place[key] < stop]
        messages = ctx.for_model([message for _key, message in kept], model, provider)
        ids = [None if message.role == "toolResult" and id(message) not in stored else key for key, message in kept]
        return ContextPage(
            messages=messages,
            message_ids=ids,
            offset=start,
            next_offset=stop if stop < len(shapes) else None,
            rows=len(shapes),
        )

    def path(self, loop_id: str) -> list[StoredMessage]:
        """The stored messages ``context(loop_id)`` is built from, in context order, extension messages included.

        Each context message is one of these rows (a summary row rendered as
        user text), except the synthetic results of unanswered calls.

        Raises:
            LoopNotFound: no such loop.
        """
        with self._db.read():
            session_id, segments, min_id = self._locate(loop_id)
            rows = self._db.fetchall(q.path_messages(), {"session_id": session_id, "min_id": min_id})
            chosen = out_of_line.restore(self._db, ctx.choose(ctx.pieces(segments), rows), (4, 8))
        return [path_stored_message(row) for row in chosen]

    def _locate(self, loop_id: str) -> tuple[str, list[ctx.Segment], int]:
        """A loop's session, the segments of its path and the smallest message id they can hold."""
        session_id = self._db.scalar(q.loop_session(), {"loop_id": loop_id})
        if session_id is None:
            raise LoopNotFound(f"loop {loop_id!r} not found")
        segments, min_id = self._plan(session_id, loop_id)
        if min_id is None:
            min_id = self._db.scalar(q.first_message_of_loop(), {"loop_id": segments[0].loop_id}) or 0
        return session_id, segments, min_id

    def _plan(self, session_id: str, loop_id: str) -> tuple[list[ctx.Segment], int | None]:
        tree = ctx.loop_nodes(self._db.fetchall(q.loop_tree(), {"session_id": session_id}))
        return ctx.plan(tree, loop_id)

    def get(self, message_id: int, *, media: MediaMode = "inline") -> StoredMessage:
        """One stored message by id, with its loop, turn and seq (``media``: as in :meth:`last`).

        Raises:
            MessageNotFound: no such message.
            InvalidArgument: ``media`` is not a media mode.
        """
        mode = check_mode(media)
        if not isinstance(message_id, int) or isinstance(message_id, bool):
            raise InvalidArgument("message_id", f"must be an integer (a message id), got {message_id!r}")
        row = self._db.fetchone(q.get_message(), {"id": message_id}) if is_message_id(message_id) else None
        if row is None:
            raise MessageNotFound(f"message {message_id} not found")
        (row,) = self._restore([row], (5, 6), mode)
        return stored_message(row)

    def media(self, digest: str) -> str:
        """The base64 data of a media reference (``media:sha256:<digest>``, as ``media="ref"`` reads it).

        Raises:
            MediaNotFound: no media has this digest.
        """
        if isinstance(digest, str) and digest.startswith(REF_PREFIX):
            digest = digest[len(REF_PREFIX) :]
        return out_of_line.fetch(self._db, digest)

    def _restore(self, rows: list[Any], columns: tuple[int, ...], mode: MediaMode) -> list[Any]:
        return out_of_line.restore(self._db, rows, columns, mode)

    def records(
        self, session_id: str | None = None, *, loop_id: str | None = None, media: MediaMode = "inline"
    ) -> Iterator[StoredMessage]:
        """Stream a session's (or a loop's) stored messages in order, without loading them all.

        Each model is built as the iteration reaches it: walking a long session
        this way, keeping none, costs about what parsing its rows does, while a
        ``list()`` of thousands of models is walked by the cyclic collector again
        and again (the more so in an app with a large heap). Rows are read a page
        (:data:`STREAM_BATCH`) at a time, each page a statement of its own, so the
        store can write while a walk is open; a page sees what was committed
        before it was read (in a transaction: what the transaction holds).
        ``media``: as in :meth:`last`, for the message and its source.

        Raises:
            SessionNotFound / LoopNotFound: no such session or loop.
            InvalidArgument: ``media`` is not a media mode.
        """
        mode = check_mode(media)
        if (session_id is None) == (loop_id is None):
            raise InvalidMessage("records() takes a session_id or a loop_id", [("session_id", "one of two")])
        if loop_id is not None:
            require_loop(self._db, loop_id)
            pages = _pages(self._db, q.stored_messages(True), {"loop_id": loop_id}, key=4)  # by seq
        else:
            require_session(self._db, session_id)  # type: ignore[arg-type]
            pages = _pages(self._db, q.stored_messages(False), {"session_id": session_id}, key=0)  # by id
        return _stream(self._db, pages, mode)

    def rows(self, session_id: str, *, media: MediaMode = "inline") -> Iterator[ExportRow]:
        """Stream a session's message rows as stored, in order: JSON text, usage columns, source (what exports write).

        Unlike :meth:`records`, nothing is parsed: the message is its stored
        JSON text, byte for byte (``media``: as in :meth:`last`, for the message and its source).

        Raises:
            SessionNotFound: no such session.
            InvalidArgument: ``media`` is not a media mode.
        """
        mode = check_mode(media)
        require_session(self._db, session_id)
        return _export_rows(self._db, _pages(self._db, q.export_messages(), {"session_id": session_id}, key=0), mode)

    def sources(self, loop_id: str, *, last: int | None = None) -> list[SourceRow]:
        """A loop's messages as ids, turn indexes and verbatim sources, oldest first; ``last``: only the last ``last``.

        Nothing is parsed: what an adapter that keeps a framework's own objects as
        sources gives back. Turn indexes never go down within a loop, so the last
        row holds its highest.

        Raises:
            InvalidArgument: ``last`` is not a non-negative integer.
            LoopNotFound: no such loop.
        """
        rows = self._loop_rows(q.loop_message_sources, loop_id, last, 2)
        return [SourceRow(message_id, turn_index, source) for message_id, turn_index, source in rows]

    def source_texts(self, loop_id: str, *, last: int | None = None) -> list[str]:
        """A loop's verbatim sources alone, oldest first (rows without one left out); ``last``: only the last ``last``.

        :meth:`sources` without ids and turns: what an adapter that keeps a
        framework's own objects as sources hands back, read with nothing else.

        Raises:
            InvalidArgument: ``last`` is not a non-negative integer.
            LoopNotFound: no such loop.
        """
        return [text for (text,) in self._loop_rows(q.loop_source_texts, loop_id, last, 0)]

    def _loop_rows(
        self, query: Callable[[bool], Any], loop_id: str, last: int | None, source_column: int
    ) -> list[tuple[Any, ...]]:
        """The rows ``query`` selects of a loop, in order, their sources (at ``source_column``) as written;
        ``last``: only the last ``last`` (``query(True)`` gives them newest first, with a ``:limit``)."""
        if last is not None:
            _check_count(last)
        with self._db.read():
            require_loop(self._db, loop_id)
            if last is None:
                rows = self._db.fetchall(query(False), {"loop_id": loop_id})
            elif last == 0:
                return []
            else:
                rows = self._db.fetchall(query(True), {"loop_id": loop_id, "limit": last})[::-1]
            return out_of_line.restore(self._db, rows, (source_column,))

    def tool_names(self, session_id: str, call_ids: Iterable[str]) -> dict[str, str]:
        """The names of the tool calls with these ids in a session's assistant messages (the newest call of an id).

        For an adapter naming a tool result whose call an earlier write stored: one
        query, read newest first and only until every id is found. An id no
        stored call has is left out; an unknown session has none.
        """
        wanted = set(call_ids)
        names: dict[str, str] = {}
        if not wanted:
            return names
        cursor = self._db.execute(q.assistant_messages_newest_first(), {"session_id": session_id})
        try:
            while wanted and (batch := cursor.fetchmany(NAMES_BATCH)):
                for (text,) in out_of_line.restore(self._db, batch, (0,), "omit"):  # the text as written
                    for call_id, name in tool_calls(text):
                        if call_id in wanted:
                            names[call_id] = name
                            wanted.discard(call_id)
        finally:
            cursor.close()
        return names

    def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        loop_id: str | None = None,
        role: str | None = None,
        tool_name: str | None = None,
        since: datetime | int | None = None,
        until: datetime | int | None = None,
        limit: int = 20,
        offset: int = 0,
        thinking: bool = True,
        match: str = "all",
    ) -> list[SearchHit]:
        """Messages of every session whose text matches ``query``, best match first.

        Syntax (``docs/search.md``): words (all must match, any order),
        ``"exact phrases"``, ``-excluded`` words or phrases, ``prefix*``;
        case, accents and width are ignored, and CJK text is found by any
        substring. Searched: user and assistant text, thinking, tool-call names
        and arguments, tool results, extension message text; never image or
        file data or signatures. Sessions still being imported are left out.

        Args:
            query: what to find.
            session_id, loop_id: only messages of this session or loop.
            role: only messages of this role (``user``, ``assistant``, ``toolResult``, ``extension``, ``system``).
            tool_name: only tool calls of this tool (assistant messages) and its results.
            since, until: only messages from ``since`` (inclusive) to ``until`` (exclusive): a
                datetime (naive means UTC) or unix milliseconds.
            limit, offset: a page of the results (``limit`` from 1 to 1,000).
            thinking: ``False`` leaves thinking out: a message matches on its other text only.
            match: ``"all"``: a message must hold every word and phrase; ``"any"``: at least one
                (those holding more rank higher). Exclusions apply either way.

        Raises:
            InvalidQuery: the query cannot be searched for (says why); nothing is searched.
            InvalidArgument: a filter, ``limit`` or ``offset`` is not valid.
            SearchUnavailable: SQLite without FTS5.
        """
        filters: dict[str, Any] = {"session_id": session_id, "loop_id": loop_id, "role": role, "tool_name": tool_name}
        filters.update(since=since, until=until)
        return search_messages(self._db, query, filters, limit=limit, offset=offset, thinking=thinking, match=match)


def _check_count(n: object) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InvalidArgument("n", f"n must be a non-negative integer, got {n!r}")


def _check_model(model: object, provider: object) -> None:
    for name, value in (("model", model), ("provider", provider)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(name, f"{name} must be a string, got {type(value).__name__}")
    if provider is not None and model is None:
        raise InvalidArgument("model", "provider is given without model: name the model to prepare the history for")


STREAM_BATCH = 2_000
"""Rows :meth:`MessageRepository.records` and :meth:`MessageRepository.rows` read at a time, one statement each.

Between pages no statement is open, so the store's connection can write while
a walk is under way, and a page sees what was committed before it was read.

``records()`` builds each model only as it is yielded, never a batch of them:
models the caller has let go die before the cyclic collector sees them, so
walking a session costs about what ``json.loads`` of its rows does, however
large the app's heap (a list of thousands of live models is walked by the
collector again and again)."""

MAX_ROWS = 2**62
"""Most rows ``turns()`` skips or reads: more than a store holds, and within both backends' 64-bit integers."""

NAMES_BATCH = 16
"""Assistant messages :meth:`MessageRepository.tool_names` reads at a time: a call is most often among the newest."""


def _pages(db: Database, statement: Any, params: dict[str, Any], key: int) -> Iterator[list[Any]]:
    """The rows of a paged statement (``:after``, ``:limit``), a page at a time; ``key``: the column paged by."""
    after = -1
    while page := db.execute(statement, {**params, "after": after, "limit": STREAM_BATCH}).fetchall():
        yield page
        if len(page) < STREAM_BATCH:
            return
        after = page[-1][key]


def _export_rows(db: Database, pages: Iterator[list[Any]], mode: MediaMode) -> Iterator[ExportRow]:
    for page in pages:
        yield from map(ExportRow._make, out_of_line.restore(db, page, (5, 6), mode))


def _stream(db: Database, pages: Iterator[list[Any]], mode: MediaMode) -> Iterator[StoredMessage]:
    for page in pages:
        yield from map(stored_message, out_of_line.restore(db, page, (5, 6), mode))
