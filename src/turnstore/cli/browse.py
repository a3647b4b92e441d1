"""``turnstore sessions`` and ``turnstore show``: what a store holds."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..errors import InvalidMessage, TurnNotFound
from ..media import MediaMode
from ..models import (
    AssistantMessage,
    ExtensionMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
)
from ..records import ContinuationKind, Loop, StoredMessage
from .app import Settings, cli, media_option, pass_settings, shared_options
from .output import console, json_time, print_json, short, text


@cli.command()
@click.option("--limit", default=100, show_default=True, help="At most this many sessions.")
@click.option("--offset", default=0, show_default=True, help="Skip this many first.")
@click.option("--agent", "agent_id", default=None, help="Only this agent's sessions.")
@shared_options
@pass_settings
def sessions(settings: Settings, limit: int, offset: int, agent_id: str | None) -> None:
    """List sessions, most recently updated first."""
    rows = settings.store(read_only=True).sessions.list(limit=limit, offset=offset, agent_id=agent_id)
    if settings.json:
        print_json(
            [
                {
                    "session_id": row.session_id,
                    "title": row.title,
                    "agent_id": row.agent_id,
                    "created_at": row.created_at,
                    "updated_at": row.updated_at,
                    "loops": row.loops,
                    "messages": row.messages,
                }
                for row in rows
            ]
        )
        return
    if not rows:
        click.echo("no sessions")
        return
    table = Table(title_justify="left")
    for name, justify in (
        ("session", "left"),
        ("title", "left"),
        ("loops", "right"),
        ("messages", "right"),
        ("updated (UTC)", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in rows:
        table.add_row(
            text(row.session_id),
            text(row.title or ""),
            str(row.loops),
            str(row.messages),
            row.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console().print(table)


@cli.command()
@click.argument("session_id")
@click.option("--loop", "loop_id", default=None, help="Only this loop.")
@click.option("--turn", "turn_index", type=int, default=None, help="Only this turn (of --loop, or of the only loop).")
@media_option
@shared_options
@pass_settings
def show(settings: Settings, session_id: str, loop_id: str | None, turn_index: int | None, media: MediaMode) -> None:
    """Show a session's loops and messages."""
    store = settings.store(read_only=True)
    session = store.sessions.get(session_id)
    loops = store.loops.list(session_id)
    if loop_id is not None:
        loops = [loop for loop in loops if loop.loop_id == loop_id]
        if not loops:
            store.loops.get(loop_id)  # raises LoopNotFound for an unknown id
            raise InvalidMessage(f"loop {loop_id!r} belongs to another session", [("loop", "other session")])
    if turn_index is not None and len(loops) != 1:
        raise click.UsageError("--turn needs --loop when the session has several loops")
    messages: dict[str, list[StoredMessage]] = {loop.loop_id: [] for loop in loops}
    for loop in loops:
        for stored in store.messages.records(loop_id=loop.loop_id, media=media):
            if turn_index is None or stored.turn_index == turn_index:
                messages[loop.loop_id].append(stored)
    if turn_index is not None and not messages[loops[0].loop_id]:
        raise TurnNotFound(f"loop {loops[0].loop_id!r} has no turn {turn_index}")
    # Replies whose source recorded no usage: their JSON holds zeros, their row no token counts.
    unknown = {message_id for loop in loops for message_id in store.usage.unknown(loop.loop_id)}
    if settings.json:
        print_json(
            {
                "session": session.model_dump(mode="json"),
                "loops": [_loop_json(loop, messages[loop.loop_id], unknown) for loop in loops],
            }
        )
        return
    _print_tree(session.session_id, session.title, loops, messages, unknown)


def _loop_json(loop: Loop, stored: list[StoredMessage], unknown: set[int]) -> dict[str, Any]:
    return {
        "loop_id": loop.loop_id,
        "parent_loop_id": loop.parent_loop_id,
        "continuation_kind": loop.continuation_kind.value,
        "fork_after": loop.fork_after,
        "status": loop.status.value,
        "config": loop.config,
        "started_at": json_time(loop.started_at),
        "ended_at": json_time(loop.ended_at) if loop.ended_at else None,
        "reported_usage": loop.reported_usage.model_dump(mode="json") if loop.reported_usage is not None else None,
        "messages": [
            {
                "id": m.message_id,
                "turn_index": m.turn_index,
                "seq": m.seq,
                "message": m.message.model_dump(mode="json"),
                **({"usage_known": m.message_id not in unknown} if isinstance(m.message, AssistantMessage) else {}),
            }
            for m in stored
        ],
    }


def _print_tree(
    session_id: str, title: str | None, loops: list[Loop], messages: dict[str, list[StoredMessage]], unknown: set[int]
) -> None:
    label = Text.assemble(("session ", "bold"), text(session_id, "bold"), "  " if title else "", text(title or ""))
    root = Tree(label)
    for loop in loops:
        # "default" is phi-core's name for the next prompt of a conversation: a continuation, to a reader.
        relation = (
            "continuation" if loop.continuation_kind is ContinuationKind.DEFAULT else loop.continuation_kind.value
        )
        if loop.parent_loop_id:
            relation += f" of {loop.parent_loop_id}" + (f" after #{loop.fork_after}" if loop.fork_after else "")
        model = f"  {loop.model}" if loop.model else ""
        reported = loop.reported_usage  # the run's usage, where its replies carry none of their own
        run_usage = f"  run: {reported.input}+{reported.output} tok" if reported is not None else ""
        branch = root.add(
            Text.assemble(
                ("loop ", "bold"),
                text(loop.loop_id, "bold"),
                "  (",
                text(relation),
                f", {loop.status.value})",
                text(model),
                (run_usage, "dim"),
            )
        )
        for stored in messages[loop.loop_id]:
            turn = "-" if stored.turn_index is None else str(stored.turn_index)
            branch.add(
                Text.assemble(
                    f"#{stored.message_id} turn {turn} seq {stored.seq}  ",
                    (stored.message.role, "cyan"),
                    "  ",
                    _describe(stored, stored.message_id in unknown),
                )
            )
    console().print(root)


def _describe(stored: StoredMessage, usage_unknown: bool = False) -> Text:
    """One line about a message; every stored value in it escaped and printed as plain text.

    ``usage_unknown``: an assistant message stored without usage, whose JSON holds zeros.
    """
    message = stored.message
    if isinstance(message, ExtensionMessage):
        return Text(short(f"[{message.kind}] {message.data}", 90))
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ThinkingContent):
            parts.append(f"(thinking: {block.thinking})")
        elif isinstance(block, ToolCallContent):
            parts.append(f"{block.name}({block.arguments})")
        elif isinstance(block, ImageContent):
            parts.append(f"[image {block.mime_type}]")
    line = Text(short(" ".join(parts), 90))
    if isinstance(message, AssistantMessage):
        used = message.usage
        counts = f"{used.input}+{used.output} tok" if used is not None and not usage_unknown else "usage unknown"
        line.append(f"  {message.stop_reason.value}, {counts}", "dim")
        if message.error_message:
            line.append(f"  {short(message.error_message, 60)}", "red")
    if isinstance(message, ToolResultMessage) and message.is_error:
        line.append("  (error)", "red")
    return line
