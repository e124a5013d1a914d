"""servesim: a GPU-free simulator of LLM-serving engines.

The public surface: the neutral contract types, the rank interface, the engine, the timing
and eviction hooks, sinks, registries, errors and the ``hookimpl`` marker plugins use.
"""

from servesim._markers import hookimpl
from servesim.config.engine import EngineConfig, PreemptionMode
from servesim.contract import *  # noqa: F403  (the contract is the public API)
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
from servesim.rank import CommandContext, Rank, RankIdentity, RankPass, RankServices, RetryHint
from servesim.registry import Registry
from servesim.sinks import FpmSink, KvEventSink
from servesim.timing.base import TimingModel
from servesim.tokens import RepeatedBlockTokens, Tokens, TokenSeq


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import version

        return version("servesim")
    raise AttributeError(name)
