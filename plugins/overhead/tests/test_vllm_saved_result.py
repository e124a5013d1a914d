"""A result saved by vLLM 0.32's own client (``data/vllm032_rate8_conc2.json``, made by
``data/make_vllm_result.sh``): ``vllm bench serve --request-rate 8 --max-concurrency 2
--save-detailed`` against ``servesim serve``. What it pins: the saved schedule is the one the
``bench_client`` draws give for the same options, and the client's semaphore hands its slots
out in the order requests were due (``workload.max_concurrency``'s rule)."""

from __future__ import annotations

import json
from pathlib import Path

from servesim_benchclient import config as client_config
from servesim_benchclient import draws
from servesim_overhead.command import _replay
from servesim_overhead.results import read

DATA = Path(__file__).parent / "data" / "vllm032_rate8_conc2.json"
OPTIONS = {"random_input_len": 128, "random_output_len": 16, "num_prompts": 24, "request_rate": 8.0,
           "max_concurrency": 2, "seed": 5, "ignore_eos": True}


def test_saved_schedule_is_the_clients_draws():
    (r,) = read(str(DATA), {})
    assert r.client["request_rate"] == 8.0 and r.client["max_concurrency"] == 2
    assert r.lengths == ((128, 16),) * 24
    drawn = draws.send_times_ms(client_config.build(OPTIONS, "options"))
    drawn = [t - drawn[0] for t in drawn]
    assert r.send_times_ms is not None and len(r.send_times_ms) == 24
    # the client's event loop sends within a few milliseconds of its schedule
    assert max(abs(a - b) for a, b in zip(r.send_times_ms, drawn, strict=True)) < 5.0


def test_semaphore_serves_waiters_in_the_order_they_were_due():
    saved = json.loads(DATA.read_text())
    due = [s - q for s, q in zip(saved["start_times"], saved["queue_times"], strict=True)]
    order = sorted(range(24), key=lambda i: due[i])
    waited = [i for i in order if saved["queue_times"][i] > 0.01]
    assert len(waited) >= 5  # the limit held requests back
    assert [saved["start_times"][i] for i in order] == sorted(saved["start_times"])


def test_saved_result_replays(tmp_path):
    (r,) = read(str(DATA), {})
    sim = tmp_path / "sim.yaml"
    sim.write_text("engine:\n  backend: vllm\n  timing_model: {type: overhead, inner: {type: fixed, "
                   "prefill_ms: 40.0, decode_ms: 10.0}, cuda_graph_padding: false}\n")
    ttft, tpot = _replay(str(sim), [], r, str(tmp_path), 0.0, 0.0)
    # the engine the client ran against, replayed on the client's schedule and limit: two
    # requests in flight, a new one's 40 ms prefill pass stalling the other's decode
    assert (ttft, tpot) == (49.007295, 12.222222)
    # the client measured the live server (the same engine in real time, behind HTTP)
    assert abs(tpot - r.measured_tpot_ms) < 0.1 and 0 < r.measured_ttft_ms - ttft < 10.0
