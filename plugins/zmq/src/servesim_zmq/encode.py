"""Payload bytes: vLLM's ``KVEventBatch`` and Dynamo's ``ForwardPassMetrics``, as msgpack.

KV events follow vLLM 0.32 ``vllm/distributed/kv_events.py`` (ecosystem.md §4; wire-facts):

* the batch is an array-like struct, so always the 3-array ``[ts, events, data_parallel_rank]``;
* events are tagged structs with ``omit_defaults``, so maps whose first key is ``"type"`` (the
  class name), then the declared fields in order, minus those still at their default. A
  ``BlockStored`` from vLLM's block pool sets ``block_hashes``, ``parent_block_hash``,
  ``token_ids`` (of every stored block, concatenated), ``block_size``, ``lora_id`` (the
  adapter id of a LoRA request's blocks, servesim.contract.StoredBlocks.lora_id), ``medium``
  and ``lora_name`` (the adapter's served name; declared without defaults, so present even
  when nil), plus ``extra_keys`` (one entry per block: nil, or for a LoRA request the
  1-tuple of its adapter name, as ``generate_block_hash_extra_keys`` and
  ``to_event_extra_keys`` in vllm/v1/core/kv_cache_utils.py build them) and ``group_idx`` 0;
  a ``BlockRemoved`` sets
  ``block_hashes``, ``medium`` and ``group_idx``, one block per event, as vLLM's pool
  evicts; ``AllBlocksCleared`` has no fields;
* block hashes are unsigned 64-bit ints (vLLM's default integer block hashes).

Forward-pass metrics are the object of :mod:`servesim.sinks.fpm_schema` (a non-array-like,
untagged msgspec struct with no omitted fields encodes as the map of every field).

Encoding plain dicts and lists with msgspec's msgpack encoder gives the same bytes as encoding
the structs: maps and arrays keep their order, ints take their smallest form, floats are
float64. ``tests/data/vllm_kv_batches.msgpack`` pins this against bytes vLLM's own classes
encoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvEvent, RemovedBlocks, StoredBlocks
from servesim.sinks.fpm_schema import fpm_object

MEDIUM_GPU = "GPU"

_encode = msgspec.msgpack.Encoder().encode


def kv_event_maps(event: KvEvent, block_size: int) -> list[dict[str, Any]]:
    """vLLM's events for one servesim KV event (a removal of n blocks is n events)."""
    data = event.data
    if isinstance(data, StoredBlocks):
        blocks = data.blocks
        tokens: list[int] = []
        for b in blocks:
            if b.token_ids is not None:
                tokens.extend(b.token_ids)
        return [{
            "type": "BlockStored",
            "block_hashes": [b.block_hash for b in blocks],
            "parent_block_hash": data.parent_hash,
            "token_ids": tokens,
            "block_size": block_size,
            "lora_id": data.lora_id,
            "medium": data.medium or MEDIUM_GPU,
            "lora_name": data.lora_name,
            "extra_keys": [None] * len(blocks) if data.lora_name is None
            else [(data.lora_name,)] * len(blocks),
            "group_idx": 0,
        }]
    if isinstance(data, RemovedBlocks):
        medium = data.medium or MEDIUM_GPU
        return [{"type": "BlockRemoved", "block_hashes": [h], "medium": medium, "group_idx": 0}
                for h in data.block_hashes]
    if isinstance(data, ClearedBlocks):
        return [{"type": "AllBlocksCleared"}]
    raise TypeError(f"unknown KV event data {type(data).__name__}")


def kv_batch(ts: float, events: Sequence[KvEvent], dp_rank: int | None, block_size: int) -> bytes:
    """The msgpack payload of one ``KVEventBatch``."""
    maps: list[dict[str, Any]] = []
    for e in events:
        maps.extend(kv_event_maps(e, block_size))
    return _encode([float(ts), maps, dp_rank])


def fpm_payload(worker_id: int, metrics: ForwardPassMetrics) -> bytes:
    """The msgpack payload of one ``ForwardPassMetrics``."""
    return _encode(fpm_object(worker_id, metrics))


__all__ = ["MEDIUM_GPU", "fpm_payload", "kv_batch", "kv_event_maps"]
