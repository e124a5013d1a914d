"""Host KV offload (G2) on the ``vllm`` rank: vLLM's native ``OffloadingConnector`` as the
reference models it (aisimulate-engine.md §9) over core's :class:`servesim.kv.host_tier.HostTier`.

* **Stores (D2H, write-through).** After each pass's scheduling, every request whose prompt
  gained complete blocks prepares a store of those the tier lacks (from its persistent store
  cursor to ``min(computed, prompt) // block_size``); prepared stores are submitted at the
  pass's completion boundary. A store that finds no room keeps the cursor and retries later.
* **Lookup (after G1).** When the admission loop reaches a waiting request, its one G1
  prefix lookup comes first; then the tier is probed for the prompt blocks that follow (every
  prompt block is touched, last first, as vLLM's LRU policy does). A hit that the admission
  rule lets in (the whole request fits beside the running ones) reserves real G1 blocks for
  the G1 prefix and the loaded blocks, queues the H2D (not before the copies out of those
  blocks end), and parks the request out of the waiting queue. A request whose hit is still
  in flight (a pending store, or another request's load of the same blocks) is skipped for
  the pass and returns to the front of the queue, as vLLM's scheduler puts skipped requests
  back. Once the pass's budget is spent, no waiting request is probed.
* **Completion.** Transfers complete when the driver processes internal work at their
  deadline (``next_internal_deadline_ms``) between passes, or at a pass boundary; one that
  falls due during a pass waits for its boundary. A completed load registers its blocks as
  G1 blocks of the request (device ``Stored`` events) and puts it at the front of the
  waiting queue (the loads completing together in completion order); its next admission
  reuses exactly the reserved prefix.
* **Cancellation** of a parked request cancels its load at command time and frees its
  reservation.
* **Attribution.** A request's first admission carries ``CacheTierAttribution(g1, host)``:
  the G1 hit before any load and the tokens the load added.

Not modelled: the reference's fencing of G1 blocks whose D2H copy is still in flight (a
later allocation of such a block waits for the copy); servesim reuses them at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract import CacheTierAttribution
from servesim.kv.host_tier import HostTier, Lookup
from servesim.mechanics.handoff import kv_bytes_per_token

from servesim_vllm.request import Status, VllmRequest

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig

    from servesim_vllm.interfaces import SchedulerView
    from servesim_vllm.pass_result import PassResult

#: Verdicts of :meth:`VllmHostOffload.probe` other than "admit through G1".
PARKED = "parked"
SKIPPED = "skipped"
BLOCKED = "blocked"


class HostRequestState:
    """One request's connector state: prompt keys, store cursor, load."""

    __slots__ = ("keys", "local", "next_store", "latest_store", "transfer", "g1_tokens",
                 "loaded_prefix", "loaded", "activated", "first_recorded")

    def __init__(self, keys: list[int], local: list[int]) -> None:
        self.keys = keys
        self.local = local
        self.next_store = 0
        self.latest_store = 0  # transfer id of the newest store, 0 when none
        self.transfer = 0  # the H2D in flight, 0 when none
        self.g1_tokens = 0
        self.loaded_prefix = 0  # G1 prefix + loaded blocks of the last load
        self.loaded = 0
        self.activated = False
        self.first_recorded = False


