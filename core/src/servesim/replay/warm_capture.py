"""Reading a captured KV-event stream for ``workload.warm_cache`` (docs/workloads.md): the
blocks each rank is left with, as servesim.kv.warm_start's paths. The two formats are
described there."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from servesim.errors import TraceError
from servesim.kv.hashing import chain_hash, local_block_hash
from servesim.kv.warm_start import CachedBlocks, WarmBlock, WarmPath
from servesim.workload.textlines import iter_text_lines, json_values


def _int_list(v: Any, key: str, file: str, line: int) -> list[int]:
    if not isinstance(v, list) or any(not isinstance(x, int) or isinstance(x, bool) for x in v):
        raise TraceError(f"field {key!r}: expected a list of integers, got {v!r}", file=file, line=line)
    return v


def _stored(state: CachedBlocks, hashes: Sequence[int], locals_: Sequence[int] | None,
            parent: int | None, tokens: Sequence[int] | None, block_size: int) -> None:
    for i, h in enumerate(hashes):
        blk = None if tokens is None else tuple(tokens[i * block_size:(i + 1) * block_size])
        local = locals_[i] if locals_ is not None else local_block_hash(blk)  # type: ignore[arg-type]
        state.store(WarmBlock(h, local, parent, blk))
        parent = h


def read_servesim_jsonl(path: str, block_size: int) -> dict[tuple[int, int], CachedBlocks]:
    """servesim's KV-event JSONL, applied per ``(worker, dp_rank)``."""
    ranks: dict[tuple[int, int], CachedBlocks] = {}
    # An unreadable file or bytes that are not UTF-8 are one error naming file (and line), as
    # for a trace; so is a line that is not JSON.
    for line, ev in json_values(iter_text_lines(path, "the warm cache"), path):
        if not isinstance(ev, dict):
            raise TraceError("expected a JSON object", file=path, line=line)
        for key in ("worker", "dp_rank"):
            if not isinstance(ev.get(key), int) or isinstance(ev.get(key), bool) or ev[key] < 0:
                raise TraceError(f"field {key!r}: expected an integer >= 0, got {ev.get(key)!r}",
                                 file=path, line=line)
        state = ranks.setdefault((ev["worker"], ev["dp_rank"]), CachedBlocks())
        kind = ev.get("type")
        if ev.get("medium") not in (None, "GPU"):
            continue
        if kind == "BlockStored":
            hashes = _int_list(ev.get("block_hashes"), "block_hashes", path, line)
            locals_ = _int_list(ev.get("tokens_hashes"), "tokens_hashes", path, line)
            if len(locals_) != len(hashes):
                raise TraceError("field 'tokens_hashes': expected one per block hash", file=path, line=line)
            parent = ev.get("parent_block_hash")
            if parent is not None and (not isinstance(parent, int) or isinstance(parent, bool)):
                raise TraceError(f"field 'parent_block_hash': expected an integer or null, got {parent!r}",
                                 file=path, line=line)
            tokens = ev.get("token_ids")
            if tokens is not None:
                tokens = _int_list(tokens, "token_ids", path, line)
                if len(tokens) != len(hashes) * block_size:
                    raise TraceError(f"field 'token_ids': expected {len(hashes)} blocks of "
                                     f"{block_size} tokens (engine.block_size), got {len(tokens)}",
                                     file=path, line=line)
            _stored(state, hashes, locals_, parent, tokens, block_size)
        elif kind == "BlockRemoved":
            for h in _int_list(ev.get("block_hashes"), "block_hashes", path, line):
                state.blocks.pop(h, None)
        elif kind == "AllBlocksCleared":
            state.blocks.clear()
        else:
            raise TraceError(f"field 'type': expected BlockStored, BlockRemoved or "
                             f"AllBlocksCleared, got {kind!r}", file=path, line=line)
    return ranks


