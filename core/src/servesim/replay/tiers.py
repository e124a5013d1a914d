"""Report keys of the host KV tier (servesim.kv.host_tier), added when a rank has one.

* ``prefix_cache_hit_rate_g1`` / ``prefix_cache_hit_rate_host``: the prompt tokens of
  completed requests that their first admission found in device KV, and those it restored
  from the host tier, over all their prompt tokens (the two add up to
  ``first_admission_prefix_cache_hit_rate``);
* ``host_offload``: transfer totals over every rank: stores (device to host) and their
  blocks and bytes, loads (host to device) likewise, loads cancelled, host blocks evicted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from servesim.rank import HostOffload
from servesim.report.stats import RequestLog


def host_tier_report(engines: Iterable[Any], log: RequestLog) -> dict[str, Any]:
    tiers = [r.host_tier for e in engines for r in e.ranks
             if isinstance(r, HostOffload) and r.host_tier is not None]
    if not tiers:
        return {}
    idx = [i for i, ok in enumerate(log.completed_flags()) if ok]
    n_in = sum(log.input_length[i] for i in idx)
    g1 = host = 0
    if log.tier_g1 is not None and log.tier_host is not None:
        g1 = sum(log.tier_g1[i] for i in idx)
        host = sum(log.tier_host[i] for i in idx)
    totals = {"stores": 0, "stored_blocks": 0, "stored_bytes": 0, "loads": 0,
              "loaded_blocks": 0, "loaded_bytes": 0, "cancelled_loads": 0, "evicted_blocks": 0}
    for tier in tiers:
        t = tier.totals
        totals["stores"] += t.stores
        totals["stored_blocks"] += t.stored_blocks
        totals["stored_bytes"] += t.stored_blocks * tier.block_bytes
        totals["loads"] += t.loads
        totals["loaded_blocks"] += t.loaded_blocks
        totals["loaded_bytes"] += t.loaded_blocks * tier.block_bytes
        totals["cancelled_loads"] += t.cancelled_loads
        totals["evicted_blocks"] += t.evicted_blocks
    return {
        "prefix_cache_hit_rate_g1": g1 / n_in if n_in else 0.0,
        "prefix_cache_hit_rate_host": host / n_in if n_in else 0.0,
        "host_offload": totals,
    }


__all__ = ["host_tier_report"]
