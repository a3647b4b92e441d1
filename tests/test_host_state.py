"""Every public entry point leaves the host process as it found it.

turnstore runs inside other people's processes. Whatever a call does, the
process-wide state that belongs to the app is the same after it (and, where a
callback lets us look, during it): the garbage collector's switch,
thresholds, callbacks and frozen objects; the ``sqlite3`` module's global
adapters and converters; the threads that run; signal handlers and the
signal mask; warning filters; the logging tree; ``sys.path`` and the import
hooks; the locale, environment, umask and working directory; the recursion
and integer-string limits; the decimal context; faulthandler; exception,
trace and profile hooks; open file descriptors. Each entry point runs in the
test process (the CLI through its console function, as ``turnstore``'s
script calls it) between two snapshots of that state.
"""

from __future__ import annotations

import asyncio
import builtins
import copyreg
import decimal
import faulthandler
import gc
import importlib.util
import locale
import logging
import os
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from factories import assistant, tool_result, user

from turnstore import AsyncStore, Message, Store

FIXTURES = Path(__file__).parent / "fixtures"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")} if os.path.isdir("/proc/self/fd") else set()


def _loggers() -> dict[str, Any]:
    loggers: dict[str, Any] = {"": (logging.root.level, list(logging.root.handlers), logging.root.disabled)}
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            loggers[name] = (logger.level, list(logger.handlers), logger.disabled, logger.propagate)
    return loggers


def _decimal_context() -> tuple[Any, ...]:
    ctx = decimal.getcontext()
    return (
        id(ctx),
        ctx.prec,
        ctx.rounding,
        ctx.Emin,
        ctx.Emax,
        ctx.capitals,
        ctx.clamp,
        dict(ctx.traps),
        dict(ctx.flags),
    )


def host_state() -> dict[str, Any]:
    """The process-wide state an embedded library must leave alone, as comparable values."""
    state: dict[str, Any] = {
        "gc.isenabled": gc.isenabled(),
        "gc.threshold": gc.get_threshold(),
        "gc.debug": gc.get_debug(),
        "gc.callbacks": list(gc.callbacks),
        "gc.freeze_count": gc.get_freeze_count(),
        "sqlite3.adapters": dict(sqlite3.adapters),
        "sqlite3.converters": dict(sqlite3.converters),
        "threads": set(threading.enumerate()),
        "threading.stack_size": threading.stack_size(),
        "threading.excepthook": threading.excepthook,
        "threading.trace": threading.gettrace(),
        "threading.profile": threading.getprofile(),
        "signals": {sig: signal.getsignal(sig) for sig in signal.valid_signals()},
        "signal.mask": signal.pthread_sigmask(signal.SIG_BLOCK, []),
        "warnings.filters": list(warnings.filters),
        "warnings.showwarning": warnings.showwarning,
        "loggers": _loggers(),
        "logging.disable": logging.root.manager.disable,
        "logging.class": logging.getLoggerClass(),
        "sys.path": list(sys.path),
        "sys.meta_path": list(sys.meta_path),
        "sys.path_hooks": list(sys.path_hooks),
        "sys.recursionlimit": sys.getrecursionlimit(),
        "sys.int_max_str_digits": sys.get_int_max_str_digits(),
        "sys.switchinterval": sys.getswitchinterval(),
        "sys.excepthook": sys.excepthook,
        "sys.unraisablehook": sys.unraisablehook,
        "sys.displayhook": sys.displayhook,
        "sys.trace": sys.gettrace(),
        "sys.profile": sys.getprofile(),
        "sys.std": (sys.stdin, sys.stdout, sys.stderr),
        "locale": locale.setlocale(locale.LC_ALL, None),
        "os.environ": dict(os.environ),
        "os.umask": _umask(),
        "os.cwd": os.getcwd(),
        "fds": _open_fds(),
        "decimal": _decimal_context(),
        "faulthandler": faulthandler.is_enabled(),
        "socket.timeout": socket.getdefaulttimeout(),
        "tempfile.tempdir": tempfile.tempdir,
        "copyreg": dict(copyreg.dispatch_table),
        "builtins": set(vars(builtins)),
        "asyncio.policy": asyncio.get_event_loop_policy(),
    }
    return state


def assert_unchanged(before: dict[str, Any], after: dict[str, Any], what: str) -> None:
    changed = {key: (before[key], after[key]) for key in before if key != "fds" and before[key] != after[key]}
    if "fds" in before and after["fds"] - before["fds"]:
        changed["fds"] = ("new, left open", sorted(after["fds"] - before["fds"]))
    assert not changed, f"{what} changed process state: {changed}"


