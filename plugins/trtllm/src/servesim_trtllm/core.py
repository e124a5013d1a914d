"""The trtllm scheduler state and the mechanics every capacity policy shares.

:class:`TrtCore` owns the requests of one rank, the KV block pool (core's
:class:`~servesim.kv.pool.BlockPool`, so prefix caching — TensorRT-LLM's "KV-cache reuse" —
and KV events are shared with the other block backends) and one step's execution:
allocation, context/decode pricing and token emission. Which requests run in a step is the
capacity policy's decision (:mod:`servesim_trtllm.policies`).

Reference semantics (dynamo-mocker.md §6, reusing the vLLM-style core of §2.2-§2.6):

* enqueue normalisation: ``capacity = num_gpu_blocks × block_size``; a prompt ≥ capacity is
  rejected when it reaches admission; ``max_output`` is clamped to ``capacity − prompt`` and,
  with ``max_model_len``, to ``max_model_len − prompt``;
* a step prices one prefill call over the requests that computed context tokens
  (``mean_isl``/``mean_prefix`` integer means, §2.2 step 5) and one decode call over the
  requests that were already decoding (logical sequence lengths, aisimulate-engine.md §6.3);
  everything the step emits shares its end time (§2.5);
* the sampled token is dangling until the next step computes it (§2.3); blocks become
  cache-visible as the computed boundary passes them (§2.3, §3.3) — for the native
  policies at the end of the step (:meth:`TrtCore.flush_finalize`); a finished request
  releases its blocks tail first (§2.5).

The reference step is :meth:`TrtllmRank.execute_pass` over a policy of
:mod:`servesim_trtllm.policies` and this module. Its fast paths sit behind one seam, the steady
batch (:mod:`servesim_trtllm.fast.steady`, with the runs of passes in :mod:`servesim_trtllm.fast.runs`):
the rank enters it at ``TrtllmRank._steady_members`` and ``TrtllmRank.execute_run``, and
everything else that reads running requests calls :meth:`TrtCore.sync` first. ``elide``
(placeholder hashes for trace-unique prompt blocks) shortens the same steps.
"""

from __future__ import annotations

from typing import Any

from servesim.config.engine import EngineConfig
from servesim.contract import (
    Admission,
    CacheTierAttribution,
    OutputBatch,
    PressureEvent,
    PressureKind,
    PressureState,
    Request,
    RequestId,
)
from servesim.kv.pool import BlockPool
from servesim.timing.base import TimingModel, scaled_ms

from servesim_trtllm.config import CapacitySchedulerPolicy, Limits, TrtllmConfig
from servesim_trtllm.fast.steady import TrtSteadyBatch
from servesim_trtllm.handoff import detach_held_source
from servesim_trtllm.queue_sums import QueueSums
from servesim_trtllm.request import TrtRequest
from servesim_trtllm.work import StepWork


