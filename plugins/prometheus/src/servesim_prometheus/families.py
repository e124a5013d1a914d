"""The metric families each engine exposes: names, types, labels and histogram buckets.

vLLM 0.32 (``vllm/v1/metrics/loggers.py`` ``PrometheusStatLogger`` with the default
observability config; buckets from ``vllm/v1/metrics/buckets.py``): every family carries
``model_name`` and ``engine``, except ``admission_rejections`` (``model_name`` only).
``tests/data/vllm_metric_families.json`` is what vLLM's own logger registered, and the tests
compare these tables with it. Help texts are servesim's own.

SGLang (``python/sglang/srt/metrics/collector.py``): the scheduler gauges and the tokenizer
counters and histograms that a simulation can fill, labelled ``model_name`` (tokenizer
metrics) and ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank`` (scheduler gauges);
servesim adds ``dp_rank`` for its worker x rank index. Its label set is not checked against
a running SGLang.
"""

from __future__ import annotations

from attrs import frozen

REQUEST_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TIME_TO_FIRST_TOKEN = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_LATENCY = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                       5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
REQUEST_PARAMS_N = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS = (1, 2, 3, 4, 5, 10, 20)

SGLANG_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_E2E = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
              1200, 1800, 2400)
SGLANG_ITL = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
              0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000,
              8.000)
SGLANG_RETRACTIONS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100)