@pytest.fixture(autouse=True)
def _warm_up(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Load every module once first: what importing a module does once is not what a call does each time."""
    folder = tmp_path_factory.mktemp("warm")
    with Store(folder / "warm.db") as store:
        _fill(store)
        store.import_("turnstore", FIXTURES / "turnstore" / "small.jsonl")
    run_cli("--db", str(folder / "warm.db"), "sessions")


def _fill(store: Store) -> tuple[str, str]:
    session = store.sessions.create(title="host")
    loop = store.loops.start(session.session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    for turn in range(3):
        store.messages.append(user(f"q{turn}"), loop_id=loop.loop_id, turn_index=turn)
        store.messages.append(assistant(calls=(f"c{turn}",)), loop_id=loop.loop_id, turn_index=turn)
        store.messages.append(tool_result(f"c{turn}"), loop_id=loop.loop_id, turn_index=turn)
    return session.session_id, loop.loop_id


def _appam_source(folder: Path) -> Path:
    path = FIXTURES / "appam" / "make_fixture.py"
    spec = importlib.util.spec_from_file_location("appam_make_fixture_host", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    target = folder / "appam"
    target.mkdir()
    return Path(module.build(target / "sessions.db"))


def _sources(folder: Path) -> dict[str, list[Path]]:
    """Each import format with the fixture files of that format (copies, where the source is a database)."""
    agents = folder / "agents.db"
    shutil.copyfile(FIXTURES / "openai_agents" / "sqlite_session.db", agents)
    return {
        "appam": [_appam_source(folder)],
        "clark": [FIXTURES / "clark" / "conversation-42.jsonl", FIXTURES / "clark" / "support-ticket.json"],
        "openai-agents": [agents],
        "phi-core": [FIXTURES / "phi_core" / "sessions"],
        "pi": sorted((FIXTURES / "pi").glob("*.jsonl")),
        "tau": [FIXTURES / "tau" / "sessions"],
        "turnstore": [FIXTURES / "turnstore" / "small.jsonl"],
        "yoagent": [FIXTURES / "yoagent" / "sessions", FIXTURES / "yoagent" / "messages"],
    }


def _sync_calls(store: Store, folder: Path) -> dict[str, Callable[[], Any]]:
    session_id, loop_id = _fill(store)
    first = next(iter(store.messages.records(session_id))).message_id
    return {
        "sessions": lambda: (
            store.sessions.create(title="x"),
            store.sessions.get(session_id),
            store.sessions.exists(session_id),
            store.sessions.list(),
            store.sessions.count(),
            store.sessions.rename(session_id, "y"),
            store.sessions.update(session_id, metadata={"k": 1}),
        ),
        "loops": lambda: (
            store.loops.get(loop_id),
            store.loops.list(session_id),
            store.loops.children(loop_id),
            store.loops.end(store.loops.start(session_id).loop_id),
        ),
        "messages.append": lambda: store.messages.append_turn(
            store.loops.start(session_id).loop_id, 0, [Message.user("hi"), assistant()]
        ),
        "messages.reads": lambda: (
            store.messages.turn(loop_id, 1),
            store.messages.turns(loop_id),
            store.messages.loop(loop_id),
            store.messages.last(session_id, 50),
            store.messages.path(loop_id),
            store.messages.get(first),
            list(store.messages.records(session_id)),
        ),
        "context": lambda: store.messages.context(loop_id),
        "rewind+delete": lambda: store.messages.delete(
            store.messages.append(
                Message.user("again"), loop_id=store.messages.rewind(loop_id, after=first).loop_id, turn_index=0
            )
        ),
        "usage": lambda: (
            store.usage.turn(loop_id, 0),
            store.usage.loop(loop_id),
            store.usage.session(session_id),
            store.usage.total(),
            store.usage.by_model(),
            store.usage.by_loop(session_id),
            store.usage.by_session(),
            store.usage.by_day(),
        ),
        "transaction": lambda: _in_transaction(store, session_id),
        "export": lambda: [
            store.export(session_id, fmt, folder / f"out.{fmt}")
            for fmt in ("turnstore", "phi-core", "phi-core-session")
        ],
        "export(text)": lambda: store.export(session_id, "turnstore"),
        "schema_version": lambda: (store.schema_version(), store.upgrade()),
        "errors": lambda: _errors(store),
    }


def _in_transaction(store: Store, session_id: str) -> None:
    with store.transaction():
        loop = store.loops.start(session_id)
        store.messages.append(Message.user("t"), loop_id=loop.loop_id, turn_index=0)


def _errors(store: Store) -> None:
    from turnstore import TurnstoreError

    for call in (
        lambda: store.sessions.get("no-such"),
        lambda: store.import_("no-such-format", FIXTURES),
        lambda: store.messages.context("no-such-loop"),
    ):
        with pytest.raises(TurnstoreError):
            call()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path


def _calls_names() -> list[str]:
    with tempfile.TemporaryDirectory() as scratch, Store(Path(scratch) / "names.db") as store:
        return list(_sync_calls(store, Path(scratch)))


@pytest.mark.parametrize("name", _calls_names())
def test_store_calls_leave_the_process_as_they_found_it(tmp_path: Path, name: str) -> None:
    before = host_state()
    with Store(tmp_path / "store.db") as store:
        _sync_calls(store, tmp_path)[name]()
    assert_unchanged(before, host_state(), f"Store: {name}")


def test_opening_and_closing_a_store_leaves_the_process_as_it_found_it(tmp_path: Path) -> None:
    before = host_state()
    Store(tmp_path / "new" / "store.db").close()
    Store(tmp_path / "new" / "store.db").close()
    assert_unchanged(before, host_state(), "Store open/close")


@pytest.mark.parametrize("fmt", sorted(_sources(Path(tempfile.mkdtemp()))))
def test_imports_leave_the_process_as_they_found_it_during_and_after(tmp_path: Path, fmt: str) -> None:
    paths = _sources(tmp_path)[fmt]
    store = Store(tmp_path / "store.db")
    before = host_state()
    during: list[dict[str, Any]] = []

    def progress(_file: str, _done: int, _total: int) -> None:
        during.append(host_state())

    report = store.import_(fmt, *paths, skip_invalid=True, progress=progress)
    assert report.sessions_written or report.sessions_unchanged, report
    dry = store.import_(fmt, *paths, dry_run=True)
    assert dry.dry_run
    tuned = store.import_(fmt, *paths, skip_invalid=True, replace=True, tune_process=True)
    assert tuned.sessions_written or tuned.sessions_unchanged, tuned
    store.close()
    assert_unchanged(before, host_state(), f"import {fmt}")
    assert during, "progress was never called"
    for seen in during:
        seen.pop("fds")  # the import has the file open
        expected = {key: value for key, value in before.items() if key != "fds"}
        assert_unchanged(expected, seen, f"import {fmt} (during, in progress)")


def test_malformed_imports_leave_the_process_as_they_found_it(tmp_path: Path) -> None:
    before = host_state()
    with Store(tmp_path / "store.db") as store:
        for fmt, folder in (("pi", "pi"), ("clark", "clark"), ("tau", "tau"), ("yoagent", "yoagent")):
            store.import_(fmt, FIXTURES / folder / "malformed")
            store.import_(fmt, FIXTURES / folder / "malformed", skip_invalid=True)
    assert_unchanged(before, host_state(), "malformed imports")


def test_async_store_leaves_the_process_as_it_found_it(tmp_path: Path) -> None:
    paths = _sources(tmp_path)["pi"]

    async def app() -> None:
        store = await AsyncStore.open(tmp_path / "store.db")
        try:
            session = await store.sessions.create(title="a")
            loop = await store.loops.start(session.session_id)
            await store.messages.append_turn(loop.loop_id, 0, [Message.user("hi"), assistant()])
            await store.messages.context(loop.loop_id)
            await store.messages.last(session.session_id, 10)
            [stored async for stored in store.messages.records(session.session_id)]
            await store.usage.session(session.session_id)
            await store.import_("pi", *paths)
            await store.export(session.session_id, "turnstore", tmp_path / "out.jsonl")
            async with store.transaction():
                await store.loops.start(session.session_id)
        finally:
            await store.close()
        async with AsyncStore(tmp_path / "store.db") as again:
            await again.sessions.list()

    # asyncio.run sets up and tears down its own loop: snapshot inside it, around what turnstore does.
    states: list[dict[str, Any]] = []

    async def main() -> None:
        states.append(host_state())
        await app()
        states.append(host_state())

    asyncio.run(main())
    before, after = states
    assert_unchanged(before, after, "AsyncStore")


CLI_CALLS: dict[str, Callable[[Path], list[list[str]]]] = {
    "help": lambda db: [["--help"], ["import", "--help"], ["db", "--help"]],
    "demo": lambda db: [["--db", str(db), "demo"], ["--db", str(db), "--json", "demo"]],
    "sessions": lambda db: [
        ["--db", str(db), "demo"],
        ["--db", str(db), "sessions"],
        ["--db", str(db), "--json", "sessions"],
    ],
    "show+usage": lambda db: [
        ["--db", str(db), "demo"],
        ["--db", str(db), "usage"],
        ["--db", str(db), "usage", "--by", "model"],
    ],
    "import": lambda db: [
        ["--db", str(db), "import", "pi", str(FIXTURES / "pi")],
        ["--db", str(db), "import", "pi", "--dry-run", str(FIXTURES / "pi")],
    ],
    "db": lambda db: [
        ["--db", str(db), "db", "upgrade"],
        ["--db", str(db), "db", "current"],
        ["--db", str(db), "db", "check"],
    ],
    "errors": lambda db: [
        ["--db", str(db), "show", "no-such"],
        ["--db", str(db), "import", "nope", "x"],
        ["no-such-command"],
    ],
}


@pytest.mark.parametrize("name", sorted(CLI_CALLS))
def test_cli_commands_leave_the_process_as_they_found_it(tmp_path: Path, name: str) -> None:
    before = host_state()
    for args in CLI_CALLS[name](tmp_path / "cli.db"):
        run_cli(*args)
    assert_unchanged(before, host_state(), f"turnstore {name}")


def test_cli_show_and_export_leave_the_process_as_they_found_it(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    with Store(db) as store:
        session_id, _ = _fill(store)
    before = host_state()
    for args in (
        ["show", session_id],
        ["--json", "show", session_id],
        ["export", session_id, "-o", str(tmp_path / "o.jsonl")],
        ["export", session_id],
    ):
        result = run_cli("--db", str(db), *args)
        assert result.code == 0, result
    assert_unchanged(before, host_state(), "turnstore show/export")


@pytest.fixture
def restore_gc() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("tune_process", [False, True])
def test_an_import_keeps_a_collector_the_app_turned_off_off(
    tmp_path: Path, restore_gc: None, tune_process: bool
) -> None:
    gc.disable()
    with Store(tmp_path / "store.db") as store:
        store.import_("pi", *_sources(tmp_path)["pi"], tune_process=tune_process)
        assert not gc.isenabled()


def test_a_postgresql_store_leaves_the_process_as_it_found_it(postgres: Any, tmp_path: Path) -> None:
    postgres.empty()
    Store(postgres.url).close()  # the driver's modules load once, on first use
    postgres.empty()
    before = host_state()
    with Store(postgres.url) as store:
        for call in _sync_calls(store, tmp_path).values():
            call()
        store.import_("pi", *_sources(tmp_path)["pi"])
    assert_unchanged(before, host_state(), "PostgreSQL Store")


def test_the_process_is_as_the_app_left_it_while_it_iterates_records(tmp_path: Path, restore_gc: None) -> None:
    with Store(tmp_path / "store.db") as store:
        session_id, _ = _fill(store)
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            before = host_state()
            for _stored in store.messages.records(session_id):
                seen = host_state()
                seen["fds"] = before["fds"]  # the read has the database open meanwhile
                assert_unchanged(before, seen, "records() (between rows)")


@pytest.mark.parametrize("app_collector", [True, False])
def test_an_import_that_fails_midway_leaves_the_process_as_it_found_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_gc: None, app_collector: bool
) -> None:
    from turnstore.importing import _Run

    def broken(self: Any, bundle: Any) -> None:
        raise KeyboardInterrupt  # the app's own interruption, inside the collector pause of a file

    monkeypatch.setattr(_Run, "bundle", broken)
    (gc.enable if app_collector else gc.disable)()
    store = Store(tmp_path / "store.db")
    before = host_state()
    with pytest.raises(KeyboardInterrupt):
        store.import_("pi", *_sources(tmp_path)["pi"], tune_process=True)
    store.close()
    assert_unchanged(before, host_state(), "an interrupted import")


def test_an_async_store_that_fails_to_open_or_is_cancelled_leaves_no_thread(tmp_path: Path) -> None:
    from turnstore import TurnstoreError

    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all, " * 100)
    states: list[dict[str, Any]] = []

    async def main() -> None:
        states.append(host_state())
        with pytest.raises(TurnstoreError):
            await AsyncStore.open(junk)
        opening = asyncio.ensure_future(AsyncStore.open(tmp_path / "store.db"))
        await asyncio.sleep(0)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        states.append(host_state())

    asyncio.run(main())
    assert_unchanged(states[0], states[1], "AsyncStore.open failing or cancelled")
