"""Writing imported sessions: the one place an import's bundles become rows, each session in one transaction.

The importers only read (a source becomes :class:`~turnstore.importers.base.SessionBundle`
objects); :class:`ImportRepository` checks and writes those bundles for
:meth:`turnstore.Store.import_`. Importing the same source again finds the
same digest in the ``imports`` table and changes nothing. A session that
exists with other content (an earlier import of a changed file, or one
written through the API) is left alone unless ``replace`` is set, which
rewrites it whole.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from datetime import datetime, timezone
from functools import partial
from itertools import chain
from typing import Any

from .. import queries as q
from ..database import Database
from ..errors import AlreadyExists, InvalidMessage, InvalidRecord
from ..importers.base import LoopRow, MessageRow, RecordError, SessionBundle, SpilledMessage
from ..limits import Limits, check_json, check_text
from ..media import split
from ..pricing import Pricing
from ..records import LoopConfig
from . import media, search_index, staging
from ._shared import Settings, dumps, utcnow
from .import_writes import ImportWrites
from .message_json import dump_message
from .rows import MAX_TURN_INDEX, row_params, usage_params

__all__ = ["UNCHANGED", "WRITTEN", "ImportRepository", "check_bundle", "check_ids", "screen_messages", "write_bundle"]

WRITTEN = "written"
UNCHANGED = "unchanged"


class ImportRepository:
    """The import writer of one store: checks and writes session bundles, each in one transaction."""

    __slots__ = ("_db", "_settings")

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings

    @property
    def limits(self) -> Limits:
        """The store's limits, which imported sessions are held to."""
        return self._settings.limits

    def writes(self, *, checkpoint_thread: bool = False) -> ImportWrites:
        """The large-write settings for one import call (a ``with`` block; its checkpoint thread, if any, ends with it)."""
        return ImportWrites(self._db, checkpoint_thread=checkpoint_thread)

    def check(self, bundle: SessionBundle, fmt: str, *, replace: bool) -> str:
        """What writing the bundle would do, without writing; see :func:`check_bundle`."""
        return check_bundle(self._db, bundle, fmt, replace=replace)

    def write(
        self,
        bundle: SessionBundle,
        fmt: str,
        *,
        replace: bool,
        report: dict[str, Any],
        writes: ImportWrites | None = None,
    ) -> str:
        """Write the bundle in one transaction; see :func:`write_bundle`.

        Raises:
            AlreadyExists: as :func:`write_bundle`, and for a row taken inside an
                enclosing transaction (e.g. a loop id that another session uses).
            InvalidMessage, InvalidRecord: as :func:`write_bundle`.
        """
        try:
            return write_bundle(
                self._db,
                bundle,
                fmt,
                replace=replace,
                limits=self.limits,
                report=report,
                writes=writes,
                pricing=self._settings.pricing,
            )
        except self._db.IntegrityError as error:
            raise AlreadyExists(f"conflicts with stored data: {error}") from None


def check_bundle(db: Database, bundle: SessionBundle, fmt: str, *, replace: bool) -> str:
    """What writing the bundle would do (``written`` / ``unchanged``), without writing.

    Raises:
        AlreadyExists: the session exists with other content and ``replace`` is off.
    """
    digest = bundle.digest(fmt)  # cached on the bundle
    previous = db.fetchone(q.get_import(), {"session_id": bundle.session_id})
    if previous is not None and previous[2] == digest:
        return UNCHANGED
    if not replace and db.fetchone(q.session_exists(), {"session_id": bundle.session_id}) is not None:
        if previous is None:  # an import of it may have committed between the two reads: read again
            previous = db.fetchone(q.get_import(), {"session_id": bundle.session_id})
            if previous is not None and previous[2] == digest:
                return UNCHANGED
        origin = f"imported from {previous[1]}" if previous is not None else "not imported"
        raise AlreadyExists(
            f"session {bundle.session_id!r} already exists ({origin}) with other content; "
            "pass --replace to overwrite it"
        )
    return WRITTEN


