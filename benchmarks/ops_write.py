"""The main table's write operations (1-3): turnstore's sync Store against the raw-sqlite3 floors.

Three systems, each on a fresh database file of its own in every repetition:

* ``raw``: the floor (``raw.py``), turnstore's pragmas;
* ``turnstore``: :class:`turnstore.Store`;
* ``raw_default``: the same floor on a connection at SQLite's defaults
  (rollback journal, ``synchronous=FULL``), the file switched out of WAL;
* ``raw_min`` (appends only): the floor on a minimal table (``raw.create_minimal``:
  the messages table with two indexes, no session touch).

Operations:

1. ``append``: one message per commit (``store.messages.append``);
2. ``append_turn``: one turn per transaction (``store.messages.append_turn``);
3. ``import``: bulk import of turnstore's own JSONL export of the write
   workload, one file per session (``store.import_("turnstore", path, tune_process=True)``,
   as ``turnstore import`` runs it),
   against the floor parsing the same lines and inserting the same rows with
   ``executemany``, one transaction per session (``RawStore.import_jsonl``).
"""

from __future__ import annotations

import cProfile
import gc
import inspect
import pstats
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import raw
import workload
from common import blocks, fill_read_store, open_with_loops, remove_db, same_rows, sqlite_columns, sqlite_rows, timed

from turnstore import Store

SYSTEMS = ("raw", "turnstore", "raw_default")
APPEND_SYSTEMS = (*SYSTEMS, "raw_min")


@dataclass
class WriteOp:
    """One write operation: what a repetition writes, and how each system writes it."""

    key: str
    name: str
    unit: str
    items: list[Any]  # what one repetition writes (turns, or export files)
    warm: list[Any]  # written untimed by each system before the timed blocks
    per_op: int  # the number of units the total time is divided by
    block: int  # items per alternating block
    tables: tuple[str, ...] = ("messages",)  # compared across systems after the warm-up repetition
    systems: tuple[str, ...] = SYSTEMS


# --- how each system writes ---------------------------------------------------------


def _raw_append(rs: raw.RawStore, turns: list[workload.Turn]) -> None:
    append = rs.append
    for turn in turns:
        for message in turn.dicts:
            append(message, turn.session_id, turn.loop_id, turn.turn_index)


def _ts_append(store: Store, turns: list[workload.Turn]) -> None:
    append = store.messages.append
    for turn in turns:
        for message in turn.models:
            append(message, loop_id=turn.loop_id, turn_index=turn.turn_index)


def _raw_append_turn(rs: raw.RawStore, turns: list[workload.Turn]) -> None:
    append_turn = rs.append_turn
    for turn in turns:
        append_turn(turn.dicts, turn.session_id, turn.loop_id, turn.turn_index)


def _ts_append_turn(store: Store, turns: list[workload.Turn]) -> None:
    append_turn = store.messages.append_turn
    for turn in turns:
        append_turn(turn.loop_id, turn.turn_index, turn.models)


def _raw_import(rs: raw.RawStore, paths: list[Path]) -> None:
    for path in paths:
        rs.import_jsonl(path)


def _ts_import(store: Store, paths: list[Path]) -> None:
    # As `turnstore import` runs it: the floor is a bulk writer with the process to itself too. A library
    # call's default (the collector and threads left alone) is measured by the import-pi suite. (Older
    # checkouts, run with --against-style PYTHONPATH A/Bs, always tuned the process and take no such flag.)
    tuned = {"tune_process": True} if "tune_process" in inspect.signature(store.import_).parameters else {}
    for path in paths:
        store.import_("turnstore", path, **tuned)


RUNS: dict[str, tuple[Callable[..., None], Callable[..., None]]] = {
    "append": (_raw_append, _ts_append),
    "append_turn": (_raw_append_turn, _ts_append_turn),
    "import": (_raw_import, _ts_import),
}


def _open(
    op: WriteOp, path: Path, system: str, loops: list[workload.Workload]
) -> tuple[Callable[[list[Any]], None], Callable[[], None]]:
    """A fresh database for ``system`` and its writer: (run a block, close).

    The schema comes from turnstore's migrations; for the appends, the
    sessions and loops are created through turnstore too (an import creates
    its own).
    """
    raw_run, ts_run = RUNS[op.key]
    if system == "raw_min":
        remove_db(path)
        Store(path).close()  # turnstore's schema, for the messages table's columns
        with closing(sqlite3.connect(path)) as connection:
            columns = sqlite_columns(connection, "messages")
        remove_db(path)
        minimal = raw.RawStore(raw.create_minimal(path, columns), touch=False)
        return (lambda items: raw_run(minimal, items)), minimal.connection.close
    if op.key == "import":
        remove_db(path)
        store = Store(path)
    else:
        store = open_with_loops(path, loops)
    if system == "turnstore":
        return (lambda items: ts_run(store, items)), store.close
    store.close()
    if system == "raw_default":
        raw.use_rollback_journal(path)
        connection = raw.connect_default(str(path))
    else:
        connection = raw.connect(str(path))
    rs = raw.RawStore(connection)
    return (lambda items: raw_run(rs, items)), connection.close


