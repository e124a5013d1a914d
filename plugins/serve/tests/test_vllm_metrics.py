"""``/metrics`` through servesim-prometheus's EngineMetrics."""

from __future__ import annotations

import re

import httpx
import pytest
from servesim_serve.testing import running

SETS = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=500"]


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample; labels are matched whatever their order."""
    for line in text.splitlines():
        m = re.match(rf"{re.escape(name)}\{{(.*)\}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1).split(",") for k, v in labels.items()):
            return float(m.group(2))
    raise AssertionError(f"no sample {name} {labels}")


def test_engine_metrics_follow_the_requests() -> None:
    with running(SETS) as s:
        assert type(s.server.observer).__name__ == "EngineMetricsObserver"
        for _ in range(2):
            httpx.post(s.base + "/completions", json={"prompt": list(range(4, 4 + 130)), "max_tokens": 3})
        text = httpx.get(s.url + "/metrics").text
    assert sample(text, "vllm:request_success_total", engine="0", finished_reason="length") == 2.0
    assert sample(text, "vllm:generation_tokens_total", engine="0") == 6.0
    assert sample(text, "vllm:prompt_tokens_total", engine="0") == 260.0
    assert sample(text, "vllm:prefix_cache_hits_total", engine="0") == 128.0  # two 64-token blocks
    assert sample(text, "vllm:time_to_first_token_seconds_count", engine="0") == 2.0
    assert sample(text, "vllm:time_to_first_token_seconds_sum", engine="0") == pytest.approx(0.020)
    assert sample(text, "vllm:inter_token_latency_seconds_sum", engine="0") == pytest.approx(0.008)
    assert sample(text, "vllm:e2e_request_latency_seconds_sum", engine="0") == pytest.approx(0.028)


def test_finished_requests_are_recorded_at_the_flush_and_before_a_render() -> None:
    from servesim_serve.records import LiveRequest
    from servesim_serve.vllm_metrics import EngineMetricsObserver

    recorded: list[tuple[str, list[str]]] = []

    class Metrics:
        registry = None

        def record_finished(self, engine: str, requests: list) -> None:
            recorded.append((engine, [r.finished_reason for r in requests]))

    obs = EngineMetricsObserver(Metrics(), lambda **kw: type("F", (), kw)(), dp_size=2)
    reqs = [LiveRequest(i, 10, 4, 0, 0.0) for i in range(3)]
    for req, (worker, dp) in zip(reqs, [(0, 1), (1, 0), (0, 1)], strict=True):
        req.worker, req.dp_rank, req.times, req.done_ms = worker, dp, [5.0, 6.0], 6.0
    reqs[2].cancelled = True
    for req in reqs:
        obs.finished(req)
    assert recorded == []
    obs.flush()
    assert recorded == [("1", ["length", "abort"]), ("2", ["length"])]  # engine = worker * 2 + dp
    obs.flush()
    assert len(recorded) == 2
    obs.finished(reqs[0])
    import servesim_serve.vllm_metrics as vm

    rendered = []
    real, vm.generate_latest = vm.generate_latest, lambda registry: rendered.append(len(recorded)) or b""
    try:
        obs.render()
    finally:
        vm.generate_latest = real
    assert rendered == [3]
