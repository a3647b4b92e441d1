"""The systems of the peer benchmark, each at its own defaults, behind one awaited interface.

Each system opens a database file of its own in the run's temporary
directory, as its users would open it, and then runs blocks of work: a list
of turns to append (one message per commit, or one turn per transaction with
the system's batch call), or one read call. Sync systems run their blocking
calls inside a coroutine (nothing per call); async systems are awaited call
by call, as an agent loop awaits its store.

* ``floor``: the raw-sqlite3 floor of ``raw.py`` (turnstore's schema and
  pragmas: WAL, synchronous=NORMAL).
* ``turnstore``: ``turnstore.Store(path)``, the same calls as ``run.py``.
* ``ts_full``: a diagnostic, ``Store(path, pragmas={"synchronous": "full"})``:
  turnstore with an fsync per commit, the durability the peers default to.
* ``oai``: OpenAI Agents SDK ``SQLiteSession(session_id, path)``, one per conversation.
* ``oai_adv``: ``AdvancedSQLiteSession(session_id=…, db_path=…, create_tables=True)``,
  ``store_run_usage(result)`` after each model call.
* ``langchain``: ``SQLChatMessageHistory(session_id, connection="sqlite:///…")``, one per conversation.
* ``adk``: Google ADK ``DatabaseSessionService(db_url="sqlite+aiosqlite:///…")``,
  sessions made with ``create_session``, events added with ``append_event``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import raw
import workload
from agents import SQLiteSession
from agents.extensions.memory import AdvancedSQLiteSession
from common import fill_read_store, open_with_loops
from google.adk.sessions import DatabaseSessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from langchain_community.chat_message_histories import SQLChatMessageHistory
from langchain_core.messages import AIMessage
from peer_items import ADK_APP, ADK_USER, PeerTurn, usage_parts

from turnstore import Store

Totals = dict[str, tuple[int, int, int, int]]  # model -> (prompt tokens, output tokens, total tokens, requests)

USAGE_BY_MODEL = (
    "SELECT model, SUM(input_tokens) + SUM(cache_read_tokens) + SUM(cache_write_tokens), SUM(output_tokens),"
    " SUM(total_tokens), COUNT(*) FROM messages WHERE input_tokens IS NOT NULL GROUP BY model, provider"
)
WHOLE = "SELECT message FROM messages WHERE session_id = ? ORDER BY id"


def _add(totals: dict[str, list[int]], model: str, prompt: int, output: int, total: int) -> None:
    row = totals.setdefault(model, [0, 0, 0, 0])
    row[0] += prompt
    row[1] += output
    row[2] += total
    row[3] += 1


def _frozen(totals: dict[str, list[int]]) -> Totals:
    return {model: tuple(row) for model, row in sorted(totals.items())}  # type: ignore[misc]


class System:
    """One store; subclasses fill in what their framework can do (``None`` reasons mark what it cannot)."""

    name = ""
    label = ""
    reads = True  # takes part in the read operations
    na: ClassVar[dict[str, str]] = {}  # operation -> why the system cannot do it

    async def open_write(self, path: Path, works: list[workload.Workload]) -> None:
        """A fresh database with the sessions of ``works`` (untimed)."""
        raise NotImplementedError

    async def open_read(self, path: Path, works: list[workload.Workload], turns: list[PeerTurn]) -> None:
        """A database holding ``turns``, written through the system's own batch path (untimed)."""
        await self.open_write(path, works)
        await self.append_turn(turns)

    async def append(self, turns: list[PeerTurn]) -> None:
        raise NotImplementedError

    async def append_turn(self, turns: list[PeerTurn]) -> None:
        raise NotImplementedError

    async def last(self, session_id: str, records: dict[str, int]) -> list[Any]:
        raise NotImplementedError

    async def whole(self, session_id: str) -> list[Any]:
        raise NotImplementedError

    async def walk(self, session_id: str) -> int:
        """Walk the whole session, item by item, keeping none; how many items.

        A store with no streaming read walks the list its whole read returns.
        """
        return sum(1 for _ in await self.whole(session_id))

    async def usage(self, session_ids: list[str]) -> Totals:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class Floor(System):
    name, label = "floor", "raw sqlite3 (floor)"

    async def open_write(self, path: Path, works: list[workload.Workload]) -> None:
        open_with_loops(path, works).close()
        self.connection = raw.connect(str(path))
        self.rs = raw.RawStore(self.connection)

    async def open_read(self, path: Path, works: list[workload.Workload], turns: list[PeerTurn]) -> None:
        # The read file is written by TurnstoreStore.open_read; the floor opens the same file.
        self.connection = raw.connect(str(path))
        self.rs = raw.RawStore(self.connection)

    async def append(self, turns: list[PeerTurn]) -> None:
        append = self.rs.append
        for peer in turns:
            t = peer.turn
            for message in t.dicts:
                append(message, t.session_id, t.loop_id, t.turn_index)

    async def append_turn(self, turns: list[PeerTurn]) -> None:
        append_turn = self.rs.append_turn
        for peer in turns:
            t = peer.turn
            append_turn(t.dicts, t.session_id, t.loop_id, t.turn_index)

    async def last(self, session_id: str, records: dict[str, int]) -> list[Any]:
        return self.rs.last(session_id, records["messages"])

    async def whole(self, session_id: str) -> list[Any]:
        # The read file is turnstore's: media kept out of line is put back, as raw.RawStore.last does.
        text = raw.whole_text
        return [json.loads(text(self.connection, row[0])) for row in self.connection.execute(WHOLE, (session_id,))]

    async def walk(self, session_id: str) -> int:
        text, walked = raw.whole_text, 0
        for row in self.connection.execute(WHOLE, (session_id,)):
            json.loads(text(self.connection, row[0]))
            walked += 1
        return walked

    async def usage(self, session_ids: list[str]) -> Totals:
        return {row[0]: tuple(row[1:]) for row in sorted(self.connection.execute(USAGE_BY_MODEL))}  # type: ignore[misc]

    async def close(self) -> None:
        self.connection.close()