def write_bundle(
    db: Database,
    bundle: SessionBundle,
    fmt: str,
    *,
    replace: bool,
    limits: Limits,
    report: dict[str, Any],
    writes: ImportWrites | None = None,
    pricing: Pricing | None = None,
) -> str:
    """Write a session bundle in one transaction; returns ``written`` or ``unchanged``.

    Each usage record is priced as it is written (``pricing``; default: the catalog alone).

    ``writes``, the import call's :class:`~turnstore.repositories.import_writes.ImportWrites`,
    writes a large session with a larger page cache and leaves its WAL checkpoint to the
    import's thread; without it the session is written like any other write.

    Raises:
        AlreadyExists: the session exists with other content and ``replace`` is off,
            or another writer stored other content in its place meanwhile.
        InvalidMessage: the session id is over the store's limits.
        InvalidRecord: a message the store cannot hold (over the limits, a lone
            surrogate, nesting too deep...), naming its record; or a session or
            loop value the database refuses (NaN in metadata, a lone surrogate,
            NUL or an out-of-range number on PostgreSQL), naming the session's origin.
            Nothing of the session is written.
    """
    check_ids(bundle, limits)
    try:
        # The rows go straight into _write, which holds the only reference: it lets them go before the commit.
        pricing = pricing or Pricing()
        rows = _priced(_message_batches(bundle, limits), pricing)
        return _write(db, bundle, fmt, replace, rows, report, writes, pricing)
    except (InvalidMessage, InvalidRecord):
        raise
    except db.IntegrityError as error:
        return _after_conflict(db, bundle, fmt, replace, error)
    except (ValueError, OverflowError, db.DataError) as error:  # rolled back: nothing of the session is written
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InvalidRecord(bundle.origin, f"a value of the session cannot be stored: {reason}") from None


def _after_conflict(db: Database, bundle: SessionBundle, fmt: str, replace: bool, error: Exception) -> str:
    """Settle a write that found a row taken (rolled back): ``unchanged`` if the session is now stored as given.

    Several imports of one source at once (app processes importing one folder)
    can each find the session absent and write it: on PostgreSQL the check
    before the write takes no lock, so all but the first stop at the session's
    primary key. (SQLite's ``BEGIN IMMEDIATE`` lets one writer at a time check
    and write.) The digest, read again, tells whether what the winner wrote is
    this session; anything else is reported in one line.

    Raises:
        AlreadyExists: the session is stored with other content, or the row taken is
            not this session's (a loop id that another session uses).
    """
    if db.in_transaction:  # an enclosing transaction, which PostgreSQL has aborted: nothing more can be read
        raise error
    if check_bundle(db, bundle, fmt, replace=replace) == UNCHANGED:
        return UNCHANGED
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    raise AlreadyExists(f"session {bundle.session_id!r} conflicts with stored data: {reason}") from None


def _write(
    db: Database,
    bundle: SessionBundle,
    fmt: str,
    replace: bool,
    rows: Iterable[list[dict[str, Any]]],
    report: dict[str, Any],
    writes: ImportWrites | None,
    pricing: Pricing,
) -> str:
    # Worked out before the write lock is taken: Python work that keeps no other writer waiting.
    first_times, created, updated = _times(bundle)
    # A session that may be staged is written in short transactions with SQLite's own cache and checkpoints.
    large = (
        nullcontext()
        if writes is None or staging.may_stage(db, len(bundle.messages))
        else (writes.session(len(bundle.messages), spilled=bundle.spill is not None))
    )
    owner: staging.OwnerLock | None = None
    try:
        with large, db.write():
            if check_bundle(db, bundle, fmt, replace=replace) == UNCHANGED:
                return UNCHANGED
            staging.refuse_live(db, bundle.session_id)
            owner = staging.staged_write(db, len(bundle.messages))
            # Without replace the check found no session here, so a delete could only take the rows of
            # an import of it that committed since (PostgreSQL reads each statement afresh): let the
            # insert meet them instead (see _after_conflict).
            replacing = replace and db.fetchone(q.session_exists(), {"session_id": bundle.session_id}) is not None
            target = bundle.session_id
            if replacing and owner is None:
                for statement in q.delete_session():
                    db.execute(statement, {"session_id": bundle.session_id})
                media.release(db, bundle.session_id)
            elif replacing:  # staged under another id; the stored session stays until it is swapped in
                target = staging.staged_id(bundle.session_id)
                staging.refuse_live(db, target)
            _insert_session(db, bundle, created, updated, target)
            if owner is not None:  # the rest in short transactions of their own, the session hidden meanwhile
                staging.begin(db, target, owner.name)
            else:
                for batch in _loop_batches(db, bundle, first_times, created, pricing):
                    db.executemany(q.insert_loop(), batch)
                for batch in rows:
                    _insert_messages(db, batch)
                _finish(db, bundle, fmt, report)
                del rows  # let go before the commit
        if owner is not None:
            under = partial(staging.staged_rows, staged=target) if target != bundle.session_id else list
            steps: Iterator[Callable[[], None]] = chain(  # made one at a time, as they run: never all in memory
                (
                    partial(db.executemany, q.insert_loop(), under(batch))
                    for batch in _loop_batches(db, bundle, first_times, created, pricing)
                ),
                (partial(_insert_messages, db, under(part)) for batch in rows for part in staging.parts(batch)),
            )
            finish = partial(_finish, db, bundle, fmt, report)
            if target != bundle.session_id:
                finish = partial(_swap_in_then_finish, db, bundle.session_id, target, finish)
            staging.write_staged(db, target, owner.name, steps, finish)
    finally:
        if owner is not None:
            owner.release()
    bundle.release()  # the messages and source records go now; the bundle keeps its loops and digest
    return WRITTEN


