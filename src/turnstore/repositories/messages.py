"""``store.messages``: appending what an agent loop produces, and reading it back by turn, loop or window.

The writes are :mod:`.message_writes`, the reads :mod:`.message_reads`; what a caller may pass
as a message, and how it is checked and made into its row, is :mod:`.message_input`.
"""

from __future__ import annotations

from .message_input import MessageInput, parse_message
from .message_json import READ_DEPTH, dump_message
from .message_reads import MessageReads
from .message_writes import MessageWrites

__all__ = ["READ_DEPTH", "MessageInput", "MessageRepository", "dump_message", "parse_message"]


class MessageRepository(MessageWrites, MessageReads):
    """Messages of one store."""
