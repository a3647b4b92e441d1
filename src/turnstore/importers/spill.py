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
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, overload

from ..errors import InvalidMessage
from ..limits import Limits
from ..models import AssistantMessage, ExtensionMessage, Message, Usage
from .base import MessageRow, RowValues, SessionBundle, SpilledMessage
from .derive import TurnDeriver, asked_tools, next_loop

__all__ = ["SPILL_AFTER_MESSAGES", "SPILL_FILE_BYTES", "Places", "Spill", "SpilledRows", "StubTable", "derived_rows"]

SPILL_AFTER_MESSAGES = 20_000
"""A session's messages are spilled once it has more than this many (those read so far, and every later one)."""


def spill_from_start(path: Path) -> bool:
    """Whether the session file at ``path`` is large enough to spill from its first message."""
    try:
        return path.stat().st_size > SPILL_FILE_BYTES
    except OSError:
        return False


SPILL_FILE_BYTES = 32 * 1024 * 1024
"""A session file larger than this is spilled from its first message: holding its first
:data:`SPILL_AFTER_MESSAGES` messages as models would raise the process's peak for good."""

READ_BATCH = 2_000
"""Rows read back from the spill (and inserted) at a time, at most."""

READ_BATCH_BYTES = 16 * 1024 * 1024
"""Bytes of spilled rows read back at a time, at most: a batch of screenshot-heavy rows ends sooner, so the
memory an import holds stays in step with its rows' count, not with the size of their media."""


class Spill:
    """The screened rows of one large session, in an anonymous temporary file."""

    def __init__(self, limits: Limits, row_values: RowValues) -> None:
        self.limits = limits
        self.row_values = row_values
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="turnstore-import-")  # noqa: SIM115 - closed by close()
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
        """The rows of ``stubs`` (each spilled and storable), in their order: :data:`READ_BATCH` rows, or
        :data:`READ_BATCH_BYTES` of them, at a time (whichever comes first; always at least one row)."""
        batch: list[dict[str, Any]] = []
        held = 0
        file = self._file
        file.flush()
        position = -1
        for stub in stubs:
            if stub.at != position:  # rows are mostly read in the order they were written
                file.seek(stub.at)
            batch.append(marshal.loads(file.read(stub.size)))
            held += stub.size
            position = stub.at + stub.size
            if len(batch) >= READ_BATCH or held >= READ_BATCH_BYTES:
                yield batch
                batch, held = [], 0
        if batch:
            yield batch

    def close(self) -> None:
        """Remove the file (the operating system frees its space)."""
        self._file.close()


class StubTable:
    """The stand-ins of a large session's spilled messages, kept as columns: a few bytes each, not an object each.

    A :class:`~turnstore.importers.base.SpilledMessage` is a Python object of
    about a hundred bytes; a session of a million messages would hold a
    hundred megabytes of them. The table keeps each stand-in's shape (role,
    kind, model, provider, whether it asks for tools: a code into the list of
    the few distinct shapes), time and place in the spill in :mod:`array`
    columns, and makes a stand-in again when one is asked for.
    """

    def __init__(self) -> None:
        self.shapes: list[tuple[str, str | None, str | None, str | None, bool]] = []
        self._codes: dict[tuple[str, str | None, str | None, str | None, bool], int] = {}
        self._shape = array("i")
        self._timestamp = array("q")
        self._at = array("q")
        self._size = array("q")
        self._reasons: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._at)

    def add(self, stub: SpilledMessage) -> int:
        """Keep ``stub``'s fields; its index in the table."""
        index = len(self._at)
        shape = (stub.role, stub.kind, stub.model, stub.provider, stub.asks_tools)
        code = self._codes.get(shape)
        if code is None:
            code = self._codes[shape] = len(self.shapes)
            self.shapes.append(shape)
        self._shape.append(code)
        self._timestamp.append(stub.timestamp)
        self._at.append(stub.at)
        self._size.append(stub.size)
        if stub.reason is not None:
            self._reasons[index] = stub.reason
        return index

    def role(self, index: int) -> str:
        return self.shapes[self._shape[index]][0]

    def asks_tools(self, index: int) -> bool:
        return self.shapes[self._shape[index]][4]

    def stub(self, index: int) -> SpilledMessage:
        """The stand-in kept at ``index`` (a new object, equal to the one added)."""
        role, kind, model, provider, asks = self.shapes[self._shape[index]]
        return SpilledMessage(
            role,
            kind,
            model,
            provider,
            self._timestamp[index],
            asks,
            self._at[index],
            self._size[index],
            self._reasons.get(index),
        )

    def codes_of_role(self, role: str) -> set[int]:
        """The shape codes of stand-ins of ``role``."""
        return {code for code, shape in enumerate(self.shapes) if shape[0] == role}

    def shape_of(self, index: int) -> int:
        return self._shape[index]

    def counts(self, indexes: Iterable[int]) -> tuple[Counter[str], Counter[str]]:
        """Roles and kinds of the stand-ins at ``indexes`` whose rows were written (what the report counts)."""
        by_shape: Counter[int] = Counter()
        at, shape = self._at, self._shape
        for index in indexes:
            if at[index] >= 0:
                by_shape[shape[index]] += 1
        roles: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        for code, count in by_shape.items():
            role, kind = self.shapes[code][:2]
            roles[role] += count
            if kind is not None:
                kinds[kind] += count
        return roles, kinds


