"""The checks every adapter makes of what it is built with: one-line errors instead of a failure on first use."""

from __future__ import annotations

from ..errors import InvalidArgument


def check_adapter_arguments(session_id: object, store: object, kind: type, hint: str) -> None:
    """``session_id`` is a string; ``store``, if given, an instance of ``kind`` (``hint``: what to use instead)."""
    if not isinstance(session_id, str):
        raise InvalidArgument("session_id", f"must be a string, got {type(session_id).__name__}")
    if store is not None and not isinstance(store, kind):
        raise InvalidArgument("store", f"must be a turnstore {kind.__name__}, got {type(store).__name__}; {hint}")
