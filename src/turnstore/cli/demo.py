"""``turnstore demo``: build a realistic store and show what it cost."""

from __future__ import annotations

import click

from ..engine import describe, holds_secret
from ..usage import UsageTotals
from .app import Settings, cli, pass_settings, shared_options
from .escaping import shell_word, visible
from .output import console, print_json, usage_table


@cli.command()
@shared_options
@pass_settings
def demo(settings: Settings) -> None:
    """Build demo sessions (coding, research, compacted) in the store and print their usage with cost.

    Running it again replaces the demo sessions; other sessions are left alone.
    """
    from ..demo import build_demo

    store = settings.store()
    session_ids = build_demo(store)
    sessions = {sid: store.sessions.get(sid) for sid in session_ids}
    by_session = [(sid, store.usage.session(sid)) for sid in session_ids]
    by_loop = [
        (sid, row.loop_id or "", UsageTotals(**row.model_dump(include=set(UsageTotals.model_fields))))
        for sid in session_ids
        for row in store.usage.by_loop(sid)
    ]
    by_model = store.usage.by_model()
    if settings.json:
        print_json(
            {
                "db": describe(store.url),
                "sessions": [
                    {"session_id": sid, "title": sessions[sid].title, **u.model_dump(mode="json")}
                    for sid, u in by_session
                ],
                "loops": [{"session_id": sid, "loop_id": lid, **u.model_dump(mode="json")} for sid, lid, u in by_loop],
                "models": [row.model_dump(mode="json") for row in by_model],
            }
        )
        return
    out = console()
    where = describe(store.url)  # a file's path; a server's URL with its password masked
    click.echo(f"Built {len(session_ids)} demo sessions in {visible(where)}\n")
    out.print(usage_table("Usage by session", "session", [(f"{sessions[sid].title}", u) for sid, u in by_session]))
    out.print()
    out.print(usage_table("Usage by loop", "loop", [(lid, u) for _, lid, u in by_loop]))
    out.print()
    out.print(usage_table("Usage by model", "model", [(_model_label(r.model, r.provider), r) for r in by_model]))
    if not holds_secret(store.url):
        db = f"--db {shell_word(where)} "  # pasted into a shell: a path with spaces (or escapes) stays one argument
        click.echo("\nExplore it:")
    else:  # a command line would show the password, and a masked one would not log in
        db = ""
        click.echo("\nExplore it (with TURNSTORE_URL set to this database's URL):")
    for command in ("sessions", f"show {shell_word(session_ids[0])}", "usage --by day", "search tests"):
        click.echo(f"  turnstore {db}{command}")


def _model_label(model: str | None, provider: str | None) -> str:
    return f"{provider}/{model}" if provider else (model or "(unknown model)")
