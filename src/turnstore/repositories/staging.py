"""Staging: a large session written in batches, each its own short transaction, invisible until published.

On SQLite one transaction holds the store's only write lock, so a session
written in one transaction keeps every other writer of the store waiting for
its whole length (an app's ``append`` gives up after ``busy_timeout``). A large
imported session is therefore written in steps:

1. :func:`begin`, one short transaction: the session row and a ``staging`` row
   naming its owner. From here on every read leaves the session out (its row,
   loops, messages, usage), through :func:`turnstore.queries.visible`, a
   ``NOT EXISTS`` probe of the ``staging`` primary key.
2. batches of rows, each in its own short transaction that also renews the
   owner's lease (:func:`renew`); other writers take turns between them.
3. :func:`publish`, in the last short transaction (with the import record):
   the ``staging`` row is removed and the session appears whole at once.

A crash leaves a staging row whose owner is gone. :func:`clean_up` (run when a
writable store opens) removes such a session in batches, and the staging row
last. Whether an owner is gone is told by its lock file (:class:`OwnerLock`):
an ``flock`` on a file beside the database, taken before the staging row is
written and held until the session is published or removed. The operating
system lets go of it when the process ends however it ends, and it is the
same lock for every process that sees the file, whatever PID namespace or
host name it runs under: a host name and a PID are not enough, since
containers sharing a host name each number their processes from 1. Only an
owner without a lock file (written by a version that took none, or where
``fcntl`` is missing) is judged by the host name and PID, or by a lease not
renewed for :data:`LEASE`.

``--replace`` of a stored session that is staged writes the new session under
another id (:func:`staged_id`), hidden, and swaps it in at the end in one
transaction (:func:`swap_in`): until then the stored session is there as it
was, and a crash at any point leaves it so.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta, timezone
from functools import cache
from typing import Any

import sqlalchemy as sa

from ..database import Database
from ..errors import AlreadyExists, TurnstoreError
from ..schema import imports, loops, messages, session_media, sessions, staging
from . import media

try:
    import fcntl
except ImportError:  # Windows: owners are told by host name, PID and lease
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LEASE",
    "OwnerLock",
    "StagingLost",
    "abandon",
    "any_staged",
    "begin",
    "clean_up",
    "may_stage",
    "new_owner",
    "owner_gone",
    "parts",
    "publish",
    "refuse_live",
    "renew",
    "staged_id",
    "staged_owner",
    "staged_rows",
    "staged_write",
    "swap_in",
    "write_staged",
]

STAGED_SESSION_MESSAGES = 20_000
"""Imported sessions of at least this many messages are staged on SQLite (smaller ones take one transaction,
which holds the write lock for about a second at most; the same bound as the spill's, so a session read in
bounded memory is also written in short transactions)."""

BATCH_MESSAGES = 2_000
"""Messages per transaction of a staged session: the longest the write lock is held by it between turns."""

PAUSE_FRACTION = 0.25
MIN_PAUSE = 0.005
"""Between two transactions of a staged session the write lock is left free for ``PAUSE_FRACTION`` of the time
the last one held it, and at least ``MIN_PAUSE`` seconds (see :func:`_give_way`)."""

LEASE = timedelta(minutes=10)
"""A staging whose owner has not renewed it for this long is abandoned (owners renew it every batch)."""

DELETE_BATCH_ROWS = 5_000
"""Rows removed per transaction when an abandoned staging is cleaned up."""

bp = sa.bindparam
log = logging.getLogger(__name__)


class StagingLost(AlreadyExists):
    """A session's staging is not (or no longer) this writer's: another import of it is under way, or
    another writer took its owner for gone and removed it."""


def new_owner() -> str:
    """A fresh owner name: ``host:pid:token``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


_TOKEN = re.compile(r"[0-9a-f]{32}")
"""An owner's token (:func:`new_owner`): what its lock file is named by. A stored owner is read, never trusted."""


