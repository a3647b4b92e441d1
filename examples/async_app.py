"""A small asyncio agent app on :class:`turnstore.AsyncStore`, fully typed.

Run it (``python examples/async_app.py [database]``) or type-check it
(``mypy --strict examples/async_app.py``): every awaited call returns the
type its sync twin returns, and ``assert_type`` fails the check otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path

from typing_extensions import assert_type

from turnstore import (
    AsyncStore,
    Loop,
    Message,
    Session,
    SessionSummary,
    StoredMessage,
    Turn,
    Usage,
    UsageRow,
    UsageTotals,
)
from turnstore.importers import ImportReport


async def converse(store: AsyncStore, session: Session, prompt: str) -> Loop:
    """One agent run: a loop holding a user prompt and the model's reply, written in one transaction."""
    async with store.transaction():
        loop = assert_type(
            await store.loops.start(session.session_id, config={"model": "gpt-5", "provider": "openai"}), Loop
        )
        reply = Message.assistant(f"echo: {prompt}", model="gpt-5", provider="openai", usage=Usage(input=12, output=5))
        ids = assert_type(await store.messages.append_turn(loop.loop_id, 0, [Message.user(prompt), reply]), list[int])
        assert len(ids) == 2
    return await store.loops.end(loop.loop_id, "completed")


async def main(database: str) -> None:
    store = await AsyncStore.open(database, busy_budget=10.0, workers=2)
    async with store:
        session = assert_type(await store.sessions.create(title="async demo"), Session)
        runs = await asyncio.gather(*(converse(store, session, f"question {n}") for n in range(3)))
        assert all(isinstance(run, Loop) for run in runs)

        summaries = assert_type(await store.sessions.list(limit=10), list[SessionSummary])
        turn = assert_type(await store.messages.turn(runs[0].loop_id, 0), Turn)
        history = assert_type(await store.messages.context(runs[0].loop_id), list[Message])
        totals = assert_type(await store.usage.session(session.session_id), UsageTotals)
        by_model = assert_type(await store.usage.by_model(session.session_id), list[UsageRow])

        stored: list[StoredMessage] = []
        async with contextlib.aclosing(store.messages.records(session.session_id)) as records:
            async for record in records:
                stored.append(assert_type(record, StoredMessage))

        exported = assert_type(await store.export(session.session_id), str | None)
        assert exported is not None
        with tempfile.TemporaryDirectory() as folder:  # carry the session over to another store
            source = Path(folder, "session.jsonl")
            source.write_text(exported)
            async with await AsyncStore.open(f"sqlite:///{folder}/copy.db") as copy:
                report = assert_type(await copy.import_("turnstore", source), ImportReport)

        print(
            f"{len(summaries)} session(s), {len(runs)} runs, {len(stored)} messages stored;"
            f" turn 0 of the first run: {len(turn.messages)} messages, its context {len(history)};"
            f" {totals.input} input tokens over {len(by_model)} model(s);"
            f" copied: {report.sessions_written}"
        )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{folder}/async_app.db"))
