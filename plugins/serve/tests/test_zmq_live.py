"""KV events of a running server through servesim-zmq's sink, when that plugin is installed."""

from __future__ import annotations

import socket

import httpx
import pytest
from servesim_serve.testing import running

zmq = pytest.importorskip("zmq")
pytest.importorskip("servesim_zmq")

TIMEOUT_MS = 5000


def free_ports(count: int) -> int:
    """A base port whose ``count`` consecutive ports are free now (a sink of several workers
    binds one port per worker, from the configured one upwards)."""
    for _ in range(100):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            base = first.getsockname()[1]
            held = []
            try:
                for offset in range(1, count):
                    extra = socket.socket()
                    held.append(extra)
                    extra.bind(("127.0.0.1", base + offset))
            except OSError:
                continue
            finally:
                for extra in held:
                    extra.close()
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


@pytest.mark.parametrize("cluster", [[], ["cluster.prefill_workers=1", "cluster.decode_workers=1"]],
                         ids=["aggregated", "split"])
def test_kv_events_reach_a_subscriber_while_serving(cluster: list[str]) -> None:
    port = free_ports(1 + bool(cluster))
    sets = [*cluster, "engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=500",
            f"sinks.kv_events=[{{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', topic: kv}}]"]
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    try:
        with running(sets) as s:
            sub.connect(f"tcp://127.0.0.1:{port}")
            frames: list[list[bytes]] = []
            for i in range(50):  # until the subscription is through (bounded)
                # a new prompt each time: a repeated one hits the prefix cache and stores nothing
                prompt = list(range(4 + 200 * i, 4 + 200 * i + 130))
                httpx.post(s.base + "/completions", json={"prompt": prompt, "max_tokens": 2})
                if sub.poll(100):
                    frames.append(sub.recv_multipart())
                    break
            assert frames, "no KV event batch arrived"
        topic, seq, payload = frames[0]
        assert topic == b"kv" and len(seq) == 8 and payload
    finally:
        sub.close(linger=0)
        ctx.term()
