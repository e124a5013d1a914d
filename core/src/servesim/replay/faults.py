"""Seeded, deterministic faults of an elastic replay (``faults:``; docs/elastic.md).

* Crashes: scripted (``crashes: [{at_s, worker}]``) or random, each serving worker failing
  after an exponential time of mean ``mtbf_s`` from its start of service (one draw per
  incarnation, from a generator seeded by ``seed`` and the worker id, so a worker's draws do
  not depend on other workers). A crash loses the worker's requests (retried or failed per
  ``lifecycle.retry``) and its KV cache (an AllBlocksCleared event), and the worker starts
  again ``restart_s`` later with a fresh engine (``starting``, then warm-up). A crash due
  while the worker is not serving (starting, restarting, stopped) is counted as missed.
* Slow workers: from ``from_s`` until ``until_s`` the worker's passes take ``factor`` times
  their modelled time (passes starting in the window; factors of overlapping windows
  multiply, and multiply a warm-up's).
* The router's KV view: worker ``worker``'s KV events reach the router ``delay_ms`` late
  and each is lost with probability ``drop`` (sinks still see them all, on time).
* KV transfers of a prefill/decode split (servesim.replay.elastic_split): a transfer fails
  as scripted or with ``failure_rate``; the split's replayer retries it or falls back.
* Rejections on arrival (``rejections``): each arriving request is turned away with
  probability ``rate``, drawn per request from ``seed`` and its id (so the draws do not depend
  on the order of arrivals), with a reason drawn by weight from ``reasons``. It is refused
  before any admission policy sees it, arrives and fails at once (the report's
  ``elastic.requests.rejected``), and is counted under ``faults.rejected`` by reason.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from servesim.config.elastic import FaultsConfig, KvViewConfig
from servesim.replay.driver import EXTERNAL

# EXTERNAL event codes (servesim.replay.elastic holds -1 to -8).
CRASH = -4
RESTART = -5
SLOW = -6
KV_LATE = -8
RANDOM_CRASH = -9


class FaultPlan:
    """One run's faults (see the module docs); counters feed ``elastic.faults``."""

    def __init__(self, config: FaultsConfig) -> None:
        self.config = config
        self.kv_view = bool(config.kv_view)
        self.kv_rng = random.Random(f"kv:{config.seed}")
        self.late: dict[int, tuple[int, Sequence[Any]]] = {}
        self.next_late = 0
        self.counts = {"crashes": 0, "crashes_missed": 0, "random_crashes": 0, "restarts": 0,
                       "slow_windows": len(config.slow), "requests_lost": 0,
                       "kv_events_delayed": 0, "kv_events_dropped": 0}
        # KV-transfer failures (a split only): the first ``count`` transfers of a scripted
        # request fail; any other fails with ``failure_rate``, drawn per request and try.
        self.transfer = config.kv_transfer
        self.scripted: dict[int, int] = {}
        if self.transfer is not None:
            for f in self.transfer.failures:
                self.scripted[f.request] = self.scripted.get(f.request, 0) + f.count
            self.counts.update({"kv_transfer_failures": 0, "kv_transfer_retries": 0,
                                "local_prefills": 0, "kv_transfer_lost": 0})
        self.rejections = config.rejections
        self.rejected: dict[str, int] = {}
        self.reason_of: dict[int, str] = {}  # request id -> why it was rejected on arrival
        if self.rejections is not None:
            self.reasons = sorted(self.rejections.reasons.items())
            self.weight = sum(w for _, w in self.reasons)

    # -- scheduling ------------------------------------------------------------------

    def schedule(self, r: Any) -> None:
        """Scripted events and the initial workers' first random crashes."""
        for c in self.config.crashes:
            r.push_event(c.at_s * 1000.0, EXTERNAL, CRASH, c.worker)
        for s in self.config.slow:
            r.push_event(s.from_s * 1000.0, EXTERNAL, SLOW, s.worker)
            r.push_event(s.until_s * 1000.0, EXTERNAL, SLOW, s.worker)
        for rec in r.records:
            if rec.ready_ms >= 0.0:
                self.in_service(r, rec.worker, rec.ready_ms)

    def in_service(self, r: Any, w: int, now: float) -> None:
        """Worker ``w`` (this incarnation) starts serving: draw its random crash."""
        mtbf = self.config.mtbf_s
        if mtbf is None:
            return
        rec = r.records[w]
        rng = random.Random(f"crash:{self.config.seed}:{w}:{rec.epoch}")
        r.push_worker_event(now + rng.expovariate(1.0 / mtbf) * 1000.0, RANDOM_CRASH, w)

    def event(self, r: Any, code: int, b: int, now: float) -> None:
        if code == CRASH:
            self.crash(r, b, now)
        elif code == RANDOM_CRASH:
            rec = r.records[b >> 16]
            if rec.epoch & 0xFFFF == b & 0xFFFF:  # else an earlier incarnation's draw
                self.counts["random_crashes"] += 1
                self.crash(r, b >> 16, now)
        elif code == RESTART:
            w = b >> 16
            before = r.records[w].epoch
            r.restart(w, b & 0xFFFF, now)
            if r.records[w].epoch != before:
                self.counts["restarts"] += 1
        elif code == SLOW:
            if b < len(r.records):
                r.rescale(b)
        elif code == KV_LATE:
            w, events = self.late.pop(b)
            r.kv_router_for(w).on_kv_events(w, events)
        else:
            raise ValueError(f"unknown elastic event {code}")

    def crash(self, r: Any, w: int, now: float) -> None:
        if w >= len(r.records):
            self.counts["crashes_missed"] += 1
            return
        lost = len(r.requests_on(w))
        if r.crash(w, now, now + self.config.restart_s * 1000.0):
            self.counts["crashes"] += 1
            self.counts["requests_lost"] += lost
        else:
            self.counts["crashes_missed"] += 1

    # -- slow workers ----------------------------------------------------------------

    def slow_factor(self, w: int, now: float) -> float:
        f = 1.0
        t = now / 1000.0
        for s in self.config.slow:
            if s.worker == w and s.from_s <= t < s.until_s:
                f *= s.factor
        return f

    # -- the router's KV view --------------------------------------------------------

    def view_of(self, w: int) -> KvViewConfig | None:
        found = None
        for k in self.config.kv_view:
            if k.worker == w:
                return k
            if k.worker is None:
                found = k
        return found

    def route_kv(self, r: Any, w: int, now: float, events: Sequence[Any]) -> None:
        """Deliver ``events`` to the router as worker ``w``'s view allows."""
        view = self.view_of(w)
        router = r.kv_router_for(w)
        if view is None:
            router.on_kv_events(w, events)
            return
        if view.drop > 0.0:
            kept = [ev for ev in events if self.kv_rng.random() >= view.drop]
            self.counts["kv_events_dropped"] += len(events) - len(kept)
            events = kept
            if not events:
                return
        if view.delay_ms > 0.0:
            key = self.next_late
            self.next_late += 1
            self.late[key] = (w, events)
            self.counts["kv_events_delayed"] += len(events)
            r.push_event(now + view.delay_ms, EXTERNAL, KV_LATE, key)
            return
        router.on_kv_events(w, events)

    # -- KV transfers -----------------------------------------------------------------

    def transfer_fails(self, rid: int, tries: int) -> bool:
        """Whether the transfer that is request ``rid``'s ``tries``-th (from 0, over all its
        attempts) fails."""
        kt = self.transfer
        assert kt is not None
        if tries < self.scripted.get(rid, 0):
            return True
        if kt.failure_rate <= 0.0:
            return False
        return random.Random(f"transfer:{self.config.seed}:{rid}:{tries}").random() < kt.failure_rate

    # -- rejections on arrival -------------------------------------------------------

    def rejects(self, rid: int) -> str | None:
        """The reason request ``rid`` is rejected on arrival, or None (see the module docs)."""
        rj = self.rejections
        assert rj is not None
        if rj.rate <= 0.0:
            return None
        rng = random.Random(f"reject:{self.config.seed}:{rid}")
        if not rng.random() < rj.rate:
            return None
        x = rng.random() * self.weight
        reason = self.reasons[-1][0]  # where rounding leaves x past every weight
        for name, w in self.reasons:
            x -= w
            if x < 0.0:
                reason = name
                break
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self.reason_of[rid] = reason
        return reason

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.counts)
        if self.rejections is not None:
            out["rejected"] = dict(sorted(self.rejected.items()))
        return out


class InjectedRejections:
    """The replay's admission step (``Replayer.admission``) with rejections on arrival in
    front of the configured admission control, if any."""

    def __init__(self, plan: FaultPlan, inner: Any) -> None:
        self.plan = plan
        self.inner = inner

    def admit(self, rid: int, now: float) -> bool:
        if self.plan.rejects(rid) is not None:
            return False
        return self.inner is None or self.inner.admit(rid, now)

    def finished(self, rid: int) -> None:
        if self.inner is not None:  # it counts only the requests it admitted
            self.inner.finished(rid)
