"""Large sessions in bounded memory: each message's row kept on disk, a small stand-in kept in memory.

A session file of a million entries becomes a million validated models, each
many times the size of its line. An importer that has read more than
:data:`SPILL_AFTER_MESSAGES` messages of one session therefore screens each
message as it reads it (the checks :func:`~turnstore.repositories.imports.screen_messages`
makes: dumped to its JSON, held to the store's limits), writes the row's
column values to an anonymous temporary file (:class:`Spill`; the operating
system removes it when it is closed or the process ends, a crash included)
and keeps in its place a :class:`~turnstore.importers.base.SpilledMessage`:
what building loops and turns, counting and dating read of a message. The
writer reads the rows back, in the session's order, a batch at a time.

Smaller sessions are not spilled: they keep the models in memory, as fast as
ever. The row values are written with :mod:`marshal` (plain strings, numbers
and None, written and read by this process only).
"""

from __future__ import annotations

import marshal
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any

from ..errors import InvalidMessage
from ..limits import Limits
from ..models import AssistantMessage, ExtensionMessage, Message, Usage
from .base import MessageRow, RowValues, SpilledMessage
from .derive import asked_tools

__all__ = ["SPILL_AFTER_MESSAGES", "Spill"]

SPILL_AFTER_MESSAGES = 20_000
"""A session's messages are spilled once it has more than this many (those read so far, and every later one)."""

READ_BATCH = 2_000
"""Rows read back from the spill (and inserted) at a time."""


class Spill:
    """The screened rows of one large session, in an anonymous temporary file."""

    def __init__(self, limits: Limits, row_values: RowValues) -> None:
        self.limits = limits
        self.row_values = row_values
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="turnstore-import-")
        self._end = 0
        self._names: dict[str, str] = {}
        """One copy of each kind, model and provider name the stand-ins hold (a few, repeated)."""

    def keep(
        self,
        message: Message | ExtensionMessage,
        *,
        source: str | None,
        usage: Usage | None = None,
        priced_as: tuple[str | None, str | None] = (None, None),
        timestamp: int | None = None,
        usage_known: bool = True,
    ) -> SpilledMessage:
        """Screen ``message`` and write its row; the stand-in to keep instead of it.

        A message the store cannot hold is not written: its stand-in carries
        the reason, which the writer's screening reports with the record's place.
        """
        names = self._names
        assistant = isinstance(message, AssistantMessage)
        role = message.ROLE  # the class's plain string (equal to the model's role)
        stub = SpilledMessage(
            role=role,
            kind=names.setdefault(message.kind, message.kind) if isinstance(message, ExtensionMessage) else None,
            model=names.setdefault(message.model, message.model) if assistant else None,  # type: ignore[union-attr]
            provider=names.setdefault(message.provider, message.provider) if assistant else None,  # type: ignore[union-attr]
            timestamp=getattr(message, "timestamp", 0),
            asks_tools=role == "assistant" and asked_tools(message),
        )
        row = MessageRow(message, "", None, source, usage, priced_as, timestamp, usage_known)
        try:
            data = marshal.dumps(self.row_values(row, self.limits))
        except InvalidMessage as error:
            stub.reason = str(error)
            return stub
        self._file.write(data)  # at the end: the file is only read once every row is written
        stub.at, stub.size = self._end, len(data)
        self._end += len(data)
        return stub

    def keep_row(self, row: MessageRow) -> None:
        """Spill a row already made: its message, source and usage give way to the stand-in."""
        message = row.message
        if isinstance(message, SpilledMessage):
            return
        row.message = self.keep(
            message,
            source=row.source,
            usage=row.usage,
            priced_as=row.priced_as,
            timestamp=row.timestamp,
            usage_known=row.usage_known,
        )
        row.source, row.usage = None, None

    def batches(self, stubs: Iterable[SpilledMessage]) -> Iterator[list[dict[str, Any]]]:
        """The rows of ``stubs`` (each spilled and storable), in their order, :data:`READ_BATCH` at a time."""
        batch: list[dict[str, Any]] = []
        file = self._file
        file.flush()
        position = -1
        for stub in stubs:
            if stub.at != position:  # rows are mostly read in the order they were written
                file.seek(stub.at)
            batch.append(marshal.loads(file.read(stub.size)))
            position = stub.at + stub.size
            if len(batch) >= READ_BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    def close(self) -> None:
        """Remove the file (the operating system frees its space)."""
        self._file.close()
