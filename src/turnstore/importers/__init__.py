"""Importers: bringing other frameworks' histories (and turnstore exports) into a store.

Use :meth:`turnstore.Store.import_` or ``turnstore import FORMAT PATH...``.
Each format is one module behind the :class:`~turnstore.importers.base.Importer`
interface; :data:`FORMATS` maps the FORMAT names to them.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AlreadyExists, ImportFailed, InvalidMessage, InvalidRecord
from .base import ImportOptions, ImportReport, Importer, RecordError, SessionBundle, collector_paused
from .files import BLANK, is_blank, iter_files
from .writer import WRITTEN, check_bundle, check_ids, screen_messages, write_bundle

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["FORMATS", "ImportOptions", "ImportReport", "RecordError", "get_importer", "import_paths"]

FORMATS: dict[str, str] = {
    "appam": "appam:AppamImporter",
    "clark": "clark:ClarkImporter",
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
    return getattr(importlib.import_module(f".{module}", __name__), name)()

Progress = Callable[[str, int, int], None]
"""``progress(file, done, total)``, called after each file."""


def import_paths(
    store: Store,
    fmt: str,
    paths: Sequence[str | Path],
    options: ImportOptions | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import every session found in ``paths`` (files or directories) of format ``fmt``.

    Each session is written in its own transaction, all or nothing. A session
    holding a malformed record is not written (it is listed in
    ``report.errors`` and ``report.sessions_failed``) unless
    ``options.skip_invalid``, which skips just the record (``report.skipped``).
    A file that cannot be read, or holds no records, and an entry of a walked
    directory that is not a regular file, are listed in ``report.errors``
    (file and reason); the other files are imported.

    Raises:
        ImportFailed: unknown format, or a path that does not exist or is
            neither a regular file nor a directory (nothing is imported then).
    """
    options = options or ImportOptions()
    if options.limits is None:
        options = dataclasses.replace(options, limits=store.settings.limits)
    importer = get_importer(fmt)
    report = ImportReport(format=fmt, dry_run=options.dry_run)
    files = list(iter_files(paths, importer, report.errors))
    for done, path in enumerate(files, start=1):
        report.files += 1
        problem = _blank_or_unreadable(path) or _import_file(store, importer, path, options, report)
        if problem is not None:
            report.errors.append(problem)
            report.sessions_failed.append(str(path))
        if progress is not None:
            progress(str(path), done, len(files))
    return report


def _blank_or_unreadable(path: Path) -> RecordError | None:
    """What keeps a file from being imported before its importer reads it: no records, or no reading."""
    try:
        return RecordError(str(path), BLANK) if is_blank(path) else None
    except OSError as error:
        return RecordError(str(path), f"cannot read: {error.strerror or error}")


def _import_file(
    store: Store, importer: Importer, path: Path, options: ImportOptions, report: ImportReport
) -> RecordError | None:
    """Import every session of one file; what failed the file as a whole, if anything did."""
    try:
        with collector_paused():
            for bundle in importer.bundles(path, options):
                _import_bundle(store, importer.format, bundle, options, report)
                # Freed now, by reference counting: not kept alive while the next session is
                # read, and not walked by the collector's first pass once it is back on.
                del bundle
    except InvalidRecord as error:
        return RecordError(error.place, error.reason)
    except ImportFailed as error:  # the file cannot be read (a reading helper's error names it first)
        return RecordError(str(path), f"cannot read: {str(error).removeprefix(f'{path}: ')}")
    return None


def _import_bundle(store: Store, fmt: str, bundle: SessionBundle, options: ImportOptions, report: ImportReport) -> None:
    try:
        _import_rows(store, fmt, bundle, options, report)
    finally:
        if bundle.spill is not None:
            bundle.spill.close()


def _import_rows(store: Store, fmt: str, bundle: SessionBundle, options: ImportOptions, report: ImportReport) -> None:
    report.records += bundle.records
    bundle.start_digest(fmt)
    screen_messages(bundle, store.settings.limits)
    if bundle.errors:
        if not options.skip_invalid:
            report.errors.extend(bundle.errors)
            report.sessions_failed.append(bundle.session_id)
            return
        report.skipped.extend(bundle.errors)
    counts = report.counts(bundle)
    try:
        check_ids(bundle, store.settings.limits)
        if options.dry_run:
            status = check_bundle(store._db, bundle, fmt, replace=options.replace)
        else:
            summary = {"records": bundle.records, "messages": counts.messages, "loops": counts.loops,
                       "skipped": [str(error) for error in bundle.errors]}
            status = write_bundle(store._db, bundle, fmt, replace=options.replace,
                                  limits=store.settings.limits, report=summary)
    except (AlreadyExists, InvalidMessage) as error:
        report.errors.append(RecordError(bundle.origin, str(error)))
        report.sessions_failed.append(bundle.session_id)
        return
    except InvalidRecord as error:  # a message or value the store cannot hold, found on writing
        report.errors.append(RecordError(error.place, error.reason))
        report.sessions_failed.append(bundle.session_id)
        return
    except store._db.IntegrityError as error:
        # e.g. a loop id that another session already uses (loop ids are global).
        report.errors.append(RecordError(bundle.origin, f"conflicts with stored data: {error}"))
        report.sessions_failed.append(bundle.session_id)
        return
    if status == WRITTEN:
        report.sessions_written.append(bundle.session_id)
        report.add(counts)
    else:
        report.sessions_unchanged.append(bundle.session_id)
