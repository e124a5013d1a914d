"""SGLang conformance scenarios: the golden ones (tests/golden/sglang_oracle) and the random
ones of the runner.

Each golden scenario is small (a few hundred scheduler steps) and aims at one part of SGLang's
scheduler: bursts with shared prefixes, page size 1 and 16, chunked prefill on and off, pools
small enough to retract, the fcfs/lpm/lof policies, ``max_running_requests`` and
``max_prefill_tokens`` limits, ``ignore_eos`` on and off, the overlap loop on and off.
"""

from __future__ import annotations

import random

from servesim_sglang.conformance import SglangOracleOptions
from servesim_vllm.conformance import ScenarioSpec

Opts = SglangOracleOptions

GOLDEN: list[ScenarioSpec] = [
    ScenarioSpec(
        name="prefix_burst_page1",
        note="burst with shared prefixes, page 1, chunked prefill 512: hits and chunks",
        n=40, isl=(100, 600), osl=(10, 80), prefix_groups=3, prefix_frac=0.8, prefix_ratio=0.6,
        seed=1, options=Opts(page_size=1, max_total_tokens=20000, chunked_prefill_size=512),
    ),
    ScenarioSpec(
        name="prefix_burst_page16",
        note="burst with shared prefixes, page 16, chunked prefill 256",
        n=40, isl=(100, 600), osl=(10, 80), prefix_groups=3, prefix_frac=0.8, prefix_ratio=0.6,
        seed=2, options=Opts(page_size=16, max_total_tokens=20000, chunked_prefill_size=256),
    ),
    ScenarioSpec(
        name="no_chunked_prefill",
        note="chunked prefill off, max_prefill_tokens 1024: whole prompts per step",
        n=40, isl=(50, 700), osl=(10, 60), prefix_groups=2, prefix_frac=0.6, prefix_ratio=0.5,
        seed=3, options=Opts(page_size=16, max_total_tokens=16000, chunked_prefill_size=-1,
                             max_prefill_tokens=1024),
    ),
    ScenarioSpec(
        name="lpm_shared_prefixes",
        note="lpm over five prefix groups: longest cached prefix first, in-batch deprioritising",
        n=60, isl=(100, 500), osl=(5, 40), prefix_groups=5, prefix_frac=0.9, prefix_ratio=0.7,
        seed=6, options=Opts(page_size=1, max_total_tokens=12000, chunked_prefill_size=1024,
                             schedule_policy="lpm", admit="stepwise", per_step=3),
    ),
    ScenarioSpec(
        name="lof_policy",
        note="lof: longest output first",
        n=40, isl=(50, 300), osl=(5, 120), seed=7,
        options=Opts(page_size=16, max_total_tokens=20000, chunked_prefill_size=512,
                     schedule_policy="lof", max_running_requests=8),
    ),
    ScenarioSpec(
        name="max_running_limit",
        note="max_running_requests 4, many short requests",
        n=60, isl=(20, 200), osl=(5, 30), prefix_groups=4, prefix_frac=0.5, prefix_ratio=0.5,
        seed=8, options=Opts(page_size=1, max_total_tokens=10000, max_running_requests=4,
                             chunked_prefill_size=2048),
    ),
    ScenarioSpec(
        name="max_prefill_tokens_limit",
        note="max_prefill_tokens 512 below the chunk size: admission stops on the input budget",
        n=40, isl=(60, 400), osl=(5, 40), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=9, options=Opts(page_size=16, max_total_tokens=12000, chunked_prefill_size=2048,
                             max_prefill_tokens=512),
    ),
    ScenarioSpec(
        name="retract_no_cache",
        note="ignore_eos off, radix cache off, small pool: ratio admission, retraction and "
             "re-prefill of prompt plus outputs",
        n=40, isl=(100, 300), osl=(40, 160), seed=12,
        options=Opts(page_size=1, max_total_tokens=1200, chunked_prefill_size=512,
                     ignore_eos=False, disable_radix_cache=True),
    ),
    ScenarioSpec(
        name="no_cache_page16",
        note="ignore_eos off, radix cache off, page 16, chunks of 256, small pool: the "
             "ratio's admission holds requests back (no retraction)",
        n=30, isl=(100, 400), osl=(40, 200), seed=13,
        options=Opts(page_size=16, max_total_tokens=1600, chunked_prefill_size=256,
                     ignore_eos=False, disable_radix_cache=True),
    ),
    ScenarioSpec(
        name="tight_pool_no_ignore_eos",
        note="ignore_eos off, small pool: new_token_ratio admission, eviction of cached leaves",
        n=40, isl=(100, 300), osl=(40, 160), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=4, options=Opts(page_size=1, max_total_tokens=3000, chunked_prefill_size=512,
                             ignore_eos=False),
    ),
    ScenarioSpec(
        name="tight_pool_page16",
        note="ignore_eos off, page 16, tight pool: eviction with page rounding",
        n=30, isl=(100, 400), osl=(40, 200), prefix_groups=2, prefix_frac=0.6, prefix_ratio=0.6,
        seed=5, options=Opts(page_size=16, max_total_tokens=4000, chunked_prefill_size=256,
                             ignore_eos=False),
    ),
    ScenarioSpec(
        name="retract_long_outputs_page16",
        note="ignore_eos off, outputs far above the ratio's estimate, page 16: retraction "
             "with a radix cache (victims, requeue at the back, re-prefill)",
        n=30, isl=(50, 150), osl=(200, 600), prefix_groups=2, prefix_frac=0.6, prefix_ratio=0.6,
        seed=15, options=Opts(page_size=16, max_total_tokens=3200, chunked_prefill_size=256,
                              ignore_eos=False),
    ),
    ScenarioSpec(
        name="stepwise_tight_pool",
        note="two requests per step into a tight pool (ignore_eos): admission waits for memory",
        n=80, isl=(80, 400), osl=(10, 60), prefix_groups=3, prefix_frac=0.8, prefix_ratio=0.7,
        seed=11, options=Opts(page_size=16, max_total_tokens=4000, chunked_prefill_size=256,
                              admit="stepwise", per_step=2),
    ),
    ScenarioSpec(
        name="retract_long_outputs",
        note="ignore_eos off, outputs far above the ratio's estimate: retraction with a radix "
             "cache (victims, requeue at the back, re-prefill with hits); a re-prefilled "
             "prompt and outputs split at the prompt's end",
        n=30, isl=(50, 150), osl=(200, 600), prefix_groups=2, prefix_frac=0.6, prefix_ratio=0.6,
        seed=14, options=Opts(page_size=1, max_total_tokens=2500, chunked_prefill_size=512,
                              ignore_eos=False),
    ),
    # The overlap loop (SGLang's serving default; the oracle needs ignore_eos for it).
    ScenarioSpec(
        name="overlap_page16",
        note="the overlap loop: a prefill enters the tree, and a finish frees its KV, one "
             "step later; later prompts miss what the last prefill computed",
        n=40, isl=(100, 500), osl=(5, 60), prefix_groups=3, prefix_frac=0.7, prefix_ratio=0.6,
        seed=10, options=Opts(page_size=16, max_total_tokens=6000, chunked_prefill_size=512,
                              overlap=True),
    ),
    ScenarioSpec(
        name="overlap_lpm_page1_stepwise",
        note="the overlap loop with lpm, page 1, three requests per step and outputs from one "
             "token: a request whose first token is its last joins the running batch until "
             "its result is processed",
        n=60, isl=(50, 400), osl=(1, 30), prefix_groups=4, prefix_frac=0.8, prefix_ratio=0.6,
        seed=16, options=Opts(page_size=1, max_total_tokens=6000, chunked_prefill_size=512,
                              schedule_policy="lpm", admit="stepwise", per_step=3,
                              overlap=True),
    ),
    ScenarioSpec(
        name="overlap_tight_pool_lof",
        note="the overlap loop, lof, page 16, a small pool, max_running_requests 3: "
             "admission waits for KV that a finish frees one step late; a decode step whose "
             "batch is all finishing requests is empty",
        n=50, isl=(60, 300), osl=(1, 50), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=17, options=Opts(page_size=16, max_total_tokens=1600, chunked_prefill_size=256,
                              schedule_policy="lof", max_running_requests=3, overlap=True),
    ),
    ScenarioSpec(
        name="overlap_no_chunked_prefill",
        note="the overlap loop with chunked prefill off, max_prefill_tokens 1024 and "
             "max_running_requests 6",
        n=40, isl=(50, 600), osl=(2, 40), prefix_groups=3, prefix_frac=0.6, prefix_ratio=0.5,
        seed=18, options=Opts(page_size=1, max_total_tokens=5000, chunked_prefill_size=-1,
                              max_prefill_tokens=1024, max_running_requests=6, overlap=True),
    ),
    # --enable-mixed-chunk: a prefill batch carries the running requests' decodes.
    ScenarioSpec(
        name="mixed_chunk_stepwise",
        note="--enable-mixed-chunk, page 1, chunks of 256, two arrivals per step: prefill "
             "chunks meet running decodes, the budgets shrink by the running batch",
        n=50, isl=(60, 700), osl=(5, 60), prefix_groups=3, prefix_frac=0.6, prefix_ratio=0.5,
        seed=41, options=Opts(page_size=1, max_total_tokens=20000, chunked_prefill_size=256,
                              admit="stepwise", per_step=2, enable_mixed_chunk=True),
    ),
    ScenarioSpec(
        name="mixed_chunk_tight_pool_page16",
        note="--enable-mixed-chunk, ignore_eos off, page 16, a small pool: mixed steps beside "
             "retraction, decodes that sit out a mixed step for want of KV",
        n=40, isl=(50, 300), osl=(40, 300), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=42, options=Opts(page_size=16, max_total_tokens=2400, chunked_prefill_size=256,
                              ignore_eos=False, admit="stepwise", per_step=1,
                              enable_mixed_chunk=True),
    ),
    ScenarioSpec(
        name="mixed_chunk_overlap",
        note="--enable-mixed-chunk with the overlap loop, page 16, lpm, one arrival per step: "
             "requests finishing in flight leave the mixed batch",
        n=50, isl=(50, 500), osl=(1, 40), prefix_groups=3, prefix_frac=0.7, prefix_ratio=0.6,
        seed=43, options=Opts(page_size=16, max_total_tokens=8000, chunked_prefill_size=256,
                              schedule_policy="lpm", admit="stepwise", per_step=1,
                              overlap=True, enable_mixed_chunk=True),
    ),
    ScenarioSpec(
        name="mixed_chunk_budget_spent",
        note="--enable-mixed-chunk, chunks of 64, short prompts with long outputs, eight "
             "arrivals per step: the running batch takes the chunk budget down to one token "
             "per step, then all of it, and requests wait through decode steps",
        n=72, isl=(6, 14), osl=(120, 240), seed=44,
        options=Opts(page_size=1, max_total_tokens=30000, chunked_prefill_size=64,
                     admit="stepwise", per_step=8, enable_mixed_chunk=True),
    ),
]

