#!/usr/bin/env python3
"""Dynamo's indexer catching up through the replay socket (docs/wire.md).

    python plugins/zmq/tools/indexer_replay_demo.py TRACE.jsonl OUT_DIR [--url http://127.0.0.1:8090]

Replays TRACE on one worker into ``OUT_DIR/kv.jsonl`` (``token_ids: true``), then publishes
those events again through the ``zmq`` sink with a replay socket: the first half before the
indexer knows the worker, then ``POST /register`` (with ``replay_endpoint``), then the second
half. The indexer sees the sequence number jump, asks the replay socket for what it missed,
and ``indexer_check.py`` then compares its scores with every stored prefix (worker id 7).
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path

from servesim.config.loader import load_config
from servesim.contract import KvBlock, KvEvent, RemovedBlocks, StoredBlocks
from servesim.replay.runner import simulate
from servesim.sinks.base import SinkDeployment
from servesim_zmq import ZmqKvEventSink, ZmqKvSinkConfig


def batches(path: Path) -> list[tuple[float, list[KvEvent]]]:
    """The JSONL file's events as the batches the replay published (one per time)."""
    out: list[tuple[float, list[KvEvent]]] = []
    for line in path.open(encoding="utf-8"):
        e = json.loads(line)
        if e["type"] == "BlockStored":
            n = len(e["token_ids"]) // len(e["block_hashes"])
            data: StoredBlocks | RemovedBlocks = StoredBlocks(e["parent_block_hash"], tuple(
                KvBlock(h, t, tuple(e["token_ids"][i * n:(i + 1) * n]))
                for i, (h, t) in enumerate(zip(e["block_hashes"], e["tokens_hashes"], strict=True))))
        else:
            data = RemovedBlocks(tuple(e["block_hashes"]))
        ev = KvEvent(e["event_id"], e["dp_rank"], data)
        if out and out[-1][0] == e["at_ms"]:
            out[-1][1].append(ev)
        else:
            out.append((e["at_ms"], [ev]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--url", default="http://127.0.0.1:8090")
    args = ap.parse_args()
    kv = Path(args.out) / "kv.jsonl"
    simulate(load_config(None, [
        "engine.block_size=16", "engine.num_gpu_blocks=400", "workload.trace.trace_block_size=16",
        f"workload.trace.path={json.dumps(args.trace)}",
        f"sinks.kv_events=[{{type: jsonl, path: {json.dumps(str(kv))}, token_ids: true}}]"]))
    todo = batches(kv)
    sink = ZmqKvEventSink(ZmqKvSinkConfig(endpoint="tcp://127.0.0.1:5557",
                                          replay_endpoint="tcp://127.0.0.1:5600", linger_s=4))
    sink.bind(SinkDeployment(num_workers=1, dp_size=1, block_size=16, backend="vllm"))
    half = len(todo) // 2
    for at, evs in todo[:half]:
        sink.publish(0, at, evs)
    body = json.dumps({"instance_id": 7, "endpoint": "tcp://127.0.0.1:5557", "model_name": "default",
                       "block_size": 16, "replay_endpoint": "tcp://127.0.0.1:5600"}).encode()
    req = urllib.request.Request(f"{args.url}/register", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        print(f"{len(todo)} batches; {half} published before registering: {resp.read().decode()}")
    time.sleep(2)  # the indexer connects its SUB and replay sockets
    for at, evs in todo[half:]:
        sink.publish(0, at, evs)
    sink.close()  # lingers, answering the indexer's replay request
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
