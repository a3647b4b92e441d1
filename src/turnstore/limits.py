"""Size limits a store enforces before anything is written.

Limits protect the store (and every later reader) from values no agent app
should produce: a 2 GB tool output, a megabyte-long session id. Each limit
is configurable per store; exceeding one raises
:class:`~turnstore.errors.LimitExceeded` naming the value and the limit.

The same checks hold every backend to one rule for the NUL character
(U+0000): PostgreSQL's text and ``jsonb`` columns cannot store it, so ids,
titles, agent ids, model and provider names, session metadata and loop config
and metadata holding one are refused on SQLite too, with
:class:`~turnstore.errors.InvalidMessage` naming the field. Message content is
stored as JSON text, where NUL is the escape ``\\u0000``: it is kept on
every backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidMessage, LimitExceeded

__all__ = ["Limits", "check_json", "check_text"]


def check_text(what: str, value: object) -> object:
    """Return ``value`` unless it is a string holding NUL, which no backend stores in a text column.

    Raises:
        InvalidMessage: naming ``what``.
    """
    if isinstance(value, str) and "\x00" in value:
        raise InvalidMessage(_nul(what), [(what, "NUL")])
    return value


def check_json(what: str, value: object) -> object:
    """Return ``value`` unless a key or string inside it holds NUL (refused by PostgreSQL's ``jsonb``).

    Walks the value without recursion, so any depth is safe; the error names
    a place that holds one (``metadata.a[2].b``, ``metadata['a key']``).

    Raises:
        InvalidMessage: naming the place.
    """
    pending: list[tuple[str, Any]] = [(what, value)]
    while pending:
        place, item = pending.pop()
        if isinstance(item, str):
            check_text(place, item)
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                if isinstance(key, str) and "\x00" in key:
                    raise InvalidMessage(f"a key of {_nul(place)}", [(place, "NUL")])
                pending.append((f"{place}.{key}" if str(key).isidentifier() else f"{place}[{key!r}]", inner))
        elif isinstance(item, (list, tuple)):
            pending.extend((f"{place}[{index}]", inner) for index, inner in enumerate(item))
    return value


def _nul(what: str) -> str:
    return f"{what!s:.200} holds a NUL character (U+0000), which the database cannot store"


@dataclass(frozen=True)
class Limits:
    """The largest values a store accepts.

    The id and name defaults are set by PostgreSQL: a b-tree index row holds
    at most 2,704 bytes, and the widest (``ix_messages_cost``, and
    ``ix_messages_usage_session``) hold a session id, a loop id, a model and a provider. At 150 characters each,
    even four-byte characters throughout fit (4 × 600 bytes plus the usage
    columns), so a value accepted on SQLite is accepted on PostgreSQL too.

    Attributes:
        max_message_bytes: largest message, as stored JSON (UTF-8 bytes).
        max_id_length: longest session id, loop id (minted ones included),
            spawn loop id or extension kind, in characters.
        max_name_length: longest model, provider or agent id, in characters.
    """

    max_message_bytes: int = 64 * 1024 * 1024
    max_id_length: int = 150
    max_name_length: int = 150

    def check_id(self, what: str, value: object) -> str:
        """Return ``value`` if it is a non-empty string within the id limit, without NUL."""
        if not isinstance(value, str) or not value:
            raise InvalidMessage(f"{what} must be a non-empty string, got {value!r:.80}", [(what, "invalid")])
        check_text(what, value)
        return self._within(what, value, self.max_id_length)

    def check_name(self, what: str, value: object) -> object:
        """Return ``value`` if it is None, not a string, or a string within the name limit, without NUL."""
        if isinstance(value, str):
            check_text(what, value)
            self._within(what, value, self.max_name_length)
        return value

    @staticmethod
    def _within(what: str, value: str, limit: int) -> str:
        if len(value) > limit:
            raise LimitExceeded(f"{what} is {len(value)} characters, over the limit of {limit}", [(what, "too long")])
        return value

    def check_message(self, text: str) -> None:
        """Refuse a stored message JSON larger than ``max_message_bytes``."""
        limit = self.max_message_bytes
        if len(text) * 4 <= limit:  # a character is at most 4 UTF-8 bytes
            return
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise LimitExceeded(f"message is {size} bytes, over the limit of {limit} bytes", [("message", "too large")])

    def check_row(self, params: dict[str, object]) -> None:
        """Check the kind, model and provider of a message row (see ``row_params``)."""
        if params["kind"] is not None:
            self.check_id("kind", params["kind"])
        self.check_name("model", params["model"])
        self.check_name("provider", params["provider"])
