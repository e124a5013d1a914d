"""What an elastic replay measures: planner snapshots and the report's ``elastic`` section.

The snapshot's windows run from one planner tick to the next: arrivals (the traffic window),
requests that finished (TTFT, mean ITL per request, throughput), and the forward-pass metrics
of the passes that ended. KV utilisation and queue lengths are each worker's last occupancy
snapshot (``Metrics``), so the ranks record occupancy when a planner is configured.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

from servesim.contract import ForwardPassMetrics
from servesim.replay.elastic_intervals import intervals
from servesim.replay.lifecycle import WorkerState, gpu_seconds
from servesim.replay.planning import (
    PlannerSnapshot,
    PoolSnapshot,
    TrafficWindow,
    WorkerSnapshot,
    percentiles,
)

if TYPE_CHECKING:
    from servesim.config.sections import ReportConfig


class ElasticView:
    """Windows and counters of one :class:`ElasticReplayer` (see the module docs)."""

    def __init__(self, replayer: Any) -> None:
        self.r = replayer
        self.since = 0.0
        self.arrivals = 0
        self.isl = 0
        self.osl = 0
        self.done: list[int] = []
        self.fpm: dict[int, list[ForwardPassMetrics]] = {}
        self.fpm_end: dict[int, list[float]] = {}
        self.occupancy: dict[tuple[int, int], Any] = {}
        # Per worker, the window's peak KV use and queue length over its passes' ranks.
        self.peak: dict[int, tuple[float, int]] = {}

    # -- recording -------------------------------------------------------------------

    def arrival(self, rid: int) -> None:
        turn = self.r.turns[rid]
        self.arrivals += 1
        self.isl += turn.input_length
        self.osl += turn.output_length

    def finished(self, rid: int) -> None:
        if self.r.planner is not None:
            self.done.append(rid)

    def pass_metrics(self, w: int, fpm: ForwardPassMetrics, occupancy: Any, now: float) -> None:
        if self.r.planner is None:
            return
        pool = self.r.records[w].pool
        self.fpm.setdefault(pool, []).append(fpm)
        self.fpm_end.setdefault(pool, []).append(now)
        if occupancy is not None:
            self.occupancy[(w, occupancy.dp_rank)] = occupancy
            kv, queue = self.peak.get(w, (0.0, 0))
            self.peak[w] = (max(kv, occupancy.cache_usage), max(queue, occupancy.waiting_requests))

    def forget_worker(self, w: int) -> None:
        """Worker ``w`` lost its engine: its occupancy snapshots are void."""
        self.occupancy = {k: v for k, v in self.occupancy.items() if k[0] != w}
        self.peak.pop(w, None)

    def restart_request(self, rid: int) -> None:
        """A retried request starts over: drop its tokens so far from the log."""
        log = self.r.log
        if log.ntok[rid] == 0:
            return
        log.first[rid] = -1.0
        log.last[rid] = -1.0
        log.ntok[rid] = 0
        if log.token_times is not None:
            log.token_times[rid] = []
        keep = [i for i, x in enumerate(log.itl_rid) if x != rid]
        if len(keep) != len(log.itl_rid):
            log.itl = array("d", [log.itl[i] for i in keep])
            log.itl_rid = array("q", [log.itl_rid[i] for i in keep])

    # -- the planner's snapshot ------------------------------------------------------

    def snapshot(self, now: float) -> PlannerSnapshot:
        r = self.r
        log = r.log
        window_s = max((now - self.since) / 1000.0, 1e-9)
        pools = []
        for p, rt in enumerate(r.pools):
            router = r.router_of_pool(p)
            state = router.state
            slot_of = {w: i for i, w in enumerate(router.ready)}
            counts = dict.fromkeys(WorkerState, 0)
            waiting = running = 0
            usage: list[float] = []
            tokens = 0
            workers = []
            for rec in r.records:
                if rec.pool != p:
                    continue
                counts[rec.state] += 1
                if rec.state in (WorkerState.READY, WorkerState.WARMUP, WorkerState.DRAINING):
                    kv_w, queue_w = 0.0, 0
                    for dp in range(r.engines[rec.worker].dp_size):
                        occ = self.occupancy.get((rec.worker, dp))
                        if occ is not None:
                            waiting += occ.waiting_requests
                            running += occ.running_requests
                            kv_w = max(kv_w, occ.cache_usage)
                            queue_w += occ.waiting_requests
                            if rec.state is not WorkerState.DRAINING:
                                usage.append(occ.cache_usage)
                    peak_kv, peak_queue = self.peak.get(rec.worker, (kv_w, queue_w))
                    workers.append(WorkerSnapshot(rec.worker, rec.state.value, kv_w, queue_w,
                                                  max(peak_kv, kv_w), max(peak_queue, queue_w),
                                                  rec.ready_ms))
                i = slot_of.get(rec.worker)
                if i is not None:
                    base = i * state.dp_size
                    tokens += sum(state.prefill_tokens[base: base + state.dp_size])
            done = [rid for rid in self.done if not log.rejected[rid] and r.request_in_pool(rid, p)]
            ttft = [log.first[rid] - log.arrival[rid] for rid in done if log.ntok[rid] >= 1]
            itl = [(log.last[rid] - log.first[rid]) / (log.ntok[rid] - 1)
                   for rid in done if log.ntok[rid] >= 2]
            out_tokens = sum(log.ntok[rid] for rid in done)
            pools.append(PoolSnapshot(
                name=rt.name, starting=counts[WorkerState.STARTING],
                warmup=counts[WorkerState.WARMUP], ready=counts[WorkerState.READY],
                draining=counts[WorkerState.DRAINING], restarting=counts[WorkerState.RESTARTING],
                queued_requests=waiting + r.held_for(p), queued_tokens=tokens,
                running_requests=running,
                kv_utilization=sum(usage) / len(usage) if usage else 0.0,
                ttft_ms=percentiles(ttft), itl_ms=percentiles(itl), completed=len(done),
                output_tokens_per_s=out_tokens / window_s,
                request_throughput=len(done) / window_s,
                passes=tuple(self.fpm.get(p, ())), workers=tuple(workers),
                pass_end_ms=tuple(self.fpm_end.get(p, ())),
                starting_ids=tuple(rec.worker for rec in r.records if rec.pool == p and rec.state
                                   in (WorkerState.STARTING, WorkerState.RESTARTING)),
            ))
        n = self.arrivals
        traffic = TrafficWindow(n, self.isl / n if n else 0.0, self.osl / n if n else 0.0)
        snap = PlannerSnapshot(now, self.since, tuple(pools), traffic)
        self.since = now
        self.arrivals = self.isl = self.osl = 0
        self.done = []
        self.fpm = {}
        self.fpm_end = {}
        self.peak = {}
        return snap

    # -- the report ------------------------------------------------------------------

    def report(self, sla: ReportConfig | None = None) -> dict[str, Any]:
        """The ``elastic`` section (docs/elastic.md, "Report"); ``sla``: the report's SLAs
        (servesim.replay.elastic_intervals)."""
        r = self.r
        log = r.log
        end = r.end_ms()
        pools = []
        for p, rt in enumerate(r.pools):
            recs = [rec for rec in r.records if rec.pool == p]
            gpu_s = sum(gpu_seconds(rec, end, rt.gpus_per_worker) for rec in recs)
            ids = {rec.worker for rec in recs}
            done = [rid for rid in range(log.n) if log.done[rid] >= 0.0 and not log.rejected[rid]
                    and r.request_in_pool(rid, p)]
            tokens = sum(log.ntok[rid] for rid in done)
            busy = sum(r.pass_busy_ms[w] for w in ids)
            pools.append({
                "name": rt.name,
                "workers_initial": rt.initial,
                "workers_added": sum(1 for a in r.scaling.actions
                                     if a["pool"] == rt.name and a["action"] == "add"),
                "workers_removed": sum(1 for a in r.scaling.actions
                                       if a["pool"] == rt.name and a["action"] == "remove"),
                "workers_final": sum(1 for rec in recs if rec.state is not WorkerState.STOPPED),
                "gpus_per_worker": rt.gpus_per_worker,
                "gpu_seconds": gpu_s,
                "completed": len(done),
                "output_tokens": tokens,
                "output_tokens_per_gpu_second": tokens / gpu_s if gpu_s > 0 else 0.0,
                "busy_gpu_seconds": busy / 1000.0 * rt.gpus_per_worker,
            })
        submitted = sum(1 for a in r.arrived if a >= 0.0)
        failed = len(r.failed)
        rejected = sum(log.rejected) - failed
        completed = sum(1 for d, x in zip(log.done, log.rejected, strict=True) if d >= 0.0 and not x)
        out: dict[str, Any] = {
            "gpu_seconds": sum(p["gpu_seconds"] for p in pools),
            "pools": pools,
            "scaling": list(r.scaling.actions),
            "workers": [{"worker": rec.worker, "pool": r.pools[rec.pool].name,
                         "added_ms": rec.added_ms, "ready_ms": rec.ready_ms,
                         "stopped_ms": rec.stopped_ms, "state": rec.state.value,
                         "crashes": rec.crashes, "states": [list(h) for h in rec.history]}
                        for rec in r.records],
            "requests": {"submitted": submitted, "completed": completed, "failed": failed,
                         "rejected": rejected, "retried": r.retried, "redirected": r.redirected},
        }
        out["intervals"] = intervals(log, sla, r.interval_ms, end)
        if r.faults is not None:
            out["faults"] = r.faults.report()
        if r.planner is not None:
            extra = r.planner.finish()
            if extra:
                out["planner"] = dict(extra)
        return out
