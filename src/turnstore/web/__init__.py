"""``turnstore serve``: a local, read-only web viewer of a store (the ``turnstore[serve]`` extra).

:func:`create_app` builds the ASGI app (Starlette, Jinja2 templates with
autoescape, SVG charts drawn on the server); ``turnstore serve`` runs it on
uvicorn. Importing :mod:`turnstore` never imports this package.
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