class VllmHostOffload:
    """The connector of one rank."""

    def __init__(self, s: SchedulerView, config: EngineConfig) -> None:
        assert config.native_host_offload is not None
        per_token = kv_bytes_per_token(config)
        assert per_token is not None
        pool = s.pool
        # The tier's events join the device pool's stream (one id sequence). BlockPool has no
        # public name for its publisher yet (tests/qa/test_private_access.py, AWAITING_CORE).
        publish = pool.publish_events if pool.events_enabled else None
        self.tier = HostTier(config.native_host_offload, int(round(s.bs * per_token)), publish)
        self.s = s
        self.load_by_key: dict[int, int] = {}
        self.parked: dict[int, VllmRequest] = {}  # transfer id -> loading request
        # G1 block id -> the store still copying it to the host: a load into that block
        # cannot start before the copy ends (the reference's source dependency).
        self.copying: dict[int, int] = {}
        self.skipped: list[VllmRequest] = []
        self.activated: dict[int, VllmRequest] = {}  # loaded, not admitted yet

    @classmethod
    def build(cls, s: SchedulerView, config: EngineConfig) -> VllmHostOffload | None:
        return cls(s, config) if config.native_host_offload is not None else None

    def state(self, req: VllmRequest) -> HostRequestState:
        st = req.host
        if st is None:
            bs = self.s.bs
            n = req.prompt_len // bs
            req.ensure_hashes(n, bs)
            st = req.host = HostRequestState(list(req.seq[:n]), list(req.loc[:n]))
        return st

    # -- admission ------------------------------------------------------------------------

    def admission(self, req: VllmRequest, cached: int, active: int) -> str | None:
        """The waiting head after its G1 lookup: :meth:`probe`, or BLOCKED once the pass's
        budget is spent (vLLM never queries the connector then)."""
        if self.s.budget <= 0:
            return BLOCKED
        return self.probe(req, cached, active)

    def probe(self, req: VllmRequest, cached: int, active: int) -> str | None:
        """After the G1 lookup of the waiting head: None to admit it through G1, else
        PARKED/SKIPPED (taken off the queue) or BLOCKED (no G1 room for its load)."""
        st = self.state(req)
        if st.activated:
            return None
        tier = self.tier
        if st.latest_store and tier.has_transfer(st.latest_store):
            return self._skip(req)
        st.latest_store = 0
        for key in reversed(st.keys):
            tier.touch(key)
        bs = self.s.bs
        base = cached // bs
        matched = 0
        deferred = False
        for key in st.keys[base:]:
            found = tier.lookup(key)
            if found is Lookup.MISS:
                break
            matched += 1
            deferred |= found is Lookup.PENDING or key in self.load_by_key
        if matched == 0:
            return None
        if deferred:
            return self._skip(req)
        return self._start_load(req, st, base, matched, cached, active)

    def _skip(self, req: VllmRequest) -> str:
        self.skipped.append(self.s.waiting.popleft())
        return SKIPPED

    def _start_load(self, req: VllmRequest, st: HostRequestState, base: int, matched: int,
                    cached: int, active: int) -> str:
        s = self.s
        bs = s.bs
        end = base + matched
        # The admission rule still holds: the whole request must fit beside the running ones.
        needed = -(-req.length // bs) - active // bs
        room = s.usable_blocks - s.pool.num_active - self.tails(req)
        if s.beh.scheduler_reserve_full_isl and needed > room:
            return BLOCKED
        if not s.pool.allocate(req.table, end, req.seq[:base] if base else ()):
            return BLOCKED
        keys = st.keys[base:end]
        now = s.now
        not_before = now
        for b in req.table.ids[base:end]:
            store = self.copying.get(b)
            if store is not None:
                deadline = self.tier.deadline(store)
                if deadline is not None and deadline > not_before:
                    not_before = deadline
        tid = self.tier.schedule_load(req.rid, keys, now, not_before)
        for key in keys:
            self.load_by_key[key] = tid
        st.transfer = tid
        st.g1_tokens = cached
        st.loaded_prefix = end
        st.loaded = matched
        s.waiting.popleft()
        s.queue_stats(req, -1)
        req.status = Status.LOADING
        self.parked[tid] = req
        return PARKED

    def restore_skipped(self) -> None:
        """Skipped requests go back to the front of the queue, in order (vLLM's
        ``skipped_waiting_requests``)."""
        if self.skipped:
            self.s.waiting.extendleft(reversed(self.skipped))
            self.skipped.clear()

    @staticmethod
    def frozen_cost(req: VllmRequest, cached: int, active: int, bs: int) -> tuple[int, int]:
        """An activated request reuses exactly its reserved prefix (held, so active)."""
        st = req.host
        if st is None or not st.activated:
            return cached, active
        tokens = min(st.loaded_prefix * bs, cached)
        return tokens, tokens

    def tails(self, candidate: VllmRequest) -> int:
        """Blocks promised to the rest of other loading or loaded requests (their full
        footprint beyond the reserved prefix), which a new load must leave free (as vLLM's
        ``_inflight_prefill_reserved_blocks`` for asynchronous loads)."""
        bs = self.s.bs
        total = 0
        for group in (self.parked.values(), self.activated.values()):
            for req in group:
                if req is not candidate:
                    total += max(0, -(-req.length // bs) - req.host.loaded_prefix)
        return total

    def on_admitted(self, req: VllmRequest, reused: int) -> CacheTierAttribution | None:
        st = self.state(req)
        bs = self.s.bs
        if st.activated:
            st.activated = False
            del self.activated[req.rid]
            g1 = min(st.g1_tokens, reused)
            attribution = CacheTierAttribution(g1, reused - g1)
            st.next_store = max(st.next_store, reused // bs)
        else:
            attribution = CacheTierAttribution(reused, 0)
        if st.first_recorded:
            return None
        st.first_recorded = True
        return attribution

    # -- stores ---------------------------------------------------------------------------

    def after_schedule(self, res: PassResult) -> None:
        """Prepare the write-through stores of the prompt blocks this pass completed."""
        bs = self.s.bs
        tier = self.tier
        for rid, w in res.work.items():
            if not w.prompt_tokens:
                continue
            req = w.req
            st = self.state(req)
            end = min(min(req.computed, req.prompt_len) // bs, len(st.keys))
            start = st.next_store
            if end <= start:
                continue
            keys = st.keys[start:end]
            if all(tier.lookup(k) is not Lookup.MISS for k in keys):
                st.next_store = end
                continue
            tid = tier.prepare_store(rid, keys, st.local[start:end])
            if tid is None:
                continue  # no room: the cursor stays, a later pass retries
            st.next_store = end
            if tid:
                st.latest_store = tid
                copying = self.copying
                ids = req.table.ids
                for i in range(start, end):
                    copying[ids[i]] = tid
                for key in reversed(st.keys):
                    tier.touch(key)

    # -- time -----------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        return self.tier.next_deadline()

    def at_boundary(self, now: float) -> None:
        """A pass boundary: complete what is due, submit the pass's stores, settle
        zero-time transfers."""
        self.advance(now)
        self.tier.submit_prepared_stores(now)
        self.advance(now)

    def advance(self, now: float) -> None:
        activated = []
        for t in self.tier.tick(now):
            if t.transfer_id not in self.parked:
                continue  # a store (its source blocks stay in ``copying`` until reused)
            for key in t.keys:
                del self.load_by_key[key]
            activated.append(self.parked.pop(t.transfer_id))
        for req in activated:
            self._activate(req)
        # Activated requests go to the front of the queue, in completion order: ahead of
        # anything preempted since, whose blocks their reservations may be holding.
        self.s.waiting.extendleft(reversed(activated))

    def _activate(self, req: VllmRequest) -> None:
        s = self.s
        st = req.host
        assert st is not None
        st.transfer = 0
        st.activated = True
        self.activated[req.rid] = req
        if s.caching:
            s.finalize_blocks(req, st.loaded_prefix)
        # A preempted request keeps its generated tokens through the load.
        req.status = Status.PREEMPTED if req.generated else Status.WAITING
        s.queue_stats(req, +1)

    def requeue_preempted(self, victim: VllmRequest) -> None:
        """A preempted request goes to the front of the queue, but behind the loaded
        requests there: their admission releases the G1 blocks they reserved."""
        waiting = self.s.waiting
        activated = self.activated
        if not activated:
            waiting.appendleft(victim)
            return
        i = 0
        while i < len(waiting) and waiting[i].rid in activated:
            i += 1
        waiting.insert(i, victim)

    def cancel(self, req: VllmRequest) -> None:
        """Cancel a parked request's load now and free its reserved G1 blocks."""
        st = req.host
        assert st is not None and st.transfer
        tid = st.transfer
        self.tier.cancel_load(tid)
        for key in st.keys[st.loaded_prefix - st.loaded:st.loaded_prefix]:
            self.load_by_key.pop(key, None)
        del self.parked[tid]
        st.transfer = 0


__all__ = ["BLOCKED", "PARKED", "SKIPPED", "HostRequestState", "VllmHostOffload"]
