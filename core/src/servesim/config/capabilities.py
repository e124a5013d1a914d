"""The capabilities a configuration needs of its backend (servesim.rank), checked while
loading, so that ``servesim validate`` refuses what a run could not honour.

Each need names the key that asks for it, the capability class and the backend's plugin
and distribution. Without these checks a missing capability would show only at run time:
a split on a backend without handoff rejects every request, an ``aic_nextn`` a backend
ignores reports latencies without speculation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servesim.config.converter import Problem
from servesim.rank import Handoff, HostOffload, LoraAdapters, SpeculativeDecoding, WarmCache

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig
    from servesim.plugins import Plugins

#: (engine key, capability, whether the engine section asks for it).
ENGINE_NEEDS: tuple[tuple[str, type, Callable[[EngineConfig], bool]], ...] = (
    ("native_host_offload", HostOffload, lambda c: c.native_host_offload is not None),
    ("aic_nextn", SpeculativeDecoding, lambda c: c.aic_nextn is not None),
    ("enable_lora", LoraAdapters, lambda c: c.enable_lora),
)


def missing(key: str, capability: type, backend: str, rank_class: type, plugins: Plugins,
            what: str) -> Problem:
    """The problem at ``key``: ``what`` needs ``capability``, which the backend lacks."""
    name = f"{capability.__module__}.{capability.__qualname__}"
    return (key, f"{what} needs the backend capability {capability.__qualname__} ({name}); "
                 f"backend {backend!r} ({plugins.label('backend', backend)}, class "
                 f"{rank_class.__qualname__}) does not declare it")


def engine_needs(config: EngineConfig, rank_class: type, plugins: Plugins, path: str) -> list[Problem]:
    """Problems of the engine section at ``path``: keys set whose capability the backend
    does not declare."""
    return [missing(f"{path}.{key}", cap, config.backend, rank_class, plugins, key)
            for key, cap, asks in ENGINE_NEEDS
            if asks(config) and not issubclass(rank_class, cap)]


def split_needs(cluster: Any, config: EngineConfig, rank_class: type, plugins: Plugins) -> list[Problem]:
    """A prefill/decode split needs :class:`servesim.rank.Handoff`: without it every request
    would be rejected."""
    if not (cluster.prefill_workers or cluster.decode_workers) or issubclass(rank_class, Handoff):
        return []
    key = "cluster.prefill_workers" if cluster.prefill_workers else "cluster.decode_workers"
    return [missing(key, Handoff, config.backend, rank_class, plugins,
                    "a prefill/decode split (prefill workers hand prefills to decode workers)")]


def workload_needs(workload: Any, config: EngineConfig, rank_class: type, plugins: Plugins) -> list[Problem]:
    """``workload.warm_cache`` needs :class:`servesim.rank.WarmCache`."""
    if getattr(workload, "warm_cache", None) is None or issubclass(rank_class, WarmCache):
        return []
    return [missing("workload.warm_cache", WarmCache, config.backend, rank_class, plugins,
                    "a warm start (a KV cache filled from a captured KV-event stream)")]