class TurnstoreStore(System):
    name, label = "turnstore", "turnstore"
    pragmas: ClassVar[dict[str, Any] | None] = None

    async def open_write(self, path: Path, works: list[workload.Workload]) -> None:
        open_with_loops(path, works).close()
        self.store = Store(path) if self.pragmas is None else Store(path, pragmas=self.pragmas)

    async def open_read(self, path: Path, works: list[workload.Workload], turns: list[PeerTurn]) -> None:
        self.store = open_with_loops(path, works)
        fill_read_store(self.store, [peer.turn for peer in turns])

    async def append(self, turns: list[PeerTurn]) -> None:
        append = self.store.messages.append
        for peer in turns:
            t = peer.turn
            for model in t.models:
                append(model, loop_id=t.loop_id, turn_index=t.turn_index)

    async def append_turn(self, turns: list[PeerTurn]) -> None:
        append_turn = self.store.messages.append_turn
        for peer in turns:
            append_turn(peer.turn.loop_id, peer.turn.turn_index, peer.turn.models)

    async def last(self, session_id: str, records: dict[str, int]) -> list[Any]:
        return self.store.messages.last(session_id, records["messages"])

    async def whole(self, session_id: str) -> list[Any]:
        return list(self.store.messages.records(session_id))

    async def walk(self, session_id: str) -> int:
        return sum(1 for _ in self.store.messages.records(session_id))

    async def usage(self, session_ids: list[str]) -> Totals:
        return {
            row.model: (row.input + row.cache_read + row.cache_write, row.output, row.total_tokens, row.requests)
            for row in self.store.usage.by_model()
        }  # type: ignore[misc]

    async def close(self) -> None:
        self.store.close()


class TurnstoreFull(TurnstoreStore):
    name, label = "ts_full", "turnstore sync=FULL"
    pragmas: ClassVar[dict[str, Any] | None] = {"synchronous": "full"}
    reads = False  # a pragma for writes: reads are turnstore's


