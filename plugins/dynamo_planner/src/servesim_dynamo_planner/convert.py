"""From servesim's planner snapshots to the tick payload Dynamo's replay adapter reads.

Dynamo 1.6.1's offline replay hands ``ReplayPlannerAdapter.on_tick`` one dict per scaling
tick (its Rust binding, ``PyReplayScalingPolicy::on_tick``; the adapter is
dynamo/planner/offline/replay_adapter.py). This module builds the same dict from servesim's
windows:

* ``decode_fpm_snapshots`` / ``prefill_fpm_snapshots``: per worker and DP rank the *latest*
  forward pass published since the previous tick (the replay's ``LatestFpmBuffer``), and an
  all-zero one for an active rank that has published nothing for 1 s (its
  ``emit_idle_due``, run at each tick: ``IDLE_FPM_INTERVAL_MS`` 1000, the publish clock
  advanced in whole seconds). Ranks of workers no longer active are dropped.
* worker ids and counts: ``active`` (serving, not draining: servesim's ready and warming-up
  workers), ``starting`` (starting or restarting), ``draining``; the ``non_draining`` counts
  are active plus starting, and agg mode reports every worker on the decode side.
* ``traffic``: the window since the previous tick: ``num_req`` arrivals, ``avg_isl`` /
  ``avg_osl`` their mean lengths (Dynamo averages the requests that *completed* in the
  window; servesim's traffic window holds the arrivals'), TTFT/ITL means left out
  (``ttft_count``/``itl_count`` 0: the adapter then records none), no KV hit rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from attrs import define, field
from servesim.contract import ForwardPassMetrics
from servesim.replay.planning import PoolSnapshot, TrafficWindow

#: An active rank silent this long gets an all-zero snapshot (Dynamo replay's scaling module).
IDLE_FPM_INTERVAL_MS = 1000.0
#: Worker states Dynamo counts as active (ready and not draining).
ACTIVE_STATES = ("ready", "warmup")


def fpm_record(fpm: ForwardPassMetrics | None, worker: int, dp_rank: int) -> dict[str, Any]:
    """The replay's JSON form of one forward pass (``fpm_snapshots_to_json``); None: idle."""
    f = fpm if fpm is not None else ForwardPassMetrics(worker_id=worker, dp_rank=dp_rank)
    return {
        "worker_id": worker,
        "dp_rank": dp_rank,
        "wall_time": f.duration_ms / 1000.0,
        "num_prefill_requests": f.num_prefill_requests,
        "sum_prefill_tokens": f.sum_prefill_tokens,
        "var_prefill_length": f.var_prefill_length,
        "sum_prefill_kv_tokens": f.sum_prefill_kv_tokens,
        "num_decode_requests": f.num_decode_requests,
        "sum_decode_kv_tokens": f.sum_decode_kv_tokens,
        "var_decode_kv_tokens": f.var_decode_kv_tokens,
        "num_queued_prefill": f.num_queued_prefill,
        "sum_queued_prefill_tokens": f.sum_queued_prefill_tokens,
        "var_queued_prefill_length": f.var_queued_prefill_length,
        "num_queued_decode": f.num_queued_decode,
        "sum_queued_decode_kv_tokens": f.sum_queued_decode_kv_tokens,
        "var_queued_decode_kv_tokens": f.var_queued_decode_kv_tokens,
    }


@define
class FpmBuffer:
    """The latest forward pass per (worker, DP rank) since the last tick, with idle fill-ins."""

    dp_size: int = 1
    snapshots: dict[tuple[int, int], dict[str, Any]] = field(factory=dict)
    last_publish_ms: dict[tuple[int, int], float] = field(factory=dict)

    def observe(self, pool: PoolSnapshot, now_ms: float) -> None:
        """Take in one servesim window: activations first, then its passes in end order
        (a pass without a recorded end counts as published at ``now_ms``)."""
        for w in pool.workers:
            if w.state in ACTIVE_STATES and w.ready_ms >= 0.0:
                for dp in range(self.dp_size):
                    self.last_publish_ms.setdefault((w.worker, dp), w.ready_ms)
        ends = pool.pass_end_ms if len(pool.pass_end_ms) == len(pool.passes) else (
            (now_ms,) * len(pool.passes))
        for fpm, end in zip(pool.passes, ends, strict=True):
            key = (fpm.worker_id, fpm.dp_rank)
            self.snapshots[key] = fpm_record(fpm, fpm.worker_id, fpm.dp_rank)
            self.last_publish_ms[key] = end

    def emit_idle_due(self, active: Sequence[int], now_ms: float) -> None:
        keep = set(active)
        for store in (self.snapshots, self.last_publish_ms):
            for key in [k for k in store if k[0] not in keep or k[1] >= self.dp_size]:
                del store[key]
        for w in sorted(keep):
            for dp in range(self.dp_size):
                last = self.last_publish_ms.setdefault((w, dp), now_ms)
                elapsed = now_ms - last
                if elapsed >= IDLE_FPM_INTERVAL_MS:
                    self.last_publish_ms[(w, dp)] = last + math.floor(
                        elapsed / IDLE_FPM_INTERVAL_MS) * IDLE_FPM_INTERVAL_MS
                    self.snapshots[(w, dp)] = fpm_record(None, w, dp)

    def take(self) -> list[dict[str, Any]]:
        out = [self.snapshots[k] for k in sorted(self.snapshots)]
        self.snapshots = {}
        return out


