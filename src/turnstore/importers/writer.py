"""Writing one imported session: all of it in one transaction, or none of it.

Importing the same source again finds the same digest in the ``imports``
table and changes nothing. A session that exists with other content (an
earlier import of a changed file, or one written through the API) is left
alone unless ``replace`` is set, which rewrites it whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from .. import queries as q
from ..database import Database
from ..errors import AlreadyExists
from ..limits import Limits
from ..records import LoopConfig
from ..repositories._shared import dumps, utcnow
from ..repositories.loops import usage_params
from ..repositories.messages import dump_message, row_params
from .base import LoopRow, SessionBundle

__all__ = ["UNCHANGED", "WRITTEN", "check_bundle", "write_bundle"]

WRITTEN = "written"
UNCHANGED = "unchanged"


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
        origin = f"imported from {previous[1]}" if previous is not None else "not imported"
        raise AlreadyExists(
            f"session {bundle.session_id!r} already exists ({origin}) with other content; "
            "pass --replace to overwrite it"
        )
    return WRITTEN


def write_bundle(
    db: Database, bundle: SessionBundle, fmt: str, *, replace: bool, limits: Limits, report: dict[str, Any]
) -> str:
    """Write a session bundle in one transaction; returns ``written`` or ``unchanged``.

    Raises:
        AlreadyExists: the session exists with other content and ``replace`` is off.
        InvalidMessage: a message is over the store's limits.
    """
    limits.check_id("session_id", bundle.session_id)
    rows = _message_params(bundle, limits)
    with db.write():
        if check_bundle(db, bundle, fmt, replace=replace) == UNCHANGED:
            return UNCHANGED
        db.execute(q.delete_session(), {"session_id": bundle.session_id})
        created, updated = _session_times(bundle)
        db.execute(
            q.insert_session(),
            {
                "session_id": bundle.session_id,
                "agent_id": bundle.agent_id,
                "title": bundle.title,
                "metadata": dumps(bundle.metadata),
                "created_at": db.bind_time(created),
                "updated_at": db.bind_time(updated),
                "source": bundle.source,
            },
        )
        first_times = _first_times(bundle)
        if bundle.loops:
            db.executemany(
                q.insert_loop(),
                [_loop_params(db, bundle, loop, first_times.get(loop.loop_id, created)) for loop in bundle.loops],
            )
        if rows:
            db.executemany(q.insert_message_at(), rows)
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
    return WRITTEN


def _message_params(bundle: SessionBundle, limits: Limits) -> list[dict[str, Any]]:
    seqs: dict[str, int] = {}
    rows = []
    for row in bundle.messages:
        text = dump_message(row.message)
        limits.check_message(text)
        params = row_params(
            row.message,
            text,
            row.loop_id,
            row.turn_index,
            row.usage,
            row.source,
            row.priced_as,
            row.timestamp,
            row.usage_known,
        )
        params["session_id"] = bundle.session_id
        params["seq"] = seqs[row.loop_id] = seqs.get(row.loop_id, -1) + 1
        rows.append(params)
    return rows


def _loop_params(db: Database, bundle: SessionBundle, loop: LoopRow, first_time: datetime) -> dict[str, Any]:
    config = loop.config
    config_id = None
    if config:
        try:
            config_id = LoopConfig(**config).effective_config_id()
        except (TypeError, ValueError):
            config_id = config.get("config_id") if isinstance(config.get("config_id"), str) else None
    started = loop.started_at or first_time
    return {
        "loop_id": loop.loop_id,
        "session_id": bundle.session_id,
        "parent_loop_id": loop.parent_loop_id,
        "continuation_kind": loop.continuation_kind,
        "fork_after": None,
        "keep_from": None,
        "config": dumps(config),
        "config_id": config_id,
        "model": _text(config, "model"),
        "provider": _text(config, "provider"),
        "status": loop.status,
        "started_at": db.bind_time(started),
        "ended_at": db.bind_time(loop.ended_at) if loop.ended_at else None,
        "spawn_loop_id": loop.spawn_loop_id,
        "spawn_tool_call_id": loop.spawn_tool_call_id,
        **usage_params(loop.reported_usage),
        "metadata": dumps(loop.metadata),
        "source": loop.source,
    }


def _resolve_forks(db: Database, bundle: SessionBundle) -> None:
    """Turn fork points given as positions in the bundle into the message ids just assigned."""
    pending = [loop for loop in bundle.loops if loop.fork_after is not None or loop.keep_from is not None]
    if not pending:
        return
    ids = [row[0] for row in db.fetchall(q.session_message_ids(), {"session_id": bundle.session_id})]
    for loop in pending:
        db.execute(
            q.set_loop_fork(),
            {
                "loop_id": loop.loop_id,
                "fork_after": ids[loop.fork_after] if loop.fork_after is not None else None,
                "keep_from": ids[loop.keep_from] if loop.keep_from is not None else None,
            },
        )


def _session_times(bundle: SessionBundle) -> tuple[datetime, datetime]:
    stamps = [t for t in _timestamps(bundle.messages) if t]
    created = bundle.created_at or (_from_ms(min(stamps)) if stamps else None) or utcnow()
    updated = bundle.updated_at or (_from_ms(max(stamps)) if stamps else None) or created
    return created, updated


def _first_times(bundle: SessionBundle) -> dict[str, datetime]:
    first: dict[str, datetime] = {}
    for row in bundle.messages:
        stamp = getattr(row.message, "timestamp", 0)
        if stamp and row.loop_id not in first:
            first[row.loop_id] = _from_ms(stamp)
    return first


def _timestamps(rows: Iterable[Any]) -> Iterable[int]:
    for row in rows:
        yield getattr(row.message, "timestamp", 0) or 0


def _from_ms(stamp: int) -> datetime:
    try:
        return datetime.fromtimestamp(stamp / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return datetime.fromtimestamp(0, tz=timezone.utc)


def _text(config: dict[str, Any] | None, key: str) -> str | None:
    value = (config or {}).get(key)
    return value if isinstance(value, str) else None

