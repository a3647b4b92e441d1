"""Old names kept working for one release: each use warns (``DeprecationWarning``) and names the new one."""

from __future__ import annotations

import warnings

__all__ = ["renamed"]


def renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is the deprecated name of ``new``; ``stacklevel`` 3 points at the caller of the function
    that calls this."""
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=stacklevel)
