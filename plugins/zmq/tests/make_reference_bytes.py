"""Writes tests/data/reference_bytes.json: the payloads vLLM's and Dynamo's own msgspec classes
encode for the cases in tests/data/wire_cases.json (hex). Run it with a Python that has vLLM
0.32 (``../shared/tools/setup_vllm_oracle.sh``) and, for FPM, Dynamo's
``dynamo/common/forward_pass_metrics.py`` on ``--dynamo-path`` (``tools/setup_peer.sh``'s
venv site-packages)::

    VENV/bin/python plugins/zmq/tests/make_reference_bytes.py --dynamo-path PEER/site-packages

The events are built as vLLM 0.32's block pool builds them (``BlockStored`` with one nil
``extra_keys`` entry per block and ``group_idx`` 0; one ``BlockRemoved`` per evicted block).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def kv_payloads(cases: list[dict]) -> dict[str, str]:
    import msgspec
    import vllm
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch

    enc = msgspec.msgpack.Encoder()
    out = {"_source": f"vllm {vllm.__version__} vllm.distributed.kv_events"}
    for case in cases:
        events: list = []
        for ev in case["events"]:
            if "stored" in ev:
                s = ev["stored"]
                events.append(BlockStored(
                    block_hashes=s["hashes"], parent_block_hash=s["parent"],
                    token_ids=[t for blk in s["tokens"] for t in blk], block_size=case["block_size"],
                    lora_id=None, medium="GPU", lora_name=None,
                    extra_keys=[None] * len(s["hashes"]), group_idx=0))
            elif "removed" in ev:
                events.extend(BlockRemoved(block_hashes=[h], medium="GPU", group_idx=0)
                              for h in ev["removed"])
            else:
                events.append(AllBlocksCleared())
        batch = KVEventBatch(ts=case["ts"], events=events, data_parallel_rank=case["dp_rank"])
        out[case["name"]] = enc.encode(batch).hex()
    return out


def fpm_payloads(cases: list[dict], dynamo_path: str) -> dict[str, str]:
    spec = importlib.util.spec_from_file_location(
        "fpm", Path(dynamo_path) / "dynamo" / "common" / "forward_pass_metrics.py")
    assert spec is not None and spec.loader is not None
    fpm = importlib.util.module_from_spec(spec)
    sys.modules["fpm"] = fpm  # its annotations are strings resolved through the module
    spec.loader.exec_module(fpm)
    sched_names = ["num_prefill_requests", "sum_prefill_tokens", "var_prefill_length",
                   "sum_prefill_kv_tokens", "num_decode_requests", "sum_decode_kv_tokens",
                   "var_decode_kv_tokens"]
    queued_names = ["num_prefill_requests", "sum_prefill_tokens", "var_prefill_length",
                    "num_decode_requests", "sum_decode_kv_tokens", "var_decode_kv_tokens"]
    out = {"_source": "ai-dynamo 1.6.1 dynamo/common/forward_pass_metrics.py"}
    for case in cases:
        m = fpm.ForwardPassMetrics(
            worker_id=case["worker_id"], dp_rank=case["dp_rank"], counter_id=case["counter_id"],
            wall_time=case["wall_time"],
            scheduled_requests=fpm.ScheduledRequestMetrics(
                **dict(zip(sched_names, case["scheduled"], strict=True))),
            queued_requests=fpm.QueuedRequestMetrics(**dict(zip(queued_names, case["queued"], strict=True))))
        out[case["name"]] = fpm.encode(m).hex()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dynamo-path", required=True, help="site-packages holding dynamo/")
    args = ap.parse_args()
    cases = json.loads((DATA / "wire_cases.json").read_text())
    ref = {"kv": kv_payloads(cases["kv"]), "fpm": fpm_payloads(cases["fpm"], args.dynamo_path)}
    (DATA / "reference_bytes.json").write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
