"""A paged-KV toy backend on core's block pool: chunked prefill, prefix caching, KV events.

The pool cycle (docs/writing-a-plugin.md, "The KV block pool"), once per request:

1. **lookup**: ``pool.lookup(seq_hashes)`` counts the prompt's leading blocks already cached;
2. **allocate**: ``pool.allocate(table, n, prefix)`` grows the request's ``BlockTable`` to
   ``n`` blocks, reusing the cached ``prefix`` blocks and taking fresh ones (evicting
   unreferenced cached blocks when the free list runs out); all or nothing;
3. **finalize**: ``pool.finalize(table, upto, seq_hashes, local_hashes)`` makes the blocks the
   pass has computed cache-visible, which publishes their ``Stored`` event;
4. **release**: ``pool.release(table)`` drops the request's references when it ends; its
   cached blocks stay in the pool (prefix hits for later prompts) until evicted, which
   publishes ``Removed``;
5. **drain_events**: ``pool.drain_events()`` hands the events over at the pass boundary.

This rank allocates a request's whole sequence (prompt and output) at admission, so it never
preempts; a request that can never fit is rejected. Each pass decodes one token for every
request past its prefill, then spends what is left of ``max_num_batched_tokens`` on prompt
chunks (admitting waiting requests in arrival order).
"""

from __future__ import annotations

from collections import deque

from attrs import define, field, frozen
from servesim import (
    APPLIED,
    NOOP,
    CancelRequest,
    CommandContext,
    CommandEffects,
    CommandRejected,
    CommandResult,
    Metrics,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
    Rank,
    RankIdentity,
    RankPass,
    RankServices,
    Request,
    Submit,
)
from servesim.config.engine import EngineConfig
from servesim.contract import Admission, Command
from servesim.kv import BlockTable, make_block_pool
from servesim.timing import scaled_ms
from servesim.timing.pricing import ShapePricer
from servesim.timing.shape import PrefillChunk


@frozen
class PagedConfig:
    """The ``engine.toy_paged:`` section."""

    max_num_batched_tokens: int = 64


@define
class _Seq:
    request: Request
    table: BlockTable
    seq_hashes: list[int]  # chained hashes of the prompt's full blocks (TokenSeq.block_hashes)
    local_hashes: list[int]
    computed: int = 0  # prompt tokens whose KV exists
    emitted: int = 0


@define
class _Pending:
    outputs: OutputBatch
    finished: list[_Seq] = field(factory=list)


