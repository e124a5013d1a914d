"""``cluster.pools``: the server serves a heterogeneous cluster as ``run`` replays it (one
router over every pool's workers, each pool with its own engine), with the report's ``pools``."""

from __future__ import annotations

import httpx
import pytest
from servesim_serve.testing import running

POOLS = ["cluster.router=round_robin", "serve.speedup=500",
         "engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}",
         "cluster.pools=[{name: fast, workers: 1},"
         " {name: slow, workers: 2, engine: {timing_model: {prefill_ms: 20.0, decode_ms: 4.0}}}]"]


def test_requests_are_served_by_every_pool_with_its_own_timing() -> None:
    with running(POOLS) as s:
        for _ in range(3):  # one after another: round robin puts one on each worker
            r = httpx.post(s.base + "/completions", json={"prompt": "a b c", "max_tokens": 3}, timeout=30)
            assert r.status_code == 200
        report = httpx.get(s.url + "/servesim/report", timeout=30).json()
        requests = list(s.server.driver.requests)
        metrics = httpx.get(s.url + "/metrics", timeout=30).text
    assert [r.worker for r in requests] == [0, 1, 2]
    # fast: prefill 10 ms, then 2 ms a token; slow: 20 ms, then 4 ms
    assert [[t - r.arrival for t in r.times] for r in requests] == [
        pytest.approx([10.0, 12.0, 14.0]), pytest.approx([20.0, 24.0, 28.0]),
        pytest.approx([20.0, 24.0, 28.0])]
    fast, slow = report["pools"]
    assert (fast["name"], fast["workers"], fast["completed"]) == ("fast", 1, 1)
    assert (slow["name"], slow["workers"], slow["completed"]) == ("slow", 2, 2)
    assert fast["mean_ttft_ms"] == pytest.approx(10.0) and slow["mean_ttft_ms"] == pytest.approx(20.0)
    assert report["completed"] == 3
    assert 'engine="2"' in metrics  # one metric child per worker of every pool