class TrtCore:
    """Requests, pool and step mechanics of one trtllm rank."""

    def __init__(
        self,
        config: EngineConfig,
        trt: TrtllmConfig,
        limits: Limits,
        pool: BlockPool,
        timing: TimingModel,
        salt: int,
    ) -> None:
        self.config = config
        self.trt = trt
        self.policy = trt.capacity_scheduler_policy
        self.limits = limits
        self.pool = pool
        self.timing = timing
        self.bs = config.bs
        self.num_blocks = config.num_gpu_blocks
        self.capacity_tokens = self.num_blocks * self.bs
        self.native = self.policy is not CapacitySchedulerPolicy.GUARANTEED_NO_EVICT
        self.reqs: dict[RequestId, TrtRequest] = {}  # submission order (TRT-LLM's active list)
        self.waiting: dict[RequestId, TrtRequest] = {}  # FIFO
        self.running: dict[RequestId, TrtRequest] = {}  # admission order
        self.queued_prefill = QueueSums()
        self.queued_decode = QueueSums()
        self.pauses_total = 0
        self.reserved = 0  # Σ_running blocks_needed_to_finish, kept incrementally
        # Steps that found the pool short. GNE and static batch reserve to completion, so
        # for them this is an invariant violation (dynamo-mocker.md §6: logged, nothing
        # evicted); the property test asserts it stays 0.
        self.allocation_failures = 0
        self._order = 0
        self._salt = salt
        self.token_ids_in_events = False  # engine.emit_kv_token_ids, when events are on
        self.elide = False  # prompts load placeholder-elided hashes (set by the rank)
        # The steady batch left by a run or a steady step (servesim_trtllm.fast.steady): while
        # set, its members' num_computed and generated are stale (see sync).
        self.steady: TrtSteadyBatch | None = None
        self.book: Any = None  # handoff bookkeeping (servesim_trtllm.handoff), set by the rank

    # -- commands -----------------------------------------------------------------------

    def submit(self, request: Request) -> TrtRequest:
        """Enqueue with the reference's normalisation (dynamo-mocker.md §6)."""
        r = TrtRequest(request, self._order, self.bs, self._salt)
        self._order += 1
        if self.elide:
            r.blocks.load_prompt(self.bs, elide=True)
        prompt = r.prompt_len
        limit = self.limits.max_num_tokens
        if prompt >= self.capacity_tokens:
            r.reject = True
        elif self.config.max_model_len is not None and prompt >= self.config.max_model_len:
            r.reject = True
        elif not self.limits.chunked_context and limit is not None and prompt > limit:
            # servesim rejects instead of stalling forever: without chunking a context
            # longer than the step budget can never be scheduled (TensorRT-LLM refuses it).
            r.reject = True
        else:
            r.max_output = min(r.max_output, self.capacity_tokens - prompt)
            if self.config.max_model_len is not None:
                r.max_output = min(r.max_output, self.config.max_model_len - prompt)
        r.set_total_blocks(self.bs)
        self.reqs[r.rid] = r
        self.waiting[r.rid] = r
        self.queued_prefill.add(prompt)
        return r

    def remove(self, r: TrtRequest) -> None:
        """Drop all scheduler and KV state of ``r`` (completion, rejection, cancellation)."""
        if self.running.pop(r.rid, None) is not None:
            self.reserved -= r.total_blocks - len(r.table.ids)
        if r.started:
            self.pool.release(r.table)
            r.started = False
        self.reqs.pop(r.rid, None)
        if self.waiting.pop(r.rid, None) is not None:
            self.unqueue(r)

    def unqueue(self, r: TrtRequest) -> None:
        if r.paused:
            self.queued_decode.add(r.seq_len, -1)
        else:
            self.queued_prefill.add(r.prompt_len, -1)

    # -- capacity arithmetic ------------------------------------------------------------

    def lookup(self, r: TrtRequest) -> tuple[int, int]:
        """``(cached_blocks, active_blocks)`` of the sequence's cached prefix.

        Native policies keep at least one context token to compute, as TensorRT-LLM does
        when it reuses a whole prompt (it recomputes the last token to get logits); the
        reference's GNE path applies no such adjustment (dynamo-mocker.md §6).
        """
        if not self.pool.prefix_caching:
            return 0, 0
        n = r.seq_len // self.bs
        if self.native:
            n = min(n, (r.ctx_len - 1) // self.bs)
        if n <= 0:
            return 0, 0
        seq, _ = r.hashes(n, self.bs)
        return self.pool.lookup(seq, n)

    def first_new_block(self, r: TrtRequest) -> int | None:
        """Sequence hash of the first full context block not in the cache, if any
        (TensorRT-LLM's ``findNewContextBlock``)."""
        n = r.ctx_len // self.bs
        if n == 0 or not self.pool.prefix_caching:
            return None
        seq, _ = r.hashes(n, self.bs)
        cached, _ = self.pool.lookup(seq, n)
        return seq[cached] if cached < n else None

    def fresh_blocks_needed(self, r: TrtRequest) -> tuple[int, int, int]:
        """``(needed, cached_blocks, active_blocks)`` for a request not holding blocks:
        ``ceil((prompt + max_output)/bs) − floor(active_cached_tokens/bs)``."""
        cached, active = self.lookup(r)
        cached_tokens = min(cached * self.bs, r.seq_len)
        active_tokens = min(active * self.bs, cached_tokens)
        return r.total_blocks - active_tokens // self.bs, cached, active

    def reserved_available(self) -> int:
        """``(num_gpu_blocks − active_blocks) − Σ_running blocks_needed_to_finish``."""
        return self.num_blocks - self.pool.num_active - self.reserved

    def sync(self) -> None:
        """Write a steady batch's counters back into its members and drop the batch
        (servesim_trtllm.fast.steady): before anything but runs and steady steps reads them."""
        batch = self.steady
        if batch is None:
            return
        self.steady = None
        reqs = self.reqs
        batch.write_back([reqs[rid] for rid in batch.rids])

    def check_invariants(self) -> None:
        """Test aid: incremental bookkeeping equals recomputation; no request is in both
        queues; computed ≤ allocated ≤ sequence (dynamo-mocker.md §10)."""
        self.sync()
        reserved = sum(r.total_blocks - len(r.table) for r in self.running.values())
        assert reserved == self.reserved, (reserved, self.reserved)
        assert not (self.running.keys() & self.waiting.keys())
        assert set(self.reqs) == self.running.keys() | self.waiting.keys()
        for r in self.running.values():
            assert r.started and r.num_computed <= len(r.table) * self.bs
            assert len(r.table) <= -(-max(r.seq_len, r.ctx_len) // self.bs)
        for r in self.waiting.values():
            assert not r.started and not r.table.ids

    # -- step mechanics -----------------------------------------------------------------

    def set_cached(self, r: TrtRequest, cached_blocks: int) -> None:
        """Fix the prefix-cache hit of a request about to be admitted."""
        r.cached_tokens = min(cached_blocks * self.bs, r.seq_len)

    def advance(self, r: TrtRequest, desired: int, work: StepWork) -> bool:
        """Compute ``desired`` more tokens of ``r`` this step (dynamo-mocker.md §2.3).

        Allocates KV all or nothing, admits a waiting request (Admission event), finalises
        blocks the computed boundary passed and records the work. False (nothing changed)
        when the pool cannot supply the blocks.
        """
        if r.started and r.num_computed >= r.ctx_len:
            return self.decode_step(r, work)
        bs = self.bs
        fresh = not r.started
        if fresh and self.native and r.cached_tokens:
            # An earlier allocation of this step may have evicted part of the prefix found
            # when the micro-batch sized the chunk; never count on more than is still there.
            cached, _ = self.lookup(r)
            r.cached_tokens = min(r.cached_tokens, cached * bs)
        before = r.cached_tokens if fresh else r.num_computed
        target = before + desired
        alloc = target
        if fresh and self.native:
            alloc = max(target, r.ctx_len)  # TensorRT-LLM's addSequence allocates the context
        prefix: list[int] = []
        if fresh and r.cached_tokens:
            n_cached = r.cached_tokens // bs
            seq, _ = r.hashes(n_cached, bs)
            prefix = seq[:n_cached]
        held = len(r.table.ids)
        if not self.pool.allocate(r.table, -(-alloc // bs), prefix):
            self.allocation_failures += 1
            return False
        if fresh:
            self._admit(r, work)
        else:
            self.reserved -= len(r.table.ids) - held
        prompt_before = min(before, r.ctx_len)
        r.num_computed = target
        if self.pool.prefix_caching and target // bs > r.table.num_cached:
            if self.native:
                work.to_finalize.append(r)
            else:
                self.finalize(r, target // bs)
        work.record_context(r, desired, prompt_before, min(target, r.ctx_len) - prompt_before)
        return True

    def decode_step(self, r: TrtRequest, work: StepWork) -> bool:
        """The hot path: compute a decoding request's dangling token (one budget token)."""
        target = r.num_computed + 1
        table = r.table
        bs = self.bs
        if target > len(table.ids) * bs:
            if not self.pool.allocate(table, len(table.ids) + 1):
                self.allocation_failures += 1
                return False
            self.reserved -= 1
        r.num_computed = target
        if target % bs == 0 and self.pool.prefix_caching:
            if self.native:
                work.to_finalize.append(r)
            else:
                self.finalize(r, target // bs)
        work.scheduled.append(r)
        work.tokens.append(1)
        return True

    def flush_finalize(self, work: StepWork) -> None:
        """Native policies publish a step's computed blocks after the step, like
        TensorRT-LLM storing context blocks for reuse once the forward ran: contexts of the
        same step cannot hit each other's new blocks (the reference's vLLM-style pass makes
        them visible in scheduling order instead, dynamo-mocker.md §2.3)."""
        bs = self.bs
        for r in work.to_finalize:
            full = r.num_computed // bs
            if r.started and full > r.table.num_cached:
                self.finalize(r, full)

    def finalize(self, r: TrtRequest, upto: int) -> None:
        bs = self.bs
        seq, local = r.hashes(upto, bs)
        tokens = None
        if self.token_ids_in_events:
            tokens = lambda i: r.tokens(i * bs, (i + 1) * bs)  # noqa: E731
        self.pool.finalize(r.table, upto, seq, local, tokens)

    def _admit(self, r: TrtRequest, work: StepWork) -> None:
        r.started = True
        del self.waiting[r.rid]
        self.unqueue(r)
        self.running[r.rid] = r
        self.reserved += r.total_blocks - len(r.table.ids)
        if r.paused:
            work.resumed.append(r.rid)
            r.paused = False
        tier = None
        if r.first_cached is None:
            r.first_cached = r.cached_tokens
            tier = CacheTierAttribution(r.cached_tokens, 0)
        work.admissions.append(Admission(r.rid, r.cached_tokens, tier))
        work.new_hits[r.rid] = r.cached_tokens

    def reject(self, r: TrtRequest, work: StepWork) -> None:
        self.remove(r)
        work.rejected.append(r)

    def pressure_state(self) -> PressureState:
        return PressureState(len(self.running), len(self.waiting), self.pool.num_active)

    def pause(self, r: TrtRequest, work: StepWork, now_ms: float) -> None:
        """MAX_UTILIZATION pause: free the request's KV and send it back to waiting.

        TensorRT-LLM's ``LlmRequest::pause`` folds the generated tokens into the prompt and
        resets the context position; the request keeps its place in the active list and
        its released blocks stay reusable through the prefix cache.
        """
        before = self.pressure_state()
        held = len(r.table)
        self.reserved -= r.total_blocks - held
        self.pool.release(r.table)
        r.started = False
        r.paused = True
        r.num_computed = 0
        r.cached_tokens = 0
        r.ctx_len = r.seq_len
        del self.running[r.rid]
        self.waiting[r.rid] = r
        self.queued_decode.add(r.seq_len)
        self.pauses_total += 1
        work.paused.append(r.rid)
        work.pressure.append(
            PressureEvent(now_ms, PressureKind.TRTLLM_PAUSE, r.rid, before, self.pressure_state(), held)
        )

    # -- pricing and emission -----------------------------------------------------------

    def prefill_ms(self, work: StepWork) -> float:
        """One batched prefill call over requests that computed context tokens (§2.2.5)."""
        count = isl = prefix = 0
        for _, pb, pt, _ in work.contexts:
            if pt > 0:
                count += 1
                isl += pb + pt
                prefix += pb
        if count == 0:
            return 0.0
        mean_isl, mean_prefix = isl // count, prefix // count
        if mean_isl - mean_prefix == 0:
            return 0.0
        raw = self.timing.predict_prefill_ms(count, mean_isl, mean_prefix)
        return scaled_ms(raw, self.config.speedup_ratio)

    def decode_ms(self, priced: int, kv_tokens: int) -> float:
        """One decode call over ``priced`` requests holding ``kv_tokens`` logical tokens."""
        if not priced:
            return 0.0
        raw = self.timing.predict_decode_ms(priced, kv_tokens, kv_tokens // priced, self.capacity_tokens)
        return scaled_ms(raw, self.config.decode_speedup)

    def ready_and_priced(
        self, work: StepWork, lens: list[int] | None = None
    ) -> tuple[list[TrtRequest], int, int]:
        """Requests that sample this step, and how many the decode call prices (with
        their summed sequence lengths).

        A request that computed context tokens this step gets its token from that context
        forward (aisimulate-engine.md §6.4, as the installed reference behaves); every
        other sampling request — decodes, and a fresh request whose whole prompt was
        cached — is priced by the decode call (the reference prices a fully cached prompt
        with a decode call over its prompt length). ``first_token_decode_call`` prices
        the context-sampled tokens too. ``lens``, when given, receives each priced
        request's length in batch order (a pass shape's decode contexts).
        """
        ready: list[TrtRequest] = []
        append = ready.append
        priced = kv = 0
        computed_context: set[int] = set()
        if work.contexts and not self.trt.first_token_decode_call:
            computed_context = {r.rid for r, _, pt, _ in work.contexts if pt > 0}
        if not computed_context:  # the usual decode-only step: no set look-ups
            for r in work.scheduled:
                gen = r.generated
                length = r.prompt_len + gen
                if r.num_computed >= length:
                    append(r)
                    if r.max_output > gen:
                        priced += 1
                        kv += length
                        if lens is not None:
                            lens.append(length)
            return ready, priced, kv
        for r in work.scheduled:
            length = r.prompt_len + r.generated
            if r.num_computed >= length:
                append(r)
                if r.max_output > r.generated and r.rid not in computed_context:
                    priced += 1
                    kv += length
                    if lens is not None:
                        lens.append(length)
        return ready, priced, kv

    def finish(self, r: TrtRequest, out: OutputBatch) -> None:
        """A request that generated its last token releases its KV (or, a finished
        prefill, keeps it for the handoff, §7.2) and completes."""
        book = self.book
        if book is not None and book.source_of and book.on_source_complete(r.rid, r.table, self.config):
            detach_held_source(self, r)
        else:
            self.remove(r)
        out.completed.append(r.rid)

    def finalize_through(self, r: TrtRequest, upto: int) -> None:
        self.finalize(r, upto)

    def emit(self, ready: list[TrtRequest], out: OutputBatch) -> list[RequestId]:
        """Sample one token per ready request; finished requests release their KV."""
        finished: list[RequestId] = []
        append_token = out.token_request_ids.append
        for r in ready:
            if not r.first_output_sent:
                r.first_output_sent = True
                out.cached_tokens[r.rid] = r.first_cached or 0
            generated = r.generated
            max_output = r.max_output
            if generated < max_output:
                generated += 1
                r.generated = generated
                append_token(r.rid)
            if generated >= max_output:
                book = self.book
                if book is not None and book.source_of and book.on_source_complete(
                    r.rid, r.table, self.config
                ):
                    detach_held_source(self, r)  # a finished prefill keeps its KV (§7.2)
                else:
                    self.remove(r)
                out.completed.append(r.rid)
                finished.append(r.rid)
        return finished
