"""``turnstore import`` and ``turnstore export``: moving histories in and out."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..export import DEFAULT_FORMAT, EXPORT_FORMATS
from ..media import MediaMode
from .app import Settings, cli, media_option, pass_settings, shared_options
from .escaping import visible
from .output import JsonSafeWriter, print_json

if TYPE_CHECKING:
    from ..importers import ImportReport


class ImportFormat(click.Choice):  # type: ignore[type-arg]
    """The FORMAT choice, whose names are read from :data:`turnstore.importers.FORMATS` only when
    a command needs them (parsing ``import`` or printing its help): other commands start without
    loading the importers."""

    def __init__(self) -> None:
        super().__init__([])

    @property  # type: ignore[override]
    def choices(self) -> Sequence[str]:
        from ..importers import FORMATS

        return sorted(FORMATS)

    @choices.setter
    def choices(self, _value: Sequence[str]) -> None:
        pass


@cli.command("import")
@click.argument("fmt", metavar="FORMAT", type=ImportFormat())
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Validate and report; write nothing.")
@click.option("--skip-invalid", is_flag=True, help="Skip malformed records (listed) instead of their whole session.")
@click.option("--replace", is_flag=True, help="Overwrite sessions that exist with other content.")
@click.option("--session-id", default=None, help="Session id for sources that name none.")
@shared_options
@pass_settings
def import_(
    settings: Settings,
    fmt: str,
    paths: tuple[Path, ...],
    dry_run: bool,
    skip_invalid: bool,
    replace: bool,
    session_id: str | None,
) -> None:
    """Import histories of FORMAT from files or directories (walked).

    Each session is written in one transaction. Importing the same source
    again changes nothing. Exit code 1 when a session was left out because of
    a malformed record (file:line given; 0 with --skip-invalid), or a file
    could not be read, held no records or was not a regular file.
    """
    store = settings.store_to_check() if dry_run else settings.store()
    show_progress = sys.stderr.isatty() and not settings.json
    if show_progress:
        from rich.markup import escape
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=True,
        ) as progress:
            task = progress.add_task(f"importing {fmt}", total=None)

            def advance(path: str, done: int, total: int) -> None:
                progress.update(
                    task, completed=done, total=total, description=f"importing {escape(visible(Path(path).name))}"
                )

            report = store.import_(
                fmt,
                *paths,
                dry_run=dry_run,
                skip_invalid=skip_invalid,
                replace=replace,
                session_id=session_id,
                progress=advance,
                tune_process=True,  # this process is turnstore's own
            )
    else:
        report = store.import_(
            fmt,
            *paths,
            dry_run=dry_run,
            skip_invalid=skip_invalid,
            replace=replace,
            session_id=session_id,
            tune_process=True,  # this process is turnstore's own
        )
    if settings.json:
        print_json(report.as_dict())
    else:
        _print_report(report)
    if not report.ok:
        raise click.exceptions.Exit(1)


def _print_report(report: ImportReport) -> None:
    verb = "would write" if report.dry_run else "wrote"
    click.echo(
        f"{visible(report.format)}: read {report.records} records from {report.files} file(s); "
        f"{verb} {len(report.sessions_written)} session(s), {report.loops} loop(s), {report.messages} message(s); "
        f"{len(report.sessions_unchanged)} unchanged; {len(report.sessions_failed)} failed"
    )
    if report.by_role:
        click.echo(
            "  by role: " + ", ".join(f"{visible(role)} {count}" for role, count in sorted(report.by_role.items()))
        )
    if report.by_kind:
        kinds = sorted(report.by_kind.items())
        click.echo("  extension kinds: " + ", ".join(f"{visible(kind)} {count}" for kind, count in kinds))
    for note in report.notes:
        click.echo(f"  note: {visible(str(note))}")
    for error in report.skipped:
        click.echo(f"  skipped {visible(str(error))}", err=True)
    for error in report.errors:
        click.echo(f"  error: {visible(str(error))}", err=True)


@cli.command()
@click.argument("session_id")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    default=DEFAULT_FORMAT,
    show_default=True,
    help="turnstore: lossless JSONL (as store.export); phi-core: JSON array of AgentMessage; "
    "phi-core-session: phi-core Session file.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write here instead of stdout: a new file, mode 0600, in place only when complete.",
)
@media_option
@shared_options
@pass_settings
def export(settings: Settings, session_id: str, fmt: str, output: Path | None, media: MediaMode) -> None:
    """Export one session (streamed; large sessions are never held in memory).

    The default format is turnstore's lossless JSONL, as ``store.export``
    writes it (``turnstore import turnstore FILE`` rebuilds the session). Every
    format names the session, so importing the file gives back the same
    session id. With -o, a failure (a full disk) leaves FILE as it was.
    """
    store = settings.store(read_only=True)
    store.sessions.get(session_id)  # a clear error before any output
    if output is not None:
        store.export(session_id, fmt, output, media=media)
    else:
        stream = JsonSafeWriter(sys.stdout)
        store.export(session_id, fmt, stream, media=media)  # type: ignore[arg-type]
        stream.flush()
