"""The viewer's routes: sessions, search, one session, a loop's context, an image, spend.

Every page reads one page's worth through the store's public read API; ids
travel in query parameters (any stored id, ``/`` and all, round-trips). A bad
parameter is a 400 naming it, an unknown session, loop, turn or image a 404,
never a 500. Handlers are plain functions: Starlette runs them in its thread
pool, where the store gives each thread its own connection.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from ..errors import InvalidArgument, NotFound, SearchUnavailable, TurnNotFound
from ..media import REF_PREFIX
from ..records import Loop, SessionSummary
from ..store import Store
from ..usage import UsageTotals
from . import charts
from .security import Guard
from .text import as_json, shown
from .views import (
    IMAGE_TYPES,
    TREE_INDENT,
    LoopPart,
    continues,
    hit_views,
    image_block,
    image_of,
    loop_of_session,
    loop_tree,
    message_view,
    next_in_conversation,
    pair_in_order,
    session_rows,
    tree_items,
    turn_views,
)

__all__ = ["CONTEXT_PAGE", "MESSAGES_PAGE", "SEARCH_PAGE", "SESSIONS_PAGE", "TURNS_PAGE", "create_app"]

HERE = Path(__file__).resolve().parent
SESSIONS_PAGE = 50
"""Sessions per page of the list (``?per=`` up to :data:`MAX_PAGE`)."""
TURNS_PAGE = 20
"""Turns of one loop per page of a session."""
MESSAGES_PAGE = 500
"""Messages per page of a session, at most: a turn longer than that is shown a page at a time
(``&from=K&offset=M``: turn K from its message M), never read or rendered whole."""
SEARCH_PAGE = 20
"""Hits per page of search results."""
ROLES = ("", "user", "assistant", "toolResult", "extension", "system")
"""The search form's roles ("" is any)."""
CONTEXT_PAGE = 100
"""Messages per page of a loop's context."""
MAX_PAGE = 200
SPEND_DAYS = 120
"""Days in the spend page's charts over time (the latest)."""
SPEND_SESSIONS = 15
"""Sessions in the spend page's by-session chart (the costliest)."""
ORDERS = ("-updated", "updated", "-created", "created", "title", "-title", "-cost", "cost", "-tokens", "tokens")
USAGE_ORDERS = ("cost", "tokens")
"""Orders of the sessions list by usage: the store's sessions are read (their rows, one usage query), then sorted."""


