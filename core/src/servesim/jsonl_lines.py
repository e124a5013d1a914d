"""JSONL lines of the built-in sinks, formatted directly.

Each function returns exactly ``json.dumps(record, allow_nan=False) + "\\n"`` for the record
that :func:`servesim.sinks_builtin.kv_event_record` / :func:`~servesim.sinks_builtin.fpm_record`
build (tests/core/test_jsonl_lines.py checks them against each other), without building the
dict or walking it in ``json``'s encoder: sinks write one line per event on the replay's hot
path. ``json`` writes ints and finite floats with their ``repr``; a NaN or infinity is a
``ValueError``, as ``allow_nan=False`` makes it.
"""

from __future__ import annotations

from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvEvent, RemovedBlocks, StoredBlocks
from servesim.fpm_schema import FPM_VERSION, QUEUED_FIELDS, SCHEDULED_FIELDS


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


def _group(m: ForwardPassMetrics, fields: tuple[tuple[str, str, bool], ...]) -> str:
    parts = []
    for wire, attr, is_float in fields:
        v = getattr(m, attr)
        parts.append(f'"{wire}": {_float(v) if is_float else int(v)}')
    return "{" + ", ".join(parts) + "}"


def fpm_line(worker_id: int, at_ms: float, m: ForwardPassMetrics) -> str:
    return (
        f'{{"version": {FPM_VERSION}, "worker_id": "{int(worker_id)}", "dp_rank": {int(m.dp_rank)}, '
        f'"counter_id": {int(m.counter_id)}, "wall_time": {_float(float(m.duration_ms) / 1000.0)}, '
        f'"scheduled_requests": {_group(m, SCHEDULED_FIELDS)}, '
        f'"queued_requests": {_group(m, QUEUED_FIELDS)}, "at_ms": {_num(at_ms)}}}\n'
    )


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
            text += f', "token_ids": [{_ints(t for b in blocks for t in b.token_ids)}]'  # type: ignore[union-attr]
        if data.start_position is not None:
            text += f', "start_position": {data.start_position}'
        return head + text + "}\n"
    if isinstance(data, RemovedBlocks):
        return head + f'"type": "BlockRemoved", "block_hashes": [{_ints(data.block_hashes)}]}}\n'
    if isinstance(data, ClearedBlocks):
        return head + '"type": "AllBlocksCleared"}\n'
    raise TypeError(f"unknown KV event data {type(data).__name__}")


__all__ = ["fpm_line", "kv_event_line"]
