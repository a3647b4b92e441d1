"""The ``media`` table: writing the runs :func:`turnstore.media.split` moves out, reading them back, freeing them.

Every write of a message row goes through :func:`put` and :func:`link_loop`
(appends) or :func:`link_session` (imports), in the transaction of the row;
every read of a stored text through :func:`restore`; every removal of a
session through :func:`release`, and of a loop's tail through
:func:`release_unreferenced`, in the transaction of the removal.

Races (PostgreSQL; SQLite writers take turns): a writer's :func:`put`
locks each media row it refers to until it commits (an upsert that updates
the row when it exists), and :func:`release` locks the rows it may free
before it looks, in a later statement, for another session that refers to
them. Whichever comes second waits for the first: a release then sees the
writer's reference and keeps the row, or a writer finds the row gone and
inserts it again with the data it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from itertools import repeat
from operator import contains
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ..database import Database
from ..errors import InvalidArgument, MediaNotFound
from ..media import MARK, MEDIA_MODES, MediaMode, digests, join, pieces, split
from ..schema import loops, media, messages, session_media
from .rows import parse_parts, parse_rows

__all__ = [
    "check_mode",
    "fetch",
    "held_by_tail",
    "link_loop",
    "link_session",
    "parse",
    "put",
    "release",
    "release_unreferenced",
    "restore",
    "split_row",
]

bp = sa.bindparam


def check_mode(mode: object) -> MediaMode:
    """``mode`` if it is a :data:`~turnstore.media.MediaMode`, else a one-line error."""
    if mode not in MEDIA_MODES:
        raise InvalidArgument("media", f"must be one of {', '.join(map(repr, MEDIA_MODES))}, got {mode!r}")
    return mode


# --- statements -----------------------------------------------------------------


@cache
def _put(on_postgresql: bool) -> sa.Insert:
    if on_postgresql:
        upsert = postgresql.insert(media).values(sha256=bp("sha256"), data=bp("data"))
        # An update of an existing row, not DO NOTHING: it holds the row until commit (see the module doc).
        locking: sa.Insert = upsert.on_conflict_do_update(
            index_elements=["sha256"], set_={"sha256": upsert.excluded.sha256}
        )
        return locking
    ignoring: sa.Insert = sqlite.insert(media).values(sha256=bp("sha256"), data=bp("data")).on_conflict_do_nothing()
    return ignoring


@cache
def _link_session(on_postgresql: bool) -> sa.Insert:
    dialect = postgresql if on_postgresql else sqlite
    insert = dialect.insert(session_media).values(session_id=bp("session_id"), sha256=bp("sha256"))
    return cast(sa.Insert, insert.on_conflict_do_nothing())


@cache
def _link_loop(on_postgresql: bool) -> sa.Insert:
    dialect = postgresql if on_postgresql else sqlite
    session_of_loop = sa.select(loops.c.session_id, bp("sha256", type_=sa.String)).where(
        loops.c.loop_id == bp("loop_id")
    )
    statement: sa.Insert = (
        dialect.insert(session_media).from_select(["session_id", "sha256"], session_of_loop).on_conflict_do_nothing()
    )
    return statement


@cache
def _get() -> sa.Select[Any]:
    return sa.select(media.c.data).where(media.c.sha256 == bp("sha256"))


@cache
def _session_digests() -> sa.Select[Any]:
    return sa.select(session_media.c.sha256).where(session_media.c.session_id == bp("session_id"))


@cache
def _unlink_session() -> sa.Delete:
    return sa.delete(session_media).where(session_media.c.session_id == bp("session_id"))


@cache
def _lock() -> sa.Select[Any]:
    return sa.select(media.c.sha256).where(media.c.sha256 == bp("sha256")).with_for_update()


@cache
def _free() -> sa.Delete:
    referred = sa.select(sa.literal(1)).where(session_media.c.sha256 == bp("sha256"))
    return sa.delete(media).where(media.c.sha256 == bp("sha256"), ~referred.exists())


# --- writing --------------------------------------------------------------------


def split_row(params: dict[str, Any]) -> dict[str, str]:
    """Move the media of a row's ``message`` and ``source`` out, in place; returns the runs by digest."""
    params["message"], found = split(params["message"])
    source = params["source"]
    if source is not None:
        params["source"], more = split(source)
        if more:
            found = {**found, **more}
    return found


def put(db: Database, found: Mapping[str, str]) -> None:
    """Store each run (once: a digest already stored is kept), in the caller's transaction."""
    db.executemany(_put(db.is_postgresql), [{"sha256": digest, "data": found[digest]} for digest in sorted(found)])


def link_loop(db: Database, loop_id: str, digests: Iterable[str]) -> None:
    """Record that the session of ``loop_id`` refers to ``digests``."""
    db.executemany(_link_loop(db.is_postgresql), [{"loop_id": loop_id, "sha256": digest} for digest in digests])


def link_session(db: Database, pairs: Iterable[tuple[str, str]]) -> None:
    """Record each ``(session_id, digest)`` reference."""
    db.executemany(_link_session(db.is_postgresql), [{"session_id": s, "sha256": d} for s, d in pairs])


