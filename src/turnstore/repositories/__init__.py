"""The repositories a store exposes: ``sessions``, ``loops``, ``messages``, ``usage``, ``prices``."""

from .loops import LATEST, LoopRepository
from .messages import MessageRepository, parse_message
from .prices import PriceRepository
from .sessions import SessionRepository
from .usage import UsageRepository

__all__ = [
    "LATEST",
    "LoopRepository",
    "MessageRepository",
    "PriceRepository",
    "SessionRepository",
    "UsageRepository",
    "parse_message",
]