class OpenAISession(System):
    name, label = "oai", "OAI SQLiteSession"
    na: ClassVar[dict[str, str]] = {"usage": "items record neither model nor usage"}

    def _session(self, session_id: str, path: Path) -> SQLiteSession:
        return SQLiteSession(session_id, path)

    async def open_write(self, path: Path, works: list[workload.Workload]) -> None:
        self.sessions = {sid: self._session(sid, path) for work in works for sid in work.session_ids}

    async def append(self, turns: list[PeerTurn]) -> None:
        for peer in turns:
            session = self.sessions[peer.turn.session_id]
            for items in peer.openai:
                await session.add_items(items)

    async def append_turn(self, turns: list[PeerTurn]) -> None:
        for peer in turns:
            await self.sessions[peer.turn.session_id].add_items(peer.openai_turn)

    async def last(self, session_id: str, records: dict[str, int]) -> list[Any]:
        return await self.sessions[session_id].get_items(limit=records["openai"])

    async def whole(self, session_id: str) -> list[Any]:
        return await self.sessions[session_id].get_items()

    async def close(self) -> None:
        for session in self.sessions.values():
            session.close()


class OpenAIAdvanced(OpenAISession):
    name, label = "oai_adv", "OAI AdvancedSQLiteSession"
    na: ClassVar[dict[str, str]] = {"usage": "turn_usage has no model column; items record no model"}

    def _session(self, session_id: str, path: Path) -> SQLiteSession:
        return AdvancedSQLiteSession(session_id=session_id, db_path=path, create_tables=True)

    async def append(self, turns: list[PeerTurn]) -> None:
        for peer in turns:
            session = self.sessions[peer.turn.session_id]
            for items in peer.openai:
                await session.add_items(items)
            if peer.run_result is not None:
                await session.store_run_usage(peer.run_result)  # type: ignore[attr-defined]

    async def append_turn(self, turns: list[PeerTurn]) -> None:
        for peer in turns:
            session = self.sessions[peer.turn.session_id]
            await session.add_items(peer.openai_turn)
            if peer.run_result is not None:
                await session.store_run_usage(peer.run_result)  # type: ignore[attr-defined]


class LangChainHistory(System):
    name, label = "langchain", "LangChain SQLChatMessageHistory"

    async def open_write(self, path: Path, works: list[workload.Workload]) -> None:
        url = f"sqlite:///{path}"
        self.histories = {sid: SQLChatMessageHistory(sid, connection=url) for work in works for sid in work.session_ids}

    async def append(self, turns: list[PeerTurn]) -> None:
        for peer in turns:
            history = self.histories[peer.turn.session_id]
            for message in peer.langchain:
                history.add_message(message)

    async def append_turn(self, turns: list[PeerTurn]) -> None:
        for peer in turns:
            self.histories[peer.turn.session_id].add_messages(peer.langchain)

    async def last(self, session_id: str, records: dict[str, int]) -> list[Any]:
        return self.histories[session_id].messages[-records["messages"] :]  # no limit: loads all, slices

    async def whole(self, session_id: str) -> list[Any]:
        return self.histories[session_id].messages

    async def usage(self, session_ids: list[str]) -> Totals:
        totals: dict[str, list[int]] = {}
        for sid in session_ids:  # no list of sessions: the app's own ids
            for message in self.histories[sid].messages:
                if isinstance(message, AIMessage) and message.usage_metadata:
                    u = message.usage_metadata
                    _add(
                        totals,
                        message.response_metadata.get("model_name", ""),
                        u["input_tokens"],
                        u["output_tokens"],
                        u["total_tokens"],
                    )
        return _frozen(totals)

    async def close(self) -> None:
        for history in self.histories.values():
            history.session_maker.remove()
            history.engine.dispose()