def create_app(store: Store, *, token: str | None = None, hosts: Iterable[str] | None = None) -> ASGIApp:
    """The viewer as an ASGI app over ``store`` (open it with ``read_only=True``).

    Args:
        store: the store to show; the app never writes to it.
        token: when given, every request must carry it (see :mod:`turnstore.web.security`).
        hosts: when given, only requests whose ``Host`` header names one of these are answered.
    """
    templates = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined, trim_blocks=True
    )
    templates.filters.update(
        shown=shown, json=as_json, tokens=_tokens, cost=_cost, priced=_priced, rate=_rate, when=_when
    )
    templates.globals.update(link=_link, roles=ROLES)
    for name in templates.list_templates():  # compiled now, not by the first request of each page
        templates.get_template(name)

    def page(request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = templates.get_template(name).render(request=request, **values)
        return HTMLResponse(html, status_code=status)

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def run(request: Request) -> Response:
            try:
                return handler(request)
            except InvalidArgument as error:
                return page(request, "error.html", 400, title="Bad request", message=str(error))
            except (NotFound, IndexError) as error:
                return page(request, "error.html", 404, title="Not found", message=str(error))

        return run

    def sessions(request: Request) -> Response:
        query = request.query_params
        per = _int(query, "per", SESSIONS_PAGE, 1, MAX_PAGE)
        number = _int(query, "page", 1, 1, 10**9)
        order = _choice(query, "order", ORDERS)
        filters: dict[str, Any] = {
            "agent_id": query.get("agent") or None,
            "model": query.get("model") or None,
            "since": _day(query, "since"),
            "until": _day(query, "until", next_day=True),
        }
        if order.lstrip("-") in USAGE_ORDERS:
            found = _by_usage(store, order, filters)[(number - 1) * per : number * per + 1]
        else:
            found = store.sessions.list(limit=per + 1, offset=(number - 1) * per, order=order, **filters)
        return page(
            request,
            "sessions.html",
            rows=session_rows(store, found[:per]),
            more=len(found) > per,
            number=number,
            order=order,
            params={k: v for k, v in query.items() if k in {"agent", "model", "since", "until", "per", "order"}},
        )

    def search(request: Request) -> Response:
        query = request.query_params
        form = {name: query.get(name, "") for name in ("q", "session", "role")}
        values: dict[str, Any] = {"form": form, "hits": None, "number": 1, "more": False, "error": None}
        values["page_size"] = SEARCH_PAGE
        if not form["q"].strip():
            return page(request, "search.html", **values)
        status = 200
        try:
            number = values["number"] = _int(query, "page", 1, 1, 10**6)
            found = store.messages.search(
                form["q"],
                session_id=form["session"] or None,
                role=form["role"] or None,
                limit=SEARCH_PAGE + 1,
                offset=(number - 1) * SEARCH_PAGE,
            )
            values.update(hits=hit_views(store, found[:SEARCH_PAGE]), more=len(found) > SEARCH_PAGE)
        except InvalidArgument as error:
            status, values["error"] = 400, str(error)
        except SearchUnavailable as error:
            status, values["error"] = 503, f"Search is not available in this store: {error}"
        return page(request, "search.html", status, **values)

    def session(request: Request) -> Response:
        query = request.query_params
        session_id = _required(query, "id")
        found = store.sessions.get(session_id)
        loops = store.loops.list(session_id)
        loop_id = query.get("loop") or (loops[0].loop_id if loops else None)
        start = _int(query, "from", 0, 0, 2**31)
        offset = _int(query, "offset", 0, 0, 2**31)
        loop = loop_of_session(store, session_id, loop_id) if loop_id is not None else None
        parts, later = _conversation(store, loops, loop, start, offset) if loop is not None else ([], None)
        earlier = None  # where the conversation before this page's first loop ends, when it has one
        if loop is not None and start == 0 and offset == 0 and continues(loop) and loop.parent_loop_id:
            lengths = store.messages.turn_lengths(loop.parent_loop_id)
            earlier = (loop.parent_loop_id, max(max(lengths, default=0) - TURNS_PAGE + 1, 0))
        turns = parts[0].turns if parts else []
        return page(
            request,
            "session.html",
            session=found,
            tree=tree_items(loop_tree(loops)),
            usage=store.usage.session(session_id),
            by_loop={row.loop_id: row for row in store.usage.by_loop(session_id)},
            current=loop,
            parts=parts,
            turns=turns,
            start=start,
            offset=offset,
            later=later,
            earlier=earlier,
            page_size=TURNS_PAGE,
            messages_page=MESSAGES_PAGE,
            tree_indent=TREE_INDENT,
        )

    def context(request: Request) -> Response:
        query = request.query_params
        loop_id = _required(query, "loop")
        offset = _int(query, "offset", 0, 0, 2**31)
        loop = store.loops.get(loop_id)
        found = store.messages.context_page(loop_id, offset, CONTEXT_PAGE, media="ref")
        shown_messages = [message_view(m, loop_id, None, i) for m, i in zip(found.messages, found.message_ids)]
        pair_in_order(shown_messages)
        return page(
            request,
            "context.html",
            session=store.sessions.get(loop.session_id),
            current=loop,
            messages=shown_messages,
            found=found,
            page_size=CONTEXT_PAGE,
        )

    def image(request: Request) -> Response:
        query = request.query_params
        if query.get("id"):  # a message of a context page, by its stored id
            message_id = _int(query, "id", None, 1, 2**62)
            number = _int(query, "block", None, 0, 2**31)
            block = image_of(store.messages.get(message_id, media="ref").message, number)
        else:
            loop_id = _required(query, "loop")
            turn, index, number = (_int(query, name, None, 0, 2**31) for name in ("turn", "message", "block"))
            try:
                block = image_block(store, loop_id, turn, index, number)
            except TurnNotFound as error:
                raise NotFound(str(error)) from None
        data = block.data
        if data.startswith(REF_PREFIX):  # kept out of line: read now, and only it
            data = store.messages.media(data)
        return _media_response(data, block.mime_type)

    def media(request: Request) -> Response:
        query = request.query_params
        digest = _required(query, "sha256")
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise InvalidArgument("sha256", "must be 64 lower-case hex digits (a media digest)")
        return _media_response(store.messages.media(digest), query.get("type") or "")

    def spend(request: Request) -> Response:
        days = store.usage.by_day()
        models = store.usage.by_model()
        top = sorted(store.usage.by_session(), key=lambda row: (row.cost or 0.0, row.total_tokens), reverse=True)
        top = top[:SPEND_SESSIONS]
        titles = {}
        for row in top:
            assert row.session_id is not None
            titles[row.session_id] = store.sessions.get(row.session_id).title or row.session_id
        undated = [row for row in days if not _dated(row.day)]
        day_items = _timeline([row for row in days if _dated(row.day)], SPEND_DAYS)
        return page(
            request,
            "spend.html",
            total=store.usage.total(),
            undated=_total(undated),
            charts=[
                charts.columns("Tokens by day", [(d, r.total_tokens if r else 0) for d, r in day_items], _tokens),
                charts.columns(
                    _cost_title("Cost by day (USD)", (r for _, r in day_items)),
                    [(d, (r.cost or 0.0) if r else 0.0) for d, r in day_items],
                    _cost,
                ),
                charts.line(
                    "Cache-hit rate by day", [(d, r.cache_hit_rate if r else None) for d, r in day_items], _rate
                ),
                charts.rows(
                    _cost_title("Cost by model (USD)", models),
                    [(_unpriced_label(_model(r), r), r.cost or 0.0) for r in models],
                    _cost,
                ),
                charts.rows("Tokens by model", [(_model(r), r.total_tokens) for r in models], _tokens),
                charts.rows(
                    _cost_title("Cost by session (USD), the costliest", top),
                    [(_unpriced_label(titles[r.session_id or ""], r), r.cost or 0.0) for r in top],
                    _cost,
                ),
                charts.rows(
                    "Tokens by session, the costliest",
                    [(titles[r.session_id or ""], r.total_tokens) for r in top],
                    _tokens,
                ),
            ],
        )

    def not_found(request: Request, _error: Exception) -> Response:
        return page(request, "error.html", 404, title="Not found", message=f"no page at {request.url.path}")

    routes = [
        Route("/", guarded(sessions)),
        Route("/search", guarded(search)),
        Route("/session", guarded(session)),
        Route("/context", guarded(context)),
        Route("/image", guarded(image)),
        Route("/media", guarded(media)),
        Route("/spend", guarded(spend)),
        Route("/favicon.ico", _no_icon),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found})
    app.state.store = store
    return Guard(app, token, None if hosts is None else frozenset(host.lower() for host in hosts))


