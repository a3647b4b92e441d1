"""``--postgres URL``: turnstore sync and async on PostgreSQL against a raw-psycopg floor.

The run creates its own databases on the server named by the URL (one per
system, and one for the reads; ``pg.py``), each with turnstore's schema (a
``Store`` opened on it runs the migrations) and the same sessions and loops;
the floor (``rawpg.py``) writes the same rows with explicit ``BEGIN`` /
``COMMIT``. Between repetitions each database is emptied with
``TRUNCATE … RESTART IDENTITY`` so ids start at 1 again; the rows of the
warm-up repetition are compared across the systems. The read database is
``VACUUM ANALYZE``d once built. The server's settings are left alone and
reported (``synchronous_commit=on`` by default: each commit waits for its WAL
flush).
"""

from __future__ import annotations

from typing import Any

import pg
import workload
from common import Sizes
from interleave import Section, run_ops
from systems import RawPostgres, System, TurnstoreAsync, TurnstoreAsyncOneWorker, TurnstoreSync


class PostgresDatabases:
    """A database per system for the whole run, emptied (TRUNCATE … RESTART IDENTITY) before each repetition."""

    dialect = "postgresql"

    def __init__(self, server: pg.Server) -> None:
        self.server = server

    def fresh(self, op: str, system: str, rep: str) -> str:
        url = self.server.database(system)
        pg.empty(url)
        return url

    def discard(self, url: str) -> None:
        pass  # emptied by the next fresh(), dropped at the end of the run

    def rows(self, url: str) -> list[tuple[Any, ...]]:
        return pg.message_rows(url)

    def after_build(self, url: str) -> None:
        pg.analyze(url)  # what autovacuum would have done to a table this size by now


def new_section() -> Section:
    return Section(
        "postgresql",
        "PostgreSQL: turnstore sync and async vs raw psycopg",
        columns=[
            ("raw", "raw psycopg"),
            ("sync", "turnstore sync"),
            ("async", "turnstore async"),
            ("async1", "async, 1 worker"),
        ],
        ratios=[("sync", "raw"), ("async", "raw"), ("async", "sync"), ("async1", "sync")],
    )


async def run(url: str, sizes: Sizes, reps: int, work: workload.Workload, warm: workload.Workload) -> Section:
    section = new_section()
    systems: list[type[System]] = [RawPostgres, TurnstoreSync, TurnstoreAsync, TurnstoreAsyncOneWorker]
    server = pg.Server(url)
    try:
        settings = server.settings()
        section.info["server"] = pg.hide_password(server.url)
        section.info["settings"] = settings
        section.info["psycopg"] = pg.psycopg.__version__
        print(
            f"\nPostgreSQL {settings['server_version']} at {pg.hide_password(server.url)}: "
            f"synchronous_commit={settings['synchronous_commit']}, fsync={settings['fsync']}, "
            f"wal_sync_method={settings['wal_sync_method']}; databases {server.prefix}_*; {reps} repetitions"
        )
        await run_ops(section, PostgresDatabases(server), systems, sizes, reps, work, warm)
    finally:
        server.drop()
    flush = " (every commit waits for its WAL flush)" if settings["synchronous_commit"] != "off" else ""
    section.notes += [
        f"Medians of {reps} repetitions, per-repetition range in parentheses; systems interleaved in blocks "
        f"({sizes.write_block} turns, or 10 calls) inside one event loop. PostgreSQL {settings['server_version']} "
        f"on the same machine over TCP (localhost), its settings left as found: "
        f"synchronous_commit={settings['synchronous_commit']}{flush}, fsync={settings['fsync']}; "
        f"psycopg {pg.psycopg.__version__}.",
        "The floor (raw psycopg) writes the same rows with BEGIN; INSERT … RETURNING id; UPDATE sessions; COMMIT "
        "on an autocommit connection, taking seq from a counter in the app and locking nothing. turnstore also "
        "locks the loop row (SELECT … FOR UPDATE) so that concurrent appends to one loop take seq in turn, and "
        "computes seq and session_id in the INSERT: one more round trip per write transaction.",
        "async: AsyncStore (8 worker threads on PostgreSQL, each with its own connection, all opened before "
        "timing), each call awaited in turn; async, 1 worker: AsyncStore(url, workers=1), a diagnostic (every "
        "call on the same thread, connection and server backend).",
        "Each system writes into a database of its own, emptied with TRUNCATE … RESTART IDENTITY before each "
        "repetition; the read database is VACUUM ANALYZEd once built.",
    ]
    return section
