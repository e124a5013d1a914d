"""servesim: a GPU-free simulator of LLM-serving engines.

The public surface a plugin author needs, each name from the module that defines it:

* ``hookimpl``, the marker of hook implementations (every hook: :mod:`servesim.hookspecs`);
* the neutral contract (:mod:`servesim.contract`): requests, commands and their results,
  pass effects, outputs, metrics, KV events;
* the rank interface (:mod:`servesim.rank`) and the engine that composes ranks
  (:mod:`servesim.engine`, :mod:`servesim.factory`);
* the hooks' interfaces: :class:`TimingModel`, :class:`EvictionPolicy`, :class:`KvEventSink`,
  :class:`FpmSink`, and the :class:`Registry` named implementations are added to;
* the engine's typed configuration and the error classes.

Everything else is imported from its own module (docs/architecture.md draws the layers).
"""

from servesim._markers import hookimpl
from servesim.config.engine import EngineConfig, PreemptionMode
from servesim.contract import (
    APPLIED,
    EMPTY_START,
    NOOP,
    ActivateDestination,
    Admission,
    CacheTierAttribution,
    CancelDestination,
    CancelRequest,
    CancelSource,
    ClearedBlocks,
    Command,
    CommandEffects,
    CommandResult,
    DecodeAcceptance,
    DestinationReserved,
    ForwardPassMetrics,
    HandoffId,
    HandoffTransferTiming,
    KvBlock,
    KvEvent,
    KvEventData,
    LifecycleEvent,
    Metrics,
    Output,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
    PressureEvent,
    PressureKind,
    PressureState,
    ReleaseSource,
    RemovedBlocks,
    Request,
    RequestId,
    ReserveDestination,
    ResultKind,
    ScheduleRecord,
    SourceHeld,
    StoredBlocks,
    Submit,
    SubmitHandoffPrefill,
    TransferTimingMode,
    WorkerType,
)
from servesim.engine import Engine, EnginePassCompleted, EnginePassStarted
from servesim.errors import (
    CommandRejected,
    ConfigError,
    EngineError,
    EnginePoisoned,
    PluginError,
    SimError,
    TraceError,
    UserError,
)
from servesim.factory import EngineFactory
from servesim.kv.eviction import EvictionPolicy, LruEviction
from servesim.rank import (
    CommandContext,
    Rank,
    RankIdentity,
    RankPass,
    RankServices,
    RetryHint,
)
from servesim.registry import Registry
from servesim.sinks.base import FpmSink, KvEventSink
from servesim.timing.base import TimingModel
from servesim.tokens import RepeatedBlockTokens, Tokens, TokenSeq


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import version

        return version("servesim")
    raise AttributeError(name)


__all__ = [
    "APPLIED",
    "ActivateDestination",
    "Admission",
    "CacheTierAttribution",
    "CancelDestination",
    "CancelRequest",
    "CancelSource",
    "ClearedBlocks",
    "Command",
    "CommandContext",
    "CommandEffects",
    "CommandRejected",
    "CommandResult",
    "ConfigError",
    "DecodeAcceptance",
    "DestinationReserved",
    "EMPTY_START",
    "Engine",
    "EngineConfig",
    "EngineError",
    "EngineFactory",
    "EnginePassCompleted",
    "EnginePassStarted",
    "EnginePoisoned",
    "EvictionPolicy",
    "ForwardPassMetrics",
    "FpmSink",
    "HandoffId",
    "HandoffTransferTiming",
    "KvBlock",
    "KvEvent",
    "KvEventData",
    "KvEventSink",
    "LifecycleEvent",
    "LruEviction",
    "Metrics",
    "NOOP",
    "Output",
    "OutputBatch",
    "PassCompletionEffects",
    "PassStartEffects",
    "PluginError",
    "PreemptionMode",
    "PressureEvent",
    "PressureKind",
    "PressureState",
    "Rank",
    "RankIdentity",
    "RankPass",
    "RankServices",
    "Registry",
    "ReleaseSource",
    "RemovedBlocks",
    "RepeatedBlockTokens",
    "Request",
    "RequestId",
    "ReserveDestination",
    "ResultKind",
    "RetryHint",
    "ScheduleRecord",
    "SimError",
    "SourceHeld",
    "StoredBlocks",
    "Submit",
    "SubmitHandoffPrefill",
    "TimingModel",
    "TokenSeq",
    "Tokens",
    "TraceError",
    "TransferTimingMode",
    "UserError",
    "WorkerType",
    "hookimpl",
]
