"""``workload.warm_cache`` (servesim.replay.warm_capture, servesim.kv.warm_start,
servesim.rank.WarmCache): a replay that
starts with the KV cache a captured KV-event stream left gets prefix hits on its first
requests; bad captures and backends without the capability are refused; without the key
nothing changes."""

from __future__ import annotations

import json

import msgpack
import pytest
from servesim.config.loader import load_config
from servesim.errors import ConfigError, TraceError
from servesim.fast.event_readers import fit_to_readers
from servesim.plugins import Plugins
from servesim.replay.cluster import build_engines
from servesim.replay.routers import KvRouter
from servesim.replay.runner import simulate
from servesim.replay.warm_capture import read_warm_cache
from servesim.replay.warm_start import preload_engines
from servesim.report.summary import per_request_lines

# Three prompts sharing blocks 1, 2 (trace block = engine block = 16 tokens).
TRACE = [
    {"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1, 2, 3, 4]},
    {"timestamp": 5, "input_length": 48, "output_length": 4, "hash_ids": [1, 2, 5]},
    {"timestamp": 900, "input_length": 40, "output_length": 4, "hash_ids": [6, 7, 8]},
]


def run(tmp_path, name, extra="", sets=(), backend="vllm", trace=TRACE):
    t = tmp_path / f"{name}.trace.jsonl"
    t.write_text("".join(json.dumps(r) + "\n" for r in trace))
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"engine: {{backend: {backend}, block_size: 16, num_gpu_blocks: 64}}\n"
                   f"workload:\n  trace: {{path: {t}, format: mooncake, trace_block_size: 16}}\n{extra}")
    res = simulate(load_config(str(cfg), list(sets), Plugins()))
    lines = {r["request_id"]: r for r in map(json.loads, per_request_lines(res.log, res.session_ids))}
    return res, lines


def capture(tmp_path, backend="vllm", token_ids=False, trace=TRACE):
    """A cold run of ``trace`` with servesim's KV JSONL sink: the capture."""
    path = tmp_path / f"{backend}.kv.jsonl"
    sink = f"sinks:\n  kv_events: [{{type: jsonl, path: {path}, token_ids: {str(token_ids).lower()}}}]\n"
    run(tmp_path, f"cap_{backend}", sink, backend=backend, trace=trace)
    return path


def warm_line(path, fmt="servesim_jsonl"):
    return f"  warm_cache: {{path: {path}, format: {fmt}}}\n"


# The cold run's hits, then the warm run's: every full block of every prompt was cached at the
# capture's end; vLLM and SGLang keep a prompt's last token to compute (64 -> 48, 40 -> 32),
# TRT-LLM reuses the whole of a fully cached prompt (request 0's 64 tokens).
@pytest.mark.parametrize(("backend", "token_ids", "warm_hits"), [
    ("vllm", False, [48, 32, 32]), ("trtllm", False, [64, 48, 32]), ("sglang", True, [48, 32, 32])])
def test_a_replay_from_its_own_capture_hits_on_its_first_requests(tmp_path, backend, token_ids,
                                                                   warm_hits):
    cap = capture(tmp_path, backend, token_ids)
    _, cold = run(tmp_path, "cold", backend=backend)
    res, warm = run(tmp_path, "warm", warm_line(cap), backend=backend)
    assert [cold[i]["cached_tokens"] for i in range(3)] == [0, 32, 0]
    assert [warm[i]["cached_tokens"] for i in range(3)] == warm_hits
    assert warm[0]["ttft_ms"] < cold[0]["ttft_ms"]
    assert res.report["warm_cache"]["blocks_skipped"] == 0
    assert res.report["warm_cache"]["blocks_loaded"] >= 7
    assert res.report["warm_cache"]["ranks_not_in_replay"] == []


def test_the_preload_publishes_no_events_and_ids_start_at_zero(tmp_path):
    cap = capture(tmp_path, trace=TRACE[:2])  # requests 0 and 1 only
    kv = tmp_path / "warm.kv.jsonl"
    _, warm = run(tmp_path, "warm", warm_line(cap) + f"sinks:\n  kv_events: [{{type: jsonl, path: {kv}}}]\n")
    assert [warm[i]["cached_tokens"] for i in range(3)] == [48, 32, 0]
    events = [json.loads(x) for x in kv.read_text().splitlines()]
    # only request 2's blocks are new: the preloaded ones and their re-computations publish
    # nothing (a duplicate copy of a cached hash publishes no event)
    assert [(e["event_id"], e["type"], len(e["block_hashes"])) for e in events] == [(0, "BlockStored", 2)]
    captured = {h for e in map(json.loads, cap.read_text().splitlines()) for h in e["block_hashes"]}
    assert captured.isdisjoint(events[0]["block_hashes"])


