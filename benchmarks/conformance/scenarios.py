"""The golden conformance scenarios (issue 9 item 4) and the random ones of the runner.

Each golden scenario is small (a few hundred scheduler steps) and aims at one part of vLLM's
v1 scheduler: chunked prefill on/off, prefix caching on/off, pools small enough to preempt,
``max_num_seqs`` and token-budget limits, stepwise arrivals. Block size 16 is vLLM's own
default; hash blocks of 64 tokens give four engine blocks per shared trace block.
"""

from __future__ import annotations

import attrs
from servesim_vllm.conformance import OracleOptions, ScenarioSpec

Opts = OracleOptions

GOLDEN: list[ScenarioSpec] = [
    ScenarioSpec(
        name="prefix_chunked",
        note="shared prefixes, chunked prefill, ample pool: hits and budget-split chunks",
        n=40, isl=(100, 400), osl=(20, 150), prefix_groups=3, prefix_frac=0.8, prefix_ratio=0.6,
        seed=1, options=Opts(num_gpu_blocks=400, max_num_seqs=8, max_num_batched_tokens=512),
    ),
    ScenarioSpec(
        name="preempt_small_pool",
        note="pool of 60 blocks for ~17-block prompts: decode growth preempts (LIFO)",
        n=30, isl=(150, 300), osl=(20, 60), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=2, options=Opts(num_gpu_blocks=60, max_num_seqs=32, max_num_batched_tokens=1024),
    ),
    ScenarioSpec(
        name="no_chunked_prefill",
        note="chunked prefill off: a prompt larger than the remaining budget waits",
        n=40, isl=(60, 500), osl=(10, 80), prefix_groups=2, prefix_frac=0.6, prefix_ratio=0.5,
        seed=3, options=Opts(num_gpu_blocks=300, max_num_seqs=8, max_num_batched_tokens=600,
                          chunked_prefill=False),
    ),
    ScenarioSpec(
        name="no_prefix_caching",
        note="prefix caching off with shared prefixes in the trace, small pool: no hits, preemption",
        n=30, isl=(100, 300), osl=(10, 50), prefix_groups=2, prefix_frac=0.8, prefix_ratio=0.7,
        seed=4, options=Opts(num_gpu_blocks=70, max_num_seqs=32, max_num_batched_tokens=1024,
                          prefix_caching=False),
    ),
    ScenarioSpec(
        name="max_num_seqs_limit",
        note="max_num_seqs 4 with many short requests: admission limited by sequences",
        n=60, isl=(20, 120), osl=(5, 25), prefix_groups=4, prefix_frac=0.5, prefix_ratio=0.5,
        seed=5, options=Opts(num_gpu_blocks=500, max_num_seqs=4, max_num_batched_tokens=2048,
                          hash_block_tokens=32),
    ),
    ScenarioSpec(
        name="tight_token_budget",
        note="budget 96 tokens: long prompts in many chunks beside decodes",
        n=40, isl=(50, 400), osl=(5, 40), prefix_groups=2, prefix_frac=0.6, prefix_ratio=0.5,
        seed=6, options=Opts(num_gpu_blocks=400, max_num_seqs=64, max_num_batched_tokens=96),
    ),
    ScenarioSpec(
        name="stepwise_arrivals",
        note="one request added before each step: prefix hits on blocks computed in flight",
        n=120, isl=(80, 300), osl=(10, 60), prefix_groups=3, prefix_frac=0.9, prefix_ratio=0.7,
        seed=7, options=Opts(num_gpu_blocks=200, max_num_seqs=32, max_num_batched_tokens=512,
                          admit="stepwise", per_step=1),
    ),
    ScenarioSpec(
        name="shared_prefix_preempt",
        note="long shared prefixes, tight pool: preemption, resume hits, eviction order",
        n=30, isl=(200, 400), osl=(20, 60), prefix_groups=2, prefix_frac=0.9, prefix_ratio=0.8,
        seed=8, options=Opts(num_gpu_blocks=80, max_num_seqs=16, max_num_batched_tokens=512),
    ),
    ScenarioSpec(
        name="no_chunk_preempt",
        note="chunked prefill off with a tight pool: whole-prompt admission and preemption",
        n=30, isl=(100, 300), osl=(20, 50), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=9, options=Opts(num_gpu_blocks=64, max_num_seqs=16, max_num_batched_tokens=512,
                          chunked_prefill=False),
    ),
    ScenarioSpec(
        name="single_token_outputs",
        note="outputs of 1-3 tokens: requests finish in their prefill step; one added per step",
        n=150, isl=(30, 200), osl=(1, 3), prefix_groups=3, prefix_frac=0.7, prefix_ratio=0.6,
        seed=10, options=Opts(num_gpu_blocks=120, max_num_seqs=8, max_num_batched_tokens=128,
                           admit="stepwise", per_step=1, hash_block_tokens=32),
    ),
    ScenarioSpec(
        name="eviction_order",
        note="pool cycled by many prefix groups: which cached block an allocation evicts",
        n=100, isl=(120, 380), osl=(5, 20), prefix_groups=8, prefix_frac=0.9, prefix_ratio=0.7,
        seed=11, options=Opts(num_gpu_blocks=100, max_num_seqs=4, max_num_batched_tokens=512),
    ),
    ScenarioSpec(
        name="no_chunk_resume",
        note="chunked prefill and prefix caching off, budget = max_model_len: a resumed "
             "request's prompt+output must fit the remaining budget whole",
        n=24, isl=(150, 300), osl=(60, 120), seed=12,
        options=Opts(num_gpu_blocks=48, max_num_seqs=16, max_num_batched_tokens=420,
                  chunked_prefill=False, prefix_caching=False, max_model_len=420),
    ),
    ScenarioSpec(
        name="no_chunk_readmit_budget",
        note="chunked prefill off, many decoders: a readmitted request whose prompt fits the "
             "remaining budget but prompt+output does not must wait (vLLM) - found by search",
        n=20, isl=(25, 61), osl=(4, 85), seed=284,
        options=Opts(num_gpu_blocks=29, max_num_seqs=32, max_num_batched_tokens=128,
                  chunked_prefill=False, prefix_caching=False, max_model_len=128,
                  admit="stepwise", per_step=1),
    ),
    ScenarioSpec(
        name="stepwise_chunk_admission",
        note="stepwise_arrivals with scheduler_reserve_full_isl off: only the first chunk "
             "must fit at admission (vLLM before 0.32)",
        n=120, isl=(80, 300), osl=(10, 60), prefix_groups=3, prefix_frac=0.9, prefix_ratio=0.7,
        seed=7, options=Opts(num_gpu_blocks=200, max_num_seqs=32, max_num_batched_tokens=512,
                          admit="stepwise", per_step=1, reserve_full_isl=False),
    ),
]