class OwnerLock:
    """A staging owner's name and the lock that tells it is live, held until :meth:`release`.

    The lock is an exclusive ``flock`` on ``<database>-staging-<token>``, a file
    made for it beside the database. An ``flock`` belongs to the open file, not
    to the process's other descriptors of it (unlike ``fcntl`` record locks,
    which closing any descriptor of the file drops), and ends with the process.
    Where no file can hold it (an in-memory database, no ``fcntl``), the name
    alone is the owner, judged by host name, PID and lease.
    """

    __slots__ = ("_descriptor", "_path", "name")

    def __init__(self, db: Database) -> None:
        self.name = new_owner()
        self._path = _lock_path(db, self.name)
        self._descriptor: int | None = None
        if self._path is not None:
            self._descriptor = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                fcntl.flock(self._descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # a file system without flock
                self.release()
                raise

    def release(self) -> None:
        """Remove the lock file and let go of the lock (once the staging row is gone)."""
        if self._descriptor is None:
            return
        descriptor, self._descriptor = self._descriptor, None
        try:
            os.unlink(self._path)  # type: ignore[arg-type]
        except OSError:
            pass  # the next open that finds it unlocked removes it
        os.close(descriptor)


def _lock_path(db: Database, owner: str) -> str | None:
    """The lock file of ``owner``'s staging: beside the database file, named by its token; None if there is none."""
    token = owner.rsplit(":", 1)[-1]
    if fcntl is None or not db.is_sqlite or not _TOKEN.fullmatch(token):
        return None
    files = [row[2] for row in db.fetchall(sa.text("PRAGMA database_list")) if row[1] == "main"]
    if not files or not files[0]:  # in memory: no other process sees the store
        return None
    return f"{files[0]}-staging-{token}"


def _lock_held(path: str | None) -> bool | None:
    """Whether the lock file at ``path`` is locked by a live owner; None if there is no such file."""
    if path is None:
        return None
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError:  # not ours to open (another user's import): never taken for gone
        return True
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)
    return False


def _forget_lock(path: str | None) -> None:
    """Remove the lock file of an owner that is gone (its staging just removed)."""
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def owner_gone(owner: str, heartbeat_at: datetime, now: datetime, lock_path: str | None = None) -> bool:
    """Whether a staging's owner is gone.

    Told by its lock file at ``lock_path`` where there is one: gone when nobody holds it.
    Otherwise: its process (on this host) has ended, or its lease ran out.
    """
    held = _lock_held(lock_path)
    if held is not None:
        return not held
    if heartbeat_at.tzinfo is None:
        heartbeat_at = heartbeat_at.replace(tzinfo=timezone.utc)
    if now - heartbeat_at > LEASE:
        return True
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname():
        return False  # another host's process: only its lease tells
    try:
        pid = int(parts[1])
    except ValueError:
        return True
    if pid == os.getpid():
        return False  # this process: its own staging is live (or is being abandoned by it)
    return not _process_exists(pid)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:
        return True
    return True


# --- statements ---------------------------------------------------------------


@cache
def _insert() -> sa.Insert:
    return sa.insert(staging).values(session_id=bp("session_id"), owner=bp("owner"), heartbeat_at=bp("heartbeat_at"))


@cache
def _renew() -> sa.Update:
    return (
        sa.update(staging)
        .where(staging.c.session_id == bp("session_id"), staging.c.owner == bp("owner"))
        .values(heartbeat_at=bp("heartbeat_at"))
    )


@cache
def _delete() -> sa.Delete:
    return sa.delete(staging).where(staging.c.session_id == bp("session_id"), staging.c.owner == bp("owner"))


@cache
def _owner() -> sa.Select[Any]:
    return sa.select(staging.c.owner, staging.c.heartbeat_at).where(staging.c.session_id == bp("session_id"))


@cache
def _all() -> sa.Select[Any]:
    return sa.select(staging.c.session_id, staging.c.owner, staging.c.heartbeat_at)


@cache
def _any() -> sa.Select[Any]:
    return sa.select(sa.literal(1)).select_from(staging).limit(1)


@cache
def _delete_some(table: sa.Table) -> sa.Delete:
    """Up to :data:`DELETE_BATCH_ROWS` of a session's rows in ``table`` (by rowid order of its key)."""
    key = table.c.id if table is messages else table.c.loop_id
    some = sa.select(key).where(table.c.session_id == bp("session_id")).limit(DELETE_BATCH_ROWS)
    return sa.delete(table).where(key.in_(some.scalar_subquery()))


@cache
def _delete_rest() -> tuple[sa.Delete, ...]:
    return tuple(sa.delete(table).where(table.c.session_id == bp("session_id")) for table in (imports, sessions))


# --- the steps ----------------------------------------------------------------


def any_staged(db: Database) -> bool:
    """Whether any session is staged (one probe of a table that is empty but during a large import)."""
    return db.fetchone(_any()) is not None


