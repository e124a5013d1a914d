"""Writes tests/data/reference_bytes.json: the payloads vLLM's and Dynamo's own msgspec classes
encode for the cases in tests/data/wire_cases.json (hex). Run it with a Python that has vLLM
0.32 (``../shared/tools/setup_vllm_oracle.sh``) and, for FPM, Dynamo's
``dynamo/common/forward_pass_metrics.py`` on ``--dynamo-path`` (``tools/setup_peer.sh``'s
venv site-packages)::

    VENV/bin/python plugins/zmq/tests/make_reference_bytes.py --dynamo-path PEER/site-packages

Each ``BlockStored`` comes from vLLM 0.32's own ``BlockPool.cache_full_blocks`` caching the
case's blocks for a ``Request`` (with a ``LoRARequest`` when the case names an adapter, as
``"lora": [id, name]``), so ``lora_id``, ``medium``, ``lora_name``, ``extra_keys`` and
``group_idx`` are what vLLM fills; its hashes, parent and tokens are then set to the case's
(vLLM's block hashes are sha256-based, servesim's are not). ``BlockRemoved`` events are built
one per evicted block, as the pool evicts.
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
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256_cbor
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256_cbor)

    def pool_stored(s: dict, block_size: int) -> BlockStored:
        """The event vLLM's block pool publishes caching ``s``'s blocks, with its hashes."""
        lora = s.get("lora")
        tokens = [t for blk in s["tokens"] for t in blk]
        req = Request(request_id="r", prompt_token_ids=tokens + [0],
                      sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
                      lora_request=None if lora is None else LoRARequest(lora[1], lora[0], "/x"),
                      block_hasher=get_request_block_hasher(block_size, sha256_cbor))
        n = len(s["hashes"])
        pool = BlockPool(n + 1, True, block_size, enable_kv_cache_events=True)
        pool.cache_full_blocks(req, pool.get_new_blocks(n), 0, n, block_size, 0)
        (event,) = pool.take_events()
        assert isinstance(event, BlockStored)
        return msgspec.structs.replace(event, block_hashes=s["hashes"],
                                       parent_block_hash=s["parent"], token_ids=tokens)

    enc = msgspec.msgpack.Encoder()
    out = {"_source": f"vllm {vllm.__version__} vllm.distributed.kv_events"}
    for case in cases:
        events: list = []
        for ev in case["events"]:
            if "stored" in ev:
                events.append(pool_stored(ev["stored"], case["block_size"]))
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
