"""Size limits a store enforces before anything is written.

Limits protect the store (and every later reader) from values no agent app
should produce: a 2 GB tool output, a megabyte-long session id. Each limit
is configurable per store; exceeding one raises
:class:`~turnstore.errors.LimitExceeded` naming the value and the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidMessage, LimitExceeded

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """The largest values a store accepts.

    Attributes:
        max_message_bytes: largest message, as stored JSON (UTF-8 bytes).
        max_id_length: longest session id, loop id or extension kind, in characters.
    """

    max_message_bytes: int = 64 * 1024 * 1024
    max_id_length: int = 1024

    def check_id(self, what: str, value: object) -> str:
        """Return ``value`` if it is a non-empty string within the id limit."""
        if not isinstance(value, str) or not value:
            raise InvalidMessage(f"{what} must be a non-empty string, got {value!r:.80}", [(what, "invalid")])
        if len(value) > self.max_id_length:
            raise LimitExceeded(
                f"{what} is {len(value)} characters, over the limit of {self.max_id_length}",
                [(what, "too long")],
            )
        return value

    def check_message(self, text: str) -> None:
        """Refuse a stored message JSON larger than ``max_message_bytes``."""
        limit = self.max_message_bytes
        if len(text) * 4 <= limit:  # a character is at most 4 UTF-8 bytes
            return
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise LimitExceeded(
                f"message is {size} bytes, over the limit of {limit} bytes", [("message", "too large")]
            )
