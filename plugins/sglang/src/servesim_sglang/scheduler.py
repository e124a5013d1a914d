"""One pass of the SGLang scheduler loop: policy, prefill admission, prefill-or-decode step.

Follows dynamo-mocker.md §5 and the newest reference core (aisimulate-engine.md §6.4), which
is what the reference implementation shipped with Dynamo 1.6.1 does (checked against its
output, see ``tests/golden/sglang``):

* **Prefill first.** A pass that forms a prefill batch runs only that batch (SGLang without
  ``--enable-mixed-chunk``): requests already running do not decode in it; each request whose
  last chunk completes gets its first token at the end of the prefill forward, with no decode
  time. A pass without a prefill batch is a decode pass over every running request. With
  ``engine.sglang.enable_mixed_chunk`` the running requests decode in the prefill pass
  (:mod:`servesim_sglang.mixed`).
* **Admission** (``get_new_batch_prefill``): ``rem_total = available + evictable −
  Σ_running min(remaining output, clip) × new_token_ratio``; ``max_prefill_tokens`` and
  ``chunked_prefill_size`` budgets charge page-rounded *computed* tokens (a request that does
  not fit the pass's remaining chunk budget is cut to it, page-aligned); a waiting request
  matches its sequence against the radix cache once, capped at ``len − 1`` so at least one
  token is computed; a chunked request caches its page-aligned prefix and goes back to the
  front of the queue. An allocation failure
  (OOM: the prefixes locked by earlier admissions in the same pass are no longer evictable)
  stops admission; only with ``engine.sglang.oom_resets_ratio`` (dynamo-mocker.md §5, Gen-2)
  does it also reset ``new_token_ratio`` — the reference implementation does not, and with
  the reset its 1000-request overload trace drifts from the reference after ~200 s.
* **Decode** (``check_decode_mem``): while ``available + evictable`` cannot cover every
  running request's next page and more than one request runs, retract the request with the
  fewest output tokens (its private KV is freed; its cached pages stay, unlocked), with a
  ``SGLANG_RETRACTION`` pressure event at the pass start. Decode time uses
  ``active_kv_tokens = min(Σ len, total)`` and the mean context. Decode tokens enter the radix
  cache as they are generated; finished requests cache ``floor_to_page(len)`` tokens.
* **After a retraction** (``engine.sglang.retraction_requeue`` / ``retraction_ratio``): by
  default the retracted requests go to the *back* of the waiting queue (SGLang
  ``_add_request_to_queue``) and ``new_token_ratio`` is re-estimated from the survivors as
  SGLang's ``retract_decode`` does, ``min(1, (Σ decoded + 20·n) / (Σ max_new + 1))``; the ratio
  decays by ``decay_step`` on decode passes only. This is what the reference implementation
  shipped with Dynamo 1.6.1 does (the golden traces pin it; with ``front``/``reset`` they
  differ by up to 43 %). dynamo-mocker.md §5 describes the older Gen-2 rule — re-queue at the
  front, reset the ratio to its initial value — available as ``front`` and ``reset``.

Where SGLang 0.5.23 itself differs from this (checked step by step against its scheduler,
docs/conformance.md), ``engine.sglang`` switches (:mod:`servesim_sglang.behaviour`, all on in
``profile: sglang-0.5.23``) select its rules: :mod:`servesim_sglang.admission` for the
prefill batch, :mod:`servesim_sglang.retraction` for the decode memory check,
:mod:`servesim_sglang.overlap` for the overlap loop (a pass's results processed at the end of
the next one), and the KV and tree switches read here and in :mod:`servesim_sglang.radix_cache`.

This module is the reference pass, stepped one pass at a time. The one fast path, runs of
steady decode passes, lives in :mod:`servesim_sglang.fast.runs` behind one seam
(``SglangRank.execute_run``), which declines under any version switch; nothing here
depends on it.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import TYPE_CHECKING, Any

from servesim.contract import Admission, WorkerType
from servesim.timing.base import scaled_ms
from servesim.timing.pricing import ShapePricer
from servesim.timing.shape import PrefillChunk

from servesim_sglang import admission as _admission
from servesim_sglang import mixed as _mixed
from servesim_sglang import overlap as _overlap
from servesim_sglang import retraction as _retraction
from servesim_sglang.pass_outcome import PassOutcome
from servesim_sglang.radix_cache import RadixCache
from servesim_sglang.request import SglangRequest
from servesim_sglang.speculative import emit_bursts

if TYPE_CHECKING:
    from servesim.timing.base import TimingModel

    from servesim_sglang.config import SchedulerParams
    from servesim_sglang.policies import SchedulePolicy


class _Stop(enum.Enum):
    """Why admission stopped: a budget ran out, or allocation failed (OOM) after the budgets
    had admitted the request."""

    BUDGET = "budget"
    OOM = "oom"


RETRACT_DECODE_STEPS = _retraction.RETRACT_DECODE_STEPS
"""Also the decode steps of KV kept per survivor when ``retract_decode`` re-estimates the ratio."""


class SglangScheduler:
    """Queues, radix cache and ``new_token_ratio`` of one rank."""

    def __init__(
        self,
        params: SchedulerParams,
        cache: RadixCache,
        policy: SchedulePolicy,
        timing: TimingModel,
        *,
        speedup: float,
        decode_speedup: float,
        worker_type: WorkerType,
    ) -> None:
        self.p = params
        self.cache = cache
        self.policy = policy
        self.timing = timing
        self.speedup = speedup
        self.decode_speedup = decode_speedup
        self.worker_type = worker_type
        self.waiting: deque[SglangRequest] = deque()
        self.waiting_version = 0  # bumped whenever membership of ``waiting`` changes
        self.entries = 0  # requests that entered ``waiting`` (SglangRequest.entry_seq)
        self.running: list[SglangRequest] = []
        self.ratio = params.init_new_token_ratio
        self.retractions_total = 0
        self.retracted_ids: set[int] = set()
        bh = params.behaviour
        # SGLang-version switches (servesim_sglang.behaviour) read on hot paths.
        self._ahead = 0 if bh.lazy_decode_slot else 1  # decode slot taken for the new token
        self.cache_decode = not bh.cache_decode_at_finish
        self._prompt_split = bh.prompt_boundary_split
        self.batch_full = False  # SGLang's running_batch.batch_is_full (sticky_batch_full)
        self._left = False  # a request left the batch in the last pass (clears batch_full)
        self._chunk_pending: SglangRequest | None = None  # cache_chunk_next_step
        self.prefix_refresh_calls = 0  # waiting_prefix_touch (servesim_sglang.admission)
        # Disaggregated handoff hooks (servesim_sglang.handoff.SglangHandoffAdapter).
        self.handoff: Any = None
        # SGLang's --enable-mixed-chunk (servesim_sglang.mixed), set by the rank: the running
        # requests decode in a step that forms a prefill batch.
        self.mix = False
        # Set by the rank for a timing model that prices pass shapes (servesim.timing.shape).
        self.shapes: ShapePricer | None = None
        # Speculative decoding (servesim.mechanics.speculative.Speculation), set by the rank.
        self.spec: Any = None
        # SGLang's overlap loop (engine.sglang.overlap_schedule, servesim_sglang.overlap), set
        # by the rank: each pass's results are processed at the end of the next pass.
        self.overlap = False
        # (request, chunk end or -1 for its last token, from a prefill) per token emitted:
        # this pass's results, and the previous pass's, processed at the end of this one.
        self.results: list[tuple[SglangRequest, int, bool]] = []
        self.pending_results: list[tuple[SglangRequest, int, bool]] = []
        # Requests whose token in flight a priority preemption dropped: their next token is
        # one the client already has (servesim_sglang.overlap.drop_inflight).
        self.echoes: dict[int, SglangRequest] = {}

    # -- policy context (read-only view for SchedulePolicy) ------------------------------

    @property
    def page_size(self) -> int:
        return self.p.page_size

    @property
    def lpm_fallback_threshold(self) -> int:
        return self.p.lpm_fallback_threshold

    @property
    def check_threshold(self) -> int:
        return self.p.check_threshold

    @property
    def deprioritize_threshold(self) -> int:
        return self.p.deprioritize_threshold

    def prefix_match_len(self, request: SglangRequest) -> int:
        return self.cache.match_len(request.tokens, request.seq_len)

    # -- the pass -------------------------------------------------------------------------

    def run_pass(self, now: float) -> PassOutcome:
        out = PassOutcome(end_ms=now)
        self.cache.now = now
        out.running_before = len(self.running)
        bh = self.p.behaviour
        self._begin_pass()
        handoff = self.handoff
        if handoff is not None and handoff.activated:
            handoff.admit_activated(out)
        if self.waiting:
            if not bh.two_phase_admission:  # else ordered by admission, past its early exits
                self.order_waiting(False)
            if not self.running:
                self._reject_impossible_head(out)
        can_run: list[SglangRequest] = []
        total_isl = total_prefix = 0
        if handoff is None or not handoff.blocks_admission():  # else: behind a pending destination
            admit = _admission.admit if bh.two_phase_admission else SglangScheduler._admit
            can_run, total_isl, total_prefix = admit(self, out)
        batch = len(can_run)
        for req in can_run:
            if req.materialized < req.seq_len:
                assert req.lease is not None
                if bh.cache_chunk_next_step:
                    self._chunk_pending = req
                else:
                    self.cache.cache_prefix(req.lease, req.tokens, req.materialized)
                self.waiting.appendleft(req)
                self.waiting_version += 1
                self._left = True  # SGLang's last-batch filter drops the chunked request
        if batch:
            if not out.running_before:
                # SGLang's empty running batch is replaced by this prefill batch at the next
                # step, and the new batch object starts with batch_is_full cleared.
                self._left = True
            out.prefill_pass = True
            out.model_work = any(item[1] > 0 for item in out.prefill_items)
            fresh = [r for r in can_run if r.materialized >= r.seq_len]
            # SGLang's mixed block: the running requests join the prefill batch
            decodes = self._join_decodes(out) if self.mix and self.running else None
            if decodes is not None:  # a shape-pricing model prices the whole pass instead
                prefill_ms = (self._prefill_ms(batch, total_isl // batch, total_prefix // batch)
                              if self.shapes is None else 0.0)
                out.end_ms = now + _mixed.price_ms(self, out, decodes, prefill_ms)
            elif self.shapes is None:
                out.end_ms = now + self._prefill_ms(batch, total_isl // batch, total_prefix // batch)
            else:  # every request of the round, a fully cached one as a 0-token chunk
                chunks = [PrefillChunk(tokens, prefix) for _, tokens, prefix, _ in out.prefill_items]
                out.end_ms = now + self.shapes.price(chunks, [], 0, self.p.total_tokens)
            kept: list[SglangRequest] = []
            if decodes is not None and self._ahead:  # eager slots: the decodes take theirs first
                kept = self._emit_decode_tokens(decodes, out)
            self._first_tokens(fresh, out)
            # (a held handoff source keeps its lease but has nothing left to run; with the
            # overlap loop a request whose first token is its last stays until processed)
            joined = [r for r in fresh if r.lease is not None and (r.remaining_output or r.inflight)]
            if decodes is not None:  # the mixed batch: its prefill requests, then the decodes
                if not self._ahead:  # results in batch order (process_batch_result_prefill)
                    kept = self._emit_decode_tokens(decodes, out)
                out.mixed_decode = [r.rid for r in decodes]
                out.model_work = True
                out.decode_forwards = len(decodes)
                self.running = joined + kept
            else:
                self.running.extend(joined)
        elif not self._decode(now, out):
            # SGLang decays the ratio in ``update_running_batch``: on decode passes only.
            self.ratio = max(self.ratio - self.p.decay_step, self.p.min_new_token_ratio)
        if self.overlap:
            _overlap.process_results(self, out)
            if self.echoes:
                _overlap.silence(self, out)
        if out.finished or out.retracted:
            self._left = True
        return out

    def _join_decodes(self, out: PassOutcome) -> list[SglangRequest] | None:
        """The running requests joining this prefill batch (servesim_sglang.mixed), with
        their decode lengths recorded; None when they sit the step out."""
        decodes, left = _mixed.join(self, out)
        if decodes is not None:
            out.decode_lens = [len(r.tokens) for r in decodes]
        # the running batch is replaced by the mixed batch at the next step, or lost the
        # requests finishing in flight: batch_is_full is cleared either way
        if decodes is not None or left:
            self._left = True
        return decodes

    def _begin_pass(self) -> None:
        """SGLang's step prologue (``get_next_batch_to_run``): the last step's chunk enters
        the tree (``cache_chunk_next_step``), and a running batch that lost a request or is
        empty may admit again (``batch_is_full`` cleared)."""
        pending = self._chunk_pending
        if pending is not None:
            self._chunk_pending = None
            if pending.lease is not None:
                self.cache.cache_prefix(pending.lease, pending.tokens, pending.materialized)
        if self._left or not self.running:
            self.batch_full = False
        self._left = False

    def order_waiting(self, chunk_first: bool) -> None:
        """Apply the policy; SGLang keeps its chunked request out of the queue it sorts."""
        head = self.waiting[0]
        held = chunk_first and 0 < head.materialized < head.seq_len
        rest = list(self.waiting)[1:] if held else list(self.waiting)
        order = self.policy.order(rest, self)
        if order is not None:
            self.waiting = deque([head, *order] if held else order)

    def _reject_impossible_head(self, out: PassOutcome) -> None:
        """servesim's no-hang rule, part 1: with nothing running, a waiting request whose whole
        sequence plus its clipped output reservation exceeds the pool can never be admitted
        (a retracted request whose output grew); it ends with a rejected terminal after the
        tokens it produced. The reference would stall forever."""
        p = self.p
        while self.waiting:
            req = self.waiting[0]
            need = self.cache.pages_for(req.seq_len) * p.page_size
            if req.materialized or need + min(req.remaining_output, p.clip_max_new_tokens) < p.total_tokens:
                return
            self.waiting.popleft()
            self.waiting_version += 1
            if self.echoes.pop(req.rid, None) is not None and req.remaining_output == 1:
                continue  # the client had its last token and completion (overlap.silence)
            self.complete(req, out, rejected=True)
            out.rejected.append(req.rid)

    def _prefill_ms(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        if batch == 0 or mean_isl <= mean_prefix or self.worker_type is WorkerType.DECODE:
            return 0.0
        raw = self.timing.predict_prefill_ms(batch, mean_isl, mean_prefix)
        return scaled_ms(raw, self.speedup)

    # -- admission ------------------------------------------------------------------------

    def _admit(self, out: PassOutcome) -> tuple[list[SglangRequest], int, int]:
        """``get_new_batch_prefill``: admit from the head of the queue while budgets last."""
        if not self.waiting:  # nothing to admit (the budgets below would go unused)
            return [], 0, 0
        p, cache = self.p, self.cache
        clip = p.clip_max_new_tokens
        reserved = sum([min(r.remaining_output + r.inflight, clip) for r in self.running]) * self.ratio
        mixed = _mixed.decode_tokens(self)  # the running batch's share (servesim_sglang.mixed)
        budget = [
            float(cache.available_tokens + cache.evictable_size) - reserved - mixed,  # rem_total
            float(p.max_prefill_tokens) - mixed,  # rem_input
            float(p.chunked_prefill_size) - mixed if p.chunking else float("inf"),  # rem_chunk
        ]
        slots = p.max_running_requests - len(self.running)
        can_run: list[SglangRequest] = []
        total_isl = total_prefix = 0
        while len(can_run) < slots and self.waiting:
            req = self.waiting[0]
            step = self._admit_one(req, budget)
            if isinstance(step, _Stop):
                if step is _Stop.OOM and p.oom_resets_ratio:
                    self.ratio = p.init_new_token_ratio
                break
            first, prefix = step
            self.waiting.popleft()
            self.waiting_version += 1
            computed = req.materialized - prefix
            out.scheduled[req.rid] = computed
            if first:
                out.admissions.append(Admission(req.rid, prefix))
                if req.cached_tokens is None:
                    req.cached_tokens = prefix
                if req.rid in self.retracted_ids:
                    self.retracted_ids.discard(req.rid)
                    out.resumed.append(req.rid)
            out.prefill_items.append((req.prompt_len, computed, prefix, prefix if first else 0))
            total_isl += req.materialized
            total_prefix += prefix
            can_run.append(req)
            if budget[2] <= 0:
                break
        return can_run, total_isl, total_prefix

    def _admit_one(self, req: SglangRequest, budget: list[float]) -> tuple[bool, int] | _Stop:
        """Size, check and allocate one request's next chunk.

        Returns ``(first_admission, prefix)`` with the budgets charged and ``req.materialized``
        advanced, or why admission stops here.
        """
        cache, ps = self.cache, self.p.page_size
        first = req.materialized == 0
        limit = req.seq_len if req.max_out == 0 else req.seq_len - 1
        start = cache.match_len(req.tokens, limit) if first else req.materialized
        extend = req.seq_len - start
        if extend == 0 and not first:
            return _Stop.BUDGET
        rem_total, rem_input, rem_chunk = budget
        if extend <= rem_chunk:
            chunk = extend
        else:  # SGLang ``add_one_req``: truncate to the pass's remaining chunk budget
            chunk = min(int(rem_chunk) // ps * ps, extend)
            if chunk == 0:
                return _Stop.BUDGET
        charged = -(-chunk // ps) * ps
        reserve = 0 if chunk < extend else min(req.remaining_output, self.p.clip_max_new_tokens)
        if charged + reserve >= rem_total or charged > rem_input or charged > rem_chunk:
            return _Stop.BUDGET
        chunk_end = start + chunk
        if first:
            got = cache.acquire(req.tokens, start, chunk_end, req.prompt_len)
            if got is None:
                return _Stop.OOM
            req.lease, prefix = got
        else:
            assert req.lease is not None
            if not cache.extend(req.lease, chunk_end):
                return _Stop.OOM
            prefix = req.materialized
        req.materialized = chunk_end
        budget[0] -= charged + reserve
        budget[1] -= charged
        budget[2] -= charged
        return first, prefix

    # -- token emission -------------------------------------------------------------------

    def emit(self, req: SglangRequest, out: PassOutcome) -> None:
        tok = req.next_token()
        req.append_token(tok)
        out.token_rids.append(req.rid)
        out.token_ids.append(tok)
        if not req.first_output_sent:
            req.first_output_sent = True
            if req.cached_tokens is not None:
                out.cached_tokens[req.rid] = req.cached_tokens

    def complete(self, req: SglangRequest, out: PassOutcome, rejected: bool = False) -> None:
        self.report_done(req, out)
        self.release_done(req, out, rejected)

    def report_done(self, req: SglangRequest, out: PassOutcome) -> None:
        """The request's completion, as the client sees it."""
        if not req.first_output_sent:
            req.first_output_sent = True
            if req.cached_tokens is not None:
                out.cached_tokens[req.rid] = req.cached_tokens
        out.completed.append(req.rid)

    def release_done(self, req: SglangRequest, out: PassOutcome, rejected: bool = False) -> None:
        """The scheduler's side of a finish: cache and free its KV (``release_kv_cache``)."""
        out.finished.append(req.rid)
        if req.lease is not None:
            if not rejected and self.handoff is not None and self.handoff.hold(req):
                return  # a finished prefill source keeps its KV (held, §7.2)
            upto = min(req.seq_len, req.materialized)
            self.cache.finish(req.lease, req.tokens, upto)
            self.split_prompt(req, upto)
            req.lease = None

    def _settle_done(self, reqs: list[SglangRequest], out: PassOutcome) -> list[SglangRequest]:
        """Complete requests with no output left (terminal without a token); keep the rest
        (with the overlap loop, also those whose last token is still to be processed)."""
        keep = []
        for r in reqs:
            if r.remaining_output == 0 and not r.inflight:
                self.complete(r, out)
            else:
                keep.append(r)
        return keep

    def _first_tokens(self, fresh: list[SglangRequest], out: PassOutcome) -> None:
        """The prefill forward samples each freshly prefilled request's first token.

        A request whose first token is its last finishes without a KV slot for it; the others
        take one slot (evicting cached pages if needed, never retracting). If even that does
        not fit, they get their token at the next decode step (reference behaviour).
        """
        fresh = self._settle_done(fresh, out)
        cont = []
        for r in fresh:
            if r.remaining_output == 1:
                self.emit(r, out)
                self._prefill_result(r, out)
            else:
                cont.append(r)
        if not self._ahead:  # lazy_decode_slot: the token's slot comes at the next decode
            for r in cont:
                self.emit(r, out)
                self._prefill_result(r, out)
            return
        need = sum(self.cache.pages_for(r.seq_len + 1) - r.allocated_pages for r in cont)
        if not self._reserve(need):
            return
        for r in cont:
            self._grow_and_emit(r, out)
            self._prefill_result(r, out)

    def _prefill_result(self, r: SglangRequest, out: PassOutcome) -> None:
        """``process_batch_result_prefill`` for a request given its first token: it finishes
        (its only token) or its prefill enters the tree; with the overlap loop, at the end
        of the next pass (the client has the token now)."""
        if self.overlap:
            _overlap.defer(self, r, out, True)
        elif r.remaining_output == 0:
            self.complete(r, out)
        else:
            assert r.lease is not None
            self.cache.cache_prefix(r.lease, r.tokens, r.materialized)
            self.split_prompt(r, r.materialized)

    def split_prompt(self, r: SglangRequest, upto: int) -> None:
        """``prompt_boundary_split``: the tree took ``r``'s tokens up to ``upto``; past its
        prompt, the prompt is inserted again (splitting the edge at its end)."""
        if self._prompt_split:
            ps = self.p.page_size
            if 0 < r.prompt_len - r.prompt_len % ps < upto - upto % ps:
                self.cache.split_at(r.tokens, r.prompt_len)

    def _reserve(self, pages: int) -> bool:
        cache = self.cache
        if cache.free_pages < pages:
            cache.evict((pages - cache.free_pages) * cache.page_size)
        return cache.free_pages >= pages

    def _grow_and_emit(self, r: SglangRequest, out: PassOutcome) -> None:
        lease = r.lease
        assert lease is not None
        if r.seq_len + 1 > lease.pages * self.cache.page_size:
            self.cache.grow(lease, 1)
        self.emit(r, out)
        r.materialized += 1

    # -- decode -----------------------------------------------------------------------------

    def _decode(self, now: float, out: PassOutcome) -> bool:
        """A decode pass; True when it retracted (the ratio is then re-set, not decayed)."""
        running = self._settle_done(self.running, out)
        self.running = running
        if self.overlap and _overlap.hold_back_decode(self, out):
            return True  # SGLang decodes nothing this step, and the ratio does not decay
        running = self.running
        out.decode_lens = [len(r.tokens) for r in running]
        if not running:
            return False
        if self.p.behaviour.sglang_retraction:
            retracted, growth = _retraction.check_decode_mem(self, now, out)
        else:
            retracted, growth = self._check_decode_mem(now, out)
        if retracted:
            self._requeue(retracted)
            self.ratio = self._ratio_after_retraction()
        running = self.running
        if not running:
            return bool(retracted)
        total_ctx = sum([len(r.tokens) for r in running])
        n = len(running)
        if self.shapes is None:
            raw = self.timing.predict_decode_ms(
                n, min(total_ctx, self.p.total_tokens), total_ctx // n, self.p.total_tokens
            )
            decode_ms = scaled_ms(raw, self.speedup * self.decode_speedup)
        else:
            lens = [len(r.tokens) for r in running]
            decode_ms = self.shapes.price([], lens, min(total_ctx, self.p.total_tokens), self.p.total_tokens)
        if not self._reserve(growth):
            self._end_stuck(out)
            return bool(retracted)
        out.model_work = True
        out.decode_forwards = n
        out.end_ms = now + decode_ms
        if self.spec is None:
            self.running = self._emit_decode_tokens(running, out)
        else:
            self.running = emit_bursts(self, running, out)
        return bool(retracted)

    def _end_stuck(self, out: PassOutcome) -> None:
        """servesim's no-hang rule, part 2: retraction left requests whose next token has no
        page even after evicting every unlocked one (a lone request filled the pool). They
        end with a rejected terminal after the tokens they produced instead of stalling the
        rank forever, as the reference would."""
        ps = self.cache.page_size
        keep = []
        for r in self.running:
            if -(-(len(r.tokens) + self._ahead) // ps) > r.allocated_pages:
                self.complete(r, out, rejected=True)
                out.rejected.append(r.rid)
            else:
                keep.append(r)
        self.running = keep

    def _emit_decode_tokens(self, running: list[SglangRequest], out: PassOutcome) -> list[SglangRequest]:
        """One token per running request (pages already reserved); the hot loop, inlined."""
        cache = self.cache
        ps = cache.page_size
        rids, ids, scheduled = out.token_rids, out.token_ids, out.scheduled
        ahead, cache_decode = self._ahead, self.cache_decode
        overlap = self.overlap
        keep = []
        for r in running:
            lease = r.lease
            assert lease is not None
            toks = r.tokens
            if len(toks) + ahead > lease.pages * ps:
                cache.free_pages -= 1
                lease.pages += 1
            i = r.output_len
            out_ids = r.output_ids
            if out_ids is not None and i < len(out_ids):
                tok = out_ids[i]
            else:
                tok = (r.rid * 0x9E3779B1 + i * 0x85EBCA77 + 0x632BE5AB) & 0xFFFFFFFF  # synthetic_token
            toks.append(tok)
            r.output_len += 1
            r.remaining_output -= 1
            r.materialized += 1
            rids.append(r.rid)
            ids.append(tok)
            scheduled[r.rid] = 1
            if not r.first_output_sent:
                r.first_output_sent = True
                if r.cached_tokens is not None:
                    out.cached_tokens[r.rid] = r.cached_tokens
            if overlap:  # the result is processed at the end of the next pass
                _overlap.defer(self, r, out, False)
                keep.append(r)
            elif r.remaining_output == 0:
                self.complete(r, out)
            else:
                if cache_decode:
                    cache.cache_prefix(lease, toks, r.materialized)
                keep.append(r)
        return keep

    def growth_pages(self, running: list[SglangRequest]) -> int:
        """Pages every running request needs for its next token (``ceil(len+1) - held``)."""
        ps, ahead = self.cache.page_size, self._ahead
        if self.spec is not None:  # every request's largest burst
            burst = self.spec.largest_burst
            return sum([-(-(len(r.tokens) + burst(r.remaining_output)) // ps)
                        - (r.lease.pages if r.lease else 0) for r in running])
        if ps == 1:
            return sum([len(r.tokens) + ahead - (r.lease.pages if r.lease else 0) for r in running])
        return sum([-(-(len(r.tokens) + ahead) // ps) - (r.lease.pages if r.lease else 0) for r in running])

    def _check_decode_mem(self, now: float, out: PassOutcome) -> tuple[list[SglangRequest], int]:
        """Retract until the next token of every survivor fits; evict cached pages for it.

        Returns the retracted requests and the survivors' page growth for this step.
        """
        cache, ps = self.cache, self.p.page_size
        retracted: list[SglangRequest] = []
        running = self.running
        growth = self.growth_pages(running)
        while True:
            logical = cache.available_tokens + cache.evictable_size
            needed = growth * ps
            if logical >= needed or len(running) <= 1:
                break
            victim = min(running, key=lambda r: r.output_len - r.inflight)
            _retraction.retract(self, victim, running, now, out, logical, needed)
            retracted.append(victim)
            growth = self.growth_pages(running)
        needed = growth * ps
        if cache.available_tokens < needed:
            cache.evict(needed - cache.available_tokens)
        return retracted, growth

    def _requeue(self, retracted: list[SglangRequest]) -> None:
        self.waiting_version += 1
        for r in retracted:
            self.entries += 1
            r.entry_seq = self.entries
        if self.p.requeue_front:
            self.waiting.extendleft(reversed(retracted))
        else:
            self.waiting.extend(retracted)

    def _ratio_after_retraction(self) -> float:
        if not self.p.ratio_estimate:
            return self.p.init_new_token_ratio
        running = self.running
        decoded = sum(r.output_len - r.inflight for r in running)
        max_new = sum(r.max_out for r in running)
        return min(1.0, (decoded + RETRACT_DECODE_STEPS * len(running)) / (max_new + 1))

    # -- bookkeeping for commands -----------------------------------------------------------

    def enqueue(self, req: SglangRequest) -> None:
        self.waiting.append(req)
        self.waiting_version += 1
        self.entries += 1
        req.entry_seq = self.entries

    def remove(self, rid: int) -> SglangRequest | None:
        """Cancel: drop a waiting or running request and free its KV."""
        self.waiting_version += 1
        for queue in (self.waiting, self.running):
            for req in queue:
                if req.rid == rid:
                    queue.remove(req)
                    if req.lease is not None:
                        self.cache.release(req.lease)
                        req.lease = None
                    self.retracted_ids.discard(rid)
                    self.echoes.pop(rid, None)
                    return req
        return None