PRIO = Opts(policy="priority")

#: ``--scheduling-policy priority`` (engine.scheduling_policy: priority): each row carries a
#: ``priority``; the waiting queue is a heap on (priority, arrival) and preemption takes the
#: running request with the largest (priority, arrival) (servesim_vllm.priority).
GOLDEN += [
    ScenarioSpec(
        name="prio_mixed_stepwise",
        note="priority: four levels, two requests arrive before each step, moderate pool: "
             "urgent arrivals overtake the queue",
        n=120, isl=(80, 300), osl=(10, 60), prefix_groups=3, prefix_frac=0.6, prefix_ratio=0.5,
        seed=21, priority_levels=4,
        options=attrs.evolve(PRIO, num_gpu_blocks=160, max_num_seqs=16,
                             max_num_batched_tokens=512, admit="stepwise", per_step=2),
    ),
    ScenarioSpec(
        name="prio_preempt_small_pool",
        note="priority: pool of 60 blocks, three levels, all admitted at once: decode growth "
             "preempts the lowest-priority running request, not the newest",
        n=30, isl=(150, 300), osl=(20, 60), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=22, priority_levels=3,
        options=attrs.evolve(PRIO, num_gpu_blocks=60, max_num_seqs=32, max_num_batched_tokens=1024),
    ),
    ScenarioSpec(
        name="prio_preempt_stepwise",
        note="priority: tight pool, one arrival per step, five levels: preempted requests "
             "re-enter the heap by key and victims sit anywhere in the running list",
        n=80, isl=(60, 200), osl=(20, 80), prefix_groups=2, prefix_frac=0.4, prefix_ratio=0.5,
        seed=23, priority_levels=5,
        options=attrs.evolve(PRIO, num_gpu_blocks=48, max_num_seqs=16, max_num_batched_tokens=256,
                             admit="stepwise", per_step=1),
    ),
    ScenarioSpec(
        name="prio_no_chunked_prefill",
        note="priority with chunked prefill off and a tight pool: whole-prompt admission in "
             "priority order, priority preemption",
        n=40, isl=(60, 300), osl=(20, 60), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=24, priority_levels=3,
        options=attrs.evolve(PRIO, num_gpu_blocks=64, max_num_seqs=16, max_num_batched_tokens=512,
                             chunked_prefill=False, admit="stepwise", per_step=1),
    ),
    ScenarioSpec(
        name="prio_shared_prefix",
        note="priority with long shared prefixes, tight pool and chunked prefill: hits of "
             "readmitted victims, eviction under priority preemption",
        n=40, isl=(200, 400), osl=(20, 60), prefix_groups=2, prefix_frac=0.9, prefix_ratio=0.8,
        seed=25, priority_levels=3,
        options=attrs.evolve(PRIO, num_gpu_blocks=80, max_num_seqs=16, max_num_batched_tokens=256,
                             admit="stepwise", per_step=1),
    ),
    ScenarioSpec(
        name="prio_ties",
        note="priority with two levels (many equal priorities): ties go to the earlier arrival; "
             "prefix caching off, tight pool",
        n=60, isl=(80, 250), osl=(10, 50), seed=26, priority_levels=2,
        options=attrs.evolve(PRIO, num_gpu_blocks=56, max_num_seqs=16, max_num_batched_tokens=384,
                             prefix_caching=False, admit="stepwise", per_step=2),
    ),
    ScenarioSpec(
        name="prio_inverted",
        note="priority inverted against arrival (each later request more urgent), all admitted "
             "at once, tight pool: served newest first, the oldest running one is the victim",
        n=30, isl=(100, 250), osl=(20, 60), prefix_groups=2, prefix_frac=0.5, prefix_ratio=0.5,
        seed=27, priority_inverted=True,
        options=attrs.evolve(PRIO, num_gpu_blocks=50, max_num_seqs=8, max_num_batched_tokens=512),
    ),
    ScenarioSpec(
        name="prio_inverted_stepwise",
        note="priority inverted against arrival with one arrival per step and a tight pool: "
             "every arrival outranks every running request, which it cannot preempt (vLLM 0.32)",
        n=60, isl=(60, 200), osl=(30, 90), seed=28, priority_inverted=True,
        options=attrs.evolve(PRIO, num_gpu_blocks=40, max_num_seqs=16, max_num_batched_tokens=256,
                             admit="stepwise", per_step=1),
    ),
]