class AdkService(System):
    name, label = "adk", "ADK DatabaseSessionService"

    async def open_write(self, path: Path, works: list[workload.Workload]) -> None:
        self.service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")
        self.sessions = {}
        for work in works:
            for sid in work.session_ids:
                self.sessions[sid] = await self.service.create_session(
                    app_name=ADK_APP, user_id=ADK_USER, session_id=sid
                )

    async def append(self, turns: list[PeerTurn]) -> None:
        append_event = self.service.append_event
        for peer in turns:
            session = self.sessions[peer.turn.session_id]
            for events in peer.adk_each:
                for event in events:
                    await append_event(session, event)

    async def append_turn(self, turns: list[PeerTurn]) -> None:  # no batch call: one commit per event
        append_event = self.service.append_event
        for peer in turns:
            session = self.sessions[peer.turn.session_id]
            for event in peer.adk_turn:
                await append_event(session, event)

    async def _get(self, session_id: str, config: GetSessionConfig | None = None) -> Any:
        return await self.service.get_session(app_name=ADK_APP, user_id=ADK_USER, session_id=session_id, config=config)

    async def last(self, session_id: str, records: dict[str, int]) -> list[Any]:
        return (await self._get(session_id, GetSessionConfig(num_recent_events=records["adk"]))).events

    async def whole(self, session_id: str) -> list[Any]:
        return (await self._get(session_id)).events

    async def usage(self, session_ids: list[str]) -> Totals:
        totals: dict[str, list[int]] = {}
        listed = await self.service.list_sessions(app_name=ADK_APP, user_id=ADK_USER)
        for listed_session in listed.sessions:
            for event in (await self._get(listed_session.id)).events:
                u = event.usage_metadata
                if u is not None:
                    _add(
                        totals,
                        event.model_version or "",
                        u.prompt_token_count or 0,
                        (u.candidates_token_count or 0) + (u.thoughts_token_count or 0),
                        u.total_token_count or 0,
                    )
        return _frozen(totals)

    async def close(self) -> None:
        await self.service.close()


SYSTEMS: list[type[System]] = [
    Floor,
    TurnstoreStore,
    TurnstoreFull,
    OpenAISession,
    OpenAIAdvanced,
    LangChainHistory,
    AdkService,
]


# --- checks -------------------------------------------------------------------------------


def expected_totals(turns: list[PeerTurn]) -> Totals:
    """Usage by model of ``turns``, from the workload itself."""
    totals: dict[str, list[int]] = {}
    for peer in turns:
        for message in peer.turn.dicts:
            if message["role"] == "assistant":
                _add(totals, message["model"], *usage_parts(message))
    return _frozen(totals)


def expected_whole(system: System, turns: list[PeerTurn], session_id: str) -> list[Any]:
    """What a whole-session read of ``system`` must return, in the form it returns it."""
    mine = [peer for peer in turns if peer.turn.session_id == session_id]
    if isinstance(system, OpenAISession):
        return [item for peer in mine for item in peer.openai_turn]
    if isinstance(system, LangChainHistory):
        return [message for peer in mine for message in peer.langchain]
    if isinstance(system, AdkService):
        return [event.model_dump(exclude_none=True, mode="json") for peer in mine for event in peer.adk_turn]
    return [message for peer in mine for message in peer.turn.dicts]


def comparable(system: System, records: list[Any]) -> list[Any]:
    """A read's result in the form ``expected_whole`` gives."""
    if isinstance(system, AdkService):
        return [event.model_dump(exclude_none=True, mode="json") for event in records]
    if isinstance(system, TurnstoreStore):
        return [getattr(record, "message", record).model_dump(mode="json") for record in records]
    return records


def stored_records(system: System, path: Path) -> int:
    """How many records the system's file holds (messages, items or events)."""
    table = {"oai": "agent_messages", "oai_adv": "agent_messages", "langchain": "message_store", "adk": "events"}
    connection = sqlite3.connect(path)
    try:
        return connection.execute(f"SELECT COUNT(*) FROM {table.get(system.name, 'messages')}").fetchone()[0]
    finally:
        connection.close()


def expected_records(system: System, turns: list[PeerTurn], op: str) -> int:
    """How many records ``op`` writes for ``turns`` in ``system``."""
    if isinstance(system, OpenAISession):
        return sum(len(peer.openai_turn) for peer in turns)
    if isinstance(system, AdkService):
        return sum(len(peer.adk_turn) if op == "append_turn" else len(peer.adk_each) for peer in turns)
    return sum(len(peer.turn.dicts) for peer in turns)
