"""Running turnstore's statements: one reused driver connection per thread, explicit transactions.

The statements themselves are SQLAlchemy Core constructs built once in
:mod:`turnstore.queries`. Here each is compiled once per dialect and then
executed on the thread's DBAPI connection with plain parameters. That skips
SQLAlchemy's per-call execution machinery, which measured here at ×1.9 the
time of raw sqlite3 per appended message, against ×1.2 for the whole append
through this path (``benchmarks/README.md``); the SQL, its portability and
its caching still come from SQLAlchemy.

Transactions are explicit: :meth:`Database.write` takes the SQLite write lock
up front (``BEGIN IMMEDIATE``) so concurrent writers queue on the busy
timeout instead of failing with "database is locked"; when the lock stays
taken longer than that, the BEGIN is retried with backoff until
``busy_budget`` seconds have passed, and only then :class:`StoreBusy` is
raised (a statement outside that retry that still finds the database locked
after the busy timeout raises it too, through :meth:`Database.refused`).
Reads outside a transaction see a consistent snapshot per statement.
"""

from __future__ import annotations

import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from operator import itemgetter
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.sql import ClauseElement

from .engine import storage_error
from .errors import InvalidMessage, LimitExceeded, StoreBusy

__all__ = ["Database", "Stopped"]


class Stopped(BaseException):
    """Raised in place of a new transaction once the thread's caller asked it to stop (:meth:`Database.stopping`).

    A ``BaseException``, like ``KeyboardInterrupt``: the code it ends (an
    import, say) has no business catching it as an error of its own input.
    """


class _ThreadState:
    """The connection a thread uses, and how deep it is in a transaction."""

    __slots__ = ("cursor", "dbapi", "depth", "pid", "proxied", "stop", "thread")

    def __init__(self, proxied: Any, dbapi: Any) -> None:
        self.proxied = proxied
        self.dbapi = dbapi
        self.cursor = dbapi.cursor()
        self.depth = 0
        self.thread = threading.current_thread()
        self.pid = os.getpid()
        self.stop: threading.Event | None = None


class _Compiled:
    """A statement compiled for one dialect: its SQL and how to lay out its parameters."""

    __slots__ = ("_pick", "constants", "order", "sql")

    def __init__(self, compiled: Any) -> None:
        self.sql: str = compiled.string
        self.order: tuple[str, ...] | None = tuple(compiled.positiontup or ()) if compiled.positional else None
        # Values of literals in the statement (e.g. the 1 in max(seq) + 1) that SQLAlchemy bound.
        self.constants = {name: bind.effective_value for bind, name in compiled.bind_names.items() if not bind.required}
        self._pick = _picker(self.order) if self.order is not None else None

    def params(self, params: Mapping[str, Any] | None) -> Any:
        """Parameters in the driver's form: a tuple (positional styles, SQLite's) or a dict (named)."""
        if self.constants:
            params = {**self.constants, **(params or {})}
        elif params is None:
            params = {}
        if self._pick is not None:
            return self._pick(params)
        return params

    def many(self, rows: Sequence[Mapping[str, Any]]) -> Iterable[Any]:
        """:meth:`params` of every row, made as the driver takes them (by ``map``, at C speed, when it can)."""
        if self._pick is not None and not self.constants:
            return map(self._pick, rows)
        return [self.params(row) for row in rows]


def _picker(order: tuple[str, ...]) -> Any:
    """A function from a parameter dict to the tuple of its values in ``order``, at C speed.

    Positional parameters bind faster than named ones: the sqlite3 driver looks
    each named one up by a name it builds again for every row.
    """
    if not order:
        return lambda params: ()
    if len(order) == 1:
        name = order[0]
        return lambda params: (params[name],)
    return itemgetter(*order)


_COMPILED: dict[tuple[Any, ...], dict[ClauseElement, _Compiled]] = {}
"""Statements compiled in this process, per kind of dialect: a store opened after another one
(each CLI command, each benchmark repetition) does not compile them again (about 5 ms for an import's)."""


