"""OpenAI Agents SDK sessions: turnstore's ``TurnstoreSession`` vs the SDK's ``SQLiteSession`` and
``AdvancedSQLiteSession``, on the same items.

    python -m benchmarks integrations [--calls 300] [--repeats 5]

Each session gets ``--calls`` ``add_items`` calls of one agent turn each (a user
message, a reasoning item, a function call, its output, the assistant's answer:
five items), in a file database of its own (the SDK's are opened on a file too,
not ``:memory:``). Then ``get_items()`` (the whole history) and
``get_items(limit=20)`` are timed. Every figure is the median of ``--repeats``
runs, each on a new database; the add figure is per call (five items). Needs
``pip install "turnstore[openai-agents]"``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents import SQLiteSession

from turnstore.aio import AsyncStore
from turnstore.integrations.openai_agents import TurnstoreSession

try:
    from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession
except ImportError:  # an SDK without it
    AdvancedSQLiteSession = None  # type: ignore[assignment,misc]


def turn(number: int) -> list[dict[str, Any]]:
    """One agent turn's items, as the SDK's runner adds them."""
    call_id = f"call_{number}"
    return [
        {
            "role": "user",
            "content": f"Question {number}: what is the weather in city {number}?",
        },
        {
            "type": "reasoning",
            "id": f"rs_{number}",
            "summary": [{"type": "summary_text", "text": "Look it up."}],
        },
        {
            "type": "function_call",
            "id": f"fc_{number}",
            "call_id": call_id,
            "name": "weather",
            "arguments": f'{{"city": "city {number}"}}',
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": call_id,
            "output": "sunny, 21 degrees " * 5,
        },
        {
            "type": "message",
            "id": f"msg_{number}",
            "role": "assistant",
            "status": "completed",
            "content": [
                {
                    "type": "output_text",
                    "text": f"It is sunny in city {number}. " * 8,
                    "annotations": [],
                }
            ],
        },
    ]


Opener = Callable[[Path], Awaitable[tuple[Any, Callable[[], Awaitable[None]]]]]


async def open_turnstore(folder: Path) -> tuple[Any, Callable[[], Awaitable[None]]]:
    store = await AsyncStore.open(folder / "turnstore.db")
    return TurnstoreSession("bench", store), store.close


async def open_sqlite(folder: Path) -> tuple[Any, Callable[[], Awaitable[None]]]:
    session = SQLiteSession("bench", folder / "sdk.db")

    async def close() -> None:
        session.close()

    return session, close


async def open_advanced(folder: Path) -> tuple[Any, Callable[[], Awaitable[None]]]:
    session = AdvancedSQLiteSession(session_id="bench", db_path=folder / "advanced.db", create_tables=True)

    async def close() -> None:
        session.close()

    return session, close


async def measure(opener: Opener, calls: int) -> dict[str, float]:
    """Seconds: per add_items call, one get_items(), one get_items(limit=20)."""
    with tempfile.TemporaryDirectory() as directory:
        session, close = await opener(Path(directory))
        try:
            turns = [turn(number) for number in range(calls)]
            await session.add_items(turn(-1))  # create the tables and the session outside the timing
            start = time.perf_counter()
            for items in turns:
                await session.add_items(items)
            add = (time.perf_counter() - start) / calls
            start = time.perf_counter()
            everything = await session.get_items()
            get_all = time.perf_counter() - start
            assert len(everything) == 5 * (calls + 1)
            start = time.perf_counter()
            for _ in range(20):
                await session.get_items(limit=20)
            get_tail = (time.perf_counter() - start) / 20
        finally:
            await close()
    return {"add": add, "get_all": get_all, "get_20": get_tail}


async def main(calls: int, repeats: int) -> None:
    systems: dict[str, Opener] = {
        "TurnstoreSession": open_turnstore,
        "SQLiteSession": open_sqlite,
    }
    if AdvancedSQLiteSession is not None:
        systems["AdvancedSQLiteSession"] = open_advanced
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    for _ in range(repeats):  # alternate the systems, so that load on the machine hits them alike
        for name, opener in systems.items():
            runs[name].append(await measure(opener, calls))
    medians = {
        name: {key: statistics.median(run[key] for run in found) for key in found[0]} for name, found in runs.items()
    }
    print(f"{calls} add_items calls of 5 items; medians of {repeats} runs")
    print(f"{'system':24} {'add_items (ms/call)':>20} {'get_items() all (ms)':>21} {'get_items(20) (ms)':>19}")
    for name, row in medians.items():
        print(f"{name:24} {row['add'] * 1e3:20.3f} {row['get_all'] * 1e3:21.3f} {row['get_20'] * 1e3:19.3f}")
    ours = medians["TurnstoreSession"]
    for name, row in medians.items():
        if name != "TurnstoreSession":
            print(
                f"{name} / TurnstoreSession: add {row['add'] / ours['add']:.2f}x, "
                f"get all {row['get_all'] / ours['get_all']:.2f}x, get 20 {row['get_20'] / ours['get_20']:.2f}x "
                "(above 1: turnstore faster)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.calls, arguments.repeats))