def _media_response(data: str, mime_type: str) -> Response:
    """Stored base64 media as its bytes: an image type this viewer shows as itself, anything else (an
    SVG may hold script; a type the link names may be any) as a download, never rendered."""
    try:
        body = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument("block", "the stored image data is not base64") from None
    if mime_type in IMAGE_TYPES:
        return Response(body, media_type=mime_type, headers={"Cache-Control": "private, max-age=3600"})
    return Response(
        body,
        media_type="application/octet-stream",
        headers={"Content-Disposition": 'attachment; filename="media.bin"'},
    )


def _conversation(
    store: Store, loops: list[Loop], loop: Loop, start: int, offset: int
) -> tuple[list[LoopPart], dict[str, Any] | None]:
    """One page of a session's conversation from turn ``start`` (its message ``offset``) of ``loop``: that
    loop's turns, then those of the loop that continues it, and so on, up to :data:`TURNS_PAGE` turns
    and :data:`MESSAGES_PAGE` messages in all; and where the next page starts (None: the conversation ends).
    """
    parts: list[LoopPart] = []
    budget, turns_left = MESSAGES_PAGE, TURNS_PAGE
    seen: set[str] = set()
    current = loop
    for _step in range(TURNS_PAGE):  # loops read on one page, at most (a chain may hold empty ones)
        seen.add(current.loop_id)
        stop = start + turns_left
        turns = turn_views(store, current.loop_id, start, stop, offset, budget)
        if turns or not parts:
            parts.append(LoopPart(current, _relation_of(current), turns, f"-{len(parts)}" if parts else ""))
        if turns and turns[-1].rest:  # the message bound ended the page within a turn
            cut = turns[-1]
            return parts, {"loop": current.loop_id, "from": cut.turn_index, "offset": cut.first + len(cut.messages)}
        budget -= sum(len(turn.messages) for turn in turns)
        turns_left -= len(turns)
        after = turns[-1].turn_index + 1 if budget <= 0 else stop  # turn numbers may have gaps
        following = store.messages.turns(current.loop_id, after, limit=1, media="omit")
        if following:
            return parts, {"loop": current.loop_id, "from": following[0].turn_index}
        successor = next_in_conversation(loops, current.loop_id)
        if successor is None or successor.loop_id in seen:  # the end (or a cycle, in a damaged store)
            return parts, None
        if budget <= 0 or turns_left <= 0:
            return parts, {"loop": successor.loop_id}
        current, start, offset = successor, 0, 0
    return parts, {"loop": current.loop_id}


