"""Importers never drop anything silently: what cannot be imported is reported with its place.

* Parent-link cycles in every tree format (pi, Tau, yoagent): an entry that
  is its own parent, or its own ancestor, is reported with its file and line;
  skipping invalid records keeps the whole cycle as a history of its own.
* Paths that are not regular files (FIFOs, devices, sockets, broken
  symlinks, unreadable files) are refused or reported, never read blindly.
* Empty and whitespace-only source files of every format are reported, and
  write nothing.

Each is checked through ``Store.import_`` and through ``turnstore import``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from turnstore import ImportFailed, Store
from turnstore.cli import main
from turnstore.importers import FORMATS

Link = tuple[str, "str | None", str]
"""A tree entry: (id, parent id, role: ``user`` or ``assistant``)."""

OUTPUT_TOKENS = 7
"""Output tokens of every assistant entry the tree files hold."""


# --- one writer per tree format: entries as (id, parent, role) ---------------------------------------


def _pi_message(role: str) -> dict[str, Any]:
    if role == "user":
        return {"role": "user", "content": "hi", "timestamp": 1767225601000}
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}],
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "stopReason": "stop",
        "timestamp": 1767225602000,
        "usage": {
            "input": 10,
            "output": OUTPUT_TOKENS,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 10 + OUTPUT_TOKENS,
        },
    }


def pi_tree(path: Path, links: list[Link]) -> int:
    """A pi v3 session file; returns the line number of the first entry."""
    header = {"type": "session", "version": 3, "id": "cycle", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/tmp"}
    entries = [
        {
            "type": "message",
            "id": ident,
            "parentId": parent,
            "timestamp": "2026-01-01T00:00:01.000Z",
            "message": _pi_message(role),
        }
        for ident, parent, role in links
    ]
    path.write_text("\n".join(json.dumps(record) for record in [header, *entries]) + "\n", encoding="utf-8")
    return 2


def _tau_message(role: str) -> dict[str, Any]:
    if role == "user":
        return {"role": "user", "contents": [{"type": "text", "content": "hi"}], "id": "u", "timestamp": 1767225600.5}
    return {
        "role": "assistant",
        "contents": [{"type": "text", "content": "ok"}],
        "id": "a",
        "timestamp": 1767225601.0,
        "usage": {"input_tokens": 10, "output_tokens": OUTPUT_TOKENS},
        "stop_reason": "stop",
        "error": "",
    }


def tau_tree(path: Path, links: list[Link]) -> int:
    header = {"type": "session", "version": 3, "id": "cycle", "timestamp": 1767225600.0, "cwd": "/tmp"}
    entries = [
        {
            "id": ident,
            "timestamp": 1767225601.0,
            **({"parent_id": parent} if parent else {}),
            "type": "message",
            "message": _tau_message(role),
        }
        for ident, parent, role in links
    ]
    path.write_text("\n".join(json.dumps(record) for record in [header, *entries]) + "\n", encoding="utf-8")
    return 2


def _yoagent_message(role: str) -> dict[str, Any]:
    if role == "user":
        return {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1767225601000}
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}],
        "stopReason": "stop",
        "model": "claude-sonnet-4-5",
        "provider": "anthropic",
        "timestamp": 1767225602000,
        "usage": {
            "input": 10,
            "output": OUTPUT_TOKENS,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 10 + OUTPUT_TOKENS,
        },
    }


def yoagent_tree(path: Path, links: list[Link]) -> int:
    entries = [
        {"id": ident, "parent_id": parent, "message": _yoagent_message(role), "timestamp": 1767225601000}
        for ident, parent, role in links
    ]
    path.write_text("\n".join(json.dumps(record) for record in entries) + "\n", encoding="utf-8")
    return 1


TREE_FORMATS: dict[str, Callable[[Path, list[Link]], int]] = {"pi": pi_tree, "tau": tau_tree, "yoagent": yoagent_tree}


def cycle_links(length: int) -> list[Link]:
    """A root, an entry hanging from the cycle (written before it), then the cycle ``c1 .. cN``
    (``c1``'s parent is ``cN``); the cycle's last entry is an assistant with usage."""
    cycle: list[Link] = [(f"c{n}", f"c{n - 1}" if n > 1 else f"c{length}", "user") for n in range(1, length + 1)]
    cycle[-1] = (*cycle[-1][:2], "assistant")
    return [("r", None, "user"), ("d", "c1", "user"), *cycle]


# --- 1. cycles of parent links ---------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 2, 5, 9])
@pytest.mark.parametrize("fmt", sorted(TREE_FORMATS))
def test_a_parent_cycle_is_reported_and_skipping_keeps_it_as_a_history_of_its_own(
    store: Store, tmp_path: Path, fmt: str, length: int
) -> None:
    path = tmp_path / "cycle.jsonl"
    links = cycle_links(length)
    place = f"{path}:{TREE_FORMATS[fmt](path, links) + 2}"  # c1: the cycle's first entry in the file

    failed = store.import_(fmt, path)

    assert not failed.ok
    assert [error.place for error in failed.errors] == [place]
    reason = failed.errors[0].reason
    assert ("is its own parent" if length == 1 else "is its own ancestor") in reason
    assert "'c1'" in reason and "\n" not in reason
    assert failed.sessions_written == [] and store.sessions.list() == []

    report = store.import_(fmt, path, skip_invalid=True)

    assert report.ok
    assert [error.place for error in report.skipped] == [place]
    [session] = report.sessions_written
    assert report.messages == len(links)  # every entry stored, the cycle's assistant among them
    assert store.usage.session(session).output == OUTPUT_TOKENS
    roots = [loop for loop in store.loops.list(session) if loop.parent_loop_id is None]
    assert len(roots) == 2  # the root's history, and the cycle's
    opening = next(store.messages.records(loop_id=roots[1].loop_id))
    assert json.loads(opening.source or "")["id"] == "c1"  # the cycle is walked from its first entry in the file


def test_a_long_cycle_is_reported_on_one_short_line(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "cycle.jsonl"
    yoagent_tree(path, cycle_links(5000))

    report = store.import_("yoagent", path, skip_invalid=True)

    [skipped] = report.skipped
    assert "(5000 entries)" in skipped.reason and len(skipped.reason) < 200
    assert report.messages == 5002


def test_two_cycles_are_each_reported(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "cycles.jsonl"
    links: list[Link] = [("r", None, "user"), ("a1", "a2", "user"), ("b1", "b1", "user"), ("a2", "a1", "assistant")]
    tau_tree(path, links)

    report = store.import_("tau", path, skip_invalid=True)

    assert [error.place for error in report.skipped] == [f"{path}:3", f"{path}:4"]
    assert report.messages == 4


@pytest.mark.parametrize("fmt", sorted(TREE_FORMATS))
def test_cli_reports_a_parent_cycle_on_one_line_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    path = tmp_path / "cycle.jsonl"
    first = TREE_FORMATS[fmt](path, cycle_links(2))
    db = str(tmp_path / "cli.db")

    assert main(["--db", db, "import", fmt, str(path)]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(errors) == 1 and f"{path}:{first + 2}" in errors[0] and "own ancestor" in errors[0]

    assert main(["--db", db, "import", fmt, str(path), "--skip-invalid"]) == 0
    skipped = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(skipped) == 1 and skipped[0].startswith(f"  skipped {path}:{first + 2}")


# --- 2. paths that are not regular files, and files that cannot be read -----------------------------


def good_tree(folder: Path, name: str = "good.jsonl") -> Path:
    """A one-entry yoagent session file."""
    folder.mkdir(parents=True, exist_ok=True)
    yoagent_tree(folder / name, [("r", None, "user")])
    return folder / name


def refuse_to_open(monkeypatch: pytest.MonkeyPatch, locked: Path) -> None:
    """Opening ``locked`` fails as a file of mode 000 does (root reads those, so the test cannot chmod)."""
    opened = Path.open

    def refuse(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return opened(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("fifo", "a FIFO"), ("/dev/zero", "a character device"), ("/dev/null", "a character device")],
    ids=["fifo", "dev-zero", "dev-null"],
)
def test_a_path_that_is_not_a_regular_file_or_directory_is_refused_unread(
    store: Store, tmp_path: Path, name: str, kind: str
) -> None:
    path = Path(name) if name.startswith("/") else tmp_path / name
    if name == "fifo":
        os.mkfifo(path)  # opened for reading, it would block until a writer came
    good = good_tree(tmp_path / "other")

    with pytest.raises(ImportFailed) as raised:
        store.import_("yoagent", good, path)  # refused before anything is imported

    assert str(raised.value) == f"{path}: not a regular file or a directory ({kind})"
    assert store.sessions.list() == []


def test_a_broken_symbolic_link_given_as_a_path_is_refused(store: Store, tmp_path: Path) -> None:
    link = tmp_path / "gone.jsonl"
    link.symlink_to(tmp_path / "missing.jsonl")

    with pytest.raises(ImportFailed, match="gone.jsonl: broken symbolic link"):
        store.import_("yoagent", link)


def test_cli_refuses_a_fifo_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)

    assert main(["--db", str(tmp_path / "cli.db"), "import", "yoagent", str(fifo)]) == 1
    assert capsys.readouterr().err == f"error: {fifo}: not a regular file or a directory (a FIFO)\n"


def test_entries_of_a_walked_folder_that_are_not_regular_files_are_reported_never_opened(
    store: Store, tmp_path: Path
) -> None:
    folder = tmp_path / "sessions"
    good = good_tree(folder)
    os.mkfifo(folder / "fifo.jsonl")
    (folder / "broken.jsonl").symlink_to(folder / "missing.jsonl")
    (folder / "device.jsonl").symlink_to("/dev/zero")
    (folder / "loop").symlink_to(folder)  # a link back up the tree: each folder is walked once
    os.mkfifo(folder / ".hidden-fifo")  # hidden: passed over, like lock and temporary files

    report = store.import_("yoagent", folder)

    assert [(Path(error.place).name, error.reason) for error in report.errors] == [
        ("broken.jsonl", "skipped: broken symbolic link (its target does not exist)"),
        ("device.jsonl", "skipped: not a regular file (a character device)"),
        ("fifo.jsonl", "skipped: not a regular file (a FIFO)"),
    ]
    assert not report.ok
    assert report.sessions_written == [good.stem] and report.files == 1


def test_an_unreadable_file_is_reported_and_the_other_files_are_imported(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "sessions"
    first, locked, last = (good_tree(folder, f"{name}.jsonl") for name in ("a", "b", "c"))
    refuse_to_open(monkeypatch, locked)

    report = store.import_("yoagent", folder)

    assert [(error.place, error.reason) for error in report.errors] == [(str(locked), "cannot read: Permission denied")]
    assert report.sessions_failed == [str(locked)]
    assert report.sessions_written == [first.stem, last.stem]


def test_a_folder_that_cannot_be_listed_is_reported(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = good_tree(tmp_path / "sessions")
    locked = tmp_path / "sessions" / "locked"
    locked.mkdir()
    listing = os.scandir

    def refuse(path: Any) -> Any:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)

    monkeypatch.setattr(os, "scandir", refuse)

    report = store.import_("yoagent", tmp_path / "sessions")

    assert [(error.place, error.reason) for error in report.errors] == [
        (str(locked), "cannot list the folder: Permission denied")
    ]
    assert report.sessions_written == [good.stem]


def test_cli_reports_an_unreadable_file_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "sessions"
    locked, good = good_tree(folder, "a.jsonl"), good_tree(folder, "b.jsonl")
    (folder / "broken.jsonl").symlink_to(folder / "missing.jsonl")
    refuse_to_open(monkeypatch, locked)

    code = main(["--db", str(tmp_path / "cli.db"), "import", "yoagent", str(folder)])

    out = capsys.readouterr()
    assert code == 1
    assert "wrote 1 session(s)" in out.out
    assert out.err.splitlines() == [
        f"  error: {folder / 'broken.jsonl'}: skipped: broken symbolic link (its target does not exist)",
        f"  error: {locked}: cannot read: Permission denied",
    ]
    assert good.exists()


# --- 3. empty files --------------------------------------------------------------------------------


SUFFIXES = {
    "adk": ".db",
    "appam": ".db",
    "clark": ".jsonl",
    "langchain": ".db",
    "openai-agents": ".db",
    "phi-core": ".json",
    "pi": ".jsonl",
    "tau": ".jsonl",
    "turnstore": ".jsonl",
    "yoagent": ".jsonl",
}
"""A file name ending each format reads."""


@pytest.mark.parametrize("content", ["", "  \n\t\r\n", "\ufeff\n"], ids=["empty", "whitespace", "bom"])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_an_empty_file_of_any_format_is_reported_and_writes_nothing(
    store: Store, tmp_path: Path, fmt: str, content: str
) -> None:
    path = tmp_path / f"empty{SUFFIXES[fmt]}"
    path.write_text(content, encoding="utf-8")

    report = store.import_(fmt, path, skip_invalid=True)

    assert [(error.place, error.reason) for error in report.errors] == [(str(path), "empty file: no records")]
    assert report.sessions_failed == [str(path)] and not report.ok
    assert store.sessions.list() == []


@pytest.mark.parametrize("fmt", ["clark", "phi-core", "yoagent"])
def test_an_empty_array_is_reported_and_writes_nothing(store: Store, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "empty.json"
    path.write_text("[ ]\n", encoding="utf-8")

    report = store.import_(fmt, path)

    assert [(error.place, error.reason) for error in report.errors] == [(f"{path}:1", "empty array: no records")]
    assert store.sessions.list() == []


def test_an_empty_file_in_a_walked_folder_is_reported_beside_the_others(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "clark"
    folder.mkdir()
    (folder / "empty.jsonl").write_text("\n", encoding="utf-8")
    (folder / "chat.jsonl").write_text(
        json.dumps({"role": "user", "content": "hi", "timestamp": 1}) + "\n", encoding="utf-8"
    )

    report = store.import_("clark", folder)

    assert [error.place for error in report.errors] == [str(folder / "empty.jsonl")]
    assert report.sessions_written == ["chat"]


@pytest.mark.parametrize("fmt", ["clark", "pi"])
def test_cli_reports_an_empty_file_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.touch()

    assert main(["--db", str(tmp_path / "cli.db"), "import", fmt, str(path)]) == 1
    assert capsys.readouterr().err == f"  error: {path}: empty file: no records\n"


# --- reports stay one line -------------------------------------------------------------------------


def test_cli_reports_stay_one_line_whatever_the_file_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "a\nb\x1b[2J.jsonl"
    empty.touch()
    fifo = tmp_path / "c\u2028d.jsonl"
    os.mkfifo(fifo)
    db = str(tmp_path / "cli.db")

    assert main(["--db", db, "import", "clark", str(empty)]) == 1
    assert capsys.readouterr().err == f"  error: {tmp_path}/a\\nb\\x1b[2J.jsonl: empty file: no records\n"
    assert main(["--db", db, "import", "clark", str(fifo)]) == 1
    assert capsys.readouterr().err == f"error: {tmp_path}/c\\u2028d.jsonl: not a regular file or a directory (a FIFO)\n"


def test_an_unreadable_tau_database_in_a_walked_folder_is_reported(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "tau"
    folder.mkdir()
    tau_tree(folder / "session.jsonl", [("r", None, "user")])
    locked = folder / "sessions.db"
    locked.write_bytes(b"SQLite format 3\x00")
    (folder / "notes.db").write_bytes(b"not a database")  # readable, not SQLite: not Tau's, passed over
    refuse_to_open(monkeypatch, locked)

    report = store.import_("tau", folder)

    assert [(error.place, error.reason) for error in report.errors] == [(str(locked), "cannot read: Permission denied")]
    assert report.sessions_written == ["cycle"] and report.files == 2


# --- 4. JSON that Python's parser refuses beyond syntax ------------------------------------------

HUGE_INTEGER = '{"role":"user","content":"hi","timestamp":1' + "0" * 5_000 + "}"
"""Valid JSON that ``json.loads`` refuses with a plain ``ValueError``: an integer beyond Python's digit limit."""


@pytest.mark.parametrize("fmt", ["clark", "phi-core", "pi", "tau", "turnstore", "yoagent"])
def test_a_number_too_long_to_read_is_reported_at_its_line(store: Store, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"huge{SUFFIXES[fmt]}"
    path.write_text(HUGE_INTEGER + "\n", encoding="utf-8")

    report = store.import_(fmt, path)

    assert [(error.place, error.reason) for error in report.errors] == [
        (f"{path}:1", "invalid JSON: a number has more than 4,300 digits")
    ]
    assert report.sessions_failed and not report.ok and store.sessions.list() == []


def test_a_number_too_long_to_read_in_a_whole_file_names_its_line(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "array.json"
    path.write_text(
        "[\n  " + json.dumps({"role": "user", "content": "hi", "timestamp": 1}) + ",\n  " + HUGE_INTEGER + "\n]\n"
    )

    report = store.import_("phi-core", path)

    assert [(error.place, error.reason) for error in report.errors] == [
        (f"{path}:3", "invalid JSON: a number has more than 4,300 digits")
    ]


def test_a_number_too_long_to_read_leaves_the_other_files_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "chats"
    folder.mkdir()
    (folder / "a.jsonl").write_text(HUGE_INTEGER + "\n", encoding="utf-8")
    (folder / "b.jsonl").write_text(json.dumps({"role": "user", "content": "hi", "timestamp": 1}) + "\n")
    db = tmp_path / "store.db"

    code = main(["--db", str(db), "import", "clark", str(folder)])

    out, err = capsys.readouterr()
    assert code == 1 and "unexpected" not in err
    assert f"{folder / 'a.jsonl'}:1: invalid JSON: a number has more than 4,300 digits" in out + err
    with Store(db) as store:
        assert [session.session_id for session in store.sessions.list()] == ["b"]


PSEUDO_TARGETS = {
    "pagemap.jsonl": "/proc/self/pagemap",  # says 0 bytes, holds gigabytes: read whole, a MemoryError
    "kmsg.jsonl": "/proc/kmsg",  # never ends: a read waits for the kernel's next message
    "status.jsonl": "/proc/self/status",
    "zero.jsonl": "/dev/zero",
    "urandom.jsonl": "/dev/urandom",
}
PROC = "skipped: a file of the kernel's /proc filesystem, whose size is not its content: never read"
_IMPORT_FOLDER = """
import json, sys
from turnstore.cli import main
code = main(["--db", sys.argv[2], "import", "yoagent", sys.argv[1], "--json"])
print(json.dumps({"code": code}))
"""


def test_pseudo_files_and_devices_behind_symbolic_links_are_refused_unread(tmp_path: Path) -> None:
    """Run in a subprocess with a timeout: a file read by mistake would hang the test or exhaust its memory."""
    folder = tmp_path / "sessions"
    good = good_tree(folder)
    expected = []
    for name, target in PSEUDO_TARGETS.items():
        if not os.path.lexists(target):  # /proc/kmsg is missing in some containers
            continue
        (folder / name).symlink_to(target)
        reason = PROC if target.startswith("/proc/") else "skipped: not a regular file (a character device)"
        expected.append((name, reason))
    os.mkfifo(folder / "fifo.jsonl")
    expected.append(("fifo.jsonl", "skipped: not a regular file (a FIFO)"))

    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_FOLDER, str(folder), str(tmp_path / "store.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )

    printed, _, last = done.stdout.rstrip().rpartition("\n")
    report, outcome = json.loads(printed), json.loads(last)
    assert sorted((Path(error["place"]).name, error["reason"]) for error in report["errors"]) == sorted(expected)
    assert report["sessions"]["written"] == [good.stem] and report["files"] == 1
    assert outcome["code"] == 1  # the exit code says something was not imported


@pytest.mark.parametrize("target", ["/proc/self/status", "/proc/self/pagemap", "/proc/kmsg"])
def test_a_pseudo_file_given_as_a_path_is_refused_unread(store: Store, tmp_path: Path, target: str) -> None:
    if not os.path.lexists(target):
        pytest.skip(f"{target} does not exist here")
    link = tmp_path / "session.jsonl"
    link.symlink_to(target)

    for path in (Path(target), link):
        with pytest.raises(ImportFailed) as raised:
            store.import_("yoagent", path)

        assert str(raised.value) == f"{path}: {PROC.removeprefix('skipped: ')}"
    assert store.sessions.list() == []


def test_a_file_swapped_for_a_pseudo_file_after_the_walk_is_refused_unread(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk found a regular file; by the time it is opened its link points into /proc."""
    folder = tmp_path / "sessions"
    good = good_tree(folder)
    link = folder / "moved.jsonl"
    link.symlink_to(good_tree(tmp_path / "elsewhere", "moved.jsonl"))
    from turnstore.importers import files

    walked = files._walk

    def walk_then_swap(*args: Any) -> Any:
        found = list(walked(*args))
        link.unlink()
        link.symlink_to("/proc/self/status")
        return iter(found)

    monkeypatch.setattr(files, "_walk", walk_then_swap)

    report = store.import_("yoagent", folder)

    assert [(error.place, error.reason) for error in report.errors] == [
        (str(link), f"cannot read: {PROC.removeprefix('skipped: ')}")
    ]
    assert report.sessions_written == [good.stem]
