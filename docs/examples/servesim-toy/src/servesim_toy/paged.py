"""A paged-KV toy backend on core's block pool: chunked prefill, prefix caching, KV events.

The pool cycle (docs/writing-a-plugin.md, "The KV block pool"), once per request:

1. **lookup**, at admission: ``pool.lookup(seq_hashes)`` counts the prompt's leading blocks
   already cached;
2. **allocate**, at admission: ``pool.allocate(table, n, prefix)`` grows the request's
   ``BlockTable`` to ``n`` blocks, reusing the cached ``prefix`` blocks and taking fresh ones
   (evicting unreferenced cached blocks when the free list runs out); all or nothing;
3. **finalize**, with each prompt chunk: ``pool.finalize(table, upto, seq_hashes,
   local_hashes)`` makes the full blocks the chunk fills cache-visible when the pass is
   scheduled (as vLLM's scheduler caches them, so a later prompt of the same pass may hit
   them), which publishes their ``Stored`` event;
4. **release**, at the boundary of the request's last pass or when it is cancelled:
   ``pool.release(table)`` drops its references; its cached blocks stay in the pool (prefix
   hits for later prompts) until evicted, which publishes ``Removed``;
5. **drain_events**, at every pass boundary: ``pool.drain_events()`` hands the events over.

This rank allocates a request's whole sequence (prompt and output) at admission, so it never
preempts; a request that can never fit is rejected. Each pass walks the requests in arrival
order, admitting waiting ones while its token budget lasts: ``max_num_batched_tokens``, less
one token per decoding request, goes to prompt chunks, and every request whose prompt is
computed emits one token.
"""

from __future__ import annotations

from attrs import define, frozen
from servesim import APPLIED, NOOP, CancelRequest, CommandEffects, CommandResult, Metrics, Request, Submit
from servesim.config.engine import EngineConfig
from servesim.contract import Admission, Command, OutputBatch, PassCompletionEffects, PassStartEffects
from servesim.errors import CommandRejected
from servesim.kv import BlockTable, make_block_pool
from servesim.rank import CommandContext, Rank, RankIdentity, RankPass, RankServices
from servesim.timing.pricing import ShapePricer
from servesim.timing.shape import PrefillChunk


@frozen
class PagedConfig:
    """The ``engine.toy_paged:`` section."""

    max_num_batched_tokens: int = 64


@define
class _Seq:
    request: Request
    table: BlockTable  # empty until the request is admitted
    computed: int = 0  # prompt tokens computed or cached, counting the pass in flight
    emitted: int = 0


