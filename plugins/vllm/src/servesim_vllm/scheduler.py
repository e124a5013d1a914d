"""The vLLM v1 scheduling pass, as Dynamo's Gen-2 ``VllmCore`` models it.

One call of :meth:`VllmScheduler.run_pass` is one scheduler step plus its forward pass
(dynamo-mocker.md §2.2-§2.5, with the newest first-token timing of aisimulate-engine.md
§6.4):

1. running requests first, in queue order, while the token budget lasts; a decoding
   request costs one token (its sampled, not yet computed token);
2. then the waiting queue in FIFO order while no preemption happened in this pass and
   ``max_num_seqs`` allows, stopping at the first request that cannot be admitted;
3. KV blocks are allocated all or nothing; a running request that cannot get its blocks
   preempts the newest (LIFO) or oldest (FIFO) running request, which drops its blocks into
   the prefix cache, keeps its generated tokens and goes back to the front of the queue
   (under ``engine.scheduling_policy: priority`` the queue is a heap on (priority, arrival)
   and the victim the running request of largest key: :mod:`servesim_vllm.priority`);
4. blocks whose tokens are now computed become cache-visible at once, so a later request of
   the same pass can hit them;
5. every request whose known tokens are all computed samples one token. Requests that
   prefilled this pass get their first token from the prefill forward; only the ongoing
   decoders are priced by the decode call, and everything finishes at the shared end
   ``now + prefill + decode``.

That is the reference pass, and this module is all of it. The speed-ups that must give the
same bytes live behind one seam, the steady batch (:mod:`servesim_vllm.fast.steady`, with the
runs of passes built on it in :mod:`servesim_vllm.fast.runs`), entered only here:
:meth:`VllmScheduler.run_pass` schedules the running list from a kept steady batch
(``steady_step``, then ``after_step``) and otherwise writes the batch back (``sync``) before
the reference :meth:`VllmScheduler._schedule_running`; :meth:`VllmScheduler.cancel` writes it
back first. Inside the reference pass, ``_schedule_running``'s first branch (a plain decode
step inside its block) and ``lazy_hashes`` (placeholder hashes for blocks no KV event or
router can observe) are shortcuts of the same steps, not other paths.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from servesim.config.engine import EngineConfig, PreemptionMode, SchedulingPolicy
from servesim.contract import (
    Admission,
    PressureEvent,
    PressureKind,
    PressureState,
    Request,
    RequestId,
)
from servesim.kv.eviction_records import make_block_pool
from servesim.mechanics.speculative import Speculation
from servesim.rank import RankServices
from servesim.timing.pricing import ShapePricer

from servesim_vllm.behaviour import Behaviour, resolve
from servesim_vllm.cadence import Cadence, mid_prefill
from servesim_vllm.fast.steady import VllmSteadyBatch, after_step, steady_step, sync
from servesim_vllm.handoff import admit_prebuilt_only
from servesim_vllm.host_offload import BLOCKED, VllmHostOffload
from servesim_vllm.lora import VllmLora, served_name
from servesim_vllm.pass_result import PassResult, Work
from servesim_vllm.priority import PriorityWaiting, lowest_priority
from servesim_vllm.request import Status, VllmRequest
from servesim_vllm.speculative import emit as emit_speculative

_BLOCKED = -1
_CURRENT_PREEMPTED = -2
_UNBOUNDED = 1 << 62


class VllmScheduler:
    """Queues, the block pool and the pass algorithm of one rank."""

    def __init__(
        self,
        config: EngineConfig,
        services: RankServices,
        dp_rank: int,
        behaviour: Behaviour | None = None,
        seed_offset: int = 0,
    ) -> None:
        self.cfg = config
        self.bs = config.bs
        self.timing = services.timing
        self.shapes = ShapePricer.for_rank(services.timing, config, dp_rank)
        self.beh = behaviour or resolve(None)
        # vLLM's null block is never handed out (docs/conformance.md, difference 1).
        self.usable_blocks = config.num_gpu_blocks - (1 if self.beh.null_block else 0)
        self.pool = make_block_pool(
            self.usable_blocks,
            eviction=services.new_eviction_policy(),
            block_size=self.bs,
            enable_prefix_caching=config.enable_prefix_caching,
            emit_events=services.emit_kv_events,
            dp_rank=dp_rank,
        )
        self.caching = config.enable_prefix_caching
        self.token_ids_in_events = config.emit_kv_token_ids and services.emit_kv_events
        # Generated blocks are hashed only when something could observe them (VllmRequest.
        # finalize_seq): with KV events off, pseudo tokens get placeholders until preemption.
        self.lazy_hashes = self.caching and not self.pool.events_enabled
        self.lifo = config.preemption_mode is PreemptionMode.LIFO
        self.max_seqs = config.max_num_seqs if config.max_num_seqs is not None else _UNBOUNDED
        self.max_tokens = (
            config.max_num_batched_tokens if config.max_num_batched_tokens is not None else _UNBOUNDED
        )
        self.requests: dict[RequestId, VllmRequest] = {}
        # engine.scheduling_policy: priority (servesim_vllm.priority): a heap, not a deque.
        self.by_priority: PriorityWaiting | None = None
        self.waiting: deque[VllmRequest] | PriorityWaiting = deque()
        if config.scheduling_policy is SchedulingPolicy.PRIORITY:
            self.by_priority = self.waiting = PriorityWaiting()
        self.running: list[VllmRequest] = []
        self.preemptions_total = 0
        # Speculative decoding (servesim_vllm.speculative), None when aic_nextn is unset.
        self.spec = Speculation.build(config, seed_offset)
        # Host KV offload G2 (servesim_vllm.host_offload), None when it is off.
        self.host = VllmHostOffload.build(self, config)
        # LoRA's max_loras rule and adapter cache (servesim_vllm.lora), None when it is off.
        self.lora = VllmLora.build(config)
        # Handoff bookkeeping (servesim_vllm.handoff), attached by the rank.
        self.book: Any = None
        # Queued-request statistics for forward-pass metrics, kept incrementally so a pass
        # never scans the waiting queue: [count, sum, sum of squares] of the prompt lengths
        # of never-admitted requests and of the known lengths of preempted ones.
        self.queued_prefill = [0, 0, 0]
        self.queued_decode = [0, 0, 0]
        # The steady batch left by a run or a steady pass (servesim_vllm.fast.steady.VllmSteadyBatch):
        # while set, the running requests' counters are stale and the batch holds them;
        # anything else that reads or changes running requests syncs first.
        self.steady: VllmSteadyBatch | None = None
        # Pass-local state (valid only inside run_pass).
        self.now = 0.0
        self.budget = 0
        self.result = PassResult()
        self.preempted_in_pass = False
        # vLLM 0.33's local prefill cadence (servesim_vllm.cadence), when it applies.
        interval = config.prefill_schedule_interval
        on = self.beh.local_prefill_cadence and interval > 1 and config.dp_size == 1
        self.cadence: Cadence | None = Cadence(interval) if on else None

    # -- commands -------------------------------------------------------------------------

    def submit(self, request: Request) -> VllmRequest:
        req = VllmRequest(request, self.cfg.max_model_len)
        if request.lora:
            req.table.lora_name = served_name(self.lora, request.lora)
        if self.caching:
            req.load_prompt_hashes(self.bs, elide=self.lazy_hashes)
        self.requests[req.rid] = req
        self.waiting.append(req)
        self.queue_stats(req, +1)
        return req

    def queue_stats(self, req: VllmRequest, sign: int) -> None:
        if req.status is Status.WAITING:
            acc, x = self.queued_prefill, req.prompt_len
        else:
            acc, x = self.queued_decode, req.length
        acc[0] += sign
        acc[1] += sign * x
        acc[2] += sign * x * x

    def cancel(self, rid: RequestId) -> bool:
        """Drop a waiting or running request and free its blocks; False if unknown."""
        if rid not in self.requests:
            return False
        sync(self)
        req = self.requests.pop(rid)
        if req.status is Status.RUNNING:
            self.running.remove(req)
        elif req.status is Status.LOADING:
            assert self.host is not None  # only the host tier parks a request LOADING
            self.host.cancel(req)
        else:
            self.waiting.remove(req)
            self.queue_stats(req, -1)
        self.pool.release(req.table)
        return True

    # -- the pass -------------------------------------------------------------------------

    def run_pass(self, now: float) -> PassResult:
        self.now = now
        self.pool.now = now
        self.budget = self.max_tokens
        self.result = res = PassResult()
        self.preempted_in_pass = False
        cadence = self.cadence
        if cadence is not None:
            sync(self)
            cadence.begin(self.running)
        from_batch = self.steady is not None and steady_step(self)
        if not from_batch:
            sync(self)
            self._schedule_running()
        lora = self.lora
        if lora is not None:
            lora.begin(res.order)
        self._admit_waiting()
        if lora is not None:
            lora.restore(self.waiting)
        if self.host is not None:
            self.host.restore_skipped()
            self.host.after_schedule(res)
        if cadence is not None:
            if not self.preempted_in_pass:
                cadence.after_waiting_scan(len(self.waiting))
            cadence.end(self.budget != self.max_tokens)
        self._prefill_time(res)
        if self.spec is None:
            self._emit(res)
        else:
            emit_speculative(self, res)
        if from_batch:
            after_step(self)
        return res

    def _schedule_running(self) -> None:
        running = self.running
        res = self.result
        order = res.order
        tokens = res.token_rids
        later = res.later
        bs = self.bs
        i = 0
        budget = self.budget
        n = total = sq = 0
        m = len(running)  # changes only on the slow path (preemption)
        fast = self.spec is None  # a speculative decode step samples in emit_speculative
        while i < m and budget > 0:
            req = running[i]
            length = req.length
            # Fast path: a plain decode step (the prompt is done, one sampled token to
            # compute) that stays inside its last allocated block and completes no block.
            # This is the per-pass cost of steady decoding, so it avoids every call, and it
            # samples the token at once (what _emit does for the others): nothing later in
            # the pass reads this request except a preemption, which undoes it exactly
            # (_unschedule). Only a completion waits for _emit (releases follow admission).
            # (length % bs > 1: neither the step's first nor its last token is at a block edge.)
            if req.computed == length - 1 and req.generated and length % bs > 1 and fast:
                req.computed = length
                order.append(req)
                tokens.append(req.rid)
                g = req.generated + 1
                req.generated = g
                req.length = length + 1
                n += 1
                total += length
                sq += length * length
                if g >= req.max_out:
                    later.append(req)
                budget -= 1
                i += 1
                continue
            if (not fast and req.computed == length - 1 and req.generated and length % bs
                    and length <= len(req.table.ids) * bs):
                # Speculative: the last burst's dangling token, inside the blocks the burst
                # took and completing none; emit_speculative samples the next burst.
                req.computed = length
                order.append(req)
                later.append(req)
                budget -= 1
                i += 1
                continue
            cadence = self.cadence
            chunk = cadence is not None and mid_prefill(req)
            if chunk and cadence is not None and cadence.held:  # held back; decodes still run
                i += 1
                continue
            self.budget = budget
            res.plain = [n, total, sq]
            used = self._schedule(req, 0, from_waiting=False)
            n, total, sq = res.plain
            budget = self.budget
            if self.by_priority is not None and len(running) != m:
                # Priority victims may sit before the scan; vLLM ends the scan when the
                # request preempted itself (servesim_vllm.priority).
                if used == _CURRENT_PREEMPTED:
                    break
                i = running.index(req)
            m = len(running)
            if used == _BLOCKED:
                break
            if chunk and cadence is not None and used > 0 and used != _CURRENT_PREEMPTED:
                cadence.carried = True
            if used != _CURRENT_PREEMPTED:
                i += 1
        self.budget = budget
        res.plain = [n, total, sq]

    def _admit_waiting(self) -> None:
        waiting = self.waiting
        running = self.running
        bs = self.bs
        pool = self.pool
        if self.book is not None and self.book.blocks_admission:
            # A blocked pending destination holds back fresh KV admission (§7.2).
            admit_prebuilt_only(self)
            return
        while waiting and not self.preempted_in_pass and len(running) < self.max_seqs:
            req = waiting[0]
            if req.status is Status.REMOTE:
                if self.lora is not None and self.lora.skips(req):
                    # vLLM checks max_loras after a remote request's KV has arrived too
                    self.lora.skipped.append(waiting.popleft())
                    continue
                self.admit_remote(req)
                if self.budget == 0:
                    break
                continue
            if self.impossible(req):
                waiting.popleft()
                self.queue_stats(req, -1)
                self._reject(req)
                continue
            if self.lora is not None and self.lora.skips(req):
                self.lora.skipped.append(waiting.popleft())
                continue
            cached, active_cached = self.prefill_cost(req)
            cadence = self.cadence
            if cadence is not None and cached < req.length - 1 and cadence.held:
                break  # held: only a request with just its last token to compute may enter
            if self.host is not None:  # the host tier's lookup follows G1's (host_offload)
                verdict = self.host.admission(req, cached, active_cached)
                if verdict is BLOCKED:
                    break
                if verdict is not None:
                    continue  # parked on a host load, or skipped for this pass
                cached, active_cached = self.host.frozen_cost(req, cached, active_cached, bs)
            needed = -(-req.length // bs) - active_cached // bs
            if self.beh.scheduler_reserve_full_isl and needed > self.usable_blocks - pool.num_active:
                if not running and self.book is not None and self.book.dests:
                    # Only prebuilt (activated) requests hold the KV this head waits for:
                    # let them run rather than stall the rank forever (servesim's no-hang rule).
                    admit_prebuilt_only(self)
                break
            used = self._schedule(req, cached, from_waiting=True)
            if used < 0:
                break
            waiting.popleft()
            self.queue_stats(req, -1)
            if cadence is not None and cached < req.length - 1:
                cadence.carried = True
            resumed = req.status is Status.PREEMPTED
            req.status = Status.RUNNING
            running.append(req)
            if self.lora is not None:
                self.lora.admitted(req)
            if req.cached_prefix is None:
                req.cached_prefix = cached
            res = self.result
            tier = self.host.on_admitted(req, cached) if self.host is not None else None
            res.admissions.append(Admission(req.rid, cached, tier))
            res.new_hits[req.rid] = cached
            if resumed:
                res.resumed.append(req.rid)
            if used == 0 and self.budget == 0:
                break

    def admit_remote(self, req: VllmRequest) -> None:
        """Admit an activated destination: its prompt KV is resident, so it needs no blocks
        and no prefill (admission stage "Materialized", dynamo-mocker.md §7.2)."""
        self.waiting.remove(req)
        self.queue_stats(req, -1)
        self._schedule(req, 0, from_waiting=True)
        req.status = Status.RUNNING
        self.running.append(req)
        if self.lora is not None:
            self.lora.admitted(req)
        req.cached_prefix = 0
        self.result.admissions.append(Admission(req.rid, 0))
        self.result.new_hits[req.rid] = 0

    def impossible(self, req: VllmRequest) -> bool:
        """Requests that could never run are rejected instead of blocking the queue forever.

        The reference rejects a prompt at or over ``max_model_len`` and a fresh prompt larger
        than the pool (dynamo-mocker.md §2.2). servesim applies the pool rule to readmitted
        requests too (their known tokens grew while generating), and rejects a prompt larger
        than the token budget when chunked prefill is off (vLLM refuses that configuration at
        start-up), so no request can hang. With speculative decoding the pool rule counts
        the request's next burst too.
        """
        cfg = self.cfg
        if cfg.max_model_len is not None and req.prompt_len >= cfg.max_model_len:
            return True
        need = req.length
        if self.spec is not None:
            # A speculative step reserves its whole burst: one that can never fit would
            # preempt its own request forever.
            need += min(self.spec.max_burst, req.max_out - req.generated)
        if -(-need // self.bs) > self.usable_blocks:
            return True
        return not cfg.enable_chunked_prefill and req.prompt_len > self.max_tokens

    def prefill_cost(self, req: VllmRequest) -> tuple[int, int]:
        """``(cached_tokens, active_cached_tokens)`` after the prefix-recompute rule (§2.3)."""
        if not self.caching:
            return 0, 0
        bs = self.bs
        full = req.length // bs
        req.ensure_hashes(full, bs)
        blocks, active = self.pool.lookup(req.seq, full)
        cached = blocks * bs
        if not req.finished_generating:
            # The last known token must be recomputed to produce logits.
            max_cached = (req.length - 1) // bs * bs
            if cached > max_cached:
                cached = max_cached
        if self.spec is not None and cached >= bs:
            # The drafter needs the hidden states of the last matched block: one more block
            # of every non-empty hit is recomputed (servesim_vllm.speculative).
            cached -= bs
        return cached, min(active * bs, cached)

    def _schedule(self, req: VllmRequest, cached_prefix: int, from_waiting: bool) -> int:
        """Schedule ``req`` within the budget: tokens used, ``_BLOCKED`` or
        ``_CURRENT_PREEMPTED`` (dynamo-mocker.md §2.3)."""
        budget = self.budget
        eff = req.computed + cached_prefix
        plen = req.prompt_len
        prompt_before = eff if eff < plen else plen
        remaining = req.length - eff
        if not self.cfg.enable_chunked_prefill and (
            self._unchunked_need(req, eff, plen - prompt_before) > budget
        ):
            return _BLOCKED
        desired = remaining if remaining < budget else budget
        if desired <= 0 < remaining:
            return _BLOCKED
        new_computed = eff + desired
        bs = self.bs
        target = -(-new_computed // bs)
        table = req.table
        if target > len(table.ids):
            prefix = req.seq[: cached_prefix // bs] if cached_prefix else ()
            while not self.pool.allocate(table, target, prefix):
                if from_waiting:
                    return _BLOCKED
                victim = self.victim()
                if victim is None:
                    return _BLOCKED
                self.preempt(victim)
                if victim is req:
                    return _CURRENT_PREEMPTED
        req.computed = new_computed
        if self.caching and new_computed // bs > table.num_cached:
            self.finalize_blocks(req, new_computed // bs)
        prompt_tokens = (new_computed if new_computed < plen else plen) - prompt_before
        work = Work(req, desired, prompt_tokens, prompt_before)
        res = self.result
        res.work[req.rid] = work
        res.order.append(req)
        res.later.append(req)
        if new_computed == req.length and req.generated < req.max_out:
            # It samples this pass (_emit): its token takes its place in batch order now.
            res.token_rids.append(req.rid)
        self.budget = budget - desired
        return desired

    def finalize_blocks(self, req: VllmRequest, full: int) -> None:
        """Make the request's first ``full`` blocks cache-visible (its computed tokens fill
        them, dynamo-mocker.md §2.6): those past ``table.num_cached`` publish ``Stored``."""
        bs = self.bs
        seq = req.finalize_seq(full, bs, self.lazy_hashes and req.request.output_token_ids is None)
        tokens = None
        if self.token_ids_in_events:
            tokens = lambda i: req.tokens(i * bs, (i + 1) * bs)  # noqa: E731
        self.pool.finalize(req.table, full, seq, req.loc, tokens)

    def _unchunked_need(self, req: VllmRequest, eff: int, prompt_left: int) -> int:
        """Tokens that must fit the budget whole with chunked prefill off: the prompt remainder
        (reference, §2.3) or every known token not yet computed (vLLM 0.32). A request longer
        than the whole budget keeps the prompt gate so it cannot wait forever (vLLM refuses
        such a configuration at start-up)."""
        if self.beh.unchunked_gate_counts_outputs and req.length <= self.max_tokens:
            return req.length - eff
        return prompt_left

    # -- preemption -----------------------------------------------------------------------

    def victim(self) -> VllmRequest | None:
        running = self.running
        if not running:
            return None
        if self.by_priority is not None:
            return lowest_priority(running, self.by_priority)
        return running[-1] if self.lifo else running[0]

    def preempt(self, victim: VllmRequest) -> None:
        """Return the victim's blocks to the cache and requeue it at the front (§2.4)."""
        running = self.running
        pool = self.pool
        before = PressureState(len(running), len(self.waiting), pool.num_active)
        held = len(victim.table)
        idx = len(running) - 1 if running[-1] is victim else running.index(victim)
        # The running scan's index is deliberately not shifted back: when a FIFO victim sits
        # before the request being scheduled, the index then points one past that request,
        # so the next running request sits this pass out, as in the reference peer (golden
        # case preempt_fifo). A LIFO victim sits at or after the scan, where nothing shifts.
        del running[idx]
        if victim in self.result.order:  # scheduled earlier in this pass: undo it (O(batch), rare)
            self._unschedule(victim)
        victim.realize_hashes(self.bs, pool)  # its own blocks may be hit on readmission
        pool.release(victim.table)
        victim.computed = 0
        victim.status = Status.PREEMPTED
        victim.preemptions += 1
        self.preemptions_total += 1
        (self.host.requeue_preempted if self.host is not None else self.waiting.appendleft)(victim)
        self.queue_stats(victim, +1)
        self.preempted_in_pass = True
        after = PressureState(len(running), len(self.waiting), pool.num_active)
        self.result.pressure.append(
            PressureEvent(self.now, PressureKind.VLLM_PREEMPTION, victim.rid, before, after, held)
        )

    # -- timing and tokens ----------------------------------------------------------------

    def _prefill_time(self, res: PassResult) -> None:
        """Mean input and prefix lengths over requests that advanced prompt tokens, by
        integer division (aisimulate-engine.md §6.3)."""
        count = isl = prefix = 0
        for w in res.work.values():
            if w.prompt_tokens > 0:
                count += 1
                isl += w.prefix_tokens + w.prompt_tokens
                prefix += w.prefix_tokens
        if count and self.shapes is None:
            res.prefill_ms = self.timing.predict_prefill_ms(count, isl // count, prefix // count)

    def _unschedule(self, victim: VllmRequest) -> None:
        """Take back everything scheduling did for ``victim`` in this pass, including a plain
        decoder's token (sampled at scheduling, _schedule_running)."""
        res = self.result
        res.order.remove(victim)
        if victim in res.later:
            res.later.remove(victim)
        if victim.rid in res.token_rids:
            res.token_rids.remove(victim.rid)
        undone = res.work.pop(victim.rid, None)
        if undone is not None:
            self.budget += undone.tokens
            return
        self.budget += 1
        if self.spec is not None:
            return  # a speculative dangling-token step sampled nothing yet
        length = victim.length - 1
        victim.length = length
        victim.generated -= 1
        n, total, sq = res.plain
        res.plain = [n - 1, total - length, sq - length * length]

    def _emit(self, res: PassResult) -> None:
        """Sample one token for every request whose known tokens are computed (§2.5).

        Plain decode steps sampled at scheduling (_schedule_running); this visits the rest,
        and those plain decoders' completions, in batch order. Two tallies: the decode call
        prices every sampling request that already generated (a first token comes out of the
        prefill forward), and forward-pass metrics count every scheduled request without
        prompt tokens that is not terminal (§4.5).
        """
        completed = res.completed
        plain, plain_sum, plain_sq = res.plain
        priced = priced_sum = 0
        fpm_n = fpm_sum = fpm_sq = 0
        finished: list[VllmRequest] = []
        work = res.work
        for req in res.later:
            w = work.get(req.rid)
            if w is None:
                # A plain decoder whose token (taken at scheduling) was its last.
                completed.append(req.rid)
                self.finish(req, res)
                finished.append(req)
                continue
            length = req.length
            terminal = req.generated >= req.max_out
            if w.prompt_tokens == 0 and not terminal:
                fpm_n += 1
                fpm_sum += length
                fpm_sq += length * length
            if req.computed < length:
                continue  # still prefilling
            if terminal:
                completed.append(req.rid)  # terminal after prefill: no token
                w.terminal = True
                self.finish(req, res)
                finished.append(req)
                continue
            if req.generated or not w.prompt_tokens:
                # An activated handoff destination (no prompt work) is a plain decoder.
                # A readmitted request that already generated is priced by the decode call
                # even in the pass that re-prefilled it (matches the reference peer).
                priced += 1
                priced_sum += length
                if self.shapes is not None:
                    if res.priced is None:
                        res.priced = {}
                    res.priced[req.rid] = length
            if not req.cached_signaled:
                req.cached_signaled = True
                res.cached_tokens[req.rid] = req.cached_prefix or 0
            req.generated += 1
            req.length = length + 1
            if req.generated >= req.max_out:
                completed.append(req.rid)
                self.finish(req, res)
                finished.append(req)
        if finished:
            if len(finished) > 8:
                self.running = [r for r in self.running if r.status is Status.RUNNING]
            else:  # in place: a steady batch (servesim_vllm.fast.steady) keeps the list
                for req in finished:
                    self.running.remove(req)
        res.decode_stats = (plain + fpm_n, plain_sum + fpm_sum, plain_sq + fpm_sq)
        self.decode_time(res, plain + priced, plain_sum + priced_sum)

    def decode_time(self, res: PassResult, decoders: int, kv_sum: int) -> None:
        """active_kv_tokens is the sum of the decoders' logical lengths, not physical blocks:
        the reference peer's decode times match this (aisimulate-engine.md §6.3)."""
        res.decoders = decoders
        if decoders and self.shapes is None:
            total = self.cfg.num_gpu_blocks * self.bs
            res.decode_ms = self.timing.predict_decode_ms(decoders, kv_sum, kv_sum // decoders, total)

    def finish(self, req: VllmRequest, res: PassResult) -> None:
        if not req.cached_signaled:
            req.cached_signaled = True
            res.cached_tokens[req.rid] = req.cached_prefix or 0
        book = self.book
        if book is None or not book.source_of or not book.on_source_complete(req.rid, req.table, self.cfg):
            self.pool.release(req.table)
        req.status = Status.FINISHED  # dropped from the running list at the end of _emit
        del self.requests[req.rid]

    def _reject(self, req: VllmRequest) -> None:
        res = self.result
        res.completed.append(req.rid)
        res.rejected.append(req.rid)
        self.pool.release(req.table)
        del self.requests[req.rid]

__all__ = ["PassResult", "VllmScheduler"]
