"""EngineMetrics exposes vLLM 0.32's metric set (names, types, labels, buckets) and SGLang's
names with the sglang backend; updates land in the right series."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from servesim.contract import ForwardPassMetrics
from servesim_prometheus.metrics import EngineMetrics, FinishedRequest

DATA = Path(__file__).resolve().parent / "data"


def _series(text: str) -> set[str]:
    """``name{labels}`` of every sample line, labels sorted (values dropped)."""
    out = set()
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = re.match(r"^([^{ ]+)(?:\{(.*)\})?(?: |$)", line)
        assert m is not None, line
        labels = sorted(m.group(2).split(",")) if m.group(2) else []
        out.add(f"{m.group(1)}{{{','.join(labels)}}}")
    return out


def test_vllm_series_equal_what_vllms_own_logger_registers() -> None:
    """data/: vLLM 0.32's PrometheusStatLogger (default config, model "m", engine 0,
    max_model_len 4096) as registered in vLLM's venv: every series and family must match."""
    m = EngineMetrics("vllm", model_name="m", engines=["0"], max_model_len=4096)
    ours = generate_latest(m.registry).decode()
    theirs = (DATA / "vllm_series.txt").read_text()
    assert _series(ours) == _series(theirs + "\n")
    families = json.loads((DATA / "vllm_metric_families.json").read_text())
    collected = list(m.registry.collect())
    for fam in collected:
        ref = families[fam.name]
        assert fam.type == ref["type"], fam.name
        labels = sorted({k for s in fam.samples for k in s.labels if k != "le"})
        assert labels == ref["labels"], fam.name
        buckets = sorted({float(s.labels["le"]) for s in fam.samples if "le" in s.labels})
        assert buckets == ref["buckets"], fam.name
    assert len(collected) == len(families) == 38


def _value(m: EngineMetrics, sample: str, **labels: str) -> float:
    got = m.registry.get_sample_value(sample, labels)
    assert got is not None, (sample, labels)
    return got


def test_updates_land_in_vllms_series() -> None:
    m = EngineMetrics("vllm", model_name="m", engines=["0", "1"], max_model_len=4096,
                      kv_capacity_tokens=1000)
    m.record_passes("1", [
        ForwardPassMetrics(num_prefill_requests=1, sum_prefill_tokens=100, sum_prefill_kv_tokens=28),
        ForwardPassMetrics(num_decode_requests=3, sum_decode_kv_tokens=400, num_queued_prefill=2),
    ])
    m.record_first_token("1", 0.25, prompt_tokens=128, cached_tokens=28)
    m.record_tokens("1", [0.02, 0.03])
    m.record_finished("1", [FinishedRequest(e2e_s=1.2, queue_s=0.1, prefill_s=0.15, decode_s=0.95,
                                            prompt_tokens=128, generation_tokens=3, cached_tokens=28)])
    one = {"model_name": "m", "engine": "1"}
    assert _value(m, "vllm:num_requests_running", **one) == 3
    assert _value(m, "vllm:num_requests_waiting", **one) == 2
    assert _value(m, "vllm:kv_cache_usage_perc", **one) == 0.4
    assert _value(m, "vllm:iteration_tokens_total_count", **one) == 2
    assert _value(m, "vllm:iteration_tokens_total_sum", **one) == 103
    assert _value(m, "vllm:iteration_tokens_total_bucket", **one, le="128.0") == 2
    assert _value(m, "vllm:iteration_tokens_total_bucket", **one, le="1.0") == 0
    assert _value(m, "vllm:prompt_tokens_total", **one) == 128
    assert _value(m, "vllm:prefix_cache_hits_total", **one) == 28
    assert _value(m, "vllm:prompt_tokens_by_source_total", **one, source="local_compute") == 100
    assert _value(m, "vllm:generation_tokens_total", **one) == 3
    assert _value(m, "vllm:inter_token_latency_seconds_count", **one) == 2
    assert _value(m, "vllm:inter_token_latency_seconds_bucket", **one, le="0.025") == 1
    assert _value(m, "vllm:time_to_first_token_seconds_bucket", **one, le="0.25") == 1
    assert _value(m, "vllm:time_to_first_token_seconds_bucket", **one, le="0.1") == 0
    assert _value(m, "vllm:request_success_total", **one, finished_reason="length") == 1
    assert _value(m, "vllm:request_time_per_output_token_seconds_sum", **one) == 0.475
    assert _value(m, "vllm:request_inference_time_seconds_sum", **one) == 0.15 + 0.95
    assert _value(m, "vllm:request_prefill_kv_computed_tokens_sum", **one) == 100
    assert _value(m, "vllm:engine_sleep_state", **one, sleep_state="awake") == 1
    zero = {"model_name": "m", "engine": "0"}
    assert _value(m, "vllm:generation_tokens_total", **zero) == 0
    assert _value(m, "vllm:num_requests_running", **zero) == 0


def test_sglang_backend_uses_sglangs_names() -> None:
    m = EngineMetrics("sglang", model_name="m", engines=["0"], kv_capacity_tokens=500)
    m.record_pass("0", ForwardPassMetrics(num_prefill_requests=2, sum_prefill_tokens=30,
                                          sum_prefill_kv_tokens=10, num_queued_prefill=4))
    m.record_first_token("0", 0.3, prompt_tokens=40, cached_tokens=10)
    sched = {"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "dp_rank": "0"}
    assert _value(m, "sglang:num_running_reqs", **sched) == 2
    assert _value(m, "sglang:num_queue_reqs", **sched) == 4
    assert _value(m, "sglang:token_usage", **sched) == 0.08
    assert _value(m, "sglang:max_total_num_tokens", **sched) == 500
    assert _value(m, "sglang:cache_hit_rate", **sched) == 0.25
    assert _value(m, "sglang:prompt_tokens_total", model_name="m") == 40
    assert _value(m, "sglang:cached_tokens_total", model_name="m") == 10
    assert _value(m, "sglang:time_to_first_token_seconds_bucket", model_name="m", le="0.4") == 1
    names = {f.name for f in m.registry.collect()}
    assert names and all(n.startswith("sglang:") for n in names)


def test_bulk_observation_equals_one_by_one() -> None:
    values = [0.001 * i for i in range(500)] + [5.0, 80.0, 81.0]
    a = EngineMetrics("vllm", engines=["0"])
    b = EngineMetrics("vllm", engines=["0"])
    a.record_tokens("0", values)
    for v in values:
        b.record_tokens("0", [v])
    for le in ("0.01", "0.1", "1.0", "80.0", "+Inf"):
        labels = {"model_name": "servesim", "engine": "0", "le": le}
        assert (a.registry.get_sample_value("vllm:inter_token_latency_seconds_bucket", labels)
                == b.registry.get_sample_value("vllm:inter_token_latency_seconds_bucket", labels))
    labels = {"model_name": "servesim", "engine": "0"}
    assert abs(a.registry.get_sample_value("vllm:inter_token_latency_seconds_sum", labels)
               - b.registry.get_sample_value("vllm:inter_token_latency_seconds_sum", labels)) < 1e-9