def _with_interval(spec: ScenarioSpec, interval: int) -> ScenarioSpec:
    import attrs

    return attrs.evolve(
        spec, name=f"{spec.name}_psi{interval}",
        note=f"{spec.note}; prefill_schedule_interval {interval} (vLLM 0.33's local cadence)",
        options=attrs.evolve(spec.options, prefill_schedule_interval=interval),
    )


#: vLLM 0.33 golden scenarios (tests/golden/vllm033_oracle): the prefill cadence with
#: interval 2 and 4 over chunked prefill, stepwise arrivals, preemption and tight budgets.
GOLDEN_033: list[ScenarioSpec] = [
    _with_interval(s, k)
    for s in GOLDEN
    if s.name in ("prefix_chunked", "stepwise_arrivals", "preempt_small_pool", "tight_token_budget",
                  "no_chunked_prefill", "single_token_outputs")
    for k in (2, 4)
]


def random_scenario(seed: int, n: int = 300) -> ScenarioSpec:
    """A random 300-request scenario: settings and lengths drawn from ``seed``."""
    import random

    rng = random.Random(f"conformance:{seed}")
    bs = 16
    isl_hi = rng.choice([256, 512, 1024])
    isl = (rng.randint(16, isl_hi // 4), isl_hi)
    osl = (1, rng.choice([16, 64, 128]))
    mean_blocks = (isl[0] + isl[1]) // 2 // bs + 1
    chunked = rng.random() < 0.7
    budget = rng.choice([256, 512, 1024, 2048])
    if not chunked:
        budget = max(budget, isl_hi + osl[1])
    opts = Opts(
        block_size=bs,
        num_gpu_blocks=int(mean_blocks * rng.choice([3, 6, 12, 40])) + isl_hi // bs + 2,
        max_num_seqs=rng.choice([4, 16, 64, 256]),
        max_num_batched_tokens=budget,
        chunked_prefill=chunked,
        prefix_caching=rng.random() < 0.8,
        hash_block_tokens=rng.choice([16, 32, 64]),
        admit=rng.choice(["all", "stepwise"]),
        per_step=rng.choice([1, 2, 4]),
    )
    return ScenarioSpec(
        name=f"random_{seed}", n=n, isl=isl, osl=osl,
        prefix_groups=rng.choice([0, 2, 5, 20]), prefix_frac=rng.random(),
        prefix_ratio=rng.uniform(0.2, 0.9), seed=seed, options=opts,
    )


def priority_scenario(seed: int, n: int = 300) -> ScenarioSpec:
    """:func:`random_scenario`'s settings and lengths under ``--scheduling-policy priority``:
    2, 3, 5 or 20 priority levels drawn per request, or (one seed in five) priorities inverted
    against arrival order."""
    import random

    rng = random.Random(f"priority:{seed}")
    base = random_scenario(seed, n)
    inverted = rng.random() < 0.2
    return attrs.evolve(base, name=f"priority_{seed}", priority_inverted=inverted,
                        priority_levels=0 if inverted else rng.choice([2, 3, 5, 20]),
                        options=attrs.evolve(base.options, policy="priority"))


def unchunked_scenario(seed: int) -> ScenarioSpec:
    """Small chunked-prefill-off scenarios with budget = ``max_model_len`` and tight pools: the
    family whose search found the readmission budget gate (docs/conformance.md, difference 3).
    Output lengths are capped so no request exceeds ``max_model_len``."""
    import random

    rng = random.Random(seed)
    mml = rng.choice([128, 160, 200, 256])
    isl = (rng.randint(8, 40), mml - rng.randint(20, 90))
    osl = (rng.randint(1, 20), rng.randint(30, 90))
    osl = (min(osl[0], mml - isl[1]), min(osl[1], mml - isl[1]))
    opts = Opts(
        num_gpu_blocks=rng.randint(mml // 16 + 2, 60),
        max_num_seqs=rng.choice([8, 16, 32]),
        max_num_batched_tokens=mml,
        max_model_len=mml,
        chunked_prefill=False,
        prefix_caching=rng.random() < 0.5,
        admit=rng.choice(["all", "stepwise"]),
        per_step=1,
    )
    return ScenarioSpec(name=f"unchunked_{seed}", n=rng.choice([10, 20, 40]), isl=isl, osl=osl,
                        seed=seed, options=opts)


def tiny_pool_scenario(seed: int) -> ScenarioSpec:
    """Pools around the size of the largest request (prompt + output), some smaller: requests
    that outgrow the pool preempt themselves and can never be readmitted, where vLLM
    deadlocks (docs/conformance.md, difference 5)."""
    import random

    rng = random.Random(f"tiny{seed}")
    hi = rng.randint(40, 200)
    isl = (rng.randint(8, hi), hi)
    osl = (1, rng.randint(2, 80))
    largest = -(-(hi + osl[1]) // 16)
    chunked = rng.random() < 0.7
    budget = rng.choice([64, 128, 256, 1024])
    opts = Opts(
        num_gpu_blocks=max(-(-hi // 16) + 2, largest - rng.randint(0, 4)),
        max_num_seqs=rng.choice([2, 4, 8, 64]),
        max_num_batched_tokens=budget if chunked else max(budget, hi + osl[1]),
        chunked_prefill=chunked,
        prefix_caching=rng.random() < 0.7,
        hash_block_tokens=rng.choice([16, 32]),
        admit=rng.choice(["all", "stepwise"]),
        per_step=rng.choice([1, 2]),
    )
    return ScenarioSpec(name=f"tinypool_{seed}", n=rng.choice([5, 10, 30]), isl=isl, osl=osl,
                        prefix_groups=rng.choice([0, 2]), prefix_frac=0.7, prefix_ratio=0.6,
                        seed=seed, options=opts)