def read_vllm_msgpack(path: str, block_size: int, worker: int) -> dict[tuple[int, int], CachedBlocks]:
    """Concatenated vLLM ``KVEventBatch`` payloads; "line" in errors is the batch's ordinal."""
    import msgpack  # type: ignore[import-untyped]  # imported only for this format

    ranks: dict[tuple[int, int], CachedBlocks] = {}
    to_ours: dict[tuple[int, int], dict[Any, int]] = {}
    try:
        with open(path, "rb") as fh:
            batches = list(msgpack.Unpacker(fh, raw=False, strict_map_key=False))
    except OSError as exc:
        raise TraceError(f"cannot read the warm cache: {exc.strerror}", file=path) from None
    except (ValueError, msgpack.UnpackException) as exc:
        raise TraceError(f"not a stream of msgpack values ({exc})", file=path) from None
    for n, batch in enumerate(batches, start=1):
        if not (isinstance(batch, list) and len(batch) == 3 and isinstance(batch[1], list)):
            raise TraceError("expected a KVEventBatch [ts, events, data_parallel_rank]", file=path, line=n)
        dp = batch[2] if batch[2] is not None else 0
        key = (worker, dp)
        state = ranks.setdefault(key, CachedBlocks())
        mapping = to_ours.setdefault(key, {})
        for i, ev in enumerate(batch[1]):
            kind = ev.get("type") if isinstance(ev, dict) else None
            if isinstance(ev, dict) and ev.get("medium") not in (None, "GPU"):
                continue
            if kind == "BlockStored":
                _vllm_stored(state, mapping, ev, block_size, path, n, i)
            elif kind == "BlockRemoved":
                for h in ev.get("block_hashes") or ():
                    ours = mapping.pop(h, None)
                    if ours is not None:
                        state.blocks.pop(ours, None)
            elif kind == "AllBlocksCleared":
                state.blocks.clear()
                mapping.clear()
            else:
                raise TraceError(f"field 'events[{i}].type': expected BlockStored, BlockRemoved "
                                 f"or AllBlocksCleared, got {kind!r}", file=path, line=n)
    return ranks


def _vllm_stored(state: CachedBlocks, mapping: dict[Any, int], ev: dict[str, Any], block_size: int,
                 path: str, n: int, i: int) -> None:
    where = f"events[{i}]"
    if ev.get("block_size") != block_size:
        raise TraceError(f"field '{where}.block_size': the capture's {ev.get('block_size')!r} is "
                         f"not engine.block_size {block_size}", file=path, line=n)
    hashes = ev.get("block_hashes")
    tokens = ev.get("token_ids")
    if not isinstance(hashes, list) or not isinstance(tokens, list) \
            or len(tokens) != len(hashes) * block_size:
        raise TraceError(f"field '{where}.token_ids': expected {block_size} token ids per block "
                         "hash (the block's servesim hash is computed from them)", file=path, line=n)
    if ev.get("lora_id") is not None:
        return  # an adapter's blocks: no base-model prompt matches them
    parent = ev.get("parent_block_hash")
    if parent is None:
        prev: int | None = None
    elif parent in mapping:
        prev = mapping[parent]
    else:
        return  # its parent is not cached: unreachable
    for k, h in enumerate(hashes):
        blk = tuple(tokens[k * block_size:(k + 1) * block_size])
        local = local_block_hash(blk)
        ours = chain_hash(prev, local)
        mapping[h] = ours
        state.store(WarmBlock(ours, local, prev, blk))
        prev = ours


def read_warm_cache(path: str, fmt: str, block_size: int,
                    worker: int | None) -> dict[tuple[int, int], list[WarmPath]]:
    """The paths to load per ``(worker, dp_rank)``, in load order."""
    if not os.path.isfile(path):
        raise TraceError("no such file", file=path)
    if fmt == "servesim_jsonl":
        ranks = read_servesim_jsonl(path, block_size)
        if worker is not None:
            ranks = {k: v for k, v in ranks.items() if k[0] == worker}
    else:
        ranks = read_vllm_msgpack(path, block_size, 0 if worker is None else worker)
    return {k: v.paths() for k, v in sorted(ranks.items())}


__all__ = ["read_warm_cache"]