def _insert_session(db: Database, bundle: SessionBundle, created: datetime, updated: datetime, session_id: str) -> None:
    """The session's row, under ``session_id`` (the bundle's, or the id a staged replace writes it under)."""
    db.execute(
        q.insert_session(),
        {
            "session_id": session_id,
            "agent_id": bundle.agent_id,
            "title": bundle.title,
            "metadata": dumps(bundle.metadata),
            "created_at": db.bind_time(created),
            "updated_at": db.bind_time(updated),
            "source": bundle.source,
        },
    )


def _loop_batches(
    db: Database, bundle: SessionBundle, first_times: dict[str, datetime], created: datetime, pricing: Pricing
) -> Iterator[list[dict[str, Any]]]:
    """The session's loop rows, :data:`LOOP_BATCH` at a time (a large session has many), their reported usage priced."""
    configs: dict[Any, tuple[Any, ...]] = {}
    for start in range(0, len(bundle.loops), LOOP_BATCH):
        batch = []
        for loop in bundle.loops[start : start + LOOP_BATCH]:
            params = _loop_params(db, bundle, loop, first_times.get(loop.loop_id, created), configs)
            if params["input_tokens"] is not None:
                when = loop.ended_at or loop.started_at or first_times.get(loop.loop_id, created)
                pricing.price_row(params, int(when.timestamp() * 1000))
            batch.append(params)
        yield batch


def _priced(batches: Iterable[list[dict[str, Any]]], pricing: Pricing) -> Iterator[list[dict[str, Any]]]:
    """The message rows of each batch with their usage priced (see :mod:`turnstore.pricing`)."""
    for batch in batches:
        for params in batch:
            if params["input_tokens"] is not None:
                pricing.price_row(params)
        yield batch


def _finish(db: Database, bundle: SessionBundle, fmt: str, report: dict[str, Any]) -> None:
    """The last writes of a session, after its messages: fork points and the import record."""
    _resolve_forks(db, bundle)
    db.execute(
        q.insert_import(),
        {
            "session_id": bundle.session_id,
            "format": fmt,
            "source_format": bundle.source_format if fmt == "turnstore" else fmt,
            "origin": bundle.origin,
            "digest": bundle.digest(fmt),
            "imported_at": db.bind_time(utcnow()),
            "report": dumps(report),
        },
    )


def _swap_in_then_finish(db: Database, session_id: str, staged: str, finish: Callable[[], None]) -> None:
    """A staged replace's last writes: the stored session gives way to the one staged, then ``finish``."""
    staging.swap_in(db, session_id, staged)
    finish()


LOOP_BATCH = 2_000
"""Loops inserted at a time (each row's parameters are a dict of some twenty values)."""


