"""turnstore: the session and transcript store that LLM agent apps embed.

Open a store with one line, append every message an agent loop produces, and
ask it what happened in turn k, what history the next model call should see,
and what a turn, loop, session or model cost::

    from turnstore import Store, Message

    store = Store()                       # $TURNSTORE_URL or ./turnstore.db
"""

from .aio import AsyncStore
from .errors import (
    AlreadyExists,
    ExportFailed,
    ImportFailed,
    InvalidArgument,
    InvalidMessage,
    InvalidPrices,
    InvalidRecord,
    LimitExceeded,
    LoopNotFound,
    MessageNotFound,
    NotAStore,
    NotFound,
    ReadOnlyStore,
    SchemaError,
    SchemaOutOfDate,
    SchemaTooNew,
    SessionNotFound,
    StorageError,
    StorageFull,
    StoreBusy,
    TurnIdMismatch,
    TurnNotFound,
    TurnstoreError,
)
from .limits import Limits
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
from .records import ContinuationKind, Loop, LoopConfig, LoopStatus, Session, SessionSummary, StoredMessage, Turn
from .repositories import parse_message
from .store import Store
from .usage import DEFAULT_PRICES, PriceTable, UsageRow, UsageTotals

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "AgentMessage",
    "AlreadyExists",
    "AssistantMessage",
    "AsyncStore",
    "AudioContent",
    "Content",
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
    "InvalidRecord",
    "LimitExceeded",
    "Limits",
    "LlmMessage",
    "Loop",
    "LoopConfig",
    "LoopNotFound",
    "LoopStatus",
    "Message",
    "MessageNotFound",
    "NotAStore",
    "NotFound",
    "parse_message",
    "PriceTable",
    "ReadOnlyStore",
    "SchemaError",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "Session",
    "SessionNotFound",
    "SessionSummary",
    "StopReason",
    "StorageError",
    "StorageFull",
    "Store",
    "StoreBusy",
    "StoredMessage",
    "SystemMessage",
    "TextContent",
    "ThinkingContent",
    "ToolCallContent",
    "ToolResultMessage",
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