class SpilledRows(Sequence[MessageRow]):
    """``bundle.messages`` of a large session: the rows as columns (stand-in, loop, turn), made on demand.

    Each row is an index into a :class:`StubTable`, a loop code and a turn
    index (-1 for none): about twenty bytes a row. Reading a row makes a
    :class:`~turnstore.importers.base.MessageRow` holding a new stand-in, which
    is all the writer reads of a spilled row (the rest waits in the spill).
    """

    def __init__(self, stubs: StubTable, place: Callable[[int], str | None]) -> None:
        self.stubs = stubs
        self._place = place
        self._entry = array("i")
        self._loop = array("i")
        self._turn = array("i")
        self.loop_ids: list[str] = []
        """The loop of each code (a loop's rows are consecutive: a new loop id takes the next code)."""

    def append_row(self, entry: int, loop_id: str, turn: int | None) -> None:
        """Add the row of the stand-in at ``entry`` of the table, in ``loop_id`` at ``turn``."""
        loop_ids = self.loop_ids
        if not loop_ids or loop_ids[-1] != loop_id:
            loop_ids.append(loop_id)
        self._entry.append(entry)
        self._loop.append(len(loop_ids) - 1)
        self._turn.append(-1 if turn is None else turn)

    def entry(self, index: int) -> int:
        """The table index of row ``index``'s stand-in."""
        return self._entry[index]

    def loop_id(self, index: int) -> str:
        return self.loop_ids[self._loop[index]]

    def __len__(self) -> int:
        return len(self._entry)

    def _row(self, index: int) -> MessageRow:
        turn = self._turn[index]
        entry = self._entry[index]
        return MessageRow(
            self.stubs.stub(entry),
            self.loop_ids[self._loop[index]],
            None if turn < 0 else turn,
            place=self._place(entry),
        )

    @overload
    def __getitem__(self, index: int) -> MessageRow: ...

    @overload
    def __getitem__(self, index: slice) -> list[MessageRow]: ...

    def __getitem__(self, index: int | slice) -> MessageRow | list[MessageRow]:
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._row(index)

    def __iter__(self) -> Iterator[MessageRow]:
        row = self._row
        for index in range(len(self._entry)):
            yield row(index)

    def stand_ins(self) -> Iterator[SpilledMessage]:
        """Each row's stand-in, in order (what :meth:`Spill.batches` reads)."""
        stub = self.stubs.stub
        for entry in self._entry:
            yield stub(entry)

    def without(self, dropped: set[int]) -> SpilledRows:
        """These rows but those at the positions ``dropped`` (the screening's refusals)."""
        rows = SpilledRows(self.stubs, self._place)
        rows.loop_ids = self.loop_ids
        for index in range(len(self._entry)):
            if index not in dropped:
                rows._entry.append(self._entry[index])
                rows._loop.append(self._loop[index])
                rows._turn.append(self._turn[index])
        return rows

    def first_entries(self, role: str) -> dict[str, int]:
        """Each loop's first row of ``role``: loop id -> the table index of its stand-in."""
        codes = self.stubs.codes_of_role(role)
        shape = self.stubs.shape_of
        found: dict[int, int] = {}
        for entry, loop in zip(self._entry, self._loop):
            if loop not in found and shape(entry) in codes:
                found[loop] = entry
        first: dict[str, int] = {}
        for loop in sorted(found):
            first.setdefault(self.loop_ids[loop], found[loop])
        return first

    def counts(self) -> tuple[Counter[str], Counter[str]]:
        """Roles and kinds of the rows, as :meth:`~turnstore.importers.base.ImportReport.counts` counts them."""
        return self.stubs.counts(self._entry)


class Places:
    """Where each record of a large session is, as line numbers after a common prefix (``file:``)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._number = array("l")
        self._other: dict[int, str] = {}

    def add(self, place: str) -> None:
        prefix = self._prefix
        number = place[len(prefix) :] if place.startswith(prefix) else ""
        if number.isdigit() and number[0] != "0" and len(number) < 18:
            self._number.append(int(number))
        else:
            self._other[len(self._number)] = place
            self._number.append(0)

    def __getitem__(self, index: int) -> str:
        number = self._number[index]
        return f"{self._prefix}{number}" if number else self._other[index]


def derived_rows(bundle: SessionBundle, loop_prefix: str, stubs: StubTable, places: Places) -> SpilledRows:
    """:func:`~turnstore.importers.derive.add_derived` for a linear history whose every message is spilled:
    its loops appended to ``bundle.loops``, its rows returned as columns."""
    rows = SpilledRows(stubs, places.__getitem__)
    deriver = TurnDeriver()
    loop = 0
    loop_id = ""
    loops = bundle.loops
    for entry in range(len(stubs)):
        new_loop, turn = deriver.step(stubs.role(entry), stubs.asks_tools(entry))
        loop += new_loop
        if not loop_id or new_loop:
            loop_id = f"{loop_prefix}.{loop + 1}"
            if not loops or loops[-1].loop_id != loop_id:
                loops.append(next_loop(loop_id, loops))
        rows.append_row(entry, loop_id, turn)
    return rows
