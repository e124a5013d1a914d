"""Applying ``workload.warm_cache`` to a replay's engines before its first request
(servesim.replay.warm_capture reads the capture; each rank loads its part through
:class:`servesim.rank.WarmCache`, block pools with servesim.kv.warm_start). The KV events
each rank published while it loaded go to a router that reads KV events, and to nothing
else: the router starts knowing what every rank holds, the sinks see the run's own events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from servesim.errors import ConfigError
from servesim.rank import WarmCache
from servesim.replay.warm_capture import read_warm_cache

if TYPE_CHECKING:
    from servesim.config.warm_cache import WarmCacheConfig
    from servesim.engine import Engine
    from servesim.replay.routers import Router


def preload_engines(engines: Sequence[Engine], warm: WarmCacheConfig, block_size: int,
                    router: Router | None = None) -> dict[str, Any]:
    """Load the capture into ``engines`` (worker ``w`` is ``engines[w]``, rank ``d`` its
    ``ranks[d]``), handing each rank's preload events to ``router`` when it reads KV events;
    the report's ``warm_cache`` entry: blocks loaded and skipped, and the capture's ranks that
    name no rank of the replay."""
    paths = read_warm_cache(warm.path, warm.format, block_size, warm.worker)
    loaded = skipped = 0
    unmatched = []
    for (worker, dp), rank_paths in paths.items():
        if worker >= len(engines) or dp >= len(engines[worker].ranks):
            unmatched.append([worker, dp])
            continue
        rank = engines[worker].ranks[dp]
        if not isinstance(rank, WarmCache):  # refused when the config loads; kept as a guard
            raise ConfigError(f"backend rank {type(rank).__qualname__} cannot preload a cache",
                              path="workload.warm_cache")
        got = rank.preload_cache(rank_paths)
        loaded += got.loaded
        skipped += got.skipped
        if got.events and router is not None and router.wants_kv_events:
            router.on_kv_events(worker, got.events)
    return {"blocks_loaded": loaded, "blocks_skipped": skipped, "ranks_not_in_replay": unmatched}


__all__ = ["preload_engines"]