def _insert_messages(db: Database, rows: list[dict[str, Any]]) -> None:
    """Insert message rows in their order (their ids follow it).

    SQLite: a row whose usage, model, provider, stop reason and kind are all
    NULL (a prompt, a tool result) goes in by a statement without those
    columns (they default to NULL). The sqlite3 driver looks for an adapter
    for every ``None`` it binds before binding NULL, and such rows are most
    of an imported session. PostgreSQL's driver sends all rows in one batch.
    """
    rows, found, links = _media_out(rows)
    if found:
        media.put(db, found)
    if not db.is_sqlite:
        db.executemany(q.insert_message_at(), rows)
    else:
        db.execute_each(q.insert_message_at(), q.insert_message_at(without_nulls=True), rows, _is_bare)
    if links:
        media.link_session(db, links)
    search_index.catch_up(db)  # searchable once committed, and the search tail stays short


def _media_out(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str], set[tuple[str, str]]]:
    """The rows with their media moved out (each changed row copied), the media, and each (session, digest)."""
    found: dict[str, str] = {}
    links: set[tuple[str, str]] = set()
    out = rows
    for index, row in enumerate(rows):
        message, source = row["message"], row["source"]
        stored, more = split(message)
        stored_source, from_source = split(source) if source is not None else (None, {})
        if stored is message and stored_source is source:  # the text is stored as it is (no split copies it)
            continue
        if out is rows:
            out = list(rows)
        out[index] = {**row, "message": stored, "source": stored_source}
        for digests in (more, from_source):
            found.update(digests)
            links.update((row["session_id"], digest) for digest in digests)
    return out, found, links


def _is_bare(params: dict[str, Any]) -> bool:
    """Whether every column the narrow insert leaves out is NULL in this row."""
    # A row has all its usage columns or none (usage_params): input_tokens stands for them.
    return (
        params["input_tokens"] is None
        and params["cost"] is None
        and params["model"] is None
        and params["kind"] is None
        and params["stop_reason"] is None
        and params["provider"] is None
        and params["search_thinking"] is None
    )


def check_ids(bundle: SessionBundle, limits: Limits) -> None:
    """Hold the session's and its loops' ids, names, titles and JSON values to the store's limits and rules.

    Raises:
        LimitExceeded: an id or name is too long (the session cannot be written).
        InvalidMessage: the session id or a loop id is empty; a loop continues one that is not the
            session's (as ``loops.start`` refuses: it would tie another session's loop to this one).
    """
    limits.check_id("session_id", bundle.session_id)
    own = {loop.loop_id for loop in bundle.loops}
    for loop in bundle.loops:
        limits.check_id("loop_id", loop.loop_id)
        if loop.parent_loop_id is not None and loop.parent_loop_id not in own:
            raise InvalidMessage(
                f"loop {loop.loop_id!r} continues loop {loop.parent_loop_id!r}, "
                f"which is not a loop of session {bundle.session_id!r}",
                [("parent_loop_id", "not a loop of the session")],
            )
        if loop.spawn_loop_id is not None:
            limits.check_id("spawn_loop_id", loop.spawn_loop_id)
        for name in ("model", "provider"):
            limits.check_name(name, (loop.config or {}).get(name))
        check_text("spawn_tool_call_id", loop.spawn_tool_call_id)
        check_json("config", loop.config)
        check_json("metadata", loop.metadata)
    limits.check_name("agent_id", bundle.agent_id)
    check_text("title", bundle.title)
    check_json("metadata", bundle.metadata)


def screen_messages(bundle: SessionBundle, limits: Limits) -> None:
    """Move every message the store cannot hold out of the bundle and into ``bundle.errors``.

    A message can parse and still be unstorable: over the size limit, a lone
    surrogate in a key, nesting deeper than the reader takes back, a turn index
    or timestamp no column holds. Found here, before the session is written,
    such a record is reported with its place like any malformed one (and
    skipped with ``skip_invalid``). Loops' fork and keep points that named a
    removed message move to the nearest kept one (before it for a fork, after
    it for a kept-from point).
    """
    dropped: set[int] = set()  # a set, not a list of the rows kept: a large session's rows are made on demand
    for index, row in enumerate(bundle.messages):
        message = row.message
        if type(message) is SpilledMessage:  # screened as it was read; its turn index is known only now
            reason = message.reason if message.at < 0 else _turn_index_problem(row.turn_index)
            if reason is not None:
                bundle.errors.append(RecordError(row.place or bundle.origin, reason))
                dropped.add(index)
        else:
            try:
                row.params = row_values(row, limits)
            except InvalidMessage as error:
                bundle.errors.append(RecordError(row.place or bundle.origin, str(error)))
                dropped.add(index)
    if not dropped:
        return
    old_indexes = [index for index in range(len(bundle.messages)) if index not in dropped]
    without = getattr(bundle.messages, "without", None)
    if without is not None:  # turnstore.importers.spill.SpilledRows
        bundle.messages = without(dropped)
    else:
        bundle.messages = [bundle.messages[index] for index in old_indexes]
    for loop in bundle.loops:
        if loop.fork_after is not None:
            before = bisect_right(old_indexes, loop.fork_after) - 1
            loop.fork_after = before if before >= 0 else None
        if loop.keep_from is not None:
            after = bisect_left(old_indexes, loop.keep_from)
            loop.keep_from = after if after < len(old_indexes) else None


