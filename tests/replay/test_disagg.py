"""Disaggregated replay (servesim.replay.disagg) through the loader and the runner.

Fixed timing (prefill 10 ms, decode 2 ms) and one-block prompts keep every timestamp
hand-checkable: a request arriving at ``t`` on an idle cluster is prefilled by ``t + 10``,
reserved at once, transferred in ``delay`` ms, decoded in 2 ms per token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.config.loader import load_config
from servesim.replay.disagg import DisaggReplayer, build_disagg_replayer
from servesim.replay.runner import SimResult, load_workload, simulate
from servesim.report.keys import numeric_keys, report_keys
from servesim.report.summary import dumps, format_table, per_request_lines

DOCS = Path(__file__).resolve().parents[2] / "docs"


def write_trace(path: Path, rows: list[tuple[int, int, int]]) -> str:
    """``(timestamp, input_length, output_length)`` rows, each with its own hash ids."""
    lines = [
        json.dumps({"timestamp": t, "input_length": n, "output_length": out,
                    "hash_ids": [1000 * i + k for k in range(-(-n // 16))]})
        for i, (t, n, out) in enumerate(rows)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run(tmp_path: Path, rows: list[tuple[int, int, int]], *sets: str) -> SimResult:
    trace = write_trace(tmp_path / "t.jsonl", rows)
    cfg = {
        "engine": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 64,
                   "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 2.0}},
        "cluster": {"prefill_workers": 1, "decode_workers": 1, "router": "kv"},
        "workload": {"trace": {"path": trace, "trace_block_size": 16}},
    }
    path = tmp_path / "sim.yaml"
    path.write_text(json.dumps(cfg))
    return simulate(load_config(str(path), list(sets)), record_token_times=True)


def test_handoff_timeline_with_engine_transfer_timing(tmp_path: Path) -> None:
    # 32 tokens × 1e6 B at 2 GB/s = 16 ms of transfer.
    res = run(tmp_path, [(0, 32, 3)], "engine.kv_bytes_per_token=1000000",
              "engine.kv_transfer_bandwidth=2")
    log, ex = res.log, res.log.extra
    assert ex["source_held_ms"][0] == 10.0 and ex["destination_reserved_ms"][0] == 10.0
    assert ex["kv_transfer_ms"][0] == pytest.approx(16.0)
    assert ex["destination_activated_ms"][0] == pytest.approx(26.0)
    assert ex["source_released_ms"][0] == pytest.approx(26.0)
    assert ex["decode_admit_ms"][0] == pytest.approx(26.0)
    # The client sees the decode worker's tokens only: 3 tokens, the first one pass later.
    assert log.token_times[0] == pytest.approx([28.0, 30.0, 32.0])
    rep = res.report
    assert rep["num_handoffs"] == 1 and rep["mean_kv_transfer_ms"] == pytest.approx(16.0)
    assert rep["mean_ttft_ms"] == pytest.approx(28.0)
    assert (rep["mean_ttft_prefill_ms"], rep["mean_ttft_transfer_ms"],
            rep["mean_ttft_decode_ms"]) == pytest.approx((10.0, 16.0, 2.0))
    # Prefill worker busy 10 of 32 ms, decode worker 6 of 32 ms.
    assert rep["worker_utilization"] == pytest.approx({"prefill": 10 / 32, "decode": 6 / 32})


def test_topology_latency_is_the_fallback_without_engine_timing(tmp_path: Path) -> None:
    base = run(tmp_path, [(0, 32, 2)]).log
    shifted = run(tmp_path, [(0, 32, 2)], "cluster.handoff_latency_ms=7").log
    assert base.token_times[0] == pytest.approx([12.0, 14.0])
    assert shifted.token_times[0] == pytest.approx([19.0, 21.0])  # +7 ms
    # A bandwidth without a KV size gives no engine timing either.
    assert run(tmp_path, [(0, 32, 2)], "cluster.handoff_latency_ms=7",
               "engine.kv_transfer_bandwidth=1").log.token_times[0] == pytest.approx([19.0, 21.0])


def test_activation_waits_for_the_decode_pass_and_release_for_the_prefill_pass(tmp_path: Path) -> None:
    res = run(tmp_path, [(0, 16, 10), (5, 16, 2)], "cluster.handoff_latency_ms=3")
    ex = res.log.extra
    # Request 0: prefill 0..10, transfer 10..13, decode passes end at 15, 17, 19, ...
    assert ex["destination_activated_ms"][0] == 13.0
    # ... but the prefill worker is busy with request 1 (10..20): released at 20.
    assert ex["source_released_ms"][0] == 20.0
    # Request 1's source is held at 20, mid decode pass 19..21: reserved at that boundary.
    assert ex["source_held_ms"][1] == 20.0 and ex["destination_reserved_ms"][1] == 21.0
    # Its transfer ends at 24, mid decode pass 23..25: activation is deferred to 25.
    assert ex["destination_activated_ms"][1] == 25.0
    assert res.log.token_times[1] == pytest.approx([27.0, 29.0])
    assert ex["source_released_ms"][1] == 25.0


def test_a_prompt_larger_than_the_decode_pool_fails_and_frees_the_source(tmp_path: Path) -> None:
    res = run(tmp_path, [(0, 160, 2), (1, 16, 2)], "cluster.decode_engine.num_gpu_blocks=4")
    log = res.log
    assert log.rejected == [True, False]
    assert res.report["failed"] == 1 and res.report["completed"] == 1
    assert res.log.extra["destination_reserved_ms"][0] == -1.0


def test_attention_dp_in_both_pools_uses_every_rank(tmp_path: Path) -> None:
    rows = [(0, 16, 3), (0, 16, 3), (0, 16, 3), (0, 16, 3)]
    res = run(tmp_path, rows, "engine.dp_size=2")
    ex = res.log.extra
    assert sorted(ex["prefill_dp_rank"]) == [0, 0, 1, 1]
    assert sorted(res.log.dp_rank) == [0, 0, 1, 1]
    # Two prefills per rank run in one pass at 0; all four finish prefill at 10.
    assert ex["source_held_ms"] == [10.0] * 4
    assert res.report["completed"] == 4


def test_per_role_engine_overrides_and_determinism(tmp_path: Path) -> None:
    rows = [(i * 3, 16 + 8 * (i % 3), 2 + i % 4) for i in range(12)]
    sets = ("cluster.prefill_workers=2", "cluster.decode_workers=2",
            "cluster.prefill_engine.speedup_ratio=2", "cluster.decode_engine.dp_size=2")
    a = run(tmp_path, rows, *sets)
    b = run(tmp_path, rows, *sets)
    assert dumps(a.report) == dumps(b.report)
    assert list(per_request_lines(a.log)) == list(per_request_lines(b.log))
    ex = a.log.extra
    # Prefill passes last 10 / 2 = 5 ms.
    assert ex["source_held_ms"][0] - ex["prefill_admit_ms"][0] == 5.0
    assert set(ex["prefill_worker"]) == {0, 1}
    assert {(w, d) for w, d in zip(a.log.worker, a.log.dp_rank, strict=True)} == {
        (2, 0), (2, 1), (3, 0), (3, 1)
    }
    assert a.report["config"]["cluster"]["decode_engine"] == {"dp_size": 2}


def test_the_table_shows_the_handoff_figures(tmp_path: Path) -> None:
    res = run(tmp_path, [(0, 32, 3)], "engine.kv_bytes_per_token=1000000",
              "engine.kv_transfer_bandwidth=2")
    table = format_table(res.report)
    assert "Disaggregated prefill/decode" in table
    rows = dict(line.rsplit(None, 1) for line in table.splitlines() if line.endswith(tuple("0123456789")))
    assert rows["Handoffs:"] == "1" and rows["Mean KV transfer (ms):"] == "16.00"
    assert rows["Mean TTFT: decode (ms):"] == "2.00"


def test_every_disaggregation_report_key_is_documented(tmp_path: Path) -> None:
    res = run(tmp_path, [(0, 16, 2)])
    text = (DOCS / "report.md").read_text()
    keys = ["num_handoffs", "mean_kv_transfer_ms", "mean_ttft_prefill_ms",
            "mean_ttft_transfer_ms", "mean_ttft_decode_ms", "worker_utilization"]
    assert all(k in res.report for k in keys)
    assert [k for k in keys if f"`{k}`" not in text] == []
    record = json.loads(next(iter(per_request_lines(res.log))))
    for key in res.log.extra:
        assert key in record and f"`{key}`" in text, key


def replayer(tmp_path: Path, rows: list[tuple[int, int, int]], *sets: str) -> DisaggReplayer:
    trace = write_trace(tmp_path / "t.jsonl", rows)
    cfg = {
        "engine": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 64,
                   "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 2.0}},
        "cluster": {"prefill_workers": 1, "decode_workers": 1, "router": "kv",
                    "handoff_latency_ms": 5.0},
        "workload": {"trace": {"path": trace, "trace_block_size": 16}},
    }
    path = tmp_path / "sim.yaml"
    path.write_text(json.dumps(cfg))
    loaded = load_config(str(path), list(sets))
    workload = load_workload(loaded.sim.workload, loaded.plugins)
    return build_disagg_replayer(loaded, workload, [], [], record_token_times=True)


@pytest.mark.parametrize(
    ("at_ms", "where"),
    [(4.0, "prefill"), (12.0, "transfer"), (18.0, "decode")],
)
def test_cancel_mid_handoff_frees_both_sides_and_keeps_the_accounting(
    tmp_path: Path, at_ms: float, where: str
) -> None:
    # Request 0: prefill 0..10, transfer 10..15, decode passes end 17, 19, ... (8 tokens).
    # Request 1 arrives at 1 and runs undisturbed.
    rp = replayer(tmp_path, [(0, 32, 8), (1, 16, 3)])
    rp.cancel_at(0, at_ms)
    log = rp.run()  # raises if a worker is left holding KV or a request is unaccounted for
    assert rp.cancelled == {0} and log.rejected == [True, False]
    assert log.done[0] == at_ms and log.ntok[1] == 3
    extra = rp.per_request_extras()
    assert (extra["destination_activated_ms"][0] >= 0) is (where == "decode")
    if where == "decode":  # tokens at 17 only; the pass 17..19 was suppressed
        assert log.token_times[0] == [17.0]
    else:
        assert log.ntok[0] == 0
    for engine in rp.engines:
        assert engine.is_drained()
        assert all(r.metrics().active_blocks == 0 for r in engine.ranks)
    rep = rp.report_extras()
    assert rep["num_cancelled"] == 1


def test_cancelling_a_finished_request_changes_nothing(tmp_path: Path) -> None:
    rp = replayer(tmp_path, [(0, 16, 2)])
    rp.cancel_at(0, 100.0)
    log = rp.run()
    assert rp.cancelled == set() and log.rejected == [False] and log.ntok[0] == 2


def _lora_split(tmp_path: Path) -> Path:
    """Two requests of 16 tokens (20 out) on adapters 1 and 2, one prefill and one decode
    worker, default adapter sizes (rank 16) and loading bandwidths."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 0, "input_length": 16, "output_length": 20,
                                         "hash_ids": [10 * i], "lora": i + 1}) + "\n" for i in range(2)))
    cfg = {
        "engine": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 64,
                   "enable_lora": True, "lora_modules": [{"id": 1}, {"id": 2}],
                   "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 2.0}},
        "cluster": {"prefill_workers": 1, "decode_workers": 1},
        "workload": {"trace": {"path": str(trace), "trace_block_size": 16}},
    }
    path = tmp_path / "sim.yaml"
    path.write_text(json.dumps(cfg))
    return path