class PagedToyRank(Rank[_Pending, PagedConfig]):
    config_class = PagedConfig
    default_block_size = 16
    eviction_support = frozenset({"lru", "ids"})  # BlockPool drives any EvictionPolicy by id

    def __init__(self, identity: RankIdentity, config: EngineConfig, backend_config: PagedConfig,
                 services: RankServices) -> None:
        super().__init__(identity, config, backend_config, services)
        self.bs = config.block_size or self.default_block_size
        self.pool = make_block_pool(
            config.num_gpu_blocks, eviction=services.new_eviction_policy(), block_size=self.bs,
            enable_prefix_caching=config.enable_prefix_caching, emit_events=services.emit_kv_events,
            dp_rank=identity.dp_rank)
        self.waiting: deque[Request] = deque()
        self.running: list[_Seq] = []
        self.in_flight = False
        self.shapes = ShapePricer.for_rank(services.timing, config, identity.dp_rank)

    def apply(self, command: Command, ctx: CommandContext, pending: _Pending | None) -> CommandEffects:
        if isinstance(command, Submit):
            rid = command.request.request_id
            if any(r.request_id == rid for r in self.waiting) or any(s.request.request_id == rid
                                                                   for s in self.running):
                raise CommandRejected(f"request {rid} is already active on this rank")
            self.waiting.append(command.request)
            return CommandEffects(CommandResult.submitted(rid))
        if not isinstance(command, CancelRequest):
            raise CommandRejected(f"the toy_paged backend does not support {type(command).__name__}")
        rid = command.request_id
        owned = any(r.request_id == rid for r in self.waiting)
        self.waiting = deque(r for r in self.waiting if r.request_id != rid)
        for seq in [s for s in self.running if s.request.request_id == rid]:
            self.running.remove(seq)
            self.pool.release(seq.table)
            owned = True
        finished = pending is not None and any(s.request.request_id == rid for s in pending.finished)
        suppressed = pending is not None and (owned or finished or command.discard_pending_output) \
            and pending.outputs.remove_request(rid)
        return CommandEffects(APPLIED if owned or suppressed else NOOP, suppressed_pending_output=suppressed,
                              retired_requests=(rid,) if owned else ())

    def is_ready(self) -> bool:
        return not self.in_flight and bool(self.waiting or self.running)

    def is_drained(self) -> bool:
        return not self.in_flight and not self.waiting and not self.running

    def execute_pass(self, now_ms: float) -> RankPass[_Pending]:
        self.pool.now = now_ms  # a record eviction policy reads the pass's time
        out, admitted = OutputBatch(), []
        pending = _Pending(out)
        decoding = [s for s in self.running if s.computed == s.request.prompt_len]
        budget = self.backend_config.max_num_batched_tokens - len(decoding)
        chunks: list[tuple[int, int]] = []  # (tokens, context before) of each prompt chunk
        prefilling = [s for s in self.running if s.computed < s.request.prompt_len]
        while self.waiting and budget > sum(s.request.prompt_len - s.computed for s in prefilling):
            req = self.waiting.popleft()
            seq_hashes, local_hashes = req.prompt.block_hashes(self.bs)
            # 1. lookup; the prompt's last token is always computed, so its block is never reused
            cached, _ = self.pool.lookup(seq_hashes, max_blocks=(req.prompt_len - 1) // self.bs)
            seq = _Seq(req, BlockTable(req.prompt_len), seq_hashes, local_hashes, cached * self.bs)
            blocks = -(-(req.prompt_len + req.planned_output_tokens) // self.bs)
            if blocks > self.pool.capacity:
                out.completed.append(req.request_id)  # can never fit: a rejected terminal
                out.rejected.append(req.request_id)
                continue
            if not self.pool.allocate(seq.table, blocks, seq_hashes[:cached]):  # 2. allocate
                self.waiting.appendleft(req)  # wait for a release
                break
            admitted.append(Admission(req.request_id, seq.computed))
            out.cached_tokens[req.request_id] = seq.computed
            self.running.append(seq)
            prefilling.append(seq)
        for seq in prefilling:  # chunked prefill within the token budget
            n = min(seq.request.prompt_len - seq.computed, budget)
            if n > 0:
                chunks.append((n, seq.computed))
                seq.computed, budget = seq.computed + n, budget - n
        for seq in self.running:  # one token for each request past its prefill
            if seq.computed < seq.request.prompt_len:
                continue
            if seq.emitted < seq.request.planned_output_tokens:
                out.token_request_ids.append(seq.request.request_id)
                seq.emitted += 1
            if seq.emitted >= seq.request.planned_output_tokens:
                out.completed.append(seq.request.request_id)
                pending.finished.append(seq)
        self.running = [s for s in self.running if s not in pending.finished]
        self.in_flight = True
        end = now_ms + self._duration(chunks, decoding)
        return RankPass(end, PassStartEffects(admissions=tuple(admitted)), pending)

    def _duration(self, chunks: list[tuple[int, int]], decoding: list[_Seq]) -> float:
        timing, cfg, ms = self.services.timing, self.config, 0.0
        kv, total = sum(s.computed + s.emitted for s in decoding), self.pool.capacity * self.bs
        if self.shapes is not None:  # a model that prices whole passes (servesim.timing.shape)
            contexts = [s.computed + s.emitted for s in decoding]
            return self.shapes.price([PrefillChunk(n, before) for n, before in chunks], contexts, kv, total)
        if chunks:
            isl = sum(n + before for n, before in chunks) // len(chunks)
            prefix = sum(before for _, before in chunks) // len(chunks)
            ms += scaled_ms(timing.predict_prefill_ms(len(chunks), isl, prefix), cfg.speedup_ratio)
        if decoding:
            ms += scaled_ms(timing.predict_decode_ms(len(decoding), kv, kv // len(decoding), total),
                            cfg.decode_speedup)
        return ms

    def complete_pass(self, pending: _Pending, end_ms: float) -> PassCompletionEffects:
        self.in_flight = False
        for seq in [*self.running, *pending.finished]:  # 3. finalize the prompt blocks computed
            self.pool.finalize(seq.table, seq.computed // self.bs, seq.seq_hashes, seq.local_hashes)
        for seq in pending.finished:
            self.pool.release(seq.table)  # 4. release
        metrics = Metrics(dp_rank=self.identity.dp_rank, active_blocks=self.pool.num_active,
                          inactive_blocks=self.pool.num_inactive, total_blocks=self.pool.capacity,
                          running_requests=len(self.running), waiting_requests=len(self.waiting))
        # 5. drain: the events of this pass's finalize, release and evictions, in order
        return PassCompletionEffects(outputs=pending.outputs, kv_events=self.pool.drain_events(),
                                     metrics=metrics)
