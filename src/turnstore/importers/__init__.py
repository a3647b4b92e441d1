"""Importers: bringing other frameworks' histories (and turnstore exports) into a store.

Use :meth:`turnstore.Store.import_` or ``turnstore import FORMAT PATH...``.
Each format is one module behind the :class:`~turnstore.importers.base.Importer`
interface; :data:`FORMATS` maps the FORMAT names to them. Importers only read:
a source becomes :class:`~turnstore.importers.base.SessionBundle` objects, which
:mod:`turnstore.importing` hands to the one writer,
:class:`turnstore.repositories.imports.ImportRepository`.
"""

from __future__ import annotations

import importlib

from ..errors import ImportFailed
from .base import Importer, ImportOptions, ImportReport, RecordError

__all__ = ["FORMATS", "ImportOptions", "ImportReport", "RecordError", "get_importer"]

FORMATS: dict[str, str] = {
    "adk": "adk:AdkImporter",
    "appam": "appam:AppamImporter",
    "clark": "clark:ClarkImporter",
    "langchain": "langchain:LangChainImporter",
    "openai-agents": "openai_agents:OpenAIAgentsImporter",
    "phi-core": "phi_core:PhiCoreImporter",
    "pi": "pi:PiImporter",
    "tau": "tau:TauImporter",
    "turnstore": "turnstore:TurnstoreImporter",
    "yoagent": "yoagent:YoagentImporter",
}
"""FORMAT name -> ``module:Class`` in this package (imported on first use)."""


def get_importer(fmt: str) -> Importer:
    """A new importer for FORMAT.

    Raises:
        ImportFailed: unknown format.
    """
    target = FORMATS.get(fmt)
    if target is None:
        raise ImportFailed(f"unknown import format {fmt!r}; choose one of {', '.join(sorted(FORMATS))}")
    module, _, name = target.partition(":")
    importer: Importer = getattr(importlib.import_module(f".{module}", __name__), name)()
    return importer