class PagedToyRank(Rank[OutputBatch, PagedConfig]):
    """The pending pass is its ``OutputBatch``, released by ``complete_pass``."""

    config_class = PagedConfig
    default_block_size = 16
    eviction_support = frozenset({"ids", "records"})  # make_block_pool drives any policy

    def __init__(self, identity: RankIdentity, config: EngineConfig, backend_config: PagedConfig,
                 services: RankServices) -> None:
        super().__init__(identity, config, backend_config, services)
        self.bs = config.block_size or self.default_block_size
        self.pool = make_block_pool(
            config.num_gpu_blocks, eviction=services.new_eviction_policy(), block_size=self.bs,
            enable_prefix_caching=config.enable_prefix_caching, emit_events=services.emit_kv_events,
            dp_rank=identity.dp_rank)
        self.seqs: dict[int, _Seq] = {}  # active requests in arrival order, so the admitted ones first
        self.in_flight = False
        self.finished: list[_Seq] = []  # requests that end in the pass in flight
        # Prices a pass from its shape; a two-method timing model through its default
        # predict_pass_ms (servesim.timing.base.default_pass_ms, speed-ups applied).
        self.pricer = ShapePricer(services.timing, config, identity.dp_rank)

    def apply(self, command: Command, ctx: CommandContext, pending: OutputBatch | None) -> CommandEffects:
        if isinstance(command, Submit):
            req = command.request
            if req.request_id in self.seqs:
                raise CommandRejected(f"request {req.request_id} is already active on this rank")
            self.seqs[req.request_id] = _Seq(req, BlockTable(req.prompt_len))
            return CommandEffects(CommandResult.submitted(req.request_id))
        if not isinstance(command, CancelRequest):
            raise CommandRejected(f"the toy_paged backend does not support {type(command).__name__}")
        rid = command.request_id
        seq = self.seqs.pop(rid, None)
        owned = seq is not None
        if seq is not None:
            self.pool.release(seq.table)  # 4. release (an empty table, if it was still waiting)
        # The pass in flight holds outputs only for a request that is still active here or that
        # finishes in it: a cancel suppresses them either way.
        suppressed = pending is not None and pending.remove_request(rid)
        return CommandEffects(APPLIED if owned or suppressed else NOOP, suppressed_pending_output=suppressed,
                              retired_requests=(rid,) if owned else ())

    def is_ready(self) -> bool:
        return not self.in_flight and bool(self.seqs)

    def is_drained(self) -> bool:
        return not self.in_flight and not self.seqs

    def execute_pass(self, now_ms: float) -> RankPass[OutputBatch]:
        self.pool.now = now_ms  # a record eviction policy orders blocks by the pass's time
        out, chunks = OutputBatch(), []
        contexts = [s.computed + s.emitted for s in self.seqs.values()  # of the decoding requests
                    if s.table and s.computed == s.request.prompt_len]
        budget = self.backend_config.max_num_batched_tokens - len(contexts)
        for seq in list(self.seqs.values()):
            req, rid = seq.request, seq.request.request_id
            if not seq.table:  # waiting: admit it while prompt tokens are left in the budget
                if budget <= 0:
                    break
                blocks = -(-(req.prompt_len + req.planned_output_tokens) // self.bs)  # prompt and output
                if blocks > self.pool.capacity:  # can never fit: a rejected terminal
                    del self.seqs[rid]
                    out.completed.append(rid)
                    out.rejected.append(rid)
                    continue
                seq_hashes = req.prompt.block_hashes(self.bs)[0]
                # 1. lookup; the prompt's last token is always computed, so its block is never reused
                cached, _ = self.pool.lookup(seq_hashes, max_blocks=(req.prompt_len - 1) // self.bs)
                if not self.pool.allocate(seq.table, blocks, seq_hashes[:cached]):  # 2. allocate
                    break  # the pool cannot hold it yet: wait for a release
                seq.computed = out.cached_tokens[rid] = cached * self.bs
            n = min(req.prompt_len - seq.computed, budget)
            if n > 0:  # a prompt chunk within the token budget; 3. finalize the full blocks it fills
                chunks.append(PrefillChunk(n, seq.computed))
                seq.computed, budget = seq.computed + n, budget - n
                self.pool.finalize(seq.table, seq.computed // self.bs, *req.prompt.block_hashes(self.bs))
            if seq.computed < req.prompt_len:
                continue
            if seq.emitted < req.planned_output_tokens:  # one token per pass once the prompt is computed
                out.token_request_ids.append(rid)
                seq.emitted += 1
            if seq.emitted == req.planned_output_tokens:
                out.completed.append(rid)
                self.finished.append(self.seqs.pop(rid))
        self.in_flight = True
        ms = self.pricer.price(chunks, contexts, sum(contexts), self.pool.capacity * self.bs)
        admissions = tuple(Admission(rid, cached) for rid, cached in out.cached_tokens.items())
        return RankPass(now_ms + ms, PassStartEffects(admissions=admissions), out)

    def complete_pass(self, pending: OutputBatch, end_ms: float) -> PassCompletionEffects:
        self.in_flight = False
        for seq in self.finished:
            self.pool.release(seq.table)  # 4. release
        self.finished.clear()
        running = sum(1 for s in self.seqs.values() if s.table)
        metrics = Metrics(dp_rank=self.identity.dp_rank, active_blocks=self.pool.num_active,
                          inactive_blocks=self.pool.num_inactive, total_blocks=self.pool.capacity,
                          running_requests=running, waiting_requests=len(self.seqs) - running)
        # 5. drain: the events of this pass's evictions and finalizes, in order
        return PassCompletionEffects(outputs=pending, kv_events=self.pool.drain_events(), metrics=metrics)
