"""``turnstore prices``: the price overrides saved in a store, which every process on it prices with."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click

from .app import Settings, cli, pass_settings, shared_options
from .output import console, print_json, text

_WHEN = click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"])


def _utc(when: datetime | None) -> datetime | None:
    return when.replace(tzinfo=timezone.utc) if when is not None and when.tzinfo is None else when


def _repriced(settings: Settings, what: str, count: int) -> None:
    if settings.json:
        print_json({"repriced": count})
    else:
        click.echo(f"{what}; repriced {count:,} usage records")


@cli.group()
def prices() -> None:
    """Price overrides saved in the store (USD per million tokens), over the genai-prices catalog."""


@prices.command("list")
@shared_options
@pass_settings
def list_(settings: Settings) -> None:
    """The saved prices."""
    saved = settings.store(read_only=True).prices.list()
    if settings.json:
        print_json([price.model_dump(mode="json") for price in saved])
        return
    if not saved:
        click.echo("no saved prices: costs come from the genai-prices catalog")
        return
    for price in saved:
        since = price.since.strftime("%Y-%m-%d %H:%M:%S") if price.since else "always"
        line = (
            f"{price.model}  {price.provider or '(any provider)'}  since {since}  "
            f"input {price.input:g}  output {price.output:g}  cache_read {price.cache_read:g}  "
            f"cache_write {price.cache_write:g}"
        )
        console().print(text(line))


@prices.command("set")
@click.argument("model")
@click.option("--provider", default=None, help="Only this provider's records (default: any).")
@click.option("--input", "input_", type=float, default=0.0, help="USD per million input tokens.")
@click.option("--output", type=float, default=0.0, help="USD per million output tokens.")
@click.option("--cache-read", type=float, default=0.0, help="USD per million cache-read tokens.")
@click.option("--cache-write", type=float, default=0.0, help="USD per million cache-write tokens.")
@click.option("--since", type=_WHEN, default=None, help="In force for records from this date (UTC) on.")
@shared_options
@pass_settings
def set_(
    settings: Settings,
    model: str,
    provider: str | None,
    input_: float,
    output: float,
    cache_read: float,
    cache_write: float,
    since: datetime | None,
) -> None:
    """Save a price of MODEL and reprice the stored records it covers."""
    count = settings.store().prices.set(
        model,
        provider,
        input=input_,
        output=output,
        cache_read=cache_read,
        cache_write=cache_write,
        since=_utc(since),
    )
    _repriced(settings, "saved", count)


@prices.command("delete")
@click.argument("model")
@click.option("--provider", default=None, help="The provider it was saved for (default: any).")
@click.option("--since", type=_WHEN, default=None, help="The date it was saved from.")
@shared_options
@pass_settings
def delete(settings: Settings, model: str, provider: str | None, since: datetime | None) -> None:
    """Delete a saved price and reprice the stored records it covered."""
    _repriced(settings, "deleted", settings.store().prices.delete(model, provider, since=_utc(since)))


@prices.command("import")
@click.argument("path", type=click.Path(path_type=Path))
@shared_options
@pass_settings
def import_(settings: Settings, path: Path) -> None:
    """Save every price of a JSON file {"model": {"input": 3, "output": 15, ...}} and reprice."""
    _repriced(settings, "imported", settings.store().prices.import_file(path))
