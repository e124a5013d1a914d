"""JSONL lines of the built-in sinks, formatted directly.

Each function returns exactly ``json.dumps(record, allow_nan=False) + "\\n"`` for the record
that :func:`servesim.sinks_builtin.kv_event_record` / :func:`~servesim.sinks_builtin.fpm_record`
build (tests/core/test_jsonl_lines.py checks them against each other), without building the
dict or walking it in ``json``'s encoder: sinks write one line per event on the replay's hot
path. ``json`` writes ints and finite floats with their ``repr``; a NaN or infinity is a
``ValueError``, as ``allow_nan=False`` makes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvEvent, RemovedBlocks, StoredBlocks
from servesim.fpm_schema import FPM_VERSION


def _float(x: float) -> str:
    x = float(x)
    if x - x != 0.0:
        raise ValueError(f"Out of range float values are not JSON compliant: {x!r}")
    return repr(x)


def _num(x: float) -> str:
    """``json`` text of an int or a float, whichever ``x`` is."""
    return repr(x) if type(x) is int else _float(x)


def _ints(values: object) -> str:
    return ", ".join(map(str, values))  # type: ignore[call-overload]


def fpm_line(worker_id: int, at_ms: float, m: ForwardPassMetrics) -> str:
    f = _float
    return (
        f'{{"version": {FPM_VERSION}, "worker_id": "{int(worker_id)}", "dp_rank": {int(m.dp_rank)}, '
        f'"counter_id": {int(m.counter_id)}, "wall_time": {f(float(m.duration_ms) / 1000.0)}, '
        f'"scheduled_requests": {{"num_prefill_requests": {int(m.num_prefill_requests)}, '
        f'"sum_prefill_tokens": {int(m.sum_prefill_tokens)}, '
        f'"var_prefill_length": {f(m.var_prefill_length)}, '
        f'"sum_prefill_kv_tokens": {int(m.sum_prefill_kv_tokens)}, '
        f'"num_decode_requests": {int(m.num_decode_requests)}, '
        f'"sum_decode_kv_tokens": {int(m.sum_decode_kv_tokens)}, '
        f'"var_decode_kv_tokens": {f(m.var_decode_kv_tokens)}}}, '
        f'"queued_requests": {{"num_prefill_requests": {int(m.num_queued_prefill)}, '
        f'"sum_prefill_tokens": {int(m.sum_queued_prefill_tokens)}, '
        f'"var_prefill_length": {f(m.var_queued_prefill_length)}, '
        f'"num_decode_requests": {int(m.num_queued_decode)}, '
        f'"sum_decode_kv_tokens": {int(m.sum_queued_decode_kv_tokens)}, '
        f'"var_decode_kv_tokens": {f(m.var_queued_decode_kv_tokens)}}}, "at_ms": {_num(at_ms)}}}\n'
    )


def kv_event_lines(worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> str:
    """The lines of one published batch (the head of each line is shared)."""
    if not events:
        return ""
    dp = events[0].dp_rank
    head = f'{{"worker": {worker_id}, "dp_rank": {dp}, "at_ms": {_num(at_ms)}, "event_id": '
    out = []
    for e in events:
        data = e.data
        if type(data) is RemovedBlocks and e.dp_rank == dp and data.medium is None:
            hashes = data.block_hashes
            body = str(hashes[0]) if len(hashes) == 1 else ", ".join(map(str, hashes))
            out.append(f'{head}{e.event_id}, "type": "BlockRemoved", "block_hashes": [{body}]}}\n')
        else:
            out.append(kv_event_line(worker_id, at_ms, e))
    return "".join(out)


def kv_event_line(worker_id: int, at_ms: float, event: KvEvent) -> str:
    head = (f'{{"worker": {worker_id}, "dp_rank": {event.dp_rank}, "at_ms": {_num(at_ms)}, '
            f'"event_id": {event.event_id}, ')
    data = event.data
    if isinstance(data, StoredBlocks):
        blocks = data.blocks
        parent = "null" if data.parent_hash is None else str(data.parent_hash)
        text = (f'"type": "BlockStored", "block_hashes": [{_ints(b.block_hash for b in blocks)}], '
                f'"parent_block_hash": {parent}, '
                f'"tokens_hashes": [{_ints(b.tokens_hash for b in blocks)}]')
        if blocks and all(b.token_ids is not None for b in blocks):
            ids = _ints(t for b in blocks for t in b.token_ids)  # type: ignore[union-attr]
            text += f', "token_ids": [{ids}]'
        if data.start_position is not None:
            text += f', "start_position": {data.start_position}'
        if data.medium is not None:
            text += f', "medium": "{data.medium}"'
        return head + text + "}\n"
    if isinstance(data, RemovedBlocks):
        medium = "" if data.medium is None else f', "medium": "{data.medium}"'
        return head + f'"type": "BlockRemoved", "block_hashes": [{_ints(data.block_hashes)}]{medium}}}\n'
    if isinstance(data, ClearedBlocks):
        return head + '"type": "AllBlocksCleared"}\n'
    raise TypeError(f"unknown KV event data {type(data).__name__}")


__all__ = ["fpm_line", "kv_event_line", "kv_event_lines"]
