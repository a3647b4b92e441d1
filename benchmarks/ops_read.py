"""The main table's read operations (4-10), on one database written through turnstore.

The database holds a session of ~5,000 messages (4 loops) among other
sessions' traffic. ``raw`` and ``turnstore`` read that file; ``raw_default``
reads a copy of it switched to SQLite's default rollback journal, through a
connection that sets no pragma.

4. ``last``: the session's last 50 messages, typed (``store.messages.last``)
   vs ``SELECT … ORDER BY id DESC LIMIT 50`` + ``json.loads``;
5. ``session``: the whole session (``list(store.messages.records(sid))``,
   ``StoredMessage`` models) vs ``SELECT id, …, message, source … ORDER BY id``
   + ``json.loads`` of each message;
6. ``turn``: one turn, a random one of the session's (``store.messages.turn``)
   vs ``SELECT message … WHERE loop_id = ? AND turn_index = ? ORDER BY seq``;
7. ``usage``: the session's usage totals (``store.usage.session``) vs one ``SUM``;
8. ``usage_loop``: one loop's usage totals (``store.usage.loop``), each of the
   session's loops in turn, vs one ``SUM`` by ``loop_id``;
9. ``usage_by_model``: usage per model across every session
   (``store.usage.by_model()``) vs ``SUM … GROUP BY model, provider``;
10. ``walk``: the whole session walked, each message built as it is reached
   and let go (``for stored in store.messages.records(sid)``) vs one cursor
   + ``json.loads`` of each row, nothing kept. Op 5 holds every model at once,
   as an app that keeps the list does; this is how an app that renders,
   exports or sums a session reads it.
"""

from __future__ import annotations

import cProfile
import gc
import itertools
import pstats
import random
import shutil
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import raw
import workload
from common import READ_BLOCK, Sizes, fill_read_store, open_with_loops, read_workloads, remove_db, timed

from turnstore import Store

SYSTEMS = ("raw", "turnstore", "raw_default")


@dataclass
class ReadOp:
    key: str
    name: str
    calls: int  # per system and repetition
    block: int  # calls per alternating block
    runs: dict[str, Callable[[], Any]]  # one call per system
    unit: str = "per call"


@dataclass
class ReadDb:
    """The read database, the systems open on it, and what the operations read."""

    store: Store
    floors: dict[str, raw.RawStore]  # raw (same file), raw_default (a rollback-journal copy)
    session_id: str
    loops: list[str]  # the read session's loops
    turns: list[tuple[str, int]]  # (loop_id, turn_index) of every turn of the read session
    in_session: int
    total: int

    def close(self) -> None:
        for rs in self.floors.values():
            rs.connection.close()
        self.store.close()


def build(out: Path, sizes: Sizes, mix: str = "tool") -> ReadDb:
    """Write the read database through turnstore, and a copy of it in rollback-journal mode for raw_default."""
    big, other, turns = read_workloads(sizes, mix)
    path = out / "read.db"
    store = open_with_loops(path, [big, other])
    fill_read_store(store, turns)
    connection = raw.connect(str(path))
    busy, _, _ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        raise SystemExit("could not checkpoint the read database")
    copy = out / "read-default.db"
    remove_db(copy)
    shutil.copyfile(path, copy)
    raw.use_rollback_journal(copy)
    session_id = big.session_ids[0]
    total = connection.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    return ReadDb(
        store=store,
        floors={"raw": raw.RawStore(connection), "raw_default": raw.RawStore(raw.connect_default(str(copy)))},
        session_id=session_id,
        loops=[plan.loop_id for plan in big.loops],
        turns=[(turn.loop_id, turn.turn_index) for turn in big.turns],
        in_session=big.messages_of(session_id),
        total=total,
    )


def remove(out: Path) -> None:
    remove_db(out / "read.db")
    remove_db(out / "read-default.db")


def _cycling(call: Callable[..., Any], args: list[tuple[Any, ...]]) -> Callable[[], Any]:
    """``call`` with the next of ``args`` each time (each system walks the same sequence)."""
    it = itertools.cycle(args)
    return lambda: call(*next(it))


def _count(items: Iterable[Any]) -> int:
    """How many items an iterator yields, keeping none (how an app walks ``records()``)."""
    return sum(1 for _ in items)


def read_ops(db: ReadDb, sizes: Sizes) -> list[ReadOp]:
    sid, n, store = db.session_id, sizes.last_n, db.store
    pairs = random.Random(workload.SEED + 3).choices(db.turns, k=max(sizes.turn_calls, 1))
    loops = [(loop_id,) for loop_id in db.loops]

    def runs(
        floor: Callable[[raw.RawStore], Callable[[], Any]], mine: Callable[[], Any]
    ) -> dict[str, Callable[[], Any]]:
        return {"raw": floor(db.floors["raw"]), "turnstore": mine, "raw_default": floor(db.floors["raw_default"])}

    per_loop = db.in_session // max(len(db.loops), 1)
    return [
        ReadOp(
            "last",
            f"last {n} of a {db.in_session:,}-message session",
            sizes.last_calls,
            READ_BLOCK,
            runs(lambda rs: lambda: rs.last(sid, n), lambda: store.messages.last(sid, n)),
        ),
        ReadOp(
            "session",
            f"whole {db.in_session:,}-message session",
            sizes.session_calls,
            2,
            runs(lambda rs: lambda: rs.session(sid), lambda: list(store.messages.records(sid))),
        ),
        ReadOp(
            "walk",
            f"walk the whole {db.in_session:,}-message session (each message built as reached, none kept)",
            sizes.session_calls,
            2,
            runs(lambda rs: lambda: rs.walk(sid), lambda: _count(store.messages.records(sid))),
        ),
        ReadOp(
            "turn",
            "one turn (random k)",
            sizes.turn_calls,
            READ_BLOCK,
            runs(lambda rs: _cycling(rs.turn, pairs), _cycling(store.messages.turn, pairs)),
        ),
        ReadOp(
            "usage",
            f"session usage totals ({db.in_session:,} messages)",
            sizes.usage_calls,
            READ_BLOCK,
            runs(lambda rs: lambda: rs.usage(sid), lambda: store.usage.session(sid)),
        ),
        ReadOp(
            "usage_loop",
            f"usage of one loop (~{per_loop:,} messages)",
            sizes.loop_usage_calls,
            READ_BLOCK,
            runs(lambda rs: _cycling(rs.usage_loop, loops), _cycling(store.usage.loop, loops)),
        ),
        ReadOp(
            "usage_by_model",
            f"usage by model, all sessions ({db.total:,} messages)",
            sizes.by_model_calls,
            READ_BLOCK,
            runs(lambda rs: rs.by_model, store.usage.by_model),
        ),
    ]


