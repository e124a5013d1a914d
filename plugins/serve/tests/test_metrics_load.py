"""/metrics under load: 200 concurrent streams, 30 % of their clients leaving after a few
chunks, ``/metrics`` scraped throughout, with aggregated workers and with a prefill/decode
split. At every scrape started = finished + cancelled + running + waiting; idle, every gauge
is 0; the report and the counters agree with what the clients saw. (The 1,000-stream version,
with its figures, is benchmarks/serve_streams.py.)"""

from __future__ import annotations

import asyncio

import pytest
from serve_helpers import wait_for
from servesim_serve.stream_load import LEAVER_TOKENS, RenderLog, drive, families, make_plans, summary
from servesim_serve.testing import running

WAIT_S = 30.0
N_STREAMS, LEAVE, SEED = 200, 0.3, 46
# 4 wall ms per pass (as test_cancel.py's 1,000 streams): a crowded machine keeps up.
LOAD = ["engine.timing_model={type: fixed, prefill_ms: 20.0, decode_ms: 20.0}", "serve.speedup=5",
        "engine.num_gpu_blocks=4096"]
MODES = {
    "aggregated": [*LOAD, "cluster.workers=2", "cluster.router=kv"],
    # a long KV transfer: many scrapes find requests between the prefill and the decode pool
    "split": [*LOAD, "cluster.prefill_workers=2", "cluster.decode_workers=2",
              "cluster.handoff_latency_ms=200"],
}


def idle(driver) -> bool:
    return driver.in_flight == 0 and not any(e.pass_in_flight for e in driver.engines) and not driver._heap


@pytest.mark.parametrize("mode", sorted(MODES))
def test_metrics_balance_at_every_scrape_with_200_streams_and_30_percent_leaving(mode: str) -> None:
    plans = make_plans(N_STREAMS, LEAVE, SEED)
    leavers = [i for i, p in enumerate(plans) if p[2] is not None]
    stayers = [i for i, p in enumerate(plans) if p[2] is None]
    assert 40 <= len(leavers) <= 80  # the seed's share of leavers: about 30 %
    with running(MODES[mode]) as s:
        log = RenderLog(s.server)
        got, scrapes = asyncio.run(drive(s.url, plans, in_flight=N_STREAMS))
        driver = s.server.driver
        wait_for(lambda: idle(driver), "the server to go idle", WAIT_S)
        report = s.server.report()
        final = families(s.server.observer.render().decode())
        blocks = sum(r.metrics().active_blocks for e in driver.engines for r in e.ranks)
    figures = summary(log.entries)
    # every scrape was logged (the scraper's, the first leaver's, the idle one above) and balanced
    assert figures["scrapes"] == scrapes + 2 and scrapes >= 1
    assert (figures["unbalanced"], figures["max_imbalance"]) == (0, 0.0)
    assert figures["busy_scrapes"] >= 1  # the first leaver's scrape found its request in flight
    # idle: the gauges are 0 and the counters are the clients' view
    assert final == {"finished": float(len(stayers)), "cancelled": float(len(leavers)),
                     "running": 0.0, "waiting": 0.0, "kv": 0.0}
    assert blocks == 0
    # each stayer got every token it asked for, each leaver some and far from all
    assert [got[i] for i in stayers] == [plans[i][1] for i in stayers]
    assert all(1 <= got[i] < LEAVER_TOKENS for i in leavers)
    assert (report["num_requests"], report["completed"], report["failed"], report["num_cancelled"]) == (
        N_STREAMS, len(stayers), len(leavers), len(leavers))
    assert report["num_unfinished"] == report["num_aborted"] == report["num_queue_full"] == 0
    assert report["total_output_tokens"] == sum(plans[i][1] for i in stayers)
    assert report["total_input_tokens"] == sum(len(plans[i][0]) for i in stayers)