#: Scenarios kept for the runner beside the golden ones (none at present: every scenario
#: that once diverged is golden now).
EXTRA: list[ScenarioSpec] = []

#: SGLang's priority scheduling (tests/golden/sglang_oracle_prio; the oracle through
#: sglang_prio_trace.py). Stepwise arrivals let urgent requests meet a full running batch.
PRIORITY: list[ScenarioSpec] = [
    ScenarioSpec(
        name="prio_preempt_slots",
        note="max_running_requests 4, one arrival per step, priorities 0-99: slot preemption",
        n=40, isl=(50, 400), osl=(10, 60), prefix_groups=3, prefix_frac=0.5, prefix_ratio=0.5,
        seed=31, priority_levels=100,
        options=Opts(page_size=1, max_total_tokens=20000, max_running_requests=4,
                     chunked_prefill_size=512, admit="stepwise", per_step=1, priority=True),
    ),
    ScenarioSpec(
        name="prio_preempt_tight_page16",
        note="page 16, tight pool, ignore_eos off: preemption beside decode retraction",
        n=40, isl=(100, 500), osl=(20, 120), prefix_groups=2, prefix_frac=0.6, prefix_ratio=0.5,
        seed=32, priority_levels=60,
        options=Opts(page_size=16, max_total_tokens=4000, max_running_requests=6,
                     chunked_prefill_size=256, ignore_eos=False, admit="stepwise", per_step=2,
                     priority=True),
    ),
    ScenarioSpec(
        name="prio_lof_low_first",
        note="lof under priority, lower values first, threshold 0",
        n=40, isl=(50, 300), osl=(5, 120), seed=33, priority_levels=8,
        options=Opts(page_size=16, max_total_tokens=20000, max_running_requests=4,
                     chunked_prefill_size=512, schedule_policy="lof", admit="stepwise",
                     per_step=1, priority=True, low_priority_values_first=True,
                     preemption_threshold=0),
    ),
    ScenarioSpec(
        name="prio_inverted_no_preemption",
        note="every later request more urgent, all queued at once, preemption off: order only",
        n=30, isl=(100, 600), osl=(5, 40), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.6,
        seed=34, priority_inverted=True,
        options=Opts(page_size=1, max_total_tokens=6000, max_running_requests=8,
                     chunked_prefill_size=256, priority=True, disable_priority_preemption=True),
    ),
    ScenarioSpec(
        name="prio_chunked_preempt",
        note="long prompts in 128-token chunks, max_running_requests 3, threshold 5",
        n=30, isl=(200, 700), osl=(10, 50), prefix_groups=2, prefix_frac=0.7, prefix_ratio=0.5,
        seed=35, priority_levels=40,
        options=Opts(page_size=16, max_total_tokens=12000, max_running_requests=3,
                     chunked_prefill_size=128, admit="stepwise", per_step=1, priority=True,
                     preemption_threshold=5),
    ),
    ScenarioSpec(
        name="prio_preempt_heavy",
        note="max_running_requests 2, long outputs, threshold 0, lower values first, every "
             "arrival more urgent than all before it: preemption at every arrival, requests preempted again",
        n=40, isl=(50, 300), osl=(40, 160), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=36, priority_inverted=True,
        options=Opts(page_size=1, max_total_tokens=20000, max_running_requests=2,
                     chunked_prefill_size=512, admit="stepwise", per_step=1, priority=True,
                     low_priority_values_first=True, preemption_threshold=0),
    ),
    # The overlap loop (SGLang's default): a victim's token in flight is dropped and
    # generated again by its re-prefill (servesim_sglang.overlap).
    ScenarioSpec(
        name="prio_overlap_slots",
        note="prio_preempt_slots with the overlap loop: victims decoding with a token in flight",
        n=40, isl=(50, 400), osl=(10, 60), prefix_groups=3, prefix_frac=0.5, prefix_ratio=0.5,
        seed=31, priority_levels=100,
        options=Opts(page_size=1, max_total_tokens=20000, max_running_requests=4,
                     chunked_prefill_size=512, admit="stepwise", per_step=1, priority=True,
                     overlap=True),
    ),
    ScenarioSpec(
        name="prio_overlap_two_slots",
        note="overlap loop, max_running_requests 2, outputs of 1-8 tokens, threshold 0: "
             "victims with their first token in flight",
        n=40, isl=(50, 400), osl=(1, 8), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=109, priority_levels=100,
        options=Opts(page_size=1, max_total_tokens=12000, max_running_requests=2,
                     chunked_prefill_size=256, admit="stepwise", per_step=1, priority=True,
                     overlap=True, preemption_threshold=0),
    ),
    ScenarioSpec(
        name="prio_overlap_short_outputs",
        note="overlap loop, page 16, lof, threshold 1, outputs of 1-8 tokens: victims whose "
             "last token is in flight",
        n=40, isl=(30, 200), osl=(1, 8), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=115, priority_levels=100,
        options=Opts(page_size=16, max_total_tokens=6000, max_running_requests=4,
                     chunked_prefill_size=512, schedule_policy="lof", admit="stepwise",
                     per_step=1, priority=True, overlap=True, preemption_threshold=1),
    ),
    ScenarioSpec(
        name="prio_overlap_page16_ties",
        note="overlap loop, page 16, lof, four priority levels (ties), threshold 0, two "
             "arrivals per step",
        n=40, isl=(50, 400), osl=(5, 60), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=108, priority_levels=4,
        options=Opts(page_size=16, max_total_tokens=6000, max_running_requests=6,
                     chunked_prefill_size=512, schedule_policy="lof", admit="stepwise",
                     per_step=2, priority=True, overlap=True, preemption_threshold=0),
    ),
    ScenarioSpec(
        name="prio_overlap_low_first",
        note="overlap loop, page 16, lof, lower values first, threshold 5, long prompts in "
             "256-token chunks, max_running_requests 2",
        n=40, isl=(100, 600), osl=(5, 60), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=116, priority_levels=100,
        options=Opts(page_size=16, max_total_tokens=20000, max_running_requests=2,
                     chunked_prefill_size=256, schedule_policy="lof", admit="stepwise",
                     per_step=1, priority=True, overlap=True, low_priority_values_first=True,
                     preemption_threshold=5),
    ),
]


