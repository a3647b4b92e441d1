"""The error hierarchy: one base to catch, standard bases where they fit, useful messages."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

import turnstore
from turnstore import errors
from turnstore.errors import (
    AlreadyExists,
    ImportFailed,
    InvalidArgument,
    InvalidMessage,
    InvalidRecord,
    LimitExceeded,
    LoopNotFound,
    MediaNotFound,
    MessageNotFound,
    NotFound,
    SchemaError,
    SchemaOutOfDate,
    SchemaTooNew,
    SessionNotFound,
    StoreBusy,
    TurnIdMismatch,
    TurnNotFound,
    TurnstoreError,
)
from turnstore.models import AGENT_MESSAGE

ALL_ERRORS = [getattr(errors, name) for name in errors.__all__]


def test_all_lists_every_error() -> None:
    assert len(ALL_ERRORS) == 28
    assert all(isinstance(cls, type) and issubclass(cls, Exception) for cls in ALL_ERRORS)


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_is_a_turnstore_error(cls: type[Exception]) -> None:
    assert issubclass(cls, TurnstoreError)
    assert getattr(turnstore, cls.__name__) is cls


@pytest.mark.parametrize("cls", [SessionNotFound, LoopNotFound, TurnNotFound, MessageNotFound, MediaNotFound])
def test_not_found_errors_are_lookup_errors(cls: type[Exception]) -> None:
    assert issubclass(cls, NotFound)
    assert issubclass(cls, LookupError)
    with pytest.raises(LookupError):
        raise cls("missing")


@pytest.mark.parametrize("cls", [InvalidMessage, TurnIdMismatch, LimitExceeded])
def test_invalid_message_family_is_value_error(cls: type[Exception]) -> None:
    assert issubclass(cls, InvalidMessage)
    assert issubclass(cls, ValueError)
    with pytest.raises(ValueError):
        raise cls("bad")


@pytest.mark.parametrize("cls", [errors.StoreClosed, errors.TransactionOpen])
def test_async_store_state_errors_are_runtime_errors(cls: type[Exception]) -> None:
    assert issubclass(cls, RuntimeError)  # what a closed store's calls raised before they were typed


@pytest.mark.parametrize(
    ("child", "parent"),
    [
        (SchemaOutOfDate, SchemaError),
        (SchemaTooNew, SchemaError),
        (InvalidRecord, ImportFailed),
    ],
)
def test_subclasses(child: type[Exception], parent: type[Exception]) -> None:
    assert issubclass(child, parent)


@pytest.mark.parametrize("cls", [AlreadyExists, SchemaError, StoreBusy, ImportFailed])
def test_other_errors_are_not_lookup_or_value_errors(cls: type[Exception]) -> None:
    assert not issubclass(cls, (LookupError, ValueError))


def test_invalid_argument_is_a_value_error_naming_the_argument_and_not_an_invalid_message() -> None:
    error = InvalidArgument("fork_after", "a branch forks after a message of its parent: give its id")
    assert isinstance(error, ValueError) and not isinstance(error, InvalidMessage)
    assert error.argument == "fork_after"
    assert str(error) == "fork_after: a branch forks after a message of its parent: give its id"
    assert "InvalidArgument" in (errors.__doc__ or "")


def test_invalid_message_carries_errors() -> None:
    error = InvalidMessage("invalid message: role: bad", [("role", "bad")])
    assert str(error) == "invalid message: role: bad"
    assert error.errors == [("role", "bad")]
    assert InvalidMessage("plain").errors == []


def test_invalid_record_place_and_reason() -> None:
    error = InvalidRecord("history.jsonl:12", "unknown role 'system'")
    assert error.place == "history.jsonl:12"
    assert error.reason == "unknown role 'system'"
    assert str(error) == "history.jsonl:12: unknown role 'system'"
    assert isinstance(error, (ImportFailed, TurnstoreError))


def pydantic_error(record: dict[str, Any]) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        AGENT_MESSAGE.validate_python(record)
    return raised.value


ASSISTANT = {
    "role": "assistant",
    "model": "m",
    "provider": "p",
    "stopReason": "stop",
    "timestamp": 1,
    "usage": {"input": 1, "output": 1},
}


@pytest.mark.parametrize(
    ("record", "path"),
    [
        ({**ASSISTANT, "content": [{"type": "toolCall", "name": "n", "arguments": {}}]}, "content[0].id"),
        ({**ASSISTANT, "content": [{"type": "text", "text": "ok"}, {"type": "thinking"}]}, "content[1].thinking"),
        (
            {**ASSISTANT, "content": [{"type": "thinking", "thinking": "t", "signature": 5}]},
            "content[0].signature",
        ),
        ({"role": "user", "content": [{"type": "image", "data": "x"}], "timestamp": 1}, "content[0].mimeType"),
        ({"role": "user", "content": [{"type": "text"}], "timestamp": 1}, "content[0].text"),
        ({"role": "user", "content": [{"type": "video"}], "timestamp": 1}, "content[0].type"),
        ({"role": "user", "content": [{}], "timestamp": 1}, "content[0].type"),
        ({"role": "toolResult", "toolName": "n", "content": [], "isError": False, "timestamp": 1}, "toolCallId"),
        ({**ASSISTANT, "content": [], "usage": {"input": 1}}, "usage.output"),
        ({"role": "user", "content": [], "timestamp": 1, "turnId": {"turnIndex": 0}}, "turnId.loopId"),
        ({"role": "extension", "kind": 3, "data": None}, "kind"),
        ({"role": "nobody", "content": []}, "role"),
        ({"content": []}, "role"),
    ],
)
def test_from_pydantic_paths_drop_union_tags(record: dict[str, Any], path: str) -> None:
    error = InvalidMessage.from_pydantic(pydantic_error(record))
    assert [p for p, _ in error.errors] == [path]
    assert str(error).startswith(f"invalid message: {path}: ")
    for tag in ("assistant.", "user.", "toolResult.", "extension.", "toolCall.", "text.", "image.", "thinking."):
        assert tag not in path


def test_from_pydantic_names_what() -> None:
    error = InvalidMessage.from_pydantic(pydantic_error({"role": "user", "content": []}), what="record")
    assert str(error).startswith("invalid record: timestamp: ")
    assert isinstance(error, InvalidMessage)


def test_from_pydantic_summarises_many_problems() -> None:
    record = {"role": "user", "timestamp": 1, "content": [{"type": "text"} for _ in range(8)]}
    error = InvalidMessage.from_pydantic(pydantic_error(record))
    assert [p for p, _ in error.errors] == [f"content[{i}].text" for i in range(8)]
    assert "and 3 more" in str(error)
    assert "content[4].text" in str(error)
    assert "content[5].text" not in str(error)


@pytest.mark.parametrize(
    ("record", "path"),
    [
        (
            {**ASSISTANT, "content": [{"type": "toolCall", "id": "c", "name": "n", "arguments": {"x": {1, 2}}}]},
            "content[0].arguments.x",
        ),
        (
            {**ASSISTANT, "content": [{"type": "toolCall", "id": "c", "name": "n", "arguments": [1, object()]}]},
            "content[0].arguments[1]",
        ),
        ({"role": "extension", "kind": "k", "data": {"a": {"b": [b"bytes"]}}}, "data.a.b[0]"),
    ],
)
def test_from_pydantic_paths_drop_json_value_tags(record: dict[str, Any], path: str) -> None:
    error = InvalidMessage.from_pydantic(pydantic_error(record))
    assert [p for p, _ in error.errors] == [path]


def test_non_finite_number_error_names_where_it_is() -> None:
    error = InvalidMessage.from_pydantic(
        pydantic_error({"role": "extension", "kind": "k", "data": {"a": {"b": [float("inf")]}}})
    )
    assert [p for p, _ in error.errors] == ["data.a.b[0]"]


def test_storage_and_foreign_file_errors_sit_where_callers_catch_them() -> None:
    assert issubclass(errors.ReadOnlyStore, errors.StorageError)
    assert issubclass(errors.StorageFull, errors.StorageError)
    assert issubclass(errors.NotAStore, SchemaError)
    assert issubclass(errors.InvalidPrices, ValueError)
    with pytest.raises(ValueError):
        turnstore.PriceTable({"m": {"input": -1}})


@pytest.mark.parametrize(
    ("url", "part"),
    [
        ("postgresql://postgres@127.0.0.1:5432/te\udcffst", "database name"),
        ("postgresql://postgres:p\udcff@127.0.0.1:5432/test", "password"),
        ("postgresql://po\udcffstgres@127.0.0.1:5432/test", "user name"),
        ("postgresql://postgres@127.0.0.1:5432/test?application_name=\udcff", "query"),
    ],
)
def test_a_server_url_with_bytes_that_are_not_utf8_is_an_invalid_argument(url: str, part: str) -> None:
    # An undecodable command-line argument reaches Python as lone surrogates; the driver cannot send them.
    with pytest.raises(
        InvalidArgument, match=f"^url: the database URL's {part} holds bytes that are not UTF-8$"
    ) as caught:
        turnstore.Store(url)
    assert "\n" not in str(caught.value) and "p\udcff" not in str(caught.value)


def test_cli_names_a_url_with_bytes_that_are_not_utf8_in_one_line() -> None:
    from cli_runner import run_cli

    result = run_cli("--db", "postgresql://postgres:secret@127.0.0.1:5432/te\udcffst", "sessions")
    assert result.code == 1
    assert result.err == "error: url: the database URL's database name holds bytes that are not UTF-8\n"


def test_search_errors_sit_in_the_tree() -> None:
    assert issubclass(turnstore.InvalidQuery, turnstore.InvalidArgument)
    assert turnstore.InvalidQuery("unbalanced quote").argument == "query"
    assert str(turnstore.InvalidQuery("unbalanced quote")) == "query: unbalanced quote"
    assert issubclass(turnstore.SearchUnavailable, TurnstoreError)
    assert not issubclass(turnstore.SearchUnavailable, ValueError)
