"""What every adapter is built with, ``(session_id, store=None, *, url=None)``, checked: one-line errors
instead of a failure on first use."""

from __future__ import annotations

from ..aio import AsyncStore
from ..deprecation import deprecated
from ..errors import InvalidArgument
from ..store import Store

STORES = (Store, AsyncStore)
"""The stores an adapter takes."""


def check_adapter_arguments(session_id: object, store: object, url: object, name: str) -> None:
    """``session_id`` is a string; ``store``, if given, a turnstore ``Store`` or ``AsyncStore``, and not with ``url``."""
    if not isinstance(session_id, str):
        raise InvalidArgument("session_id", f"must be a string, got {type(session_id).__name__}")
    if store is not None and not isinstance(store, STORES):
        raise InvalidArgument(
            "store", f"must be a turnstore Store or AsyncStore, got {type(store).__name__}; {name}(session_id, store)"
        )
    if store is not None and url is not None:
        raise InvalidArgument("url", "give a store or a url, not both")
    if url is not None and not isinstance(url, str):
        raise InvalidArgument("url", f"must be a string, got {type(url).__name__}")


def old_order(session_id: object, store: object, name: str) -> tuple[object, object]:
    """``(session_id, store)``, from arguments given in the old order ``(store, session_id)`` too (with a warning)."""
    if isinstance(session_id, STORES) and isinstance(store, str):
        deprecated(
            f"{name}(store, session_id) is deprecated and will be removed in the next release: "
            f"use {name}(session_id, store)",
            stacklevel=4,
        )
        return store, session_id
    return session_id, store


def sync_store(store: Store | AsyncStore, name: str, method: str) -> Store:
    """``store`` for a synchronous method: a ``Store`` (an ``AsyncStore`` serves the ``a``-prefixed ones)."""
    if isinstance(store, AsyncStore):
        raise InvalidArgument(
            "store", f"{name} was given an AsyncStore, which serves its async methods: await {method}(...)"
        )
    return store