def staged_owner(db: Database, session_id: str) -> tuple[str, datetime] | None:
    """The owner and last renewal of a session's staging, or None if it is not staged."""
    row = db.fetchone(_owner(), {"session_id": session_id})
    return None if row is None else (row[0], _aware(row[1]))


def begin(db: Database, session_id: str, owner: str) -> None:
    """Mark a session as staged by ``owner`` (inside the caller's transaction, before its rows are written)."""
    db.execute(_insert(), {"session_id": session_id, "owner": owner, "heartbeat_at": db.bind_time(_now())})


def refuse_live(db: Database, session_id: str) -> None:
    """Make way for writing a session (inside the caller's write transaction): remove a staging of it whose
    owner is gone, refuse one whose owner is live.

    Raises:
        StagingLost: another import of the session is under way.
    """
    found = staged_owner(db, session_id)
    if found is None:
        return
    lock_path = _lock_path(db, found[0])
    if not owner_gone(found[0], found[1], _now(), lock_path):
        raise StagingLost(f"session {session_id!r} is being imported by another writer; try again when it is done")
    abandon(db, session_id, found[0])
    _forget_lock(lock_path)


def renew(db: Database, session_id: str, owner: str) -> None:
    """Renew the owner's lease (inside each batch's transaction).

    Raises:
        StagingLost: the staging is no longer this owner's.
    """
    cursor = db.execute(_renew(), {"session_id": session_id, "owner": owner, "heartbeat_at": db.bind_time(_now())})
    if cursor.rowcount != 1:
        raise StagingLost(f"the staging of session {session_id!r} was removed while it was written")


def publish(db: Database, session_id: str, owner: str) -> None:
    """Make the staged session visible (inside the caller's last transaction).

    Raises:
        StagingLost: the staging is no longer this owner's.
    """
    cursor = db.execute(_delete(), {"session_id": session_id, "owner": owner})
    if cursor.rowcount != 1:
        raise StagingLost(f"the staging of session {session_id!r} was removed while it was written")


def may_stage(db: Database, messages: int) -> bool:
    """Whether a session of this many messages is staged unless it replaces a stored one (see :func:`staged_write`)."""
    return db.is_sqlite and messages >= STAGED_SESSION_MESSAGES


def staged_write(db: Database, messages: int) -> OwnerLock | None:
    """The owner to stage a session under, its lock taken; or None to write the session in one transaction.

    Staged: a session of at least :data:`STAGED_SESSION_MESSAGES` messages on
    SQLite. PostgreSQL locks rows, not the store: a long import transaction
    keeps no other session's writer waiting, so it keeps the one transaction.
    The caller releases the lock once the staging row is gone (published or removed).
    Where no lock file can be made beside the database, the session is written in one transaction.
    """
    if not may_stage(db, messages):
        return None
    try:
        return OwnerLock(db)
    except OSError as error:
        log.warning("turnstore: a large session is written in one transaction: no staging lock file: %s", error)
        return None


STAGED_PREFIX = "\x1fstaged replace\x1f"
"""Starts the id a replacing session is staged under (:func:`staged_id`): no id an app or a source gives."""


def staged_id(session_id: str) -> str:
    """The id a staged ``--replace`` of ``session_id`` writes the new session under, its loops under
    ``<it>/<loop id>``: one per session, so a second replace meets the first one's staging."""
    return f"{STAGED_PREFIX}{session_id}"


def staged_rows(rows: Iterable[dict[str, Any]], staged: str) -> list[dict[str, Any]]:
    """Loop or message rows of a session as a staged replace writes them: under ``staged`` and its loop ids."""
    return [{**row, "session_id": staged, "loop_id": f"{staged}/{row['loop_id']}"} for row in rows]


@cache
def _swap_statements() -> tuple[sa.Insert | sa.Update | sa.Delete, ...]:
    """Delete :session_id, then move the session staged under :staged in its place (loop ids cut at :cut)."""

    def moved(table: sa.Table, **values: Any) -> sa.Insert:
        names = [column.name for column in table.c]
        select = sa.select(*(values.get(name, table.c[name]) for name in names))
        return sa.insert(table).from_select(names, select.where(table.c.session_id == bp("staged")))

    real_loop = sa.func.substr(loops.c.loop_id, bp("cut"))
    deletes = tuple(
        sa.delete(table).where(table.c.session_id == bp("session_id")) for table in (messages, loops, imports, sessions)
    )
    return (
        *deletes,
        # New rows first, so that no statement leaves a row whose foreign key names nothing.
        moved(sessions, session_id=bp("session_id")),
        moved(loops, session_id=bp("session_id"), loop_id=real_loop),
        sa.update(messages)
        .where(messages.c.session_id == bp("staged"))
        .values(session_id=bp("session_id"), loop_id=sa.func.substr(messages.c.loop_id, bp("cut"))),
        sa.update(session_media).where(session_media.c.session_id == bp("staged")).values(session_id=bp("session_id")),
        sa.delete(loops).where(loops.c.session_id == bp("staged")),
        sa.delete(sessions).where(sessions.c.session_id == bp("staged")),
    )