def _relation_of(loop: Loop) -> str:
    return loop_tree([loop])[0].relation


def _by_usage(store: Store, order: str, filters: dict[str, Any]) -> list[SessionSummary]:
    """The sessions ``filters`` select, by cost or tokens (``order``, ``-`` first: most first); sessions
    without a cost last either way, ties by last activity.

    What is sorted is not a column: every selected session is listed (a row each, no message read)
    and the store's usage by session read once, then the page cut from the sorted list.
    """
    descending = order.startswith("-")
    key = order.lstrip("-")
    usage = {row.session_id: row for row in store.usage.by_session()}
    summaries: list[SessionSummary] = []
    while batch := store.sessions.list(limit=BY_USAGE_BATCH, offset=len(summaries), **filters):
        summaries += batch
        if len(batch) < BY_USAGE_BATCH:
            break

    def value(summary: SessionSummary) -> float | None:
        row = usage.get(summary.session_id)
        if row is None:
            return None
        return row.cost if key == "cost" else float(row.total_tokens)

    known = [s for s in summaries if value(s) is not None]
    known.sort(key=lambda s: value(s) or 0.0, reverse=descending)  # stable: ties keep the newest first
    return known + [s for s in summaries if value(s) is None]


BY_USAGE_BATCH = 1_000
"""Sessions one list read fetches when the list is sorted by usage."""


UNDATED_DAY = "1970-01-01"
"""The day of timestamp 0: a message's timestamp when its source recorded none (never a real day of use)."""


def _dated(day: str | None) -> bool:
    """Whether a usage row's day is a day of use: not missing, not that of timestamp 0."""
    return day is not None and day != UNDATED_DAY


