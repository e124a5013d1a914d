"""SGLang-version behaviour settings of the ``sglang`` rank (``engine.sglang:``).

Where SGLang 0.5.23's scheduler (checked step by step against the real one,
docs/conformance.md) differs from the reference semantics (dynamo-mocker.md §5), the difference
is one named key. ``profile`` picks a preset; a key set explicitly overrides it. The default
profile is the reference's, so the reference-parity goldens (``tests/golden/sglang``) stay as
they are.

Source citations are to SGLang 0.5.23 (``sglang/srt/managers/schedule_policy.py``,
``scheduler.py``, ``schedule_batch.py``, ``mem_cache/prefill_budget.py``).
"""

from __future__ import annotations

from typing import Any

from attrs import frozen
from servesim.config.profiles import profile_problems, resolve_switches

#: Every switch, in documentation order.
SWITCHES = (
    "two_phase_admission",
    "ignore_eos_reserves_full_output",
    "admission_page_headroom",
    "prefill_budget_after_admit",
    "sticky_batch_full",
    "lazy_decode_slot",
    "cache_decode_at_finish",
    "cache_chunk_next_step",
    "sglang_retraction",
    "evict_whole_leaves",
    "conservative_eviction",
    "split_refreshes_recency",
    "child_per_insert",
    "waiting_prefix_touch",
    "overlap_schedule",
    "prompt_boundary_split",
    "overlap_read_lag",
)