def swap_in(db: Database, session_id: str, staged: str) -> None:
    """Replace the stored ``session_id`` by the session staged under ``staged`` (in the caller's last transaction).

    The old session's rows and media references go, and the staged rows take its
    id and their loops' ids: one transaction, so every read sees the old session
    or the new one. (Its staging row is the caller's to remove, with :func:`publish`.)
    """
    statements = _swap_statements()
    params = {"session_id": session_id, "staged": staged, "cut": len(staged) + 2}
    for statement in statements[:4]:
        db.execute(statement, params)
    media.release(db, session_id)
    for statement in statements[4:]:
        db.execute(statement, params)


def parts(batch: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """A batch of message rows in parts of at most :data:`BATCH_MESSAGES`, one transaction each."""
    for start in range(0, len(batch), BATCH_MESSAGES):
        yield batch[start : start + BATCH_MESSAGES]


def write_staged(
    db: Database, session_id: str, owner: str, steps: Iterable[Callable[[], None]], finish: Callable[[], None]
) -> None:
    """Run each of a staged session's write ``steps`` in a short transaction, then ``finish`` and publish it in one more.

    Each transaction renews the owner's lease. ``steps`` is iterated lazily, so
    a step's rows are made only when it runs. On any error (or interruption)
    the staged rows are removed before it propagates; if even that fails, the
    next writer to open the store removes them.

    Raises:
        StagingLost: the staging was taken away meanwhile (nothing is published).
    """
    held = 0.0
    try:
        for step in steps:
            _give_way(held)
            began = time.monotonic()
            with db.write():
                renew(db, session_id, owner)
                step()
            held = time.monotonic() - began
        _give_way(held)
        with db.write():
            finish()
            publish(db, session_id, owner)
    except BaseException:
        try:
            abandon(db, session_id, owner)
        except (TurnstoreError, db.DatabaseError) as error:  # invisible; the next writable open removes it
            log.warning("turnstore: the staged rows of session %r were left for the next open: %s", session_id, error)
        raise


def _give_way(held: float) -> None:
    """Leave the write lock free for a while after a transaction that held it for ``held`` seconds.

    A writer kept waiting on SQLite polls for the lock, every 100 ms once it
    has waited a few hundred; a lock taken again as soon as it is released is
    found free by chance only, and such a writer can wait for many batches.
    Free for a quarter of the time it was held (at least a few milliseconds),
    it is found within a few polls.
    """
    if held > 0:
        time.sleep(max(MIN_PAUSE, PAUSE_FRACTION * held))


def abandon(db: Database, session_id: str, owner: str) -> None:
    """Remove a staged session and its rows, in short transactions; the staging row goes last.

    Does nothing if the staging is not ``owner``'s (another writer took it over).
    """
    while True:
        with db.write():
            found = db.fetchone(_owner(), {"session_id": session_id})
            if found is None or found[0] != owner:
                return
            removed = 0
            for table in (messages, loops):
                removed += db.execute(_delete_some(table), {"session_id": session_id}).rowcount
                if removed:
                    break
            if removed:
                continue
            for statement in _delete_rest():
                db.execute(statement, {"session_id": session_id})
            media.release(db, session_id)
            db.execute(_delete(), {"session_id": session_id, "owner": owner})
            return


def clean_up(db: Database) -> list[str]:
    """Remove every staged session whose owner is gone; returns their ids.

    Cheap when nothing is staged: one probe of the empty ``staging`` table.
    """
    if not any_staged(db):
        return []
    now = _now()
    removed = []
    for session_id, owner, heartbeat_at in db.fetchall(_all()):
        lock_path = _lock_path(db, owner)
        if owner_gone(owner, _aware(heartbeat_at), now, lock_path):
            abandon(db, session_id, owner)
            _forget_lock(lock_path)
            removed.append(session_id)
    return removed


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _aware(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    stamp: datetime = value
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=timezone.utc)
