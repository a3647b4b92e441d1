"""``turnstore search``: find messages of every session by their words (``store.messages.search``)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import click
from rich.table import Table
from rich.text import Text

from ..records import SearchHit
from ..repositories.search import MAX_LIMIT, ROLES
from .app import Settings, cli, pass_settings, shared_options
from .escaping import json_safe, visible
from .output import console, text

DATES = ["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]


@cli.command()
@click.argument("words", metavar="QUERY...", nargs=-1, required=True)
@click.option("--session", "session_id", default=None, help="Only this session's messages.")
@click.option("--loop", "loop_id", default=None, help="Only this loop's messages.")
@click.option("--role", type=click.Choice(sorted(ROLES)), default=None, help="Only messages of this role.")
@click.option("--tool", "tool_name", default=None, help="Only calls of this tool and their results.")
@click.option("--since", type=click.DateTime(DATES), default=None, help="Only messages from this time on (UTC).")
@click.option("--until", type=click.DateTime(DATES), default=None, help="Only messages before this time (UTC).")
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=20, show_default=True, help="At most this many.")
@click.option("--offset", type=click.IntRange(0), default=0, show_default=True, help="Skip this many best first.")
@click.option("--any", "match_any", is_flag=True, help="Match messages with any of the words, not all.")
@click.option("--no-thinking", is_flag=True, help="Leave thinking out: match on the other text only.")
@shared_options
@pass_settings
def search(
    settings: Settings,
    words: tuple[str, ...],
    session_id: str | None,
    loop_id: str | None,
    role: str | None,
    tool_name: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    offset: int,
    match_any: bool,
    no_thinking: bool,
) -> None:
    """Find messages by their words, best match first.

    QUERY: words (all must match), "exact phrases", -excluded, prefix*; every
    argument that is not an option is a part of it (`search fix test` is
    `search "fix test"`), and a query that starts with -excluded goes after
    `--` (`search -- -draft report`). Each hit names its session, loop and
    turn: `turnstore show SESSION --loop LOOP --turn N` shows the whole turn.
    """
    query = " ".join(words)
    filters = {"session_id": session_id, "loop_id": loop_id, "role": role, "tool_name": tool_name}
    hits = settings.store(read_only=True).messages.search(
        query, **filters, since=_utc(since), until=_utc(until), limit=limit, offset=offset,
        thinking=not no_thinking, match="any" if match_any else "all",
    )  # fmt: skip
    if settings.json:
        for hit in hits:  # JSON lines: one hit per line
            click.echo(json_safe(json.dumps(hit.model_dump(mode="json"), ensure_ascii=False, allow_nan=False)))
        return
    if not hits:
        click.echo("no messages found")
        return
    table = Table(title_justify="left")
    table.add_column("where (show SESSION --loop LOOP --turn N)", overflow="fold")
    table.add_column("role")
    table.add_column("snippet", overflow="fold")
    for hit in hits:
        turn = "-" if hit.turn_index is None else str(hit.turn_index)
        where = Text.assemble(
            text(hit.session_id, "bold"), "\n", text(hit.loop_id), f"\nturn {turn}  #{hit.message_id}"
        )
        table.add_row(where, text(hit.role, "cyan"), highlighted(hit))
    console().print(table)


def highlighted(hit: SearchHit) -> Text:
    """The hit's snippet, matched words in bold yellow, every piece escaped (never markup)."""
    line = Text()
    at = 0
    for start, end in hit.highlights:
        line.append(visible(hit.snippet[at:start]))
        line.append(visible(hit.snippet[start:end]), "bold yellow")
        at = end
    line.append(visible(hit.snippet[at:]))
    return line


def _utc(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=timezone.utc) if value is not None else None
