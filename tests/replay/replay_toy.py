"""A tiny continuous-batching rank for driver tests (no KV pressure, unlimited cache).

Each pass admits every waiting request (up to ``max_num_seqs``), takes ``prefill_ms`` when any
admitted request has uncached prompt tokens, else ``decode_ms``, and every running request
emits one token at the pass end. Full prompt blocks are cached by sequence hash and reported
as ``Stored`` KV events when the factory enables KV events; ``evict()`` drops them with a
``Removed`` event.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from servesim.config.engine import EngineConfig
from servesim.contract import (
    Admission,
    CommandEffects,
    CommandResult,
    ForwardPassMetrics,
    KvBlock,
    KvEvent,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
    RemovedBlocks,
    StoredBlocks,
    Submit,
)
from servesim.factory import EngineFactory
from servesim.rank import Rank, RankPass
from servesim.timing import FixedTiming, FixedTimingConfig


class ToyRank(Rank):
    default_block_size = 4

    def __init__(self, identity, config, backend_config, services) -> None:
        super().__init__(identity, config, backend_config, services)
        self.waiting: deque = deque()
        self.running: list[list[Any]] = []  # [request, remaining]
        self.cache: set[int] = set()
        self.event_id = 0
        self._prefill = False

    def apply(self, command, ctx, pending) -> CommandEffects:
        assert isinstance(command, Submit)
        self.waiting.append(command.request)
        return CommandEffects(CommandResult.submitted(command.request.request_id))

    def is_ready(self) -> bool:
        return bool(self.waiting or self.running)

    def is_drained(self) -> bool:
        return not self.waiting and not self.running

    def _event(self, data) -> KvEvent:
        ev = KvEvent(self.event_id, self.identity.dp_rank, data)
        self.event_id += 1
        return ev

    def execute_pass(self, now_ms: float) -> RankPass:
        bs = self.config.bs
        admissions, stored, rejected = [], [], []
        new_tokens = 0
        limit = self.config.max_num_seqs or 10**9
        while self.waiting and len(self.running) < limit:
            req = self.waiting.popleft()
            if self.config.max_model_len is not None and req.prompt_len >= self.config.max_model_len:
                rejected.append(req.request_id)
                continue
            hashes = req.prompt.block_hashes(bs)[0]
            hit = 0
            while hit < len(hashes) and hashes[hit] in self.cache:
                hit += 1
            admissions.append(Admission(req.request_id, hit * bs))
            new_tokens += req.prompt_len - hit * bs
            fresh = [h for h in hashes[hit:]]
            self.cache.update(fresh)
            if fresh and self.services.emit_kv_events:
                parent = hashes[hit - 1] if hit else None
                stored.append(self._event(StoredBlocks(parent, tuple(KvBlock(h, h) for h in fresh))))
            self.running.append([req, req.max_output_tokens, hit * bs])
        timing = self.services.timing
        if new_tokens:
            dur = timing.predict_prefill_ms(len(admissions), new_tokens, 0)
        else:
            dur = timing.predict_decode_ms(len(self.running), 0, 0, 0)
        batch = OutputBatch()
        fresh_ids = {a.request_id for a in admissions}
        still = []
        for item in self.running:
            req, remaining, cached = item
            rid = req.request_id
            if rid in fresh_ids:
                batch.cached_tokens[rid] = cached
            if remaining > 0:
                batch.token_request_ids.append(rid)
                item[1] = remaining - 1
            if item[1] == 0:
                batch.completed.append(rid)
            else:
                still.append(item)
        self.running = still
        for rid in rejected:
            batch.completed.append(rid)
            batch.rejected.append(rid)
        fpm = None
        if self.services.emit_forward_pass_metrics:
            fpm = ForwardPassMetrics(worker_id=self.identity.worker_id, num_prefill_requests=len(admissions),
                                     duration_ms=dur)
        done = PassCompletionEffects(outputs=batch, kv_events=stored, forward_pass_metrics=fpm)
        return RankPass(now_ms + dur, PassStartEffects(admissions=tuple(admissions)), done)

    def complete_pass(self, pending, end_ms: float) -> PassCompletionEffects:
        return pending

    def evict(self) -> KvEvent:
        ev = self._event(RemovedBlocks(tuple(sorted(self.cache))))
        self.cache.clear()
        return ev


def make_factory(
    prefill_ms: float = 10.0,
    decode_ms: float = 1.0,
    *,
    kv_events: bool = False,
    fpm: bool = False,
    rank_class: type[Rank] = ToyRank,
    **engine: Any,
) -> EngineFactory:
    engine.setdefault("block_size", 4)
    return EngineFactory(
        EngineConfig(**engine),
        rank_class,
        FixedTiming(FixedTimingConfig(float(prefill_ms), float(decode_ms))),
        emit_kv_events=kv_events,
        emit_forward_pass_metrics=fpm,
    )