def bench_read(op: ReadOp, reps: int, profile: bool) -> tuple[dict[str, list[float]], pstats.Stats | None]:
    """Per-call nanoseconds of each repetition per system (and a profile of turnstore's side if asked).

    Each repetition makes ``op.calls`` calls per system, in blocks of
    ``op.block`` calls alternating between the systems (order reversed every
    block and every repetition), after one untimed warm-up pass.
    """

    def loop(call: Callable[[], Any], count: int) -> None:
        for _ in range(count):
            call()

    rounds = max(op.calls // op.block, 1)
    for system in SYSTEMS:  # warm-up, untimed
        loop(op.runs[system], rounds * op.block)
    samples: dict[str, list[float]] = {system: [] for system in SYSTEMS}
    for rep in range(reps):
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        totals = dict.fromkeys(SYSTEMS, 0)
        gc.collect()
        for i in range(rounds):
            for system in order if i % 2 == 0 else order[::-1]:
                totals[system] += timed(lambda: loop(op.runs[system], op.block))
        for system in SYSTEMS:
            samples[system].append(totals[system] / (rounds * op.block))
    stats = None
    if profile:
        profiler = cProfile.Profile()
        timed(lambda: loop(op.runs["turnstore"], rounds * op.block), profiler)
        stats = pstats.Stats(profiler)
    return samples, stats


# --- checks: every system reads the same thing -------------------------------------------


def _sums(totals: Any) -> tuple[Any, ...]:
    return (
        totals.input,
        totals.output,
        totals.reasoning,
        totals.cache_read,
        totals.cache_write,
        totals.total_tokens,
        totals.requests,
    )


def check_reads(db: ReadDb, n: int) -> str:
    """Both floors and turnstore return the same messages and the same sums; a line saying what was checked."""
    store, sid = db.store, db.session_id
    for name, rs in db.floors.items():
        typed = [m.model_dump(mode="json") for m in store.messages.last(sid, n)]
        plain = rs.last(sid, n)
        if not typed or plain[-len(typed) :] != typed:
            raise SystemExit(f"last(): turnstore and {name} returned different messages")
        mine = [
            (r.message_id, r.session_id, r.loop_id, r.turn_index, r.seq, r.message.model_dump(mode="json"), r.source)
            for r in store.messages.records(sid)
        ]
        if mine != rs.session(sid):
            raise SystemExit(f"records(): turnstore and {name} returned different rows")
        if rs.walk(sid) != len(mine):
            raise SystemExit(f"walk: {name} walked {rs.walk(sid)} rows, turnstore {len(mine)}")
        for loop_id, k in db.turns[:: max(len(db.turns) // 50, 1)]:
            got = [m.model_dump(mode="json") for m in store.messages.turn(loop_id, k).messages]
            if got != rs.turn(loop_id, k):
                raise SystemExit(f"turn({loop_id}, {k}): turnstore and {name} differ")
        if _sums(store.usage.session(sid)) != tuple(rs.usage(sid)):
            raise SystemExit(f"usage.session: turnstore {_sums(store.usage.session(sid))} != {name} {rs.usage(sid)}")
        for loop_id in db.loops:
            if _sums(store.usage.loop(loop_id)) != tuple(rs.usage_loop(loop_id)):
                raise SystemExit(f"usage.loop({loop_id}): turnstore and {name} differ")
        by_model = [(r.model, r.provider, *_sums(r)) for r in store.usage.by_model()]
        if by_model != [tuple(row) for row in rs.by_model()]:
            raise SystemExit(f"usage.by_model: turnstore {by_model} != {name} {rs.by_model()}")
    window = len(store.messages.last(sid, n))
    return (
        f"same results checked: last({n}) ({window} models), the session's {db.in_session} records, "
        f"{len(db.turns[:: max(len(db.turns) // 50, 1)])} turns, usage of the session, its {len(db.loops)} loops "
        f"and {len(store.usage.by_model())} models"
    )


def check_pragmas(store: Store, floors: dict[str, raw.RawStore]) -> dict[str, dict[str, Any]]:
    """turnstore's connection and the raw floor's have the same effective pragmas; all of them, by system."""
    store.sessions.exists("x")  # make sure this thread's connection exists
    ts_connection: sqlite3.Connection = store._db._state().dbapi  # the connection turnstore runs on (read only)
    got = {"turnstore": raw.pragmas(ts_connection)}
    got.update({name: raw.pragmas(rs.connection) for name, rs in floors.items()})
    if got["turnstore"] != got["raw"]:
        raise SystemExit(f"pragmas: turnstore {got['turnstore']} != raw {got['raw']}")
    if ts_connection.isolation_level is not None or any(
        rs.connection.isolation_level is not None for rs in floors.values()
    ):
        raise SystemExit("every connection must be in autocommit mode")
    return got