@frozen(kw_only=True)
class Behaviour:
    """The resolved switches a rank consults.

    * ``two_phase_admission`` — SGLang's ``PrefillAdder`` (:mod:`servesim_sglang.admission`):
      a live budget, every admitted prefix locked before the batch's KV is allocated with
      one eviction; the next four switches refine it (they apply only with it on).
    * ``ignore_eos_reserves_full_output`` — a running request sent with ``ignore_eos`` (every
      simulated request: its output length is known) reserves its whole clipped remaining
      output in ``rem_total``, not ``× new_token_ratio``
      (``PrefillAdder._get_running_request_total_token_offset``).
    * ``admission_page_headroom`` — admission asks ``extend + max_new + page_size`` of
      ``rem_total`` for the whole uncached remainder (chunked or not), and each admitted
      request's charge carries one page more (``PrefillBudget.reserve``).
    * ``sticky_batch_full`` — a request refused for memory (``NO_TOKEN``) sets the running
      batch's ``batch_is_full``, which keeps every later step from admitting until a request
      leaves the running batch.
    * ``prefill_budget_after_admit`` — ``max_prefill_tokens`` stops admission only after a
      request took it to zero or below (``budget_state``); the reference refuses a request
      whose chunk exceeds what is left.
    * ``lazy_decode_slot`` — the token sampled in a step gets its KV slot in the next decode
      step (``alloc_for_decode``): a request holds prompt + outputs − 1 slots, the prefill
      forward allocates the extend tokens only, and a finished request caches
      ``floor_page(prompt + outputs − 1)`` tokens.
    * ``cache_decode_at_finish`` — decoded tokens enter the radix tree only when the request
      finishes (``cache_finished_req``); the reference inserts each completed decode page.
    * ``cache_chunk_next_step`` — a chunked request's chunk enters the tree at the start of
      the next step (``stash_chunked_request``), not at the end of its own.
    * ``sglang_retraction`` — ``retract_decode``: retract at least one request, victims in
      the order fewest outputs first, then longest input, then latest in the batch; after
      each, evict until ``remaining × SGLANG_RETRACT_DECODE_STEPS`` (20) tokens are free; the
      survivors keep the retraction order as their batch order.
    * ``evict_whole_leaves`` — eviction frees whole least-recently-used leaves, even when
      fewer tokens are needed (SGLang's radix tree); the reference cuts only the tail pages
      it needs off the last leaf.
    * ``conservative_eviction`` — with pages > 1, a prefill batch evicts until its extend
      tokens plus one page per request are free, and a decode step until one page per
      request is (``alloc_paged_token_slots_extend`` / ``_decode``), whatever the exact need.
      Applies with ``two_phase_admission`` / ``sglang_retraction``.
    * ``split_refreshes_recency`` — splitting a tree edge stamps both parts as just used, and
      a match stamps its whole path when it ends (``UnifiedTreeCore._split_node``,
      ``_match_post_processor``); the reference keeps a split node's recency. A finished
      request's insert touches its whole path, even when nothing new is cached.
    * ``child_per_insert`` — an insertion past an existing leaf adds a child node (a chunk, or
      a finished request's decoded tokens, is its own leaf, evicted alone); the reference
      extends a leaf that only the inserting request locks.
    * ``waiting_prefix_touch`` — admission matches waiting requests against the tree, which
      splits edges and refreshes recency: ``lpm`` matches every waiting request each step
      (``_compute_prefix_matches``), the other policies refresh the first 128 every 32nd
      step (``_touch_waiting_prefixes``). With ``two_phase_admission``.
    * ``overlap_schedule`` — SGLang's default event loop (``event_loop_overlap``; off with
      ``--disable-overlap-schedule``): a step's results are processed after the next step was
      scheduled (:mod:`servesim_sglang.overlap`). Tokens still reach the client when their
      forward ends; the scheduler sees them, the finishes they make, the KV those free and
      the prefill's tree insert one step later, and a decode step leaves out the requests
      whose pending token is their last (``_reqs_finishing_inflight``). Aggregated workers
      without speculative decoding only; the others process each step's results at once.
    * ``prompt_boundary_split`` — after a request's tokens enter the tree past its prompt
      (a finish, or the prefill of a retracted request's prompt and outputs), its prompt is
      inserted once more, which splits the edge at the prompt's end, so that eviction can
      drop the output tokens without the prompt (``UnifiedRadixCache.checkpoint_into_tree``).
    * ``overlap_read_lag`` — with ``overlap_schedule``: the overlap loop reads new requests
      (``recv_requests`` at the top of an iteration) right after it processed a step's
      results, while the next step already runs, and the step it schedules then runs after
      that one: a request that arrives while step k-1 runs joins step k+1 at the earliest
      (:mod:`servesim.mechanics.overlap_inbox`; the receive interval, if any, applies to the
      reads). A separate switch because SGLang's scheduler oracle injects each step's
      requests straight into that step's read, which no arrival time expresses: its
      comparisons run without it.
    """

    two_phase_admission: bool
    ignore_eos_reserves_full_output: bool
    admission_page_headroom: bool
    prefill_budget_after_admit: bool
    sticky_batch_full: bool
    lazy_decode_slot: bool
    cache_decode_at_finish: bool
    cache_chunk_next_step: bool
    sglang_retraction: bool
    evict_whole_leaves: bool
    conservative_eviction: bool
    split_refreshes_recency: bool
    child_per_insert: bool
    waiting_prefix_touch: bool
    overlap_schedule: bool
    prompt_boundary_split: bool
    overlap_read_lag: bool

    @property
    def runs_supported(self) -> bool:
        """Whether runs of passes (servesim_sglang.fast.runs) model these switches: only the
        reference's. Any other switch changes what a steady decode pass allocates, caches,
        evicts or admits, so the rank declines runs and steps (docs/architecture.md, "Speed by design")."""
        return not any(getattr(self, name) for name in SWITCHES)


PROFILES: dict[str, Behaviour] = {
    "reference": Behaviour(**dict.fromkeys(SWITCHES, False)),
    "sglang-0.5.23": Behaviour(**dict.fromkeys(SWITCHES, True)),
}
DEFAULT_PROFILE = "reference"


def resolve(settings: Any) -> Behaviour:
    """The switches for an ``engine.sglang:`` config (keys left None follow the profile)."""
    return resolve_switches(settings, PROFILES, DEFAULT_PROFILE, SWITCHES, Behaviour)


def validate(settings: Any) -> list[tuple[str, str]]:
    """``[(key path, message)]`` for a bad profile name."""
    return profile_problems(settings, PROFILES, DEFAULT_PROFILE, "engine.sglang.profile")


__all__ = ["Behaviour", "DEFAULT_PROFILE", "PROFILES", "SWITCHES", "resolve", "validate"]
