"""Crash safety: a writer process is killed with SIGKILL mid-append or mid-import, again and again.

Each test forks a child that opens a :class:`~turnstore.Store` and writes
forever; the parent kills it after a seeded random delay counted from the
child's "ready" signal, checks the database, and starts the next child on
the SAME database, which carries on where the last one stopped. After every
kill:

* SQLite: ``PRAGMA integrity_check`` is ``ok`` and ``foreign_key_check`` is
  empty (on a plain, read-only ``sqlite3`` connection, so the crashed
  writer's WAL is left for the next child's store to recover);
* PostgreSQL: the server has ended the killed client's backend (and so rolled
  its open transaction back) before anything is read;
* append: every turn in the loop has exactly its 3 messages, turn indexes
  and ``seq`` run 0..n-1 without a gap, every append that returned in the
  child is there, and an append that was inside its transaction when the
  child died is not;
* import: every session in the database has all its messages and loops and
  an ``imports`` row, no row belongs to a half-written session, and every
  session the importer had reported done is there.

The child reports what it is doing through a pipe: ``T<k>``/``t<k>`` around
each ``append_turn``, ``S<j>``/``s<j>`` around each single ``append``,
``F<n>`` after each imported file, and ``b``/``c``/``r`` when its connection
starts a ``BEGIN``/``COMMIT``/``ROLLBACK`` (a SQLite trace callback; on
PostgreSQL a cursor subclass), so the parent knows where each kill landed:
between calls, in a call before its ``BEGIN``, inside the transaction, in
its ``COMMIT``, or after it (a single append whose commit reached the search
index's batch size indexes the newest messages in a transaction of its own,
its message already committed). Each test prints that tally.

Counts are small by default so the suite stays quick; ``TURNSTORE_STRESS=1``
runs the figures quoted in docs/reliability.md (200 kills per append test,
100 per import test). ``TURNSTORE_CRASH_SEED`` changes the seed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import select
import signal
import sqlite3
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from factories import assistant, tool_result, user

from turnstore import Store

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL") or not hasattr(os, "fork"), reason="needs fork and SIGKILL"),
]

STRESS = os.environ.get("TURNSTORE_STRESS") == "1"
SEED = int(os.environ.get("TURNSTORE_CRASH_SEED", "20250601"))
APPEND_KILLS = 200 if STRESS else 25
IMPORT_KILLS = 100 if STRESS else 15
KILL_DELAY = (0.005, 0.300)
"""Seconds between the child's "ready" and the SIGKILL, for the append tests (uniform)."""
SESSIONS = 30
"""Sessions in the import source: session i has 180 + 2i messages (about 200) in 1 + i % 3 loops."""
CHILD_LIFETIME = 120.0
"""A child the parent failed to kill exits by itself after this many seconds."""
READY_TIMEOUT = 60.0
PG_APP = f"turnstore-crash-{os.getpid()}"
"""``application_name`` of the children's PostgreSQL connections, to see when the server has ended them."""


# --- the child's side ---------------------------------------------------------------------


class _Marks:
    """Lines written to the parent through a pipe, one ``os.write`` each (nothing buffered to lose)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def put(self, text: str) -> None:
        os.write(self.fd, text.encode() + b"\n")

    def statement(self, sql: Any) -> None:
        if not isinstance(sql, str):
            return
        head = sql.lstrip()[:8].upper()
        if head.startswith("BEGIN"):
            self.put("b")
        elif head.startswith("COMMIT"):
            self.put("c")
        elif head.startswith("ROLLBACK"):
            self.put("r")


def _watch_transactions(marks: _Marks) -> None:
    """Report every BEGIN / COMMIT / ROLLBACK the child's connections start (the child only)."""

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.set_trace_callback(marks.statement)  # called as each statement starts
        else:
            dbapi_connection.cursor_factory = _marking_cursor(marks)

    sa.event.listen(sa.engine.Engine, "connect", on_connect)


