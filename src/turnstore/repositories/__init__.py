"""The four repositories a store exposes: ``sessions``, ``loops``, ``messages``, ``usage``."""

from .loops import LATEST, LoopRepository
from .messages import MessageRepository, parse_message
from .sessions import SessionRepository
from .usage import UsageRepository

__all__ = [
    "LATEST",
    "LoopRepository",
    "MessageRepository",
    "SessionRepository",
    "UsageRepository",
    "parse_message",
]
