"""LoRA golden conformance scenarios (tests/golden/vllm_lora_oracle): vLLM 0.32's ``max_loras``
rule (at most that many distinct adapters per step; a waiting request whose adapter would
exceed it is skipped) over many adapters and few slots, preemption in a small pool, chunked
prefill, chunked prefill off, stepwise arrivals, and prefix caching with prefixes shared
across adapters (a block hash includes the adapter, so only same-adapter requests hit)."""

from __future__ import annotations

from servesim_vllm.conformance import OracleOptions, ScenarioSpec

Opts = OracleOptions

GOLDEN_LORA: list[ScenarioSpec] = [
    ScenarioSpec(
        name="lora_many_adapters",
        note="16 adapters, max_loras 4, ample pool: admission skips requests of a fifth adapter",
        n=80, isl=(60, 200), osl=(10, 60), prefix_groups=0, seed=21, loras=16,
        options=Opts(num_gpu_blocks=600, max_num_seqs=32, max_num_batched_tokens=1024,
                     max_loras=4),
    ),
    ScenarioSpec(
        name="lora_one_slot",
        note="max_loras 1, 4 adapters and base-model requests mixed: base requests pass skipped ones",
        n=60, isl=(40, 160), osl=(10, 40), prefix_groups=2, prefix_frac=0.5, seed=22, loras=4,
        lora_frac=0.7,
        options=Opts(num_gpu_blocks=400, max_num_seqs=16, max_num_batched_tokens=512,
                     max_loras=1),
    ),
    ScenarioSpec(
        name="lora_preempt_small_pool",
        note="pool of 60 blocks, 6 adapters, max_loras 2: preemption requeues under the rule",
        n=30, isl=(150, 300), osl=(20, 60), prefix_groups=2, prefix_frac=0.5, seed=23, loras=6,
        options=Opts(num_gpu_blocks=60, max_num_seqs=32, max_num_batched_tokens=1024,
                     max_loras=2),
    ),
    ScenarioSpec(
        name="lora_chunked_prefill",
        note="budget 96 tokens, 4 adapters, max_loras 2: chunked prompts hold their adapter's slot",
        n=40, isl=(50, 400), osl=(5, 40), prefix_groups=2, prefix_frac=0.6, seed=24, loras=4,
        options=Opts(num_gpu_blocks=400, max_num_seqs=64, max_num_batched_tokens=96,
                     max_loras=2),
    ),
    ScenarioSpec(
        name="lora_shared_prefix",
        note="long prefixes shared across 3 adapters and the base model, max_loras 2: hits only "
             "within one adapter",
        n=60, isl=(150, 350), osl=(10, 40), prefix_groups=2, prefix_frac=0.9, prefix_ratio=0.8,
        seed=25, loras=3, lora_frac=0.75,
        options=Opts(num_gpu_blocks=300, max_num_seqs=8, max_num_batched_tokens=512,
                     max_loras=2),
    ),
    ScenarioSpec(
        name="lora_stepwise_prefix",
        note="one request per step, 8 adapters, max_loras 2, shared prefixes: hits on blocks "
             "computed in flight by the same adapter",
        n=120, isl=(80, 300), osl=(10, 60), prefix_groups=3, prefix_frac=0.9, prefix_ratio=0.7,
        seed=26, loras=8,
        options=Opts(num_gpu_blocks=200, max_num_seqs=32, max_num_batched_tokens=512,
                     admit="stepwise", per_step=1, max_loras=2),
    ),
    ScenarioSpec(
        name="lora_no_chunk_preempt",
        note="chunked prefill off, tight pool, 5 adapters, max_loras 2",
        n=30, isl=(100, 300), osl=(20, 50), prefix_groups=2, prefix_frac=0.5, seed=27, loras=5,
        options=Opts(num_gpu_blocks=64, max_num_seqs=16, max_num_batched_tokens=512,
                     chunked_prefill=False, max_loras=2),
    ),
    ScenarioSpec(
        name="lora_shared_prefix_preempt",
        note="long shared prefixes across 4 adapters, tight pool, max_loras 2: preemption, "
             "resume hits and eviction of other adapters' blocks",
        n=40, isl=(200, 400), osl=(20, 60), prefix_groups=2, prefix_frac=0.9, prefix_ratio=0.8,
        seed=28, loras=4, lora_frac=0.8,
        options=Opts(num_gpu_blocks=80, max_num_seqs=16, max_num_batched_tokens=512,
                     max_loras=2),
    ),
]