def random_scenario(seed: int, n: int = 300, overlap: bool | None = None,
                    mixed_chunk: bool = False) -> ScenarioSpec:
    """A random ``n``-request scenario: settings and lengths drawn from ``seed``.

    ``overlap`` True or False forces the overlap loop on (with ``ignore_eos``, which the
    oracle needs for it) or off, the other settings drawn as for the same seed.
    ``mixed_chunk`` turns ``--enable-mixed-chunk`` on, with chunked prefill forced on (it
    needs it), the other settings drawn as for the same seed."""
    overlap_arg = overlap
    rng = random.Random(f"sglang-conformance:{seed}")
    page = rng.choice([1, 16])
    isl_hi = rng.choice([256, 512, 1024])
    isl = (rng.randint(16, isl_hi // 4), isl_hi)
    osl = (1, rng.choice([16, 64, 128]))
    ignore_eos = rng.random() < 0.6
    drawn_overlap = ignore_eos and rng.random() < 0.3
    if overlap is None:
        overlap = drawn_overlap
    elif overlap:
        ignore_eos = True
    mean = (isl[0] + isl[1]) // 2
    chunked = rng.random() < 0.7
    chunk = rng.choice([256, 512, 1024, 2048])
    chunked = chunked or mixed_chunk
    pool = int(mean * rng.choice([3, 6, 12, 40])) + isl_hi + osl[1] + 4 * page
    pool -= pool % page
    opts = Opts(
        page_size=page,
        max_total_tokens=pool,
        max_running_requests=rng.choice([4, 16, 64, 256]),
        chunked_prefill_size=chunk if chunked else -1,
        max_prefill_tokens=rng.choice([1024, 4096, 16384]),
        schedule_policy=rng.choice(["fcfs", "fcfs", "lpm", "lof"]),
        ignore_eos=ignore_eos,
        overlap=overlap,
        hash_block_tokens=rng.choice([16, 32, 64]),
        admit=rng.choice(["all", "stepwise"]),
        per_step=rng.choice([1, 2, 4]),
        enable_mixed_chunk=mixed_chunk,
    )
    return ScenarioSpec(
        name=f"sglang_random_{seed}" + {None: "", True: "_overlap", False: "_no_overlap"}[overlap_arg]
        + ("_mixed_chunk" if mixed_chunk else ""),
        n=n, isl=isl, osl=osl,
        prefix_groups=rng.choice([0, 2, 5, 20]), prefix_frac=rng.random(),
        prefix_ratio=rng.uniform(0.2, 0.9), seed=seed, options=opts,
    )


def priority_scenario(seed: int, n: int = 40) -> ScenarioSpec:
    """A random ``n``-request scenario under SGLang's priority scheduling, drawn from
    ``seed``: few request slots, one or two arrivals per step, priorities in 4, 20 or 100
    levels, either direction, thresholds 0-10, and the overlap loop on for half the seeds
    (with ``ignore_eos``, which the oracle's overlap loop needs)."""
    rng = random.Random(f"sglang-priority:{seed}")
    overlap = rng.random() < 0.5
    opts = Opts(
        page_size=rng.choice([1, 16]),
        max_total_tokens=rng.choice([6000, 12000, 20000]),
        max_running_requests=rng.choice([2, 3, 4, 6, 8]),
        chunked_prefill_size=rng.choice([128, 256, 512]),
        schedule_policy=rng.choice(["fcfs", "fcfs", "lof"]),
        ignore_eos=overlap or rng.random() < 0.5,
        overlap=overlap,
        admit="stepwise",
        per_step=rng.choice([1, 1, 2]),
        priority=True,
        low_priority_values_first=rng.random() < 0.5,
        preemption_threshold=rng.choice([0, 1, 3, 5, 10]),
    )
    return ScenarioSpec(
        name=f"sglang_priority_{seed}" + ("_overlap" if overlap else ""),
        n=n, isl=rng.choice([(30, 200), (50, 400), (100, 600)]),
        osl=rng.choice([(1, 8), (1, 30), (5, 60), (20, 120)]),
        prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5, seed=seed,
        priority_levels=rng.choice([4, 20, 100]), options=opts,
    )
