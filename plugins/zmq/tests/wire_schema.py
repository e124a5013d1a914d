"""The consumers' view of the wire: msgspec structs with the schemas of vLLM 0.32's
``vllm/distributed/kv_events.py`` and ai-dynamo 1.6.1's ``forward_pass_metrics.py`` (field
names, order, tagging and array-likeness as those files declare them), used by the tests to
decode what the sinks send as a typed consumer would."""

from __future__ import annotations

from typing import Any

import msgspec


class _Event(msgspec.Struct, tag=True, omit_defaults=True):
    pass


class BlockStored(_Event):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None


class BlockRemoved(_Event):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(_Event):
    pass


class KVEventBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


class Scheduled(msgspec.Struct, frozen=True):
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    sum_prefill_kv_tokens: int = 0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0


class Queued(msgspec.Struct, frozen=True):
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0


class ForwardPassMetrics(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int = 1
    worker_id: str = ""
    dp_rank: int = 0
    counter_id: int = 0
    wall_time: float = 0.0
    scheduled_requests: Scheduled = Scheduled()
    queued_requests: Queued = Queued()


decode_kv = msgspec.msgpack.Decoder(KVEventBatch).decode
decode_fpm = msgspec.msgpack.Decoder(ForwardPassMetrics).decode
