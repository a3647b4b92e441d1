"""``turnstore usage``: tokens and dollars, totalled or broken down."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click

from ..usage import PriceTable, UsageRow
from .app import Settings, cli, pass_settings, shared_options
from .output import console, print_json, usage_table

_GROUP_KEY = {"model": "model", "loop": "loop_id", "session": "session_id", "day": "day"}


@cli.command()
@click.option("--session", "session_id", default=None, help="Only this session.")
@click.option("--loop", "loop_id", default=None, help="Only this loop.")
@click.option(
    "--by",
    "group",
    type=click.Choice(sorted(_GROUP_KEY)),
    default=None,
    help="Break the total down (--by loop: the loops of one --session).",
)
@click.option(
    "--prices",
    type=click.Path(path_type=Path),
    default=None,
    help='JSON file {"model": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}} (USD per million tokens).',
)
@shared_options
@pass_settings
def usage(
    settings: Settings, session_id: str | None, loop_id: str | None, group: str | None, prices: Path | None
) -> None:
    """Token usage and cost: of the whole store, a session or a loop; optionally --by model, loop, session or day."""
    if session_id and loop_id:
        raise click.UsageError("give --session or --loop, not both")
    if group == "loop" and not session_id:
        raise click.UsageError("--by loop needs --session")
    if group == "session" and (session_id or loop_id):
        raise click.UsageError("--by session covers the whole store; drop --session/--loop")
    table = PriceTable.from_file(prices) if prices else None
    repo = settings.store(read_only=True).usage
    if group is None:
        if loop_id:
            totals, scope = repo.loop(loop_id, prices=table), f"loop {loop_id}"
        elif session_id:
            totals, scope = repo.session(session_id, prices=table), f"session {session_id}"
        else:
            totals, scope = repo.total(prices=table), "all sessions"
        if settings.json:
            print_json(totals.model_dump(mode="json"))
        else:
            console().print(usage_table(f"Usage of {scope}", "scope", [(scope, totals)]))
        return
    rows: list[UsageRow]
    if group == "model":
        rows = repo.by_model(session_id, loop_id=loop_id, prices=table)
    elif group == "loop":
        rows = repo.by_loop(session_id, prices=table)  # type: ignore[arg-type]
    elif group == "session":
        rows = repo.by_session(prices=table)
    else:
        rows = repo.by_day(session_id, loop_id=loop_id, prices=table)
    if settings.json:
        print_json([row.model_dump(mode="json") for row in rows])
        return
    labels = [(_label(row, group), row) for row in rows]
    console().print(usage_table(f"Usage by {group}", group, labels))


def _label(row: UsageRow, group: str) -> str:
    if group == "model":
        return f"{row.provider}/{row.model}" if row.provider else (row.model or "(unknown model)")
    return str(getattr(row, _GROUP_KEY[group]) or "-")


@cli.command()
@click.option("--session", "session_id", default=None, help="Only this session's records.")
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"]),
    default=None,
    help="Only records from this date (UTC) or time on.",
)
@click.option("--model", default=None, help="Only this model's records.")
@shared_options
@pass_settings
def reprice(settings: Settings, session_id: str | None, since: datetime | None, model: str | None) -> None:
    """Price stored usage again with the store's prices now (after an override or a price data update).

    Reported costs are kept; catalog, override and unpriced records are priced again at their own time and tier.
    """
    if session_id and since:
        raise click.UsageError("give --session or --since, not both")
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=timezone.utc)
    changed = settings.store().usage.reprice(session_id, since=since, model=model)
    if settings.json:
        print_json({"repriced": changed})
    else:
        click.echo(f"repriced {changed:,} usage records")