def release(db: Database, session_id: str) -> None:
    """Drop a session's references and free the media no other session refers to (after its messages went)."""
    digests = sorted(digest for (digest,) in db.fetchall(_session_digests(), {"session_id": session_id}))
    if not digests:
        return
    db.execute(_unlink_session(), {"session_id": session_id})
    rows = [{"sha256": digest} for digest in digests]
    if db.is_postgresql:
        for row in rows:  # in digest order, as writers lock them: no deadlock between two releases
            db.execute(_lock(), row)
    db.executemany(_free(), rows)


@cache
def _tail_texts() -> sa.Select[Any]:
    """The stored texts of a loop's messages from :seq on that may refer to media (``:pattern``, see
    :func:`_referring_message`); ``message`` may be a JSON column: read as text."""
    pattern = bp("pattern", type_=sa.Text)
    message = sa.cast(messages.c.message, sa.Text)
    return sa.select(message, messages.c.source).where(
        messages.c.loop_id == bp("loop_id"),
        messages.c.seq >= bp("seq"),
        sa.or_(message.like(pattern, escape="!"), messages.c.source.like(pattern, escape="!")),
    )


@cache
def _referring_message() -> sa.Select[Any]:
    """A message of the session whose text or source still holds a reference: ``:pattern`` is ``%<reference>%``.

    ``ESCAPE`` is given so that PostgreSQL takes the reference's backslash as itself (its default escape); a
    reference holds no ``%``, ``_`` or ``!``.
    """
    pattern = bp("pattern", type_=sa.Text)
    message = sa.cast(messages.c.message, sa.Text).like(pattern, escape="!")
    source = messages.c.source.like(pattern, escape="!")
    return sa.select(sa.literal(1)).where(messages.c.session_id == bp("session_id"), sa.or_(message, source)).limit(1)


@cache
def _unlink() -> sa.Delete:
    return sa.delete(session_media).where(
        session_media.c.session_id == bp("session_id"), session_media.c.sha256 == bp("sha256")
    )


def held_by_tail(db: Database, params: Mapping[str, Any]) -> list[str]:
    """The digests the messages of ``params``' loop from its ``seq`` on refer to (before they are deleted)."""
    held: set[str] = set()
    for text, source in db.fetchall(_tail_texts(), {**params, "pattern": f"%{MARK}m%"}):
        for stored in (text, source):
            if stored is not None and MARK in stored:
                held.update(digests(stored))
    return sorted(held)


def release_unreferenced(db: Database, session_id: str, held: Sequence[str]) -> None:
    """After messages of a session were deleted: drop its references to ``held`` that no message of it still
    makes, and free the media no session refers to any more, in the caller's transaction.

    As :func:`release` does, each row that may be freed is locked (in digest order) before its references are
    looked for, in a later statement.
    """
    for digest in sorted(held):
        row = {"sha256": digest}
        if db.is_postgresql:
            db.execute(_lock(), row)
        pattern = f"%{MARK}m{digest}{MARK}%"
        if db.fetchone(_referring_message(), {"session_id": session_id, "pattern": pattern}) is None:
            db.execute(_unlink(), {"session_id": session_id, "sha256": digest})
            db.execute(_free(), row)


# --- reading --------------------------------------------------------------------


def fetch(db: Database, digest: str) -> str:
    """The run stored under ``digest``.

    Raises:
        MediaNotFound: no media has this digest.
    """
    data = db.scalar(_get(), {"sha256": digest}) if isinstance(digest, str) else None
    if data is None:
        raise MediaNotFound(f"media {digest!r} not found")
    return str(data)


def parse(db: Database, ids: Sequence[int], texts: Sequence[str], mode: MediaMode = "inline") -> list[Any]:
    """:func:`~.rows.parse_rows` of stored texts (the messages ``ids``), as written (or per ``mode``).

    Texts that refer to media are not put together one by one: the array
    validated is joined once from all their pieces, so a screenshot's data is
    copied once on its way to the parser, as when it was stored inline.
    """
    if not any(map(contains, texts, repeat(MARK))):  # at C speed: a long history without media pays little
        return parse_rows(ids, texts)
    lookup = _fetcher(db)
    parts = ["["]
    for text in texts:
        if MARK in text:
            parts += pieces(text, mode, lookup)
        else:
            parts.append(text)
        parts.append(",")
    parts[-1] = "]"
    return parse_parts(ids, texts, parts)


def parse_texts_of(db: Database, rows: Sequence[Any], mode: MediaMode = "inline") -> list[Any]:
    """:func:`parse` of rows that hold a message's id first and its stored text last."""
    return parse(db, [row[0] for row in rows], [row[-1] for row in rows], mode)


def _fetcher(db: Database) -> Callable[[str], str]:
    """:func:`fetch`, each digest read once."""
    fetched: dict[str, str] = {}

    def lookup(digest: str) -> str:
        data = fetched.get(digest)
        if data is None:
            data = fetched[digest] = fetch(db, digest)
        return data

    return lookup


def restore(db: Database, rows: list[Any], columns: tuple[int, ...], mode: MediaMode = "inline") -> list[Any]:
    """``rows`` with the texts in ``columns`` as written (or per ``mode``); the same list when none refers to media.

    Only a text holding ``\\/`` is looked at; each digest is read once per call.
    """
    changed: list[Any] | None = None
    lookup = _fetcher(db)
    for index, row in enumerate(rows):
        for column in columns:
            text = row[column]
            if text is not None and MARK in text:
                if changed is None:
                    changed = list(rows)
                values = list(changed[index])
                values[column] = join(text, mode, lookup)
                changed[index] = row = tuple(values)
    return rows if changed is None else changed
