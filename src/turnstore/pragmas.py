"""The SQLite settings an app may give a store (``Store(url, pragmas={...})``), checked before any connection.

SQLite ignores a pragma it does not know and, for several settings, a value
it does not understand: ``synchronous=fulll`` leaves the connection at its
default, so an app asking for power-loss durability would silently not get
it. So every name must be one of SQLite's connection settings (not a command
such as ``optimize``, nor one of the store file's own header fields such as
``user_version``, which migrations own), and every value must be one the
setting takes. A wrong one raises :class:`~turnstore.errors.InvalidArgument`
naming it, before the store opens.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from functools import cache
from typing import Any

from .errors import InvalidArgument

__all__ = ["check_pragmas"]

_NOT_SETTINGS = frozenset(
    {
        # Commands and reports: they do something once, or answer a question; nothing to set.
        "collation_list",
        "compile_options",
        "data_version",
        "database_list",
        "foreign_key_check",
        "foreign_key_list",
        "freelist_count",
        "function_list",
        "incremental_vacuum",
        "index_info",
        "index_list",
        "index_xinfo",
        "integrity_check",
        "module_list",
        "optimize",
        "page_count",
        "pragma_list",
        "quick_check",
        "shrink_memory",
        "table_info",
        "table_list",
        "table_xinfo",
        "wal_checkpoint",
        # Fields of the store file itself, which turnstore's migrations own (the encoding is fixed when it is made).
        "application_id",
        "encoding",
        "temp_store_directory",
        "schema_version",
        "user_version",
        "writable_schema",
    }
)

_BOOLEAN = frozenset({"0", "1", "on", "off", "true", "false", "yes", "no"})
_CHOICES: dict[str, frozenset[str]] = {
    "synchronous": _BOOLEAN | {"2", "3", "normal", "full", "extra"},  # on/yes/true: NORMAL, as SQLite reads them
    "journal_mode": frozenset({"delete", "truncate", "persist", "memory", "wal", "off"}),
    "temp_store": frozenset({"0", "1", "2", "default", "file", "memory"}),
    "locking_mode": frozenset({"normal", "exclusive"}),
    "auto_vacuum": frozenset({"0", "1", "2", "none", "full", "incremental"}),
    "secure_delete": _BOOLEAN | {"fast"},
}
_BOOLEANS = frozenset(
    {
        "automatic_index",
        "case_sensitive_like",
        "cell_size_check",
        "checkpoint_fullfsync",
        "count_changes",
        "defer_foreign_keys",
        "empty_result_callbacks",
        "foreign_keys",
        "full_column_names",
        "fullfsync",
        "ignore_check_constraints",
        "legacy_alter_table",
        "query_only",
        "read_uncommitted",
        "recursive_triggers",
        "reverse_unordered_selects",
        "short_column_names",
        "trusted_schema",
    }
)
_INTEGERS = frozenset(
    {
        "analysis_limit",
        "busy_timeout",
        "cache_size",
        "cache_spill",
        "default_cache_size",
        "hard_heap_limit",
        "journal_size_limit",
        "max_page_count",
        "mmap_size",
        "page_size",
        "soft_heap_limit",
        "threads",
        "wal_autocheckpoint",
    }
)


@cache
def _sqlite_pragmas() -> frozenset[str]:
    """Every pragma this process's SQLite library knows (``PRAGMA pragma_list``)."""
    with closing(sqlite3.connect(":memory:")) as connection:
        return frozenset(row[0] for row in connection.execute("PRAGMA pragma_list"))


def check_pragmas(pragmas: Mapping[str, Any]) -> dict[str, Any]:
    """``pragmas`` with their names in lower case, once none is a pragma SQLite does not know as a setting, nor
    holds a value the setting does not take.

    Raises:
        InvalidArgument: names the pragma and what it takes.
    """
    if not isinstance(pragmas, Mapping):
        raise InvalidArgument("pragmas", f"must be a mapping of pragma names to values, not {type(pragmas).__name__}")
    known = _sqlite_pragmas()
    checked: dict[str, Any] = {}
    for name, value in pragmas.items():
        if not isinstance(name, str) or name.lower() not in known:
            raise InvalidArgument("pragmas", f"SQLite has no pragma {name!r}")
        name = name.lower()
        checked[name] = value
        if name in _NOT_SETTINGS:
            raise InvalidArgument("pragmas", f"{name!r} is not a connection setting a store can be opened with")
        text = str(value).lower() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
        if isinstance(value, bool):
            text = "on" if value else "off"
        choices = _BOOLEAN if name in _BOOLEANS else _CHOICES.get(name)
        if choices is not None and text not in choices:
            raise InvalidArgument("pragmas", f"{name} takes one of {', '.join(sorted(choices))}, not {value!r}")
        if name in _INTEGERS and not _is_integer(value) and not (name == "cache_spill" and text in _BOOLEAN):
            raise InvalidArgument("pragmas", f"{name} takes a 64-bit integer, not {value!r}")
    return checked


_INTEGER = re.compile(r"-?[0-9]{1,19}")


def _is_integer(value: Any) -> bool:
    """An int, or the text of one in ASCII digits, that SQLite reads as that 64-bit integer."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return isinstance(value, str) and _INTEGER.fullmatch(value) is not None and -(2**63) <= int(value) < 2**63
