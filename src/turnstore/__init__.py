"""turnstore: the session and transcript store that LLM agent apps embed.

Open a store with one line, append every message an agent loop produces, and
ask it what happened in turn k, what history the next model call should see,
and what a turn, loop, session or model cost::

    from turnstore import Store, Message

    store = Store()                       # $TURNSTORE_URL or ./turnstore.db

Importing the package is cheap: the exceptions load with it, everything else on
first use (module ``__getattr__``), so a program that only needs ``Store`` does
not pay for the async layer, the importers or the migration machinery, and the
command line starts quickly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    AlreadyExists,
    ExportFailed,
    ImportFailed,
    InvalidArgument,
    InvalidMessage,
    InvalidPrices,
    InvalidQuery,
    InvalidRecord,
    LimitExceeded,
    LoopNotFound,
    MediaNotFound,
    MessageNotFound,
    NotAStore,
    NotFound,
    ReadOnlyStore,
    SchemaError,
    SchemaOutOfDate,
    SchemaTooNew,
    SearchUnavailable,
    SessionNotFound,
    StorageError,
    StorageFull,
    StoreBusy,
    StoreClosed,
    TransactionOpen,
    TurnIdMismatch,
    TurnNotFound,
    TurnstoreError,
)

if TYPE_CHECKING:
    from .aio import AsyncStore
    from .limits import Limits
    from .media import MediaMode
    from .models import (
        AgentMessage,
        AssistantMessage,
        AudioContent,
        Content,
        CostConfig,
        ExtensionMessage,
        FileContent,
        ImageContent,
        LlmMessage,
        Message,
        StopReason,
        SystemMessage,
        TextContent,
        ThinkingContent,
        ToolCallContent,
        ToolResultMessage,
        TurnId,
        Usage,
        UserMessage,
    )
    from .records import (
        ContextPage,
        ContinuationKind,
        Loop,
        LoopConfig,
        LoopStatus,
        SearchHit,
        Session,
        SessionSummary,
        StoredMessage,
        Turn,
    )
    from .repositories import parse_message
    from .store import Store
    from .usage import DEFAULT_PRICES, PriceTable, SavedPrice, UsageRow, UsageTotals

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "AgentMessage": ".models",
    "AssistantMessage": ".models",
    "AsyncStore": ".aio",
    "AudioContent": ".models",
    "Content": ".models",
    "ContextPage": ".records",
    "ContinuationKind": ".records",
    "CostConfig": ".models",
    "DEFAULT_PRICES": ".usage",
    "ExtensionMessage": ".models",
    "FileContent": ".models",
    "ImageContent": ".models",
    "Limits": ".limits",
    "LlmMessage": ".models",
    "Loop": ".records",
    "LoopConfig": ".records",
    "LoopStatus": ".records",
    "MediaMode": ".media",
    "Message": ".models",
    "parse_message": ".repositories",
    "PriceTable": ".usage",
    "SearchHit": ".records",
    "Session": ".records",
    "SessionSummary": ".records",
    "StopReason": ".models",
    "Store": ".store",
    "StoredMessage": ".records",
    "SystemMessage": ".models",
    "TextContent": ".models",
    "ThinkingContent": ".models",
    "ToolCallContent": ".models",
    "ToolResultMessage": ".models",
    "Turn": ".records",
    "TurnId": ".models",
    "Usage": ".models",
    "SavedPrice": ".usage",
    "UsageRow": ".usage",
    "UsageTotals": ".usage",
    "UserMessage": ".models",
}
"""Public name -> the module that defines it, imported on first access."""


__all__ = [
    "__version__",
    "AgentMessage",
    "AlreadyExists",
    "AssistantMessage",
    "AsyncStore",
    "AudioContent",
    "Content",
    "ContextPage",
    "ContinuationKind",
    "CostConfig",
    "DEFAULT_PRICES",
    "ExportFailed",
    "ExtensionMessage",
    "FileContent",
    "ImageContent",
    "ImportFailed",
    "InvalidArgument",
    "InvalidMessage",
    "InvalidPrices",
    "InvalidQuery",
    "InvalidRecord",
    "LimitExceeded",
    "Limits",
    "LlmMessage",
    "Loop",
    "LoopConfig",
    "LoopNotFound",
    "LoopStatus",
    "MediaMode",
    "MediaNotFound",
    "Message",
    "MessageNotFound",
    "NotAStore",
    "NotFound",
    "parse_message",
    "PriceTable",
    "ReadOnlyStore",
    "SavedPrice",
    "SchemaError",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "SearchHit",
    "SearchUnavailable",
    "Session",
    "SessionNotFound",
    "SessionSummary",
    "StopReason",
    "StorageError",
    "StorageFull",
    "Store",
    "StoreBusy",
    "StoreClosed",
    "StoredMessage",
    "SystemMessage",
    "TextContent",
    "ThinkingContent",
    "ToolCallContent",
    "ToolResultMessage",
    "TransactionOpen",
    "Turn",
    "TurnId",
    "TurnIdMismatch",
    "TurnNotFound",
    "TurnstoreError",
    "Usage",
    "UsageRow",
    "UsageTotals",
    "UserMessage",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access, then keep the value as a module attribute."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
