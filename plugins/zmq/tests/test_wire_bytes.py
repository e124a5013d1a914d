"""Payload bytes equal what vLLM's and Dynamo's own msgspec classes encode.

``data/reference_bytes.json`` holds those classes' bytes for ``data/wire_cases.json``
(written by ``make_reference_bytes.py`` in vLLM 0.32's venv); with vLLM importable the
comparison also runs live."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from servesim.contract import (
    ClearedBlocks,
    ForwardPassMetrics,
    KvBlock,
    KvEvent,
    RemovedBlocks,
    StoredBlocks,
)
from servesim_zmq.encode import fpm_payload, kv_batch

DATA = Path(__file__).resolve().parent / "data"
CASES = json.loads((DATA / "wire_cases.json").read_text())
REFERENCE = json.loads((DATA / "reference_bytes.json").read_text())


def servesim_events(case: dict) -> list[KvEvent]:
    out = []
    for i, ev in enumerate(case["events"]):
        if "stored" in ev:
            s = ev["stored"]
            data = StoredBlocks(s["parent"], tuple(
                KvBlock(h, h ^ 1, tuple(t)) for h, t in zip(s["hashes"], s["tokens"], strict=True)))
        elif "removed" in ev:
            data = RemovedBlocks(tuple(ev["removed"]))
        else:
            data = ClearedBlocks()
        out.append(KvEvent(i, case["dp_rank"], data))
    return out


def servesim_fpm(case: dict) -> tuple[int, ForwardPassMetrics]:
    s, q = case["scheduled"], case["queued"]
    m = ForwardPassMetrics(
        worker_id=int(case["worker_id"]), dp_rank=case["dp_rank"], counter_id=case["counter_id"],
        num_prefill_requests=s[0], sum_prefill_tokens=s[1], var_prefill_length=s[2],
        sum_prefill_kv_tokens=s[3], num_decode_requests=s[4], sum_decode_kv_tokens=s[5],
        var_decode_kv_tokens=s[6], num_queued_prefill=q[0], sum_queued_prefill_tokens=q[1],
        var_queued_prefill_length=q[2], num_queued_decode=q[3], sum_queued_decode_kv_tokens=q[4],
        var_queued_decode_kv_tokens=q[5], duration_ms=case["wall_time"] * 1000.0)
    return int(case["worker_id"]), m


def ours_kv(case: dict) -> str:
    return kv_batch(case["ts"], servesim_events(case), case["dp_rank"], case["block_size"]).hex()


@pytest.mark.parametrize("case", CASES["kv"], ids=lambda c: c["name"])
def test_kv_batch_bytes_equal_vllms(case: dict) -> None:
    assert ours_kv(case) == REFERENCE["kv"][case["name"]]


@pytest.mark.parametrize("case", CASES["fpm"], ids=lambda c: c["name"])
def test_fpm_bytes_equal_dynamos(case: dict) -> None:
    assert fpm_payload(*servesim_fpm(case)).hex() == REFERENCE["fpm"][case["name"]]


def test_reference_bytes_come_from_the_pinned_versions() -> None:
    assert REFERENCE["kv"]["_source"] == "vllm 0.32.0 vllm.distributed.kv_events"
    assert set(REFERENCE["kv"]) - {"_source"} == {c["name"] for c in CASES["kv"]}
    assert set(REFERENCE["fpm"]) - {"_source"} == {c["name"] for c in CASES["fpm"]}


def test_kv_batch_bytes_equal_vllms_live() -> None:
    pytest.importorskip("vllm.distributed.kv_events")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_reference_bytes import kv_payloads

    live = kv_payloads(CASES["kv"])
    for case in CASES["kv"]:
        assert ours_kv(case) == live[case["name"]]


def test_host_tier_events_carry_medium_cpu() -> None:
    """Host-tier (G2) events publish ``medium: "CPU"``, as vLLM's offloading connector does;
    device events keep ``"GPU"``."""
    from servesim.contract import KvBlock, KvEvent, RemovedBlocks, StoredBlocks
    from servesim_zmq.encode import kv_event_maps

    host = KvEvent(0, 0, StoredBlocks(None, (KvBlock(7, 7, (1, 2)),), None, "CPU"))
    (stored,) = kv_event_maps(host, block_size=2)
    assert stored["medium"] == "CPU" and stored["token_ids"] == [1, 2]
    removed = kv_event_maps(KvEvent(1, 0, RemovedBlocks((7, 8), "CPU")), block_size=2)
    assert [(m["block_hashes"], m["medium"]) for m in removed] == [([7], "CPU"), ([8], "CPU")]
    (device,) = kv_event_maps(KvEvent(2, 0, RemovedBlocks((9,))), block_size=2)
    assert device["medium"] == "GPU"


# vLLM 0.32's own encoding of KVEventBatch(ts=1.5, events=[BlockStored(block_hashes=[11, 12],
# parent_block_hash=None, token_ids=[1, 2, 3, 4], block_size=2, lora_id=3, medium="GPU",
# lora_name=None, extra_keys=[None, None], group_idx=0)], data_parallel_rank=0), written
# with vllm.distributed.kv_events' classes and msgspec.msgpack.encode.
LORA_BATCH = bytes.fromhex(
    "93cb3ff8000000000000918aa474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573920b0c"
    "b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739401020304aa626c6f636b5f73697a65"
    "02a76c6f72615f696403a66d656469756da3475055a96c6f72615f6e616d65c0aa65787472615f6b65797392c0"
    "c0a967726f75705f6964780000")


def test_a_lora_requests_stored_event_carries_its_adapter_id() -> None:
    blocks = (KvBlock(11, 5, (1, 2)), KvBlock(12, 6, (3, 4)))
    event = KvEvent(0, 0, StoredBlocks(None, blocks, lora_id=3))
    assert kv_batch(1.5, [event], 0, block_size=2) == LORA_BATCH