def test_vllm_wire_capture_is_rehashed_from_its_token_ids(tmp_path):
    cap = tmp_path / "vllm.msgpack"
    stored = {"type": "BlockStored", "block_hashes": [901, 902], "parent_block_hash": None,
              "token_ids": [1] * 16 + [2] * 16, "block_size": 16, "lora_id": None,
              "medium": "GPU", "lora_name": None, "extra_keys": [None, None], "group_idx": 0}
    child = dict(stored, block_hashes=[903], parent_block_hash=902, token_ids=[3] * 16,
                 extra_keys=[None])
    orphan = dict(stored, block_hashes=[950], parent_block_hash=777, token_ids=[6] * 16,
                  extra_keys=[None])
    removed = {"type": "BlockRemoved", "block_hashes": [903], "medium": "GPU", "group_idx": 0}
    cap.write_bytes(msgpack.packb([1.0, [stored, child, orphan], None])
                    + msgpack.packb([2.0, [removed], 0]))
    res, warm = run(tmp_path, "warm", warm_line(cap, "vllm_msgpack"))
    assert [warm[i]["cached_tokens"] for i in range(3)] == [32, 32, 0]
    assert res.report["warm_cache"] == {"blocks_loaded": 2, "blocks_skipped": 0, "ranks_not_in_replay": []}


def test_removed_and_cleared_blocks_are_not_loaded(tmp_path):
    cap = capture(tmp_path)
    events = [json.loads(x) for x in cap.read_text().splitlines()]
    full = read_warm_cache(str(cap), "servesim_jsonl", 16, None)
    cleared = tmp_path / "cleared.jsonl"
    cleared.write_text(cap.read_text() + json.dumps({"worker": 0, "dp_rank": 0, "at_ms": 1e4,
                                                     "event_id": 99, "type": "AllBlocksCleared"}) + "\n")
    assert sum(len(p) for p in full[(0, 0)]) >= 7
    assert read_warm_cache(str(cleared), "servesim_jsonl", 16, None) == {(0, 0): []}
    first = events[0]["block_hashes"][0]  # the root of request 0's prompt: its whole path goes
    removed = tmp_path / "removed.jsonl"
    removed.write_text(cap.read_text() + json.dumps({"worker": 0, "dp_rank": 0, "at_ms": 1e4,
                                                     "event_id": 99, "type": "BlockRemoved",
                                                     "block_hashes": [first]}) + "\n")
    left = read_warm_cache(str(removed), "servesim_jsonl", 16, None)[(0, 0)]
    assert all(b.seq_hash != first for p in left for b in p)
    assert all(p[0].parent is None for p in left)
    assert read_warm_cache(str(cap), "servesim_jsonl", 16, 1) == {}  # another worker's lines


@pytest.mark.parametrize(("text", "line", "field"), [
    ('{"worker": 0, "dp_rank": 0, "type": "BlockStored", "block_hashes": [1], "tokens_hashes": []}',
     1, "tokens_hashes"),
    ('{"worker": -1, "dp_rank": 0, "type": "AllBlocksCleared"}', 1, "worker"),
    ('{"worker": 0, "dp_rank": 0, "type": "Bogus"}', 1, "type"),
    ('not json', 1, None),
    ('\n' + '[' * 100_000 + ']' * 100_000, 2, None),  # too deep to read: a line, not a traceback
])
def test_a_bad_capture_line_names_file_line_and_field(tmp_path, text, line, field):
    cap = tmp_path / "bad.jsonl"
    cap.write_text(text + "\n")
    with pytest.raises(TraceError) as info:
        run(tmp_path, "warm", warm_line(cap))
    assert str(info.value).startswith(f"{cap}:{line}:")
    if field:
        assert f"'{field}'" in str(info.value)


def test_a_vllm_capture_with_another_block_size_is_refused(tmp_path):
    cap = tmp_path / "vllm.msgpack"
    cap.write_bytes(msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [1],
                                          "parent_block_hash": None, "token_ids": [1] * 32,
                                          "block_size": 32}], None]))
    with pytest.raises(TraceError, match="'events\\[0\\].block_size'.*engine.block_size 16"):
        run(tmp_path, "warm", warm_line(cap, "vllm_msgpack"))


def test_bad_settings_and_a_backend_without_the_capability_are_config_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        run(tmp_path, "warm", warm_line(tmp_path / "x.jsonl", "parquet"))
    assert info.value.path == "workload.warm_cache.format"
    with pytest.raises(ConfigError) as info:
        run(tmp_path, "warm", warm_line(tmp_path / "x.jsonl"), backend="toy_paged")
    msg = str(info.value)
    assert info.value.path == "workload.warm_cache"
    assert "WarmCache" in msg and "servesim.rank.WarmCache" in msg and "'toy_paged'" in msg
    assert "servesim-toy" in msg  # the backend's distribution


