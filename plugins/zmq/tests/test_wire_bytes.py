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
            lora_id, lora_name = s.get("lora", (None, None))
            data = StoredBlocks(s["parent"], tuple(
                KvBlock(h, h ^ 1, tuple(t)) for h, t in zip(s["hashes"], s["tokens"], strict=True)),
                lora_id=lora_id, lora_name=lora_name)
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


def test_a_lora_requests_stored_event_names_its_adapter_as_vllms_pool_does() -> None:
    """vLLM 0.32's block pool (``_build_block_stored_event``) sets ``lora_id``, ``lora_name``
    and one ``(lora_name,)`` entry of ``extra_keys`` per block for a LoRA request (the
    ``stored_lora`` case's reference bytes come from that pool); the base model's stay nil."""
    from servesim_zmq.encode import kv_event_maps

    blocks = (KvBlock(11, 5, (1, 2)), KvBlock(12, 6, (3, 4)))
    (lora,) = kv_event_maps(KvEvent(0, 0, StoredBlocks(None, blocks, lora_id=3, lora_name="sql")), 2)
    assert (lora["lora_id"], lora["lora_name"], lora["extra_keys"]) == (3, "sql", [("sql",), ("sql",)])
    (base,) = kv_event_maps(KvEvent(1, 0, StoredBlocks(None, blocks)), 2)
    assert (base["lora_id"], base["lora_name"], base["extra_keys"]) == (None, None, [None, None])
