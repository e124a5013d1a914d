"""The live disaggregated replayer (servesim_serve.disagg_live) against the batch replay.

Random small traces on prefill and decode pools (vLLM, or SGLang's reserve-first handoff; KV
or round-robin prefill routing, transfer latencies, tight or roomy decode pools, prefix
caching on or off, a cancellation): fed the trace's arrivals one at a time, each followed by
an advance to its time, the live replayer must give the batch replay's report (handoff keys
included) and per-request lines byte for byte, and tell its listener every decode token at
the time the log has it. Its per-request records must grow with every request added.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.loader import load_config
from servesim.plugins import Plugins
from servesim.replay.disagg import build_disagg_replayer
from servesim.replay.runner import load_workload
from servesim.report.stats import RequestLog
from servesim.report.summary import build_report, dumps, per_request_lines
from servesim.workload.model import Workload
from servesim_serve.disagg_live import LiveDisaggReplayer, LiveListener

PLUGINS = Plugins()


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 12))
    rows = []
    t = 0
    for i in range(n):
        t += draw(st.integers(0, 30))
        blocks = draw(st.integers(1, 5))
        rows.append((t, blocks, draw(st.integers(0, 2)), draw(st.integers(1, 30)), i))
    return dict(
        rows=rows,
        backend=draw(st.sampled_from(["vllm", "vllm", "sglang"])),
        router=draw(st.sampled_from(["kv", "kv", "round_robin"])),
        workers=draw(st.tuples(st.integers(1, 2), st.integers(1, 3))),
        latency=draw(st.sampled_from([0.0, 1.5, 7.0])),
        decode_blocks=draw(st.sampled_from([12, 40, 4096])),
        caching=draw(st.booleans()),
        cancel=draw(st.one_of(st.none(), st.tuples(st.integers(0, 11), st.integers(0, 200)))),
    )


def _loaded(case: dict[str, Any]) -> Any:
    tmp = Path(tempfile.mkdtemp())
    lines = []
    for t, blocks, shared, out, i in case["rows"]:
        hashes = list(range(min(shared, blocks))) + [1000 * (i + 1) + k for k in range(blocks)]
        lines.append(json.dumps({"timestamp": t, "input_length": 8 * blocks - i % 3,
                                 "output_length": out, "hash_ids": hashes[:blocks]}))
    (tmp / "t.jsonl").write_text("\n".join(lines) + "\n")
    cfg = {
        "engine": {"backend": case["backend"], "block_size": 8,
                   "timing_model": {"type": "fixed", "prefill_ms": 4.0, "decode_ms": 1.0},
                   "enable_prefix_caching": case["caching"]},
        "cluster": {"prefill_workers": case["workers"][0], "decode_workers": case["workers"][1],
                    "router": case["router"], "handoff_latency_ms": case["latency"],
                    "decode_engine": {"num_gpu_blocks": case["decode_blocks"]}},
        "workload": {"trace": {"path": str(tmp / "t.jsonl"), "trace_block_size": 8}},
    }
    (tmp / "sim.yaml").write_text(json.dumps(cfg))
    return load_config(str(tmp / "sim.yaml"), (), PLUGINS)


def _out(rp: Any, log: Any, loaded: Any) -> tuple[str, list[str]]:
    report = build_report(log, loaded.sim.report)
    report.update(rp.report_extras())
    log.extra = rp.per_request_extras()
    return dumps(report), list(per_request_lines(log))


class Heard(LiveListener):
    def __init__(self, n: int) -> None:
        self.times: list[list[float]] = [[] for _ in range(n)]
        self.ended_at: dict[int, float] = {}

    def tokens(self, rid: int, count: int, now: float) -> None:
        assert rid not in self.ended_at
        self.times[rid].extend([now] * count)

    def ended(self, rid: int, now: float) -> None:
        self.ended_at[rid] = now


def _batch_and_live(case: dict[str, Any]) -> tuple[Any, Any, Heard, Any]:
    loaded = _loaded(case)
    batch = build_disagg_replayer(loaded, load_workload(loaded.sim.workload, loaded.plugins), [], [],
                                  record_token_times=True)
    cancel = case["cancel"]
    n = len(case["rows"])
    if cancel is not None and cancel[0] < n:
        batch.cancel_at(cancel[0], float(cancel[1]))
    batch_log = batch.run()
    live = build_disagg_replayer(loaded, Workload(()), [], [], record_token_times=True,
                                 replayer_class=LiveDisaggReplayer)
    assert isinstance(live, LiveDisaggReplayer)
    heard = Heard(n)
    live.listener = heard
    turns = load_workload(loaded.sim.workload, loaded.plugins).turns()
    base = min(row[0] for row in case["rows"])  # the replay rebases timestamps to the first
    arrivals = sorted((float(t - base), i) for t, *_rest, i in case["rows"])
    events = [(at, 1, rid) for at, rid in arrivals]
    if cancel is not None and cancel[0] < n:
        # the batch replay handles a cancellation due with an arrival before the arrival
        events.append((float(cancel[1]), 0, cancel[0]))
    events.sort()
    for i, (at, kind, rid) in enumerate(events):
        if kind == 1:
            assert live.add(turns[rid].prompt, turns[rid].output_length) == rid
            live.arrive(rid, at)
        elif rid < len(live.turns):  # (before its arrival the batch replay ignores it)
            live.cancel(rid, at)
        if i + 1 == len(events) or events[i + 1][0] != at:  # what is due together, together
            live.advance(at)
    live.advance(float("inf"))
    return batch, batch_log, heard, (live, loaded)


@settings(max_examples=80, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_live_arrivals_give_the_batch_replay(case: dict[str, Any]) -> None:
    batch, batch_log, heard, (live, loaded) = _batch_and_live(case)
    assert live.next_event_ms() is None
    for engine in live.engines:
        assert engine.is_drained()
    assert _out(live, live.log, loaded) == _out(batch, batch_log, loaded)
    assert heard.times == live.log.token_times
    assert heard.ended_at == {r: live.log.done[r] for r in range(len(case["rows"]))}


def test_a_receipt_before_the_handled_time_is_the_logged_arrival() -> None:
    case = dict(rows=[(0, 2, 0, 3, 0)], backend="vllm", router="kv", workers=(1, 1),
                latency=0.0, decode_blocks=4096, caching=True, cancel=None)
    loaded = _loaded(case)
    live = build_disagg_replayer(loaded, Workload(()), [], [], replayer_class=LiveDisaggReplayer,
                                 record_token_times=True)
    rid = live.add(load_workload(loaded.sim.workload, loaded.plugins).turns()[0].prompt, 3)
    live.arrive(rid, 5.0, received=2.0)
    live.advance(100.0)
    # prefill 5..9, then 3 decode passes of 1 ms; the arrival (TTFT origin) is the receipt
    assert live.log.arrival == [2.0]
    assert live.log.token_times == [[10.0, 11.0, 12.0]]


def test_every_per_request_record_grows_with_each_request() -> None:
    case = dict(rows=[(i, 1, 0, 2, i) for i in range(5)], backend="vllm", router="kv",
                workers=(1, 1), latency=0.0, decode_blocks=4096, caching=True, cancel=None)
    loaded = _loaded(case)
    batch = build_disagg_replayer(loaded, load_workload(loaded.sim.workload, loaded.plugins), [], [],
                                  record_token_times=True)
    live = build_disagg_replayer(loaded, Workload(()), [], [], replayer_class=LiveDisaggReplayer,
                                 record_token_times=True)
    for turn in load_workload(loaded.sim.workload, loaded.plugins).turns():
        live.add(turn.prompt, turn.output_length)

    def per_request(obj: Any) -> set[str]:
        out = set()
        for name in dir(obj):
            value = getattr(obj, name, None)
            if isinstance(value, list) and len(value) == 5:
                out.add(name)
            elif isinstance(value, dict) and value and all(
                    isinstance(v, list) and len(v) == 5 for v in value.values()):
                out.add(name)
        return out

    assert per_request(batch) <= per_request(live)
    assert per_request(batch.log) <= per_request(live.log)


def test_append_request_grows_every_per_request_list() -> None:
    log = RequestLog([3, 4], record_token_times=True)
    log.tier_attribution(0, type("T", (), {"g1_reused_input_tokens": 1, "host_reused_input_tokens": 2})())
    before = {name for name in dir(log) if isinstance(getattr(log, name, None), list)
              and len(getattr(log, name)) == 2}
    assert log.append_request(7) == 2
    assert log.n == 3 and log.input_length == [3, 4, 7]
    for name in before:
        assert len(getattr(log, name)) == 3, name
    assert log.completed_flags() == [False, False, False]


@pytest.mark.parametrize("at_ms", [2.0, 4.5, 7.0])
def test_a_cancel_anywhere_frees_every_block(at_ms: float) -> None:
    # prefill 0..4, transfer 4..6 (1.5 ms latency: activated at the pass boundary), decode after
    case = dict(rows=[(0, 3, 0, 20, 0)], backend="vllm", router="kv", workers=(1, 1),
                latency=1.5, decode_blocks=4096, caching=False, cancel=(0, int(at_ms)))
    _batch, _log, heard, (live, _loaded_cfg) = _batch_and_live(case)
    assert live.cancelled == {0} and live.log.rejected == [True]
    assert heard.ended_at == {0: float(int(at_ms))}
    for engine in live.engines:
        assert engine.is_drained()
        assert all(r.metrics().active_blocks == 0 for r in engine.ranks)
