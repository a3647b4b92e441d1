"""The error an integration raises when its framework is not installed: which extra to install."""

from __future__ import annotations


def missing_extra(error: ModuleNotFoundError, extra: str) -> ModuleNotFoundError:
    """``error`` (the framework's import failing), saying which extra brings it: ``pip install 'turnstore[extra]'``.

    Still a ``ModuleNotFoundError`` naming the missing module, so ``pytest.importorskip`` and
    ``except ImportError`` treat it as before.
    """
    return ModuleNotFoundError(
        f"this integration needs the {extra} extra (missing {error.name}): pip install 'turnstore[{extra}]'",
        name=error.name,
    )
