"""``turnstore serve``: the read-only web viewer on uvicorn (the ``turnstore[serve]`` extra)."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from .app import Settings, cli, pass_settings, shared_options
from .escaping import visible

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Hosts the viewer binds to without ``--allow-remote``: reachable from this machine only."""


REQUEST_TIMEOUT = 10.0
"""Seconds a request may take to arrive whole, by default (``--request-timeout``)."""
MAX_CONNECTIONS = 100
"""Connections open at once, by default (``--max-connections``)."""
KEEP_ALIVE = 5.0
"""Seconds an idle connection stays open after a response, by default (``--keep-alive``)."""


def is_local(host: str) -> bool:
    """Whether binding to ``host`` keeps the viewer on this machine."""
    return host.strip("[]") in LOCAL_HOSTS


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind to.")
@click.option("--port", default=8484, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in the default browser.")
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a host other than 127.0.0.1/localhost/::1; every request then needs the token printed at start.",
)
@click.option(
    "--request-timeout",
    default=REQUEST_TIMEOUT,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help=(
        "Seconds a request may take to arrive whole (line, headers, body), and a client may leave its "
        "answer unread; a slower client is disconnected."
    ),
)
@click.option(
    "--max-connections",
    default=MAX_CONNECTIONS,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Connections open at once; one more closes the one waiting longest for a request.",
)
@click.option(
    "--keep-alive",
    default=KEEP_ALIVE,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help="Seconds an idle connection stays open after a response.",
)
@shared_options
@pass_settings
def serve(
    settings: Settings,
    host: str,
    port: int,
    open_browser: bool,
    allow_remote: bool,
    request_timeout: float,
    max_connections: int,
    keep_alive: float,
) -> None:
    """Serve a read-only web viewer of the store: sessions, turns, context and spend.

    Binds to 127.0.0.1 unless told otherwise; another host is refused without
    --allow-remote, and with it every request must carry the access token
    printed at start (the printed link carries it once, then a cookie does).
    A request must arrive whole within --request-timeout, and at most
    --max-connections are open at once, so slow clients cannot hold it.
    """
    if not is_local(host) and not allow_remote:
        raise click.UsageError(
            f"refusing to serve on {visible(host)}: it may be reachable from other machines; "
            "pass --allow-remote (every request then needs the printed token)"
        )
    try:
        import uvicorn

        from ..web import create_app
        from ..web.security import new_token
        from ..web.server import protocol
    except ImportError as error:
        raise click.ClickException(
            f"turnstore serve needs the serve extra (missing {error.name}): pip install 'turnstore[serve]'"
        ) from None
    store = settings.store(read_only=True)
    token = new_token() if allow_remote else None
    shown_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    url = f"http://{shown_host}:{port}/" + (f"?token={token}" if token else "")
    app = create_app(store, token=token, hosts=None if allow_remote else LOCAL_HOSTS)
    click.echo(f"turnstore viewer (read-only) at {visible(url)}")
    if token is not None:
        click.echo(f"access token: {token} (header X-Turnstore-Token, or ?token= once, then a cookie)")
    config = uvicorn.Config(
        app,
        host=host.strip("[]"),
        port=port,
        log_level="warning",
        http=protocol(request_timeout, max_connections),
        timeout_keep_alive=keep_alive,  # type: ignore[arg-type]
    )
    server = uvicorn.Server(config)
    asyncio.run(_run(server, url if open_browser else None))


async def _run(server: Any, url: str | None) -> None:
    """Serve until stopped; with ``url``, open it in the default browser once the server listens."""
    serving = asyncio.ensure_future(server.serve())
    if url is not None:
        while not server.started and not serving.done():
            await asyncio.sleep(0.05)
        if server.started:
            import webbrowser

            webbrowser.open(url)
    await serving
