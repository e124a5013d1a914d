"""A prefill/decode split with lifecycle, planner and faults fed arrivals as they come
(``servesim serve``; docs/elastic.md "In servesim serve", docs/serve.md).

:class:`LiveElasticSplitReplayer` is the batch replay's
:class:`~servesim.replay.elastic_split.ElasticSplitReplayer` fed as the aggregated elastic
server's replayer is (:class:`~servesim_serve.elastic_live.LiveElasticFeed`: a request lost
after its stream sent tokens fails whatever ``lifecycle.retry`` says, planner ticks and faults
fall on the server's clock) with a split's per-request records and cancellation
(:class:`~servesim_serve.disagg_live.LiveSplitFeed`). A request lost to a failed KV transfer
(``faults.kv_transfer`` with ``fallback: fail``) ends as one lost with its worker, its decode
worker named.

A client that leaves cancels its request wherever it is: waiting for a ready worker of either
pool, waiting for a retry, mid-transfer, in a local prefill, or on its workers (its handoff
cancelled on each side still alive; one whose last token is already in flight on its decode
worker completes). A cancelled request keeps its handoff times and workers, as in the split's
replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.contract import CancelDestination
from servesim.replay.elastic_split import ElasticSplitReplayer
from servesim.workload.model import Workload

from servesim_serve.disagg_live import LiveSplitFeed
from servesim_serve.elastic_live import LiveElasticFeed

# What a decode worker did to a request whose KV never reached it (LiveElasticFeed.lost_at).
TRANSFER_LOST = "did not receive this request's KV (faults.kv_transfer, fallback: fail)"


class LiveElasticSplitReplayer(LiveElasticFeed, LiveSplitFeed, ElasticSplitReplayer):
    """An :class:`ElasticSplitReplayer` over requests added while it runs (module docstring).
    Takes ElasticSplitReplayer's arguments but the workload (it starts empty)."""

    def __init__(self, prefill_engines: Sequence[Any], decode_engines: Sequence[Any],
                 workload: Workload | None = None, **kwargs: Any) -> None:
        super().__init__(prefill_engines, decode_engines, Workload(()), **kwargs)
        self.init_feed()
        self.init_elastic_feed()

    def transfer_failure(self, rid: int, now: float) -> None:
        self._failing = (self.decode_worker[rid], TRANSFER_LOST)
        try:
            super().transfer_failure(rid, now)
        finally:
            self._failing = None

    def _cancel(self, rid: int, now: float) -> None:
        log = self.log
        if self.arrived[rid] < 0.0 or log.done[rid] >= 0.0 or rid in self.cancelled:
            return
        dw, ddp = self.decode_worker[rid], self.decode_dp[rid]
        if dw >= 0 and dw not in self.dead and self.times["destination_activated_ms"][rid] >= 0.0:
            # Decoding: its last token may be in flight.
            self.internal_work_due(dw, now)
            eff = self.engines[dw].apply(ddp, CancelDestination(self._hid[rid]), now)
            self.dirty.add(dw)
            if eff.kv_events:
                self.publish_kv(dw, now, eff.kv_events)
            if eff.lifecycle_events:
                self.apply_lifecycle(dw, ddp, eff.lifecycle_events, now)
            if rid not in eff.retired_requests:
                return  # its last token is in flight: it completes
        pw, pdp = self.prefill_worker[rid], self.prefill_dp[rid]
        # Waiting for a retry: on no worker, in no wait, not in the in-flight count.
        retrying = pw < 0 and dw < 0 and rid not in self.wait_prefill and rid not in self.wait_decode
        times = {k: column[rid] for k, column in self.times.items()}
        transfer = self.transfer_ms[rid]
        self.detach(rid, now)  # the rest of its handoff, its waits, transfer and local prefill
        for k, column in self.times.items():
            column[rid] = times[k]
        self.transfer_ms[rid] = transfer
        self.prefill_worker[rid], self.prefill_dp[rid] = pw, pdp
        self.decode_worker[rid] = dw
        if retrying:
            self._in_flight += 1
        self.cancelled.add(rid)
        log.rejected[rid] = True
        self.finish_request(rid, now)


__all__ = ["LiveElasticSplitReplayer"]