def test_without_the_key_nothing_changes(tmp_path):
    res, lines = run(tmp_path, "plain")
    assert "warm_cache" not in res.report
    assert [lines[i]["cached_tokens"] for i in range(3)] == [0, 32, 0]
    cfg = tmp_path / "plain.yaml"
    assert "warm_cache" not in load_config(str(cfg), [], Plugins()).resolved()["workload"]


def on_worker(path, worker):
    """A capture's lines, rewritten to fill ``worker``."""
    out = path.parent / f"{path.stem}.w{worker}.jsonl"
    out.write_text("".join(json.dumps(dict(json.loads(x), worker=worker)) + "\n"
                           for x in path.read_text().splitlines()))
    return out


TWO_KV = ("cluster.workers=2", "cluster.router=kv")


def test_a_kv_router_routes_to_the_worker_whose_warm_cache_holds_the_prefix(tmp_path):
    cap = on_worker(capture(tmp_path), 1)  # every block of TRACE, on worker 1
    trace = [*TRACE, {"timestamp": 1000, "input_length": 32, "output_length": 4, "hash_ids": [30, 31]}]
    kv = tmp_path / "warm.kv.jsonl"
    _, cold = run(tmp_path, "cold", sets=TWO_KV, trace=trace)
    sink = f"sinks:\n  kv_events: [{{type: jsonl, path: {kv}}}]\n"
    res, warm = run(tmp_path, "warm", warm_line(cap) + sink, sets=TWO_KV, trace=trace)
    placed = [(cold[i]["worker"], cold[i]["cached_tokens"]) for i in range(4)]
    assert placed == [(0, 0), (1, 0), (0, 0), (1, 0)]
    # The router knows worker 1's preloaded blocks: each prompt of the capture goes there and
    # hits; the new prompt goes to the idle worker 0.
    placed = [(warm[i]["worker"], warm[i]["cached_tokens"]) for i in range(4)]
    assert placed == [(1, 48), (1, 32), (1, 32), (0, 0)]
    assert res.report["warm_cache"] == {"blocks_loaded": 7, "blocks_skipped": 0, "ranks_not_in_replay": []}
    # The sinks see the run's own events only: worker 0's two new blocks, numbered from 0.
    events = [json.loads(x) for x in kv.read_text().splitlines()]
    assert [(e["worker"], e["event_id"], e["type"], len(e["block_hashes"])) for e in events] == [
        (0, 0, "BlockStored", 2)]


@pytest.mark.parametrize(("backend", "token_ids"), [("vllm", False), ("trtllm", False), ("sglang", True)])
def test_a_capture_bigger_than_the_pool_gives_the_router_only_what_the_pool_kept(tmp_path, backend,
                                                                                  token_ids):
    cap = capture(tmp_path, backend, token_ids)
    # The capture's 7 blocks in store order: request 0's 4, request 1's own block (after
    # request 0's second), request 2's 2; they load as paths [0-3], [0, 1, 4], [5, 6].
    stored = [h for e in map(json.loads, cap.read_text().splitlines()) for h in e["block_hashes"]]
    assert len(stored) == 7
    cfg = tmp_path / "small.yaml"
    cfg.write_text(f"engine: {{backend: {backend}, block_size: 16, num_gpu_blocks: 5}}\n"
                   f"cluster: {{workers: 2, router: kv}}\n"
                   f"workload:\n  trace: {{path: {tmp_path}/cap_{backend}.trace.jsonl, format: mooncake, "
                   f"trace_block_size: 16}}\n" + warm_line(on_worker(cap, 1)))
    loaded = load_config(str(cfg), [], Plugins())
    router = KvRouter(2, 1, 16)
    factory = loaded.engine_factory(None, emit_kv_events=True)
    fit_to_readers(factory, [], router_reads_events=True, record_metrics=False, router=router)
    engines = build_engines(factory.build, 2)
    report = preload_engines(engines, loaded.sim.workload.warm_cache, 16, router)
    assert report == {"blocks_loaded": 7, "blocks_skipped": 0, "ranks_not_in_replay": []}
    # Five blocks fit: loading [5, 6] evicted the least recently used, request 0's tail
    # blocks 2 and 3; the router holds exactly the rest, on worker 1 only.
    kept = {stored[i] for i in (0, 1, 4, 5, 6)}
    assert router.index.held[1] == kept
    assert not router.index.held[0]
    rank = engines[1].ranks[0]
    if backend != "sglang":
        pool = rank.sched.pool if backend == "vllm" else rank.core.pool
        assert pool.cached_hashes() == kept
        assert pool.drain_events() == []  # the preload's events left the rank