def _timeline(rows: list[Any], most: int) -> list[tuple[str, Any]]:
    """The latest ``most`` days up to the last day of ``rows`` (oldest first), each with its row or None:
    the days between days of use stand on the axis too, so the chart's spacing is time's."""
    if not rows:
        return []
    by_day = {row.day: row for row in rows}
    last = date.fromisoformat(rows[-1].day)
    first = max(date.fromisoformat(rows[0].day), last - timedelta(days=most - 1))
    span = (last - first).days + 1
    return [(day.isoformat(), by_day.get(day.isoformat())) for day in (first + timedelta(days=i) for i in range(span))]


def _total(rows: list[Any]) -> Any:
    """Tokens and cost of usage rows together (None when there are none)."""
    if not rows:
        return None
    costs = [row.cost for row in rows if row.cost is not None]
    return {
        "tokens": sum(row.total_tokens for row in rows),
        "cost": sum(costs) if costs else None,
        "unpriced": sum(row.unpriced_tokens for row in rows),
    }


def _no_icon(_request: Request) -> Response:
    """No icon, and no 404 in the browser's console for the one it asks for."""
    return Response(status_code=204)


# --- query parameters ---------------------------------------------------------------


def _required(query: Any, name: str) -> str:
    value = query.get(name)
    if not value:
        raise InvalidArgument(name, "is required")
    return str(value)


def _int(query: Any, name: str, default: int | None, low: int, high: int) -> int:
    """A whole-number parameter within bounds; ``default`` None: required."""
    raw = query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise InvalidArgument(name, "is required")
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 12:
        raise InvalidArgument(name, f"must be a whole number from {low} to {high}")
    value = int(raw)
    if not low <= value <= high:
        raise InvalidArgument(name, f"must be a whole number from {low} to {high}")
    return value


def _choice(query: Any, name: str, choices: tuple[str, ...]) -> str:
    value = query.get(name) or choices[0]
    if value not in choices:
        raise InvalidArgument(name, f"must be one of {', '.join(choices)}")
    return str(value)


def _day(query: Any, name: str, *, next_day: bool = False) -> datetime | None:
    """A ``YYYY-MM-DD`` bound as a UTC time: its start, or (``until``, inclusive) the next day's."""
    raw = query.get(name)
    if not raw:
        return None
    try:
        day = date.fromisoformat(raw) if len(raw) == 10 else None
    except ValueError:
        day = None
    if day is None:
        raise InvalidArgument(name, "must be a date as YYYY-MM-DD")
    start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    if not next_day:
        return start
    if day == date.max:  # no next day to end an inclusive range at
        raise InvalidArgument(name, "must be a date before 9999-12-31")
    return start + timedelta(days=1)


# --- formatting ---------------------------------------------------------------------


def _link(path: str, **params: Any) -> str:
    """``path`` with its query string; None values left out."""
    kept = {k: v for k, v in params.items() if v is not None}
    return f"{path}?{urlencode(kept)}" if kept else path


def _tokens(value: float) -> str:
    return f"{int(value):,}"


def _cost(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def _priced(totals: Any) -> str:
    """A total's cost and what it leaves unpriced (``$0.2250 + 110,000 tokens unpriced (model)``)."""
    note = totals.unpriced_note() if isinstance(totals, UsageTotals) else ""
    if not note:
        return _cost(totals.cost)
    return note if totals.cost is None else f"{_cost(totals.cost)} + {note}"


def _unpriced_label(label: str, row: UsageTotals) -> str:
    """A chart label marked when its cost leaves tokens unpriced."""
    return f"{label} (+{row.unpriced_tokens:,} tokens unpriced)" if row.unpriced_records else label


def _cost_title(title: str, rows: Iterable[UsageTotals | None]) -> str:
    """A cost chart's title, saying how many tokens of its rows have no price and are not in its bars."""
    tokens = sum(row.unpriced_tokens for row in rows if row is not None)
    return f"{title}; {tokens:,} tokens unpriced, not in the bars" if tokens else title


def _rate(value: float) -> str:
    return f"{value:.0%}"


def _when(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _model(row: Any) -> str:
    return f"{row.model} ({row.provider})" if row.provider else str(row.model or "unknown model")