def _dialect_key(dialect: Any) -> tuple[Any, ...]:
    """What the SQL text of a compiled statement depends on: the dialect, its parameter style and server version."""
    return (type(dialect), dialect.paramstyle, dialect.positional, getattr(dialect, "server_version_info", None))


class Database:
    """Executes compiled statements on a per-thread driver connection.

    Args:
        engine: where to connect; its dialect compiles the statements.
        busy_budget: seconds a write may wait, in total, for the SQLite write
            lock before :class:`StoreBusy` is raised.
    """

    def __init__(self, engine: Engine, *, busy_budget: float = 60.0) -> None:
        self.engine = engine
        self.dialect = engine.dialect
        self.is_sqlite = engine.dialect.name == "sqlite"
        self.is_postgresql = engine.dialect.name == "postgresql"
        self.busy_budget = busy_budget
        dbapi = engine.dialect.loaded_dbapi
        self.IntegrityError: type[Exception] = dbapi.IntegrityError
        self.OperationalError: type[Exception] = dbapi.OperationalError
        self.DatabaseError: type[Exception] = dbapi.DatabaseError
        self.DataError: type[Exception] = dbapi.DataError
        self._local = threading.local()
        self._states: list[_ThreadState] = []
        self._states_lock = threading.Lock()
        self._compiled: dict[ClauseElement, _Compiled] = {}
        self._closed = False
        _forget_after_fork(self)

    # --- connections ------------------------------------------------------

    def _state(self) -> _ThreadState:
        state: _ThreadState | None = getattr(self._local, "state", None)
        if state is not None:
            return state
        if self._closed:
            raise RuntimeError("this store is closed")
        with self._states_lock:  # ended threads' connections back to the pool first, to be reused
            self._states = [s for s in self._states if s.thread.is_alive() or self._close_state(s)]
        try:
            proxied = self.engine.raw_connection()
        except Exception as error:
            raise storage_error(error, self.engine.url) or error from None
        dbapi = proxied.driver_connection
        assert dbapi is not None  # a connection the pool just handed out
        if self.is_postgresql:
            dbapi.autocommit = True  # turnstore issues BEGIN / COMMIT itself
            _load_json_as_text(dbapi)
        state = _ThreadState(proxied, dbapi)
        self._local.state = state
        with self._states_lock:
            self._states.append(state)
        return state

    @staticmethod
    def _close_state(state: _ThreadState) -> bool:
        try:
            state.proxied.close()
        except Exception:  # a connection of a finished thread; nothing more to do
            pass
        return False

    def close(self) -> None:
        """Close every connection this database opened."""
        self._closed = True
        with self._states_lock:
            for state in self._states:
                self._close_state(state)
            self._states = []
        self._local = threading.local()
        self.engine.dispose()

    def _reset_after_fork(self) -> None:
        # The parent's connections must not be used (or closed) by the child.
        self._local = threading.local()
        self._states = []
        self._states_lock = threading.Lock()
        self.engine.dispose(close=False)

    # --- compiling ----------------------------------------------------------

    def compile(self, statement: ClauseElement) -> _Compiled:
        """The SQL text of a statement for this dialect, compiled once and cached.

        Only pass statements built once (the builders in :mod:`turnstore.queries`);
        the cache keeps every statement it sees.
        """
        compiled = self._compiled.get(statement)
        if compiled is None:
            shared = _COMPILED.setdefault(_dialect_key(self.dialect), {})
            compiled = shared.get(statement)
            if compiled is None:
                compiled = shared[statement] = _Compiled(statement.compile(dialect=self.dialect))
            self._compiled[statement] = compiled
        return compiled

    # --- executing ----------------------------------------------------------

    def execute(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> Any:
        """Execute a statement; returns the driver cursor (for ``fetchall`` / ``rowcount``)."""
        compiled = self.compile(statement)
        cursor = self._state().dbapi.cursor()
        try:
            cursor.execute(compiled.sql, compiled.params(params))
        except (UnicodeEncodeError, self.DataError, self.OperationalError) as error:
            raise self.refused(error) from None
        return cursor

    def executemany(self, statement: ClauseElement, rows: Sequence[Mapping[str, Any]]) -> None:
        """Execute a statement once per parameter set, in the current transaction."""
        compiled = self.compile(statement)
        cursor = self._state().dbapi.cursor()
        try:
            cursor.executemany(compiled.sql, compiled.many(rows))
        except (UnicodeEncodeError, self.DataError, self.OperationalError) as error:
            raise self.refused(error) from None

    def execute_each(
        self,
        statement: ClauseElement,
        other: ClauseElement,
        rows: Iterable[Mapping[str, Any]],
        takes_other: Callable[[Any], bool],
    ) -> None:
        """Execute ``statement`` for each row, or ``other`` where ``takes_other(row)``, in order, on one cursor."""
        first, second = self.compile(statement), self.compile(other)
        cursor = self._state().dbapi.cursor()
        execute, first_sql, second_sql = cursor.execute, first.sql, second.sql
        first_params, second_params = first.params, second.params
        try:
            for row in rows:
                if takes_other(row):
                    execute(second_sql, second_params(row))
                else:
                    execute(first_sql, first_params(row))
        except (UnicodeEncodeError, self.DataError, self.OperationalError) as error:
            raise self.refused(error) from None

    def refused(self, error: Exception) -> Exception:
        """The typed error for a value the driver or the database will not store, else ``error`` itself.

        A lone surrogate cannot be encoded as UTF-8 (both drivers); PostgreSQL's
        text cannot hold NUL and its numbers have ranges (``DataError``); a
        value too long for one of its index rows (2,704 bytes) is over a
        program limit (SQLSTATE 54000). SQLite stores NUL and long values.
        A read-only database, a full disk, an I/O error or a lock that outlasted
        the busy timeout is the typed error :func:`~turnstore.engine.storage_error`
        makes of it.
        """
        stored = storage_error(error, self.engine.url)
        if stored is not None:
            return stored
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        if isinstance(error, UnicodeEncodeError):
            return InvalidMessage(
                "a value holds a lone surrogate, which UTF-8 (and so the database) cannot store",
                [("value", "lone surrogate")],
            )
        if isinstance(error, self.DataError):
            return InvalidMessage(f"the database cannot store a value: {reason}", [("value", reason)])
        if getattr(error, "sqlstate", None) == "54000":
            return LimitExceeded(
                f"a value is too large for the database's index: {reason}", [("value", "too large to index")]
            )
        return error

    def insert(
        self,
        statement: ClauseElement,
        params: Mapping[str, Any],
        then: tuple[ClauseElement, Mapping[str, Any]] | None = None,
    ) -> int:
        """Run an INSERT (and ``then`` a second statement) and return the new row's id.

        Both run in one write transaction of their own, unless one is open. The
        statement returns the id with ``RETURNING`` on PostgreSQL; on SQLite it
        must not (the driver's ``lastrowid`` is cheaper). This is the append hot
        path, so it skips the general transaction machinery.
        """
        compiled = self.compile(statement)
        follow = (self.compile(then[0]), then[1]) if then is not None else None
        state = self._state()
        cursor = state.cursor
        if state.depth:
            return self._insert(cursor, compiled, params, follow)
        self._begin(cursor, "BEGIN IMMEDIATE" if self.is_sqlite else "BEGIN")
        try:
            row_id = self._insert(cursor, compiled, params, follow)
            cursor.execute("COMMIT")
        except Exception as error:
            _rollback_quietly(cursor)
            raise self.refused(error) from None
        except BaseException:
            _rollback_quietly(cursor)
            raise
        return row_id

    def _insert(self, cursor: Any, compiled: _Compiled, params: Mapping[str, Any], follow: Any) -> int:
        try:
            cursor.execute(compiled.sql, compiled.params(params))
        except (UnicodeEncodeError, self.DataError, self.OperationalError) as error:
            raise self.refused(error) from None
        row_id: int = cursor.lastrowid if self.is_sqlite else cursor.fetchone()[0]
        if follow is not None:
            cursor.execute(follow[0].sql, follow[0].params(follow[1]))
        return row_id

    def pragma(self, pragma: str) -> Any:
        """Run ``PRAGMA <pragma>`` (SQLite) on this thread's connection; the first value it returns, or None."""
        row = self._state().dbapi.execute(f"PRAGMA {pragma}").fetchone()
        return None if row is None else row[0]

    @contextmanager
    def pragmas_during(self, **values: Any) -> Iterator[None]:
        """SQLite: these pragmas on this thread's connection for the block; then each back to what it was."""
        before = {name: self.pragma(name) for name in values}
        for name, value in values.items():
            self.pragma(f"{name}={value}")
        try:
            yield
        finally:
            for name, value in before.items():
                self.pragma(f"{name}={value}")

    def fetchall(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """All result rows, as tuples."""
        rows: list[tuple[Any, ...]] = self.execute(statement, params).fetchall()
        return rows

    def fetchone(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> tuple[Any, ...] | None:
        """The first result row, or None."""
        row: tuple[Any, ...] | None = self.execute(statement, params).fetchone()
        return row

    def scalar(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> Any:
        """The first column of the first row, or None."""
        row = self.execute(statement, params).fetchone()
        return None if row is None else row[0]

    # --- transactions -------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction; joins the enclosing one if there is one.

        On SQLite it starts with ``BEGIN IMMEDIATE`` (retried while the
        database is locked, up to ``busy_budget`` seconds).
        """
        with self._transaction("BEGIN IMMEDIATE" if self.is_sqlite else "BEGIN"):
            yield

    @contextmanager
    def read(self) -> Iterator[None]:
        """One read transaction: several statements see the same snapshot."""
        with self._transaction("BEGIN" if self.is_sqlite else "BEGIN READ ONLY"):
            yield

    @contextmanager
    def write_if_free(self) -> Iterator[bool]:
        """SQLite: a write transaction of its own if no other connection holds the write lock at this moment.

        Yields whether it is one; it never waits for the lock (for work that is
        worth doing only when it costs nobody a wait). Yields False inside a
        transaction, on PostgreSQL, and once asked to stop.
        """
        state = self._state()
        if not self.is_sqlite or state.depth or (state.stop is not None and state.stop.is_set()):
            yield False
            return
        with self.pragmas_during(busy_timeout=0):
            try:
                state.cursor.execute("BEGIN IMMEDIATE")
            except self.OperationalError as error:
                if not _is_busy(error):
                    raise self.refused(error) from None
                taken = False
            else:
                taken = True
        if not taken:
            yield False
            return
        state.depth = 1
        try:
            yield True
        except BaseException:
            self.rollback()
            raise
        self.commit()

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[None]:
        self.begin(begin)
        try:
            yield
        except BaseException:
            self.rollback()
            raise
        self.commit()

    @contextmanager
    def stopping(self, stop: threading.Event) -> Iterator[None]:
        """For the block, on this thread: once ``stop`` is set, beginning a transaction raises :class:`Stopped`.

        Lets a long run of transactions (an import, one per session) be ended
        from another thread between two of them: the async store sets ``stop``
        when the awaiting task is cancelled. Joining an open transaction is not
        beginning one, and a transaction under way runs to its end.
        """
        state = self._state()
        before, state.stop = state.stop, stop
        try:
            yield
        finally:
            state.stop = before

    def begin(self, statement: str | None = None) -> None:
        """Open a transaction on this thread's connection (a write one by default), or join the open one.

        Pair every ``begin`` with one ``commit`` or ``rollback``; only the
        outermost pair ends the transaction. Prefer :meth:`write` / :meth:`read`;
        this form exists for callers that cannot use a ``with`` block (the async
        store, whose transaction spans several awaits).
        """
        state = self._state()
        if state.depth:
            state.depth += 1
            return
        if state.stop is not None and state.stop.is_set():
            raise Stopped("asked to stop before this transaction")
        self._begin(state.cursor, statement or ("BEGIN IMMEDIATE" if self.is_sqlite else "BEGIN"))
        state.depth = 1

    def commit(self) -> None:
        """End one :meth:`begin`; the outermost one commits."""
        state = self._state()
        state.depth -= 1
        if state.depth:
            return
        try:
            state.cursor.execute("COMMIT")
        except Exception as error:
            _rollback_quietly(state.cursor)
            raise self.refused(error) from None
        except BaseException:
            _rollback_quietly(state.cursor)
            raise

    def rollback(self) -> None:
        """End one :meth:`begin` after an error; the whole transaction is undone."""
        state = self._state()
        state.depth -= 1
        if state.depth:
            return
        _rollback_quietly(state.cursor)

    def _begin(self, cursor: Any, begin: str) -> None:
        if not self.is_sqlite:
            cursor.execute(begin)
            return
        deadline = time.monotonic() + self.busy_budget
        delay = 0.005
        while True:
            try:
                cursor.execute(begin)
                return
            except self.OperationalError as error:
                if not _is_busy(error) or time.monotonic() >= deadline:
                    if _is_busy(error):
                        raise StoreBusy(
                            f"the database stayed locked by other writers for {self.busy_budget:g} s"
                        ) from error
                    raise self.refused(error) from None
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)

    @property
    def in_transaction(self) -> bool:
        """Whether this thread is inside a transaction opened here."""
        return self._state().depth > 0

    # --- value conversion -----------------------------------------------------

    def bind_time(self, value: datetime) -> Any:
        """A UTC datetime as this database stores it: on SQLite, text that sorts as the times do
        (``0005-01-02 03:04:05.000000``, the year always four digits), on PostgreSQL a timestamptz."""
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None).isoformat(" ", "microseconds") if self.is_sqlite else value

    def load_time(self, value: Any) -> datetime | None:
        """A stored time back as an aware UTC datetime."""
        if value is None:
            return None
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value).replace(tzinfo=timezone.utc)
            except ValueError:
                return _unpadded_year(value)
        stamp: datetime = value.astimezone(timezone.utc)
        return stamp


def _unpadded_year(value: str) -> datetime:
    """A time stored before 2026-11-25 with a year under 1000, which was written without its leading
    zeros (``5-01-02 03:04:05.000000``)."""
    year, separator, rest = value.partition("-")
    if not separator or not year.isdigit() or len(year) >= 4:
        raise ValueError(f"not a stored time: {value!r}")
    return datetime.fromisoformat(f"{int(year):04d}-{rest}").replace(tzinfo=timezone.utc)


def _is_busy(error: Exception) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


def _rollback_quietly(cursor: Any) -> None:
    try:
        cursor.execute("ROLLBACK")
    except Exception:  # no transaction left to roll back (the error already ended it)
        pass


def _load_json_as_text(connection: Any) -> None:
    """Have psycopg return json/jsonb as text, which pydantic parses directly."""
    from psycopg.types.string import TextLoader

    connection.adapters.register_loader("jsonb", TextLoader)
    connection.adapters.register_loader("json", TextLoader)


_DATABASES: weakref.WeakSet[Database] = weakref.WeakSet()


def _forget_after_fork(database: Database) -> None:
    _DATABASES.add(database)


def _reset_all_after_fork() -> None:
    for database in list(_DATABASES):
        database._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_all_after_fork)