def write_rep(
    op: WriteOp,
    paths: dict[str, Path],
    loops: list[workload.Workload],
    systems: tuple[str, ...],
    profiler: cProfile.Profile | None = None,
) -> dict[str, int]:
    """One repetition: each system on its own fresh file; returns the summed nanoseconds per system.

    Untimed: create each file (schema, sessions, loops) and write the warm-up
    items through each system's own path, so statements are prepared and
    connections open. Timed: the items, in blocks of ``op.block`` that
    alternate between the systems (order reversed every block), so load from
    other processes on the machine falls on all of them alike.
    """
    runs: dict[str, Callable[[list[Any]], None]] = {}
    closers: list[Callable[[], None]] = []
    try:
        for system in systems:
            run, close = _open(op, paths[system], system, loops)
            closers.append(close)
            runs[system] = run
            run(op.warm)
        totals = dict.fromkeys(systems, 0)
        gc.collect()
        for i, items in enumerate(blocks(op.items, op.block)):
            for system in systems if i % 2 == 0 else systems[::-1]:
                totals[system] += timed(lambda: runs[system](items), profiler)
        return totals
    finally:
        for close in closers:
            close()


def bench_write(
    op: WriteOp,
    reps: int,
    out: Path,
    loops: list[workload.Workload],
    profile: bool,
) -> tuple[dict[str, list[float]], int, pstats.Stats | None]:
    """Per-unit nanoseconds of each repetition per system, the number of rows checked, and a profile if asked."""
    # Warm-up repetition, untimed; its databases are compared row by row.
    paths = {system: out / f"warmup-{op.key}-{system}.db" for system in op.systems}
    write_rep(op, paths, loops, op.systems)
    raw.learn_search_words(paths["turnstore"])
    rows = 0
    for table in op.tables:
        rows += same_rows(f"{op.key} ({table})", {system: sqlite_rows(path, table) for system, path in paths.items()})
    for path in paths.values():
        remove_db(path)
    samples: dict[str, list[float]] = {system: [] for system in op.systems}
    for rep in range(reps):
        paths = {system: out / f"{op.key}-{system}-{rep}.db" for system in op.systems}
        order = op.systems if rep % 2 == 0 else op.systems[::-1]
        totals = write_rep(op, paths, loops, order)
        for system in op.systems:
            samples[system].append(totals[system] / op.per_op)
        for path in paths.values():
            remove_db(path)
    stats = None
    if profile:
        profiler = cProfile.Profile()
        path = out / f"profile-{op.key}.db"
        write_rep(op, {"turnstore": path}, loops, ("turnstore",), profiler)
        remove_db(path)
        stats = pstats.Stats(profiler)
    return samples, rows, stats


# --- the exports the import reads -----------------------------------------------------


def export_files(out: Path, works: dict[str, workload.Workload]) -> dict[str, list[Path]]:
    """turnstore JSONL exports of each workload, one file per session, written before timing.

    Each workload is appended through turnstore into a scratch database and
    exported with ``store.export(session_id, "turnstore", path)``.
    """
    files: dict[str, list[Path]] = {}
    for name, work in works.items():
        path = out / f"export-{name}.db"
        store = open_with_loops(path, [work])
        try:
            fill_read_store(store, work.turns)
            directory = out / f"export-{name}"
            directory.mkdir(exist_ok=True)
            files[name] = []
            for i, session_id in enumerate(work.session_ids):
                target = directory / f"{i:03d}.jsonl"
                store.export(session_id, "turnstore", target)
                files[name].append(target)
        finally:
            store.close()
            remove_db(path)
    return files


def check_import(out: Path, files: list[Path], sessions: int, messages: int) -> None:
    """turnstore imports every exported session whole (the timed runs do not look at the reports)."""
    path = out / "import-check.db"
    remove_db(path)
    store = Store(path)
    try:
        written = 0
        for file in files:
            report = store.import_("turnstore", file)
            if not report.ok:
                raise SystemExit(f"import of {file} failed: {report.errors or report.sessions_failed}")
            written += report.messages
        if written != messages or store.sessions.count() != sessions:
            raise SystemExit(
                f"import wrote {written} messages in {store.sessions.count()} sessions, "
                f"expected {messages} in {sessions}"
            )
    finally:
        store.close()
        remove_db(path)


def write_ops(
    work: workload.Workload, warm: workload.Workload, block: int, files: dict[str, list[Path]]
) -> list[WriteOp]:
    """The three write operations over the write workload."""
    per_turn = work.message_count / len(work.turns)
    return [
        WriteOp(
            "append",
            "append 1 message per commit",
            "per message",
            work.turns,
            warm.turns,
            work.message_count,
            block,
            systems=APPEND_SYSTEMS,
        ),
        WriteOp(
            "append_turn",
            f"append 1 turn per transaction ({per_turn:.2f} msgs)",
            "per turn",
            work.turns,
            warm.turns,
            len(work.turns),
            block,
            systems=APPEND_SYSTEMS,
        ),
        WriteOp(
            "import",
            f"bulk import, turnstore JSONL ({len(work.session_ids)} sessions, {work.message_count:,} msgs)",
            "per message",
            files["work"],
            files["warm"],
            work.message_count,
            1,
            tables=("sessions", "loops", "messages"),
        ),
    ]
