"""Finding the source files of an import, and looking at them before an importer reads them.

A PATH given to an import is a regular file or a directory; anything else (a
FIFO, ``/dev/zero``, a socket) would block or never end, and is refused
before anything is read. A directory is walked in path order, and nothing in
it is ever opened that is not a regular file: a FIFO, a socket, a device, a
broken symbolic link or a folder that cannot be listed is reported with what
it is, and the walk goes on. Lock, temporary and hidden files are passed over
in silence, and each importer's ``accepts`` picks its own files among the rest.

A regular file of a kernel pseudo filesystem is refused the same way, unread
(:func:`pseudo_file`): what procfs and sysfs report as its size is not its
content (``/proc/self/pagemap`` says 0 bytes and holds gigabytes,
``/proc/kmsg`` never ends), so no bound on reading it holds. The rule, after
symbolic links are followed: the file's real path is under ``/proc`` or
``/sys``, or the file is on the filesystem ``/proc``, ``/sys`` or ``/dev``
itself is on (which also catches those mounted a second time elsewhere).

A source file that is empty, or holds nothing but whitespace, is reported the
same way for every format (:func:`is_blank`): there is no session in it, and
an importer would otherwise make an empty one, or fail on it in its own words.
The formats whose file is a bare JSON array of messages report an empty array
alike (:data:`EMPTY_ARRAY`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from ..errors import ImportFailed
from .base import Importer, RecordError, one_line

__all__ = ["BLANK", "EMPTY_ARRAY", "IGNORED_SUFFIXES", "is_blank", "iter_files", "open_source", "pseudo_file"]

IGNORED_SUFFIXES = (".lock", ".tmp", ".bak", ".swp", ".partial")

BLANK = "empty file: no records"
"""The report of a source file that holds nothing but whitespace."""

EMPTY_ARRAY = "empty array: no records"
"""The report of a JSON array source (clark, yoagent, phi-core) that holds no record: no session either."""

_WHITESPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 12


def iter_files(paths: Sequence[str | Path], importer: Importer, problems: list[RecordError]) -> Iterator[Path]:
    """Every source file in ``paths``: files as given, directories walked (sorted), non-history files skipped.

    Entries of a walked directory that cannot be sources (see the module
    docstring) are appended to ``problems``, each with what it is.

    Raises:
        ImportFailed: a path does not exist, or is neither a regular file nor a directory.
    """
    for raw in paths:
        path = Path(raw)
        try:
            mode = path.stat().st_mode
        except OSError as error:
            raise ImportFailed(f"{one_line(str(path))}: {_stat_failure(path, error)}") from None
        if stat.S_ISDIR(mode):
            yield from _walk(path, importer, problems)
        elif stat.S_ISREG(mode):
            refused = pseudo_file(path, path.stat())
            if refused is not None:
                raise ImportFailed(f"{one_line(str(path))}: {refused}")
            yield path
        else:
            raise ImportFailed(f"{one_line(str(path))}: not a regular file or a directory ({_kind(mode)})")


def pseudo_file(path: Path, info: os.stat_result) -> str | None:
    """Why a regular file (``info``: its ``stat``, symbolic links followed) is not read, when it belongs to
    a kernel pseudo filesystem (see the module docstring); None for any other file.

    Nothing is opened: the real path is resolved and compared, and the
    devices of ``/proc``, ``/sys`` and ``/dev`` looked up.
    """
    real = os.path.realpath(path)
    for root, device in _pseudo_devices():
        if real == root or real.startswith(f"{root}/") or info.st_dev == device:
            return f"a file of the kernel's {root} filesystem, whose size is not its content: never read"
    return None


_PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


def _pseudo_devices() -> list[tuple[str, int | None]]:
    """Each pseudo filesystem root, and its device when it is a filesystem of its own (not the root's)."""
    try:
        top = os.stat("/").st_dev
    except OSError:
        top = None
    found: list[tuple[str, int | None]] = []
    for root in _PSEUDO_ROOTS:
        try:
            device: int | None = os.stat(root).st_dev
        except OSError:
            device = None
        found.append((root, None if device == top else device))
    return found


def open_source(path: Path) -> BinaryIO:
    """A source file opened for reading, once it is seen, open, to be a regular file of no pseudo filesystem.

    The file was found a regular file, but a symbolic link may have been pointed
    elsewhere, or the file replaced, since: it is opened without blocking (a
    FIFO put in its place would keep a plain open waiting for a writer for
    ever) and looked at again before a byte is read.

    Raises:
        OSError: the file cannot be opened, or is no longer a regular file one may read.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(descriptor)
        refused = (
            pseudo_file(path, info) if stat.S_ISREG(info.st_mode) else f"not a regular file ({_kind(info.st_mode)})"
        )
        if refused is not None:
            raise OSError(errno.EINVAL, refused)
        return os.fdopen(descriptor, "rb")  # O_NONBLOCK is no matter to a regular file
    except BaseException:
        os.close(descriptor)
        raise


def is_blank(path: Path) -> bool:
    """Whether a regular file holds nothing but whitespace (after a UTF-8 BOM); read until its first other byte.

    Opened with :func:`open_source`.

    Raises:
        OSError: the file cannot be read, or is no longer a regular file one may read.
    """
    with open_source(path) as file:
        chunk = file.read(_CHUNK).removeprefix(_BOM)
        while chunk:
            if chunk.strip(_WHITESPACE):
                return False
            chunk = file.read(_CHUNK)
    return True


def _walk(root: Path, importer: Importer, problems: list[RecordError]) -> Iterator[Path]:
    """The source files below ``root`` in path order. Symbolic links to folders are followed,
    each folder and file taken once (a link back up the tree is not a loop)."""
    files: list[Path] = []
    found: list[RecordError] = []
    seen: set[tuple[int, int]] = set()  # (device, inode) of every folder and file taken
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            info = folder.stat()
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as error:
            found.append(RecordError(str(folder), f"cannot list the folder: {error.strerror or error}"))
            continue
        for entry in entries:
            child = Path(entry.path)
            try:
                info = entry.stat()  # follows a symbolic link, opens nothing
            except OSError as error:
                if not _ignored(entry.name):
                    found.append(RecordError(str(child), f"skipped: {_stat_failure(child, error)}"))
                continue
            if stat.S_ISDIR(info.st_mode):
                folders.append(child)
            elif _ignored(entry.name) or (info.st_dev, info.st_ino) in seen:
                continue
            elif not stat.S_ISREG(info.st_mode):
                found.append(RecordError(str(child), f"skipped: not a regular file ({_kind(info.st_mode)})"))
            elif (refused := pseudo_file(child, info)) is not None:
                found.append(RecordError(str(child), f"skipped: {refused}"))
            elif importer.accepts(child):
                seen.add((info.st_dev, info.st_ino))
                files.append(child)
    problems.extend(sorted(found, key=lambda problem: problem.place))
    yield from sorted(files)


def _ignored(name: str) -> bool:
    """Lock, temporary, backup and hidden files: never sources."""
    return name.startswith(".") or name.endswith(IGNORED_SUFFIXES)


def _stat_failure(path: Path, error: OSError) -> str:
    """Why ``path`` cannot be looked at, in words (a dangling symbolic link says so)."""
    if isinstance(error, FileNotFoundError):
        return "broken symbolic link (its target does not exist)" if path.is_symlink() else "no such file or directory"
    return str(error.strerror or error)


def _kind(mode: int) -> str:
    """What a file that is not a regular file or a directory is, from its ``st_mode``."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((kind for test, kind in kinds if test(mode)), "a special file")
