"""One import call: files -> session bundles (the importers) -> the import writer -> an :class:`ImportReport`.

:meth:`turnstore.Store.import_` runs :func:`import_paths`. The importers only
read; every bundle is checked and written by
:class:`~turnstore.repositories.imports.ImportRepository`, each session in its
own transaction. Whatever the call sets up for itself ends with it: the
large-write settings of its connection (:mod:`turnstore.repositories.import_writes`)
and, only when the app lends it the process (``tune_process=True``, as
``turnstore import`` does), the collector pause around each file's reading
and writing (:mod:`turnstore.collector`) and the checkpoint thread, which is
joined before the call returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .collector import collector_paused
from .errors import AlreadyExists, ImportFailed, InvalidMessage, InvalidRecord, TurnstoreError
from .importers import get_importer
from .importers.base import Importer, ImportOptions, ImportReport, RecordError, SessionBundle, digest_of
from .importers.detect import wrong_format
from .importers.files import BLANK, is_blank, iter_files
from .repositories.import_writes import ImportWrites
from .repositories.imports import UNCHANGED, WRITTEN, ImportRepository, check_ids, row_values, screen_messages

if TYPE_CHECKING:
    from .store import Store

__all__ = ["Progress", "import_paths"]

Progress = Callable[[str, int, int], None]
"""``progress(file, done, total)``, called after each file."""


def import_paths(
    store: Store,
    imports: ImportRepository,
    fmt: str,
    paths: Sequence[str | Path],
    options: ImportOptions | None = None,
    progress: Progress | None = None,
    *,
    tune_process: bool = False,
) -> ImportReport:
    """Import every session found in ``paths`` (files or directories) of format ``fmt``.

    Each session is written in its own transaction, all or nothing. A session
    holding a malformed record is not written (it is listed in
    ``report.errors`` and ``report.sessions_failed``) unless
    ``options.skip_invalid``, which skips just the record (``report.skipped``).
    A file that cannot be read, or holds no records, and an entry of a walked
    directory that is not a regular file, are listed in ``report.errors``
    (file and reason); the other files are imported. ``tune_process``: as in
    :meth:`turnstore.Store.import_` (the collector paused per file, WAL
    checkpoints on the import's own thread).

    Raises:
        ImportFailed: unknown format, or a path that does not exist or is
            neither a regular file nor a directory (nothing is imported then).
    """
    options = options or ImportOptions()
    if options.limits is None:
        options = dataclasses.replace(options, limits=imports.limits)
    if options.row_values is None:
        options = dataclasses.replace(options, row_values=row_values)
    importer = get_importer(fmt)
    report = ImportReport(format=fmt, dry_run=options.dry_run)
    files = list(iter_files(paths, importer, report.errors))
    with imports.writes(checkpoint_thread=tune_process) as writes:
        run = _Run(store, imports, writes, importer, options, report, tune_process)
        for done, path in enumerate(files, start=1):
            report.files += 1
            problem = _blank_or_unreadable(path) or run.file(path)
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


@dataclasses.dataclass
class _Run:
    """What one import call writes with, and reports to."""

    store: Store
    imports: ImportRepository
    writes: ImportWrites
    importer: Importer
    options: ImportOptions
    report: ImportReport
    tune_process: bool
    """Pause the cyclic collector around each file (``Store.import_(tune_process=True)``)."""

    def file(self, path: Path) -> RecordError | None:
        """Import every session of one file; what failed the file as a whole, if anything did.

        An export of another format than the importer's is refused whole, naming its format.
        """
        other = wrong_format(path, self.importer.format)
        if other is not None:
            return RecordError(str(path), other)
        try:
            with collector_paused() if self.tune_process else contextlib.nullcontext():
                for bundle in self.importer.bundles(path, self.options):
                    self.bundle(bundle)
                    # Freed now, by reference counting: not kept alive while the next session is
                    # read, and not walked by the collector's first pass once it is back on.
                    del bundle
        except InvalidRecord as error:
            return RecordError(error.place, error.reason)
        except ImportFailed as error:  # the file cannot be read (a reading helper's error names it first)
            return RecordError(str(path), f"cannot read: {str(error).removeprefix(f'{path}: ')}")
        return None

    def bundle(self, bundle: SessionBundle) -> None:
        try:
            self._rows(bundle)
        finally:
            if bundle.spill is not None:
                bundle.spill.close()

    def _rows(self, bundle: SessionBundle) -> None:
        report, options, imports, fmt = self.report, self.options, self.imports, self.importer.format
        report.records += bundle.records
        report.notes.extend(bundle.notes)
        screen_messages(bundle, imports.limits)
        if bundle.errors:
            if not options.skip_invalid:
                report.errors.extend(bundle.errors)
                report.sessions_failed.append(bundle.session_id)
                return
            report.skipped.extend(bundle.errors)
        counts = report.counts(bundle)
        try:
            check_ids(bundle, imports.limits)
            try:
                if options.dry_run:
                    status = imports.check(bundle, fmt, replace=options.replace)
                else:
                    summary = {
                        "records": bundle.records,
                        "messages": counts.messages,
                        "loops": counts.loops,
                        "skipped": [str(error) for error in bundle.errors],
                    }
                    status = imports.write(bundle, fmt, replace=options.replace, report=summary, writes=self.writes)
            except AlreadyExists:
                if not self._is_own_export(bundle, fmt):
                    raise
                status = UNCHANGED
        except (AlreadyExists, InvalidMessage) as error:
            report.errors.append(RecordError(bundle.origin, str(error)))
            report.sessions_failed.append(bundle.session_id)
            return
        except InvalidRecord as error:  # a message or value the store cannot hold, found on writing
            report.errors.append(RecordError(error.place, error.reason))
            report.sessions_failed.append(bundle.session_id)
            return
        if status == WRITTEN:
            report.sessions_written.append(bundle.session_id)
            report.add(counts)
        else:
            report.sessions_unchanged.append(bundle.session_id)

    def _is_own_export(self, bundle: SessionBundle, fmt: str) -> bool:
        """Whether a turnstore export being imported is, line for line, what the store exports of that session now.

        A session written through the API (or imported from another format)
        has no import digest of this export; comparing with a fresh export
        tells an unchanged session from one with other content.
        """
        if fmt != "turnstore" or bundle.errors:
            return False
        from .export import iter_export

        try:
            lines = "".join(iter_export(self.store, bundle.session_id, "turnstore")).split("\n")[:-1]
        except TurnstoreError:  # the stored session cannot be exported as it stands: not the same content
            return False
        return digest_of(fmt, lines) == bundle.digest(fmt)