def one_two_five(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's token-count buckets)."""
    out: list[int] = []
    exp = 1
    while True:
        for m in (1, 2, 5):
            v = m * exp
            if v > max_value:
                return tuple(out)
            out.append(v)
        exp *= 10


@frozen
class Family:
    """One metric family. ``key``: the role servesim fills it in (metrics.py); ``buckets``
    "tokens" means 1-2-5 up to max_model_len. ``extra``: extra label and its values."""

    name: str
    kind: str  # gauge | counter | histogram
    key: str
    help: str
    buckets: tuple[float, ...] | str | None = None
    extra: tuple[str, tuple[str, ...]] | None = None
    engine_label: bool = True


def _f(name: str, kind: str, key: str, help: str, buckets: tuple[float, ...] | str | None = None,
       extra: tuple[str, tuple[str, ...]] | None = None, engine_label: bool = True) -> Family:
    return Family(name, kind, key, help, buckets, extra, engine_label)


VLLM: tuple[Family, ...] = (
    _f("vllm:estimated_flops_per_gpu", "counter", "zero", "Modelled FLOPs per GPU (not simulated)."),
    _f("vllm:estimated_read_bytes_per_gpu", "counter", "zero",
       "Modelled bytes read per GPU (not simulated)."),
    _f("vllm:estimated_write_bytes_per_gpu", "counter", "zero",
       "Modelled bytes written per GPU (not simulated)."),
    _f("vllm:num_requests_running", "gauge", "running", "Requests in the running batch."),
    _f("vllm:num_requests_waiting", "gauge", "waiting", "Requests waiting to be scheduled."),
    _f("vllm:num_requests_waiting_by_reason", "gauge", "waiting_by_reason",
       "Waiting requests by why they wait.", extra=("reason", ("capacity", "deferred"))),
    _f("vllm:engine_sleep_state", "gauge", "sleep_state", "Engine sleep state (1 for the current one).",
       extra=("sleep_state", ("awake", "weights_offloaded", "discard_all"))),
    _f("vllm:kv_cache_usage_perc", "gauge", "kv_usage", "KV-cache usage, 1 is full."),
    _f("vllm:prefix_cache_queries", "counter", "prefix_queries",
       "Prompt tokens looked up in the prefix cache."),
    _f("vllm:prefix_cache_hits", "counter", "prefix_hits", "Prompt tokens found in the prefix cache."),
    _f("vllm:external_prefix_cache_queries", "counter", "zero", "External prefix cache lookups, in tokens."),
    _f("vllm:external_prefix_cache_hits", "counter", "zero", "External prefix cache hits, in tokens."),
    _f("vllm:mm_cache_queries", "counter", "zero", "Multi-modal cache lookups."),
    _f("vllm:mm_cache_hits", "counter", "zero", "Multi-modal cache hits."),
    _f("vllm:num_preemptions", "counter", "preemptions", "Preemptions so far."),
    _f("vllm:prompt_tokens", "counter", "prompt_tokens", "Prompt tokens of requests past prefill."),
    _f("vllm:prompt_tokens_by_source", "counter", "prompt_by_source",
       "Prompt tokens by where their KV came from.",
       extra=("source", ("local_compute", "local_cache_hit", "external_kv_transfer"))),
    _f("vllm:prompt_tokens_cached", "counter", "prompt_cached", "Prompt tokens served from a cache."),
    _f("vllm:prompt_tokens_cached_by_source", "counter", "cached_by_source",
       "Cached prompt tokens by cache tier.",
       extra=("source", ("device", "host", "p2p", "disk", "external_unspecified"))),
    _f("vllm:generation_tokens", "counter", "generation_tokens", "Generated tokens."),
    _f("vllm:request_success", "counter", "success", "Finished requests by finish reason.",
       extra=("finished_reason", ("stop", "length", "abort", "error", "repetition"))),
    _f("vllm:admission_rejections", "counter", "zero", "Requests rejected at admission.",
       extra=("reason", ("max_num_queued_reqs", "max_num_queued_tokens")), engine_label=False),
    _f("vllm:request_prompt_tokens", "histogram", "req_prompt_tokens", "Prompt length per request.",
       "tokens"),
    _f("vllm:request_generation_tokens", "histogram", "req_generation_tokens",
       "Generated tokens per request.", "tokens"),
    _f("vllm:iteration_tokens_total", "histogram", "iteration_tokens", "Tokens per engine step.",
       ITERATION_TOKENS),
    _f("vllm:request_max_num_generation_tokens", "histogram", "req_max_tokens",
       "Most tokens a request may generate.", "tokens"),
    _f("vllm:request_params_n", "histogram", "req_n", "The n parameter per request.", REQUEST_PARAMS_N),
    _f("vllm:request_params_max_tokens", "histogram", "req_max_tokens",
       "The max_tokens parameter per request.", "tokens"),
    _f("vllm:time_to_first_token_seconds", "histogram", "ttft", "Time to first token.", TIME_TO_FIRST_TOKEN),
    _f("vllm:inter_token_latency_seconds", "histogram", "itl", "Time between consecutive tokens.",
       INTER_TOKEN_LATENCY),
    _f("vllm:request_time_per_output_token_seconds", "histogram", "tpot",
       "Mean inter-token time per request.", INTER_TOKEN_LATENCY),
    _f("vllm:e2e_request_latency_seconds", "histogram", "e2e", "Arrival to last token.", REQUEST_LATENCY),
    _f("vllm:request_queue_time_seconds", "histogram", "queue", "Arrival to first scheduling.",
       REQUEST_LATENCY),
    _f("vllm:request_inference_time_seconds", "histogram", "inference",
       "First scheduling to last token.", REQUEST_LATENCY),
    _f("vllm:request_prefill_time_seconds", "histogram", "prefill", "First scheduling to first token.",
       REQUEST_LATENCY),
    _f("vllm:request_decode_time_seconds", "histogram", "decode", "First token to last token.",
       REQUEST_LATENCY),
    _f("vllm:request_num_preemptions", "histogram", "req_preemptions", "Preemptions per request.",
       REQUEST_NUM_PREEMPTIONS),
    _f("vllm:request_prefill_kv_computed_tokens", "histogram", "req_computed",
       "Prompt tokens computed (not cached) per request.", "tokens"),
)

SGLANG_SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "dp_rank")
SGLANG: tuple[Family, ...] = (
    _f("sglang:num_running_reqs", "gauge", "running", "Running requests."),
    _f("sglang:num_queue_reqs", "gauge", "waiting", "Requests in the waiting queue."),
    _f("sglang:num_used_tokens", "gauge", "used_tokens", "KV tokens in use."),
    _f("sglang:token_usage", "gauge", "kv_usage", "KV token usage, 1 is full."),
    _f("sglang:max_total_num_tokens", "gauge", "max_tokens", "KV pool size in tokens."),
    _f("sglang:cache_hit_rate", "gauge", "hit_rate", "Prefix cache hit rate of the last batch."),
    _f("sglang:prompt_tokens", "counter", "prompt_tokens", "Prompt tokens processed.", engine_label=False),
    _f("sglang:generation_tokens", "counter", "generation_tokens", "Generated tokens.", engine_label=False),
    _f("sglang:cached_tokens", "counter", "prompt_cached", "Prompt tokens served from the cache.",
       engine_label=False),
    _f("sglang:num_requests", "counter", "finished", "Finished requests.", engine_label=False),
    _f("sglang:time_to_first_token_seconds", "histogram", "ttft", "Time to first token.", SGLANG_TTFT,
       engine_label=False),
    _f("sglang:inter_token_latency_seconds", "histogram", "itl", "Time between consecutive tokens.",
       SGLANG_ITL, engine_label=False),
    _f("sglang:e2e_request_latency_seconds", "histogram", "e2e", "Arrival to last token.", SGLANG_E2E,
       engine_label=False),
    _f("sglang:num_retractions", "histogram", "req_preemptions", "Retractions per request.",
       SGLANG_RETRACTIONS, engine_label=False),
)

FAMILIES = {"vllm": VLLM, "sglang": SGLANG}

__all__ = ["FAMILIES", "Family", "SGLANG", "VLLM", "one_two_five"]