@define
class TrafficAccumulator:
    """Arrivals since the last Dynamo tick (servesim may tick in between)."""

    requests: int = 0
    isl: float = 0.0
    osl: float = 0.0

    def add(self, t: TrafficWindow) -> None:
        self.requests += t.requests
        self.isl += t.mean_isl * t.requests
        self.osl += t.mean_osl * t.requests

    def drain(self, duration_s: float) -> dict[str, Any]:
        n = self.requests
        out = {
            "duration_s": duration_s,
            "num_req": n,
            "avg_isl": self.isl / n if n else 0.0,
            "avg_osl": self.osl / n if n else 0.0,
            "avg_ttft_ms": 0.0,
            "avg_itl_ms": 0.0,
            "shape_count": n,
            "ttft_count": 0,
            "itl_count": 0,
            "avg_accept_length": None,
            "avg_kv_hit_rate": 0.0,
            "hit_rate_count": 0,
            "accept_length_forward_count": 0,
        }
        self.requests, self.isl, self.osl = 0, 0.0, 0.0
        return out


def _ids(pool: PoolSnapshot | None, states: Iterable[str]) -> list[int]:
    if pool is None:
        return []
    want = set(states)
    return sorted(w.worker for w in pool.workers if w.state in want)


@define
class TickPayload:
    """Builds the ``on_tick`` dict of each Dynamo tick for one pool (agg) or two (disagg)."""

    disagg: bool
    dp_size: int = 1
    prefill_fpm: FpmBuffer = field(init=False)
    decode_fpm: FpmBuffer = field(init=False)
    traffic: TrafficAccumulator = field(factory=TrafficAccumulator)
    ordinal: int = 0
    last_tick_ms: float = 0.0

    def __attrs_post_init__(self) -> None:
        self.prefill_fpm = FpmBuffer(self.dp_size)
        self.decode_fpm = FpmBuffer(self.dp_size)

    def observe(self, prefill: PoolSnapshot | None, decode: PoolSnapshot, traffic: TrafficWindow,
                now_ms: float) -> None:
        """Take in one servesim window (every servesim tick, Dynamo's or not)."""
        if prefill is not None:
            self.prefill_fpm.observe(prefill, now_ms)
        self.decode_fpm.observe(decode, now_ms)
        self.traffic.add(traffic)

    def build(self, prefill: PoolSnapshot | None, decode: PoolSnapshot, now_ms: float) -> dict[str, Any]:
        """The payload of the Dynamo tick at ``now_ms`` (drains the buffers)."""
        act_p = _ids(prefill, ACTIVE_STATES)
        act_d = _ids(decode, ACTIVE_STATES)
        start_p = sorted(prefill.starting_ids) if prefill is not None else []
        start_d = sorted(decode.starting_ids)
        drain_p = _ids(prefill, ("draining",))
        drain_d = _ids(decode, ("draining",))
        self.prefill_fpm.emit_idle_due(act_p, now_ms)
        self.decode_fpm.emit_idle_due(act_d, now_ms)
        out = {
            "tick_ordinal": self.ordinal,
            "now_ms": now_ms,
            "prefill_fpm_snapshots": self.prefill_fpm.take(),
            "decode_fpm_snapshots": self.decode_fpm.take(),
            "active_prefill_count": len(act_p),
            "active_decode_count": len(act_d),
            "active_prefill_ids": act_p,
            "active_decode_ids": act_d,
            "starting_prefill_count": len(start_p),
            "starting_decode_count": len(start_d),
            "starting_prefill_ids": start_p,
            "starting_decode_ids": start_d,
            "draining_prefill_count": len(drain_p),
            "draining_decode_count": len(drain_d),
            "draining_prefill_ids": drain_p,
            "draining_decode_ids": drain_d,
            "non_draining_prefill_count": len(act_p) + len(start_p),
            "non_draining_decode_count": len(act_d) + len(start_d),
            "total_prefill_count": len(act_p) + len(start_p) + len(drain_p),
            "total_decode_count": len(act_d) + len(start_d) + len(drain_d),
            "traffic": self.traffic.drain((now_ms - self.last_tick_ms) / 1000.0),
        }
        self.ordinal += 1
        self.last_tick_ms = now_ms
        return out


__all__ = ["IDLE_FPM_INTERVAL_MS", "FpmBuffer", "TickPayload", "TrafficAccumulator", "fpm_record"]