def _turn_index_problem(turn_index: int | None) -> str | None:
    """Why a spilled row's turn index cannot be stored (what :func:`row_values` checks), or None."""
    if turn_index is None or 0 <= turn_index <= MAX_TURN_INDEX:
        return None
    return f"turn index {turn_index} is over the largest, {MAX_TURN_INDEX}"


def row_values(row: MessageRow, limits: Limits) -> dict[str, Any]:
    """A message row's column values, its message dumped and held to ``limits``.

    Raises:
        InvalidMessage: the store cannot hold the message.
    """
    message = row.message
    assert not isinstance(message, SpilledMessage)  # screened when it was spilled
    role = message.role
    if type(role) is not str:
        # The validated role is a callable str subclass, which pydantic-core serializes through
        # its slow fallback path (about a fifth of the dump). An imported model never leaves the
        # import, so it takes the plain string: the JSON is the same.
        message.__dict__["role"] = str(role)
    text = dump_message(message)
    limits.check_message(text)
    params = row_params(
        message,
        text,
        row.loop_id,
        row.turn_index,
        row.usage,
        row.source,
        row.priced_as,
        row.timestamp,
        row.usage_known,
    )
    limits.check_row(params)
    return params


def _message_batches(bundle: SessionBundle, limits: Limits) -> Iterable[list[dict[str, Any]]]:
    """Every message row's column values, numbered per loop, in batches to insert.

    One batch of every row for a session held in memory; a spilled session's
    rows are read back from its spill a batch at a time (every message of a
    spilled session is spilled).
    """
    if bundle.spill is None:
        return [_message_params(bundle, limits)]
    return _spilled_params(bundle)


def _spilled_params(bundle: SessionBundle) -> Iterator[list[dict[str, Any]]]:
    session_id = bundle.session_id
    seqs: dict[str, int] = {}
    rows = bundle.messages
    done = 0
    for batch in bundle.spill.batches(row.message for row in rows):
        for params in batch:
            row = rows[done]
            done += 1
            loop_id = params["loop_id"] = row.loop_id
            params["turn_index"] = row.turn_index
            params["session_id"] = session_id
            params["seq"] = seqs[loop_id] = seqs.get(loop_id, -1) + 1
        yield batch


def _message_params(bundle: SessionBundle, limits: Limits) -> list[dict[str, Any]]:
    """Every message row's column values, numbered per loop; the screened values are used up (not copied)."""
    session_id = bundle.session_id
    seqs: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    append = rows.append
    for row in bundle.messages:
        params = row.params
        if params is None:
            try:
                params = row_values(row, limits)
            except InvalidMessage as error:
                raise InvalidRecord(row.place or bundle.origin, str(error)) from None
        else:
            row.params = None
        loop_id = params["loop_id"]
        params["session_id"] = session_id
        params["seq"] = seqs[loop_id] = seqs.get(loop_id, -1) + 1
        append(params)
    return rows