def _marking_cursor(marks: _Marks) -> type:
    """A psycopg cursor that reports the transaction statements it executes."""
    import psycopg

    class MarkingCursor(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            marks.statement(query)
            return super().execute(query, params, **kwargs)

    return MarkingCursor


def _child(body: Callable[[_Marks], None], fd: int) -> None:
    """Run ``body``; report an exception to the parent instead of dying quietly."""
    marks = _Marks(fd)
    try:
        _watch_transactions(marks)
        body(marks)
    except BaseException:
        marks.put("E" + json.dumps(traceback.format_exc()))
        os._exit(1)
    os._exit(0)


def _append_worker(
    url: str, pragmas: Mapping[str, Any] | None, loop_id: str, turn: int, single: int, seed: int, fd: int
) -> None:
    """Append turns of 3 messages (``turn-<k>`` in each) forever, with a single message now and then."""

    def body(marks: _Marks) -> None:
        store = Store(url, pragmas=pragmas)
        rng = random.Random(seed)
        k, j = turn, single
        marks.put("R")
        deadline = time.monotonic() + CHILD_LIFETIME
        while time.monotonic() < deadline:
            if rng.random() < 0.25:
                marks.put(f"S{j}")
                store.messages.append(user(f"single-{j}"), loop_id=loop_id)
                marks.put(f"s{j}")
                j += 1
            text = f"turn-{k}"
            messages = [user(text), assistant(text, calls=(f"call-{k}",)), tool_result(f"call-{k}", text)]
            marks.put(f"T{k}")
            store.messages.append_turn(loop_id, k, messages)
            marks.put(f"t{k}")
            k += 1

    _child(body, fd)


def _import_worker(url: str, source: str, fd: int) -> None:
    """Import every session of ``source``, then wait to be killed."""

    def body(marks: _Marks) -> None:
        store = Store(url)
        marks.put("R")
        report = store.import_("turnstore", source, progress=lambda _file, done, _total: marks.put(f"F{done}"))
        if report.errors or report.sessions_failed:
            raise AssertionError(f"import failed: {report.errors} {report.sessions_failed}")
        marks.put("DONE")
        time.sleep(CHILD_LIFETIME)

    _child(body, fd)


# --- the parent's side ---------------------------------------------------------------------


class _Pipe:
    """The read end of the child's pipe, drained as it fills (so the child never blocks writing)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = bytearray()
        self.eof = False

    def lines(self) -> list[str]:
        return self.data.decode().split("\n")[:-1]

    def read(self, until: Callable[[list[str]], bool], timeout: float) -> bool:
        """Read until ``until(lines)`` holds (True), end of file or ``timeout`` (False)."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            if until(self.lines()):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 1 << 16)
                if chunk:
                    self.data += chunk
                else:
                    self.eof = True
        return until(self.lines())


def _failure(lines: list[str]) -> str | None:
    for line in lines:
        if line.startswith("E"):
            return json.loads(line[1:])
    return None


@dataclass
class _Run:
    lines: list[str]  # what the child wrote after "R"
    seconds: float  # from its "R" to the kill


def _run_and_kill(target: Callable[..., None], args: tuple[Any, ...], delay: float) -> _Run:
    """Start a child; SIGKILL it ``delay`` s after it is ready, or as soon as it says DONE."""
    read_fd, write_fd = os.pipe()
    process = multiprocessing.get_context("fork").Process(target=target, args=(*args, write_fd), daemon=True)
    try:
        process.start()
    finally:
        os.close(write_fd)
    pipe = _Pipe(read_fd)
    try:
        ready = pipe.read(lambda lines: "R" in lines or _failure(lines) is not None, READY_TIMEOUT)
        ready_at = time.monotonic()
        if ready and _failure(pipe.lines()) is None:
            pipe.read(lambda lines: lines[-1:] == ["DONE"] or _failure(lines) is not None, delay)
        process.kill()
        seconds = time.monotonic() - ready_at
        process.join(30)
        pipe.read(lambda lines: False, 30)  # the rest, up to the end of file
    finally:
        os.close(read_fd)
        if process.is_alive():
            process.kill()
            process.join(5)
    lines = pipe.lines()
    error = _failure(lines)
    assert error is None, f"the child failed:\n{error}"
    assert ready, "the child never said it was ready"
    assert process.exitcode == -signal.SIGKILL, f"the child ended by itself (exit code {process.exitcode})"
    return _Run(lines[len(lines) - lines[::-1].index("R") :], seconds)


@dataclass
class _Target:
    """Where a crash test writes, and how the parent looks at it afterwards."""

    kind: str  # "sqlite" or "postgresql"
    url: str  # what the children open
    pragmas: dict[str, Any] | None = None
    path: Path | None = None  # SQLite file
    plain_url: str | None = None  # PostgreSQL, without the children's application_name
    backend_waits: list[float] = field(default_factory=list)

    def settle(self) -> None:
        """After a kill: wait until the child's server backend is gone (PostgreSQL); check the file (SQLite)."""
        if self.kind == "postgresql":
            start = time.monotonic()
            while self.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = :app", app=PG_APP)[0][0]:
                assert time.monotonic() - start < 30, "the server kept the killed client's backend for 30 s"
                time.sleep(0.002)
            self.backend_waits.append(time.monotonic() - start)
            return
        with self._sqlite() as connection:
            assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert connection.execute("PRAGMA foreign_key_check").fetchall() == []

    def _sqlite(self) -> closing[sqlite3.Connection]:
        # A plain, read-only connection: closing it neither checkpoints nor removes the WAL, so the
        # next child's store opens the files exactly as the killed one left them.
        assert self.path is not None
        return closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True))

    def query(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            with self._sqlite() as connection:
                return connection.execute(sql, params).fetchall()
        engine = sa.create_engine(self.plain_url or self.url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                return [tuple(row) for row in connection.execute(sa.text(sql), params)]
        finally:
            engine.dispose()


def _target(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> _Target:
    if kind.startswith("sqlite"):
        path = tmp_path / "crash.db"
        pragmas = {"synchronous": "full"} if kind == "sqlite-full" else None
        Store(path, pragmas=pragmas).close()
        return _Target("sqlite", str(path), pragmas=pragmas, path=path)
    database = request.getfixturevalue("postgres")
    database.empty()
    url = sa.engine.make_url(database.url).update_query_dict({"application_name": PG_APP})
    return _Target("postgresql", url.render_as_string(hide_password=False), plain_url=database.url)


@pytest.fixture(params=["sqlite", "sqlite-full", "postgresql"])
def append_target(request: pytest.FixtureRequest, tmp_path: Path) -> _Target:
    """An empty database: SQLite with the default pragmas, SQLite with synchronous=FULL, PostgreSQL."""
    return _target(request.param, request, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def import_target(request: pytest.FixtureRequest, tmp_path: Path) -> _Target:
    """An empty database: SQLite (default pragmas) or PostgreSQL."""
    return _target(request.param, request, tmp_path)


def _append_landing(lines: list[str]) -> tuple[str, str | None]:
    """Where an append child was when it died, from its last lines; and the call in flight (``T3``...), if any."""
    where, call, committed = "between calls", None, False
    for line in lines:
        if line[:1] in ("T", "S"):
            where, call, committed = "in a call, before BEGIN", line, False
        elif line[:1] in ("t", "s"):
            where, call = "between calls", None
        elif line == "b" and committed:  # a BEGIN after the call's COMMIT: that COMMIT returned
            where = "after its COMMIT"
        else:
            where = _STATEMENT_LANDING.get(line, where)
            committed = committed or line == "c"
    return where, call


def _import_landing(lines: list[str]) -> str:
    """Where an import child was when it died, from its last lines."""
    where = "reading files"
    for line in lines:
        if line.startswith("F"):
            where = "reading files"
        elif line == "DONE":
            where = "after the import"
        else:
            where = _STATEMENT_LANDING.get(line, where)
    return where


_STATEMENT_LANDING = {"b": "inside the transaction", "c": "in COMMIT", "r": "rolled back"}


# --- killing appends -----------------------------------------------------------------------


@dataclass
class _LoopState:
    """What the parent knows of the loop the children append to."""

    turns: int = 0  # turns 0..turns-1 are stored
    singles: int = 0  # single-0..single-(singles-1) are stored
    checked_id: int = 0  # rows up to this id have had their text checked


def _check_loop(target: _Target, loop_id: str, state: _LoopState) -> None:
    """The loop's invariants; advances ``state`` to what is stored now."""
    counts = target.query(
        "SELECT turn_index, count(*) FROM messages WHERE loop_id = :loop AND turn_index IS NOT NULL "
        "GROUP BY turn_index ORDER BY turn_index",
        loop=loop_id,
    )
    partial = [(turn, count) for turn, count in counts if count != 3]
    assert partial == [], f"turns without exactly 3 messages (turn, count): {partial[:10]}"
    turns = [turn for turn, _ in counts]
    assert turns == list(range(len(turns))), "the loop's turn indexes have a gap"
    seqs = [row[0] for row in target.query("SELECT seq FROM messages WHERE loop_id = :loop ORDER BY id", loop=loop_id)]
    assert seqs == list(range(len(seqs))), "seq does not run 0..n-1 in id order"
    singles = state.singles
    rows = target.query(
        "SELECT id, turn_index, CAST(message AS TEXT) FROM messages WHERE loop_id = :loop AND id > :after ORDER BY id",
        loop=loop_id,
        after=state.checked_id,
    )
    for row_id, turn, text in rows:
        expected = f'"single-{singles}"' if turn is None else f'"turn-{turn}"'
        assert expected in text, f"message {row_id} (turn {turn}) should hold {expected}: {text[:200]}"
        singles += turn is None
    assert len(seqs) == 3 * len(turns) + singles
    state.turns, state.singles = len(turns), singles
    if rows:
        state.checked_id = rows[-1][0]


def test_sigkill_during_append_turn_leaves_whole_turns(append_target: _Target) -> None:
    target = append_target
    with Store(target.url, pragmas=target.pragmas) as store:
        session_id = store.sessions.create(title="crash").session_id
        loop_id = store.loops.start(session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"}).loop_id
    rng = random.Random(SEED)
    state = _LoopState()
    landings: Counter[str] = Counter()
    committed_unacknowledged = 0
    started = time.monotonic()
    for kill in range(APPEND_KILLS):
        before = (state.turns, state.singles)
        lines = _run_and_kill(
            _append_worker,
            (target.url, target.pragmas, loop_id, state.turns, state.singles, SEED * 1000 + kill),
            rng.uniform(*KILL_DELAY),
        ).lines
        target.settle()
        _check_loop(target, loop_id, state)

        where, call = _append_landing(lines)
        landings[where] += 1
        acked_turns = [int(line[1:]) for line in lines if line.startswith("t")]
        acked_singles = [int(line[1:]) for line in lines if line.startswith("s")]
        assert acked_turns == list(range(before[0], before[0] + len(acked_turns)))
        assert acked_singles == list(range(before[1], before[1] + len(acked_singles)))
        # Every append that returned is stored (a process crash loses no committed transaction), and
        # nothing more but the call in flight, and that only if the child died in its COMMIT.
        extra = (state.turns - before[0] - len(acked_turns), state.singles - before[1] - len(acked_singles))
        assert min(extra) >= 0, f"appends that returned are gone: {extra}"
        assert where != "rolled back", "the child rolled a transaction back"
        in_flight = (1, 0) if call and call[0] == "T" else (0, 1)
        if where == "in COMMIT":
            assert extra in ((0, 0), in_flight), f"{extra} stored in flight"
            committed_unacknowledged += extra != (0, 0)
        elif where == "after its COMMIT":  # killed while the search index took the newest messages
            assert extra == in_flight, f"{call} committed but {extra} stored"
            committed_unacknowledged += 1
        else:
            assert extra == (0, 0), f"{call} is stored though the child died before its COMMIT ({where})"

    # The same loop, once more, through the API: a store opens and appends as if nothing had happened.
    with Store(target.url, pragmas=target.pragmas) as store:
        messages = [user("after"), assistant("after")]
        store.messages.append_turn(loop_id, state.turns, messages)
        assert len(store.messages.turn(loop_id, state.turns).messages) == 2
        stored = list(store.messages.records(loop_id=loop_id))
        assert [m.seq for m in stored] == list(range(len(stored)))
    if target.kind == "sqlite":
        target.settle()
    assert state.turns > APPEND_KILLS, "the children hardly appended anything"
    _report(
        "append",
        target,
        kills=APPEND_KILLS,
        turns=state.turns,
        singles=state.singles,
        landings=dict(landings),
        committed_unacknowledged=committed_unacknowledged,
        seconds=round(time.monotonic() - started, 1),
    )


# --- killing imports -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    directory: Path
    files: list[str]  # session ids in the order the importer reads their files
    expected: dict[str, tuple[int, int]]  # session id -> (messages, loops)


@pytest.fixture(scope="module")
def import_source(tmp_path_factory: pytest.TempPathFactory) -> _Source:
    """A turnstore JSONL export of SESSIONS sessions of known sizes, one file each."""
    root = tmp_path_factory.mktemp("crash-source")
    directory = root / "export"
    directory.mkdir()
    expected: dict[str, tuple[int, int]] = {}
    with Store(root / "scratch.db") as store:
        for i in range(SESSIONS):
            session_id = f"crash-{i:02d}"
            messages, loops = 180 + 2 * i, 1 + i % 3
            turns = messages // 2
            with store.transaction():
                store.sessions.create(session_id, title=f"session {i}")
                loop_ids = [store.loops.start(session_id).loop_id for _ in range(loops)]
                next_turn: Counter[str] = Counter()
                for t in range(turns):
                    loop_id = loop_ids[t * loops // turns]
                    prompt, reply = user(f"{session_id} turn {t}"), assistant(f"{session_id} reply {t}")
                    store.messages.append_turn(loop_id, next_turn[loop_id], [prompt, reply])
                    next_turn[loop_id] += 1
            store.export(session_id, "turnstore", directory / f"{session_id}.jsonl")
            expected[session_id] = (messages, loops)
    return _Source(directory, sorted(expected), expected)


def _check_sessions(target: _Target, expected: Mapping[str, tuple[int, int]]) -> set[str]:
    """Every stored session is whole (all messages, loops, its imports row); returns their ids."""
    sessions = target.query(
        "SELECT s.session_id,"
        " (SELECT count(*) FROM messages m WHERE m.session_id = s.session_id),"
        " (SELECT count(*) FROM loops l WHERE l.session_id = s.session_id),"
        " (SELECT count(*) FROM imports i WHERE i.session_id = s.session_id)"
        " FROM sessions s"
    )
    present = {row[0] for row in sessions}
    assert present <= set(expected), f"unknown sessions: {sorted(present - set(expected))}"
    half = [row for row in sessions if (row[1], row[2], row[3]) != (*expected[row[0]], 1)]
    assert half == [], f"half-imported sessions (id, messages, loops, imports rows): {half}"
    totals = target.query(
        "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM loops), (SELECT count(*) FROM imports)"
    )[0]
    assert totals == (
        sum(expected[s][0] for s in present),
        sum(expected[s][1] for s in present),
        len(present),
    ), "rows outside the stored sessions"
    gaps = target.query(
        "SELECT loop_id FROM messages GROUP BY loop_id HAVING min(seq) <> 0 OR max(seq) <> count(*) - 1"
        " OR count(DISTINCT seq) <> count(*)"
    )
    assert gaps == [], f"loops whose seq does not run 0..n-1: {gaps}"
    return present


def test_sigkill_during_import_leaves_whole_sessions(import_target: _Target, import_source: _Source) -> None:
    target, source = import_target, import_source
    everything = set(source.expected)
    # Time a child's whole import and one with nothing left to do (each kill below falls within the time
    # the child's import should take), then back to empty.
    full = _run_and_kill(_import_worker, (target.url, str(source.directory)), READY_TIMEOUT)
    assert full.lines[-1] == "DONE"
    target.settle()
    assert _check_sessions(target, source.expected) == everything
    unchanged = _run_and_kill(_import_worker, (target.url, str(source.directory)), READY_TIMEOUT)
    assert unchanged.lines[-1] == "DONE" and "b" in unchanged.lines
    with Store(target.url) as store:
        for session_id in source.files:
            store.sessions.delete(session_id)
    assert _check_sessions(target, source.expected) == set()

    rng = random.Random(SEED)
    present: set[str] = set()
    landings: Counter[str] = Counter()
    passes = 0
    started = time.monotonic()
    for kill in range(IMPORT_KILLS):
        before = present
        expected_time = (
            unchanged.seconds + max(full.seconds - unchanged.seconds, 0) * (SESSIONS - len(present)) / SESSIONS
        )
        lines = _run_and_kill(
            _import_worker, (target.url, str(source.directory)), rng.uniform(0.005, expected_time)
        ).lines
        target.settle()
        present = _check_sessions(target, source.expected)
        assert before <= present, "an imported session disappeared"

        finished = set(source.files[: max((int(line[1:]) for line in lines if line[:1] == "F"), default=0)])
        assert finished <= present, "a session the importer reported done is gone"
        allowed = before | finished
        where = _import_landing(lines)
        assert where != "rolled back", "the child rolled a transaction back"
        if where in ("inside the transaction", "in COMMIT"):
            # The session being written is the one of the first file not reported done.
            writing = source.files[len(finished)]
            where += " (unchanged session)" if writing in before else " (new session)"
            if where == "in COMMIT (new session)":
                allowed = allowed | {writing}  # its COMMIT may have completed
        assert present <= allowed, f"stored though the child died before their COMMIT: {sorted(present - allowed)}"
        landings[where] += 1
        if len(present) >= SESSIONS // 2 and kill < IMPORT_KILLS - 1:
            # Skipping imported sessions takes most of a run by now: empty the same database, so that
            # the next kills land in writes again.
            passes += 1
            with Store(target.url) as store:
                for session_id in sorted(present):
                    store.sessions.delete(session_id)
            present = _check_sessions(target, source.expected)
            assert present == set()

    # Once more to the end on what the last kill left, then again: nothing left to do.
    with Store(target.url) as store:
        report = store.import_("turnstore", source.directory)
        assert report.ok and report.errors == []
        assert sorted(report.sessions_written + report.sessions_unchanged) == source.files
        assert set(report.sessions_unchanged) == present
        assert _check_sessions(target, source.expected) == everything
        again = store.import_("turnstore", source.directory)
        assert again.sessions_written == []
        assert sorted(again.sessions_unchanged) == source.files
    target.settle()
    _report(
        "import",
        target,
        kills=IMPORT_KILLS,
        full_import_seconds=round(full.seconds, 3),
        unchanged_import_seconds=round(unchanged.seconds, 3),
        emptied=passes,
        landings=dict(landings),
        seconds=round(time.monotonic() - started, 1),
    )


def _report(test: str, target: _Target, **figures: Any) -> None:
    """Print the test's figures (``pytest -s`` or ``-rP`` shows them); docs/reliability.md quotes them."""
    engine = target.kind + (f" synchronous={target.pragmas['synchronous']}" if target.pragmas else "")
    if target.backend_waits:
        figures["server_ended_backend_ms"] = {
            "max": round(1000 * max(target.backend_waits), 1),
            "mean": round(1000 * sum(target.backend_waits) / len(target.backend_waits), 1),
        }
    print(f"\ncrash {test} [{engine}] seed={SEED}: {json.dumps(figures)}")