def test_a_split_reports_adapter_loads_per_pool(tmp_path: Path) -> None:
    """The split's ``lora`` section (servesim.replay.adapters.split_lora_report): each pool
    loads the adapters of the requests it runs; each request is counted once."""
    path = _lora_split(tmp_path)
    load = 83_886_080 / 2e6 + 83_886_080 / 12e6  # rank 16 x 5,242,880 bytes: disk, then into a slot
    loaded = load_config(str(path), ["engine.max_loras=1"])
    report = simulate(loaded).report
    report.pop("config")
    # the keys a sweep may name are known before the run (the per-adapter counts aside)
    assert report_keys(loaded) == {k for k in numeric_keys(report) if not k.startswith("lora.requests.")}
    one = report["lora"]
    # One slot and one host slot: adapter 2 evicts adapter 1 from both, on each pool.
    pool = {"disk_loads": 2, "gpu_loads": 2, "cpu_evictions": 1, "gpu_evictions": 1,
            "load_ms": pytest.approx(2 * load)}
    assert one == {"disk_loads": 4, "gpu_loads": 4, "cpu_evictions": 2, "gpu_evictions": 2,
                   "load_ms": pytest.approx(4 * load), "requests": {"1": 1, "2": 1},
                   "prefill": pool, "decode": pool}
    kv = tmp_path / "kv.jsonl"
    two = simulate(load_config(str(path), ["engine.max_loras=2",
                                           f"sinks.kv_events=[{{type: jsonl, path: {kv}}}]"])).report["lora"]
    pool = {"disk_loads": 2, "gpu_loads": 2, "cpu_evictions": 0, "gpu_evictions": 0,
            "load_ms": pytest.approx(2 * load)}
    assert two["prefill"] == two["decode"] == pool and two["requests"] == {"1": 1, "2": 1}
    # Both pools' Stored events name the adapter (the decode worker's through its handoff).
    stored = [json.loads(line) for line in kv.read_text().splitlines()]
    assert [(e["worker"], e["lora_id"], e["lora_name"]) for e in stored] == [
        (0, 1, "adapter-1"), (0, 2, "adapter-2"), (1, 1, "adapter-1"), (1, 2, "adapter-2"),
        (1, 1, "adapter-1"), (1, 2, "adapter-2")]
    plain = simulate(load_config(str(path), ["engine.enable_lora=false"])).report
    assert "lora" not in plain


def test_the_decode_worker_keeps_max_loras(tmp_path: Path) -> None:
    """A transferred request is held to ``max_loras`` on its decode worker too, as vLLM checks
    the rule after a remote request's KV has arrived: with one slot, request 1 (adapter 2)
    decodes only after request 0 (adapter 1) has ended; with two slots they decode together."""
    path = _lora_split(tmp_path)

    def decode_spans(slots: int) -> list[tuple[float, float]]:
        res = simulate(load_config(str(path), [f"engine.max_loras={slots}"]), record_token_times=True)
        times = res.log.token_times
        return [(t[1], t[-1]) for t in times]  # (first decoded token, last token)

    one, two = decode_spans(1), decode_spans(2)
    # One slot: request 1 decodes only after request 0 ended (its adapter loaded from disk
    # again on each worker, as the default lora_loading prices it).
    assert one == [pytest.approx((112.167094, 149.967094)), pytest.approx((203.100641, 240.900641))]
    assert one[1][0] > one[0][1]
    # Two slots: both adapters load into one pass, and the two requests decode together.
    assert two == [pytest.approx((210.334186, 249.934186))] * 2