def _loop_params(
    db: Database, bundle: SessionBundle, loop: LoopRow, first_time: datetime, configs: dict[Any, tuple[Any, ...]]
) -> dict[str, Any]:
    config, config_id, model, provider = _config_columns(loop.config, configs)
    started = loop.started_at or first_time
    return {
        "loop_id": loop.loop_id,
        "session_id": bundle.session_id,
        "parent_loop_id": loop.parent_loop_id,
        "continuation_kind": loop.continuation_kind,
        "fork_after": None,
        "keep_from": None,
        "config": config,
        "config_id": config_id,
        "model": model,
        "provider": provider,
        "status": loop.status,
        "started_at": db.bind_time(started),
        "ended_at": db.bind_time(loop.ended_at) if loop.ended_at else None,
        "spawn_loop_id": loop.spawn_loop_id,
        "spawn_tool_call_id": loop.spawn_tool_call_id,
        **usage_params(loop.reported_usage),
        "requests": loop.reported_requests,
        "metadata": dumps(loop.metadata),
        "source": loop.source,
    }


def _resolve_forks(db: Database, bundle: SessionBundle) -> None:
    """Turn fork points given as positions in the bundle into the message ids just assigned."""
    pending = [loop for loop in bundle.loops if loop.fork_after is not None or loop.keep_from is not None]
    if not pending:
        return
    ids = _ids_at(db, bundle.session_id, {p for loop in pending for p in (loop.fork_after, loop.keep_from)})
    for loop in pending:
        db.execute(
            q.set_loop_fork(),
            {
                "loop_id": loop.loop_id,
                "fork_after": ids[loop.fork_after] if loop.fork_after is not None else None,
                "keep_from": ids[loop.keep_from] if loop.keep_from is not None else None,
            },
        )


def _ids_at(db: Database, session_id: str, positions: set[int | None]) -> dict[int, Any]:
    """The ids of the session's messages at ``positions`` (in id order), read without holding every id."""
    wanted = sorted(position for position in positions if position is not None)
    found: dict[int, Any] = {}
    if not wanted:
        return found
    cursor = db.execute(q.session_message_ids(), {"session_id": session_id})
    try:
        at = 0
        index = 0
        while index < len(wanted):
            batch = cursor.fetchmany(10_000)
            if not batch:
                break
            while index < len(wanted) and wanted[index] < at + len(batch):
                found[wanted[index]] = batch[wanted[index] - at][0]
                index += 1
            at += len(batch)
    finally:
        cursor.close()
    return found


def _config_columns(config: dict[str, Any] | None, seen: dict[Any, tuple[Any, ...]]) -> tuple[Any, ...]:
    """A loop config's columns: ``(config JSON, config id, model, provider)``.

    A session's loops share a handful of configs; ``seen`` keeps the columns of
    each one met whose values are all text (keyed by its items, in order), so
    each is worked out once.
    """
    if not config:
        return dumps(config), None, None, None
    key: Any = tuple(config.items())
    if all(type(name) is str and (value is None or type(value) is str) for name, value in key):
        found = seen.get(key)
    else:  # other values (numbers, nested objects) are worked out every time
        key = found = None
    if found is None:
        config_id: str | None
        try:
            config_id = LoopConfig(**config).effective_config_id()
        except (TypeError, ValueError):
            raw_id = config.get("config_id")
            config_id = raw_id if isinstance(raw_id, str) else None
        found = (dumps(config), config_id, _text(config, "model"), _text(config, "provider"))
        if key is not None:
            seen[key] = found
    return found


def _times(bundle: SessionBundle) -> tuple[dict[str, datetime], datetime, datetime]:
    """Each loop's first message time, and the session's created and updated times."""
    first: dict[str, Any] = {}
    low: int | None = None
    high: int | None = None
    for row in bundle.messages:
        stamp = getattr(row.message, "timestamp", 0)
        if stamp:
            if row.loop_id not in first:
                first[row.loop_id] = stamp
            if low is None or high is None:
                low = high = stamp
            elif stamp < low:
                low = stamp
            elif stamp > high:
                high = stamp
    created = bundle.created_at or (_from_ms(low) if low is not None else None) or utcnow()
    updated = bundle.updated_at or (_from_ms(high) if high is not None else None) or created
    return {loop_id: _from_ms(stamp) for loop_id, stamp in first.items()}, created, updated


def _from_ms(stamp: int) -> datetime:
    try:
        return datetime.fromtimestamp(stamp / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return datetime.fromtimestamp(0, tz=timezone.utc)


def _text(config: dict[str, Any] | None, key: str) -> str | None:
    value = (config or {}).get(key)
    return value if isinstance(value, str) else None
