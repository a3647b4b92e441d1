"""Old names kept working for one release: each use warns and names the new one.

The warning is a :class:`TurnstoreDeprecationWarning` (a ``DeprecationWarning``), so an app or a
test suite can turn turnstore's own deprecations into errors without touching other libraries'
(``-W error::turnstore.deprecation.TurnstoreDeprecationWarning``); turnstore's tests do.
"""

from __future__ import annotations

import warnings

__all__ = ["TurnstoreDeprecationWarning", "deprecated", "renamed"]


class TurnstoreDeprecationWarning(DeprecationWarning):
    """A deprecated turnstore spelling was used; it works for one more release."""


def deprecated(message: str, *, stacklevel: int = 3) -> None:
    """Warn with ``message``; ``stacklevel`` 3 points at the caller of the function that calls this."""
    warnings.warn(message, TurnstoreDeprecationWarning, stacklevel=stacklevel)


def renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is the deprecated name of ``new``."""
    deprecated(f"{old} is deprecated; use {new}", stacklevel=stacklevel + 1)
