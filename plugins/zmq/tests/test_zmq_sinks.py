"""The zmq sinks against pyzmq consumers on 127.0.0.1: frames, sequence numbers, port
offsets, the replay protocol, heartbeats and a whole replay decoded with the wire schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servesim.contract import ForwardPassMetrics, KvBlock, KvEvent, RemovedBlocks, StoredBlocks
from servesim.sinks.base import SinkDeployment, SinkError, WorkerChange
from servesim_zmq import ZmqFpmSink, ZmqFpmSinkConfig, ZmqKvEventSink, ZmqKvSinkConfig
from wire_schema import AllBlocksCleared, BlockRemoved, BlockStored, decode_fpm, decode_kv  # noqa: E402

TIMEOUT_MS = 5000  # bounds every receive; loopback delivery takes microseconds
CTX = SinkDeployment(num_workers=2, dp_size=2, block_size=2, backend="vllm")


def _sub(ctx: zmq.Context, port: int) -> zmq.Socket:
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.RECONNECT_IVL, 10)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(f"tcp://127.0.0.1:{port}")
    return s


def _recv(sock: zmq.Socket) -> list[bytes]:
    assert sock.poll(TIMEOUT_MS), "nothing received"
    return sock.recv_multipart()


def _stored(i: int, dp: int, parent: int | None, h: int) -> KvEvent:
    return KvEvent(i, dp, StoredBlocks(parent, (KvBlock(h, h + 1, (h % 7, 3)),)))


def test_kv_frames_on_offset_ports_decode_with_vllms_schema(free_ports: Any) -> None:
    base = free_ports(4)
    ctx = zmq.Context()
    subs = {off: _sub(ctx, base + off) for off in range(4)}
    sink = ZmqKvEventSink(ZmqKvSinkConfig(endpoint=f"tcp://127.0.0.1:{base}", topic="kv",
                                          wait_for_subscribers_s=0.5, epoch_s=100.0))
    sink.bind(CTX)
    sink.publish(1, 250.0, [_stored(0, 1, None, 2**64 - 5), KvEvent(1, 1, RemovedBlocks((9, 10)))])
    sink.publish(1, 260.0, [_stored(2, 1, 2**64 - 5, 40)])
    sink.publish(0, 5.0, [_stored(0, 0, None, 1)])
    sink.close()
    # worker 1, dp rank 1 -> offset 1 * 2 + 1
    topic, seq, payload = _recv(subs[3])
    assert (topic, seq) == (b"kv", (0).to_bytes(8, "big"))
    batch = decode_kv(payload)
    assert (batch.ts, batch.data_parallel_rank) == (100.25, 1)
    stored, rem9, rem10 = batch.events
    assert isinstance(stored, BlockStored) and isinstance(rem9, BlockRemoved)
    assert (stored.block_hashes, stored.parent_block_hash) == ([2**64 - 5], None)
    assert (stored.token_ids, stored.block_size, stored.medium) == ([(2**64 - 5) % 7, 3], 2, "GPU")
    assert (stored.extra_keys, stored.group_idx) == ([None], 0)
    assert [rem9.block_hashes, rem10.block_hashes] == [[9], [10]]
    topic, seq, payload = _recv(subs[3])
    assert seq == (1).to_bytes(8, "big") and decode_kv(payload).events[0].parent_block_hash == 2**64 - 5
    topic, seq, payload = _recv(subs[0])
    assert seq == (0).to_bytes(8, "big") and decode_kv(payload).ts == 100.005
    for s in (subs[1], subs[2], subs[0], subs[3]):
        assert not s.poll(50)
        s.close(linger=0)
    ctx.term()


def test_replay_socket_answers_vllms_protocol(free_ports: Any) -> None:
    base = free_ports(8)
    sink = ZmqKvEventSink(ZmqKvSinkConfig(endpoint=f"tcp://127.0.0.1:{base}",
                                          replay_endpoint=f"tcp://127.0.0.1:{base + 4}",
                                          buffer_steps=2, linger_s=1.0))
    sink.bind(CTX)
    for i in range(3):  # nobody subscribed: only the replay buffer (2 steps) keeps them
        sink.publish(1, float(i), [_stored(i, 0, None, 100 + i)])
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{base + 4 + 2}")  # worker 1, rank 0
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    sink.close()  # lingers 1 s, answering the request
    frames = [_recv(dealer) for _ in range(3)]
    assert [f[:3] for f in frames[:2]] == [[b"", b"", (1).to_bytes(8, "big")],
                                           [b"", b"", (2).to_bytes(8, "big")]]
    assert [decode_kv(f[3]).events[0].block_hashes for f in frames[:2]] == [[101], [102]]
    assert frames[2] == [b"", b"", b"\xff" * 8, b""]  # the end marker
    dealer.close(linger=0)
    ctx.term()


def _fpm(dp: int, counter: int, ms: float, decodes: int) -> ForwardPassMetrics:
    return ForwardPassMetrics(worker_id=0, dp_rank=dp, counter_id=counter,
                              num_decode_requests=decodes, sum_decode_kv_tokens=10 * decodes,
                              duration_ms=ms)


def test_fpm_frames_counters_and_heartbeats(free_ports: Any) -> None:
    base = free_ports(4)
    ctx = zmq.Context()
    sub = _sub(ctx, base + 2)  # worker 1, dp rank 0
    sink = ZmqFpmSink(ZmqFpmSinkConfig(endpoint=f"tcp://127.0.0.1:{base}", wait_for_subscribers_s=0.5))
    sink.bind(CTX)
    sink.publish(1, 10.0, _fpm(0, 0, 10.0, 2))
    sink.publish(1, 20.0, _fpm(0, 1, 10.0, 2))  # back to back: no heartbeat
    sink.publish(1, 1030.0, _fpm(0, 2, 10.0, 1))  # idle 1 s before it: heartbeat first
    sink.close()  # the run ends: the rank goes idle
    got = [_recv(sub) for _ in range(5)]
    assert all(f[0] == b"" for f in got)
    assert [int.from_bytes(f[1], "big") for f in got] == [0, 1, 2, 3, 4]
    msgs = [decode_fpm(f[2]) for f in got]
    assert [m.counter_id for m in msgs] == [0, 1, 2, 3, 4]
    assert [m.wall_time for m in msgs] == [0.01, 0.01, 0.0, 0.01, 0.0]
    assert [m.scheduled_requests.num_decode_requests for m in msgs] == [2, 2, 0, 1, 0]
    assert {(m.version, m.worker_id, m.dp_rank) for m in msgs} == {(1, "1", 0)}
    assert msgs[2] == type(msgs[2])(worker_id="1", counter_id=2)  # all zero but identity
    assert not sub.poll(50)
    sub.close(linger=0)
    ctx.term()


def test_a_replay_publishes_every_batch_and_pass(free_ports: Any, tmp_path: Path) -> None:
    """Two KV-routed vLLM workers with both zmq sinks and a JSONL FPM sink: the KV
    subscribers see one seq-numbered batch per publish, with token ids of every stored block,
    and the FPM subscribers one message per pass (the JSONL file's count) plus the final
    heartbeats."""
    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    kv_base, fpm_base = free_ports(2), free_ports(2)
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 3 * i, "hash_ids": [i % 3, 10 + i],
                                         "output_length": 6}) + "\n" for i in range(10)))
    ctx = zmq.Context()
    kv_subs = [_sub(ctx, kv_base + w) for w in range(2)]
    fpm_subs = [_sub(ctx, fpm_base + w) for w in range(2)]
    sets = ["engine.block_size=4", f"workload.trace.path={json.dumps(str(trace))}",
            "workload.trace.trace_block_size=4", "cluster.workers=2", "cluster.router=kv",
            f'sinks.kv_events=[{{type: zmq, endpoint: "tcp://127.0.0.1:{kv_base}", '
            f'wait_for_subscribers_s: 0.5}}]',
            f'sinks.fpm=[{{type: zmq, endpoint: "tcp://127.0.0.1:{fpm_base}", '
            f'wait_for_subscribers_s: 0.5}}, {{type: jsonl, path: "{tmp_path}/fpm.jsonl"}}]']
    result = simulate(load_config(None, sets))
    lines = [json.loads(x) for x in (tmp_path / "fpm.jsonl").read_text().splitlines()]
    assert len(lines) == result.passes
    for w in range(2):
        mine = [x for x in lines if x["worker_id"] == str(w)]
        msgs = [decode_fpm(_recv(fpm_subs[w])[2]) for _ in range(len(mine) + 1)]
        assert [m.counter_id for m in msgs] == list(range(len(mine) + 1))
        assert [m.scheduled_requests for m in msgs[:-1]] == [
            type(msgs[0].scheduled_requests)(**x["scheduled_requests"]) for x in mine]
        assert msgs[-1].wall_time == 0.0  # the end-of-run heartbeat
        seq = 0
        while kv_subs[w].poll(200):
            _topic, s, payload = kv_subs[w].recv_multipart()
            assert int.from_bytes(s, "big") == seq
            seq += 1
            for ev in decode_kv(payload).events:
                assert not isinstance(ev, AllBlocksCleared)
                if isinstance(ev, BlockStored):
                    assert len(ev.token_ids) == 4 * len(ev.block_hashes)
        assert seq > 0
    for s in kv_subs + fpm_subs:
        s.close(linger=0)
    ctx.term()


def test_bad_endpoints_are_config_errors_and_busy_ports_user_errors(free_ports: Any) -> None:
    from servesim.config.loader import load_config
    from servesim.errors import ConfigError, UserError

    with pytest.raises(ConfigError, match=r"sinks\.kv_events\[0\]\.endpoint: expected tcp://HOST:PORT"):
        load_config(None, ['sinks.kv_events=[{type: zmq, endpoint: "ipc:///tmp/x"}]'])
    base = free_ports(1)
    ctx = zmq.Context()
    holder = ctx.socket(zmq.PUB)
    holder.bind(f"tcp://127.0.0.1:{base}")
    sink = ZmqFpmSink(ZmqFpmSinkConfig(endpoint=f"tcp://127.0.0.1:{base}"))
    with pytest.raises(UserError, match=f"zmq fpm sink .*cannot bind tcp://127.0.0.1:{base}"):
        sink.bind(SinkDeployment(num_workers=1, dp_size=1, block_size=4, backend="vllm"))
    holder.close(linger=0)
    ctx.term()


def test_a_worker_added_later_gets_its_sockets(free_ports: Any) -> None:
    """An elastic replay tells the sinks of a worker it adds (``worker_changed``): its ranks
    publish on the next port offsets; a removed worker's sockets stay until close."""
    base = free_ports(12)
    ctx = zmq.Context()
    kv_sub, fpm_sub = _sub(ctx, base + 5), _sub(ctx, base + 6 + 4)  # worker 2, dp rank 1 / 0
    kv = ZmqKvEventSink(ZmqKvSinkConfig(endpoint=f"tcp://127.0.0.1:{base}", wait_for_subscribers_s=0.0))
    fpm = ZmqFpmSink(ZmqFpmSinkConfig(endpoint=f"tcp://127.0.0.1:{base + 6}"))
    kv.bind(CTX)
    fpm.bind(CTX)
    with pytest.raises(SinkError, match="no socket for worker 2 dp rank 1"):
        kv.publish(2, 400.0, [_stored(0, 1, None, 7)])
    added = WorkerChange(2, 500.0, "added", "default", 2)
    kv.worker_changed(added)
    fpm.worker_changed(added)
    kv.worker_changed(WorkerChange(0, 600.0, "removed", "default", 2))
    kv.publish(0, 650.0, [_stored(0, 0, None, 9)])  # still bound until close
    for sub in (kv_sub, fpm_sub):
        sub.poll(500)  # let the subscribers reconnect to the new sockets
    kv.publish(2, 750.0, [_stored(0, 1, None, 7)])
    fpm.publish(2, 760.0, _fpm(0, 0, 10.0, 1))
    kv.close()
    fpm.close()
    topic, seq, payload = _recv(kv_sub)
    assert seq == (0).to_bytes(8, "big") and decode_kv(payload).events[0].block_hashes == [7]
    assert decode_fpm(_recv(fpm_sub)[2]).worker_id == "2"
    for s in (kv_sub, fpm_sub):
        s.close(linger=0)
    ctx.term()


def test_an_elastic_replay_publishes_for_added_workers(free_ports: Any, tmp_path: Path) -> None:
    """A planner adds a third worker at 5 ms: its passes reach the FPM subscriber on the third
    port, one message per pass (the JSONL file's count) plus the end heartbeat."""
    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    kv_base, fpm_base = free_ports(3), free_ports(3)
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 3 * i, "hash_ids": [i % 3, 10 + i],
                                         "output_length": 6}) + "\n" for i in range(10)))
    ctx = zmq.Context()
    sub = _sub(ctx, fpm_base + 2)
    sets = ["engine.block_size=4", f"workload.trace.path={json.dumps(str(trace))}",
            "workload.trace.trace_block_size=4", "cluster.workers=2", "cluster.router=round_robin",
            "planner={type: schedule, steps: [{at_s: 0.005, workers: 3}]}", "lifecycle={startup_s: 0}",
            f'sinks.kv_events=[{{type: zmq, endpoint: "tcp://127.0.0.1:{kv_base}"}}]',
            f'sinks.fpm=[{{type: zmq, endpoint: "tcp://127.0.0.1:{fpm_base}", '
            f'wait_for_subscribers_s: 0.5}}, {{type: jsonl, path: "{tmp_path}/fpm.jsonl"}}]']
    result = simulate(load_config(None, sets))
    assert [(a["t_ms"], a["worker"]) for a in result.report["elastic"]["scaling"]] == [(5.0, 2)]
    mine = [x for x in map(json.loads, (tmp_path / "fpm.jsonl").read_text().splitlines())
            if x["worker_id"] == "2"]
    assert mine
    msgs = [decode_fpm(_recv(sub)[2]) for _ in range(len(mine) + 1)]
    assert [m.counter_id for m in msgs] == list(range(len(mine) + 1))
    assert {m.worker_id for m in msgs} == {"2"} and msgs[-1].wall_time == 0.0
    sub.close(linger=0)
    ctx.term()
