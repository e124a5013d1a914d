"""A warm start: the blocks a captured KV-event stream leaves cached, loaded into each rank's
KV cache before the first request (``workload.warm_cache``, docs/workloads.md).

Two capture formats:

* ``servesim_jsonl``: servesim's own KV-event JSONL (the ``jsonl`` KV sink,
  docs/sinks.md): one event per line with ``worker``, ``dp_rank``, ``type`` and, for
  ``BlockStored``, ``block_hashes`` (servesim's sequence hashes), ``parent_block_hash``,
  ``tokens_hashes`` and, when the run emitted them, ``token_ids``. Each line's ``worker`` and
  ``dp_rank`` name the rank it fills.
* ``vllm_msgpack``: vLLM's wire format, the ``KVEventBatch`` payloads a subscriber receives
  (vLLM 0.32 ``vllm/distributed/kv_events.py``: ``[ts, events, data_parallel_rank]``, each event
  a map with ``type``), concatenated in arrival order. One capture is one server: its
  batches fill worker ``worker`` (default 0), rank ``data_parallel_rank`` (0 when nil). vLLM's
  block hashes are its own, so every stored block needs its ``token_ids``: its servesim
  hashes are recomputed from them (servesim.kv.hashing), chained through the parent's.

Events are applied in order per rank: ``BlockStored`` adds blocks, ``BlockRemoved`` drops them,
``AllBlocksCleared`` drops all. What is left is loaded as *paths*: every cached block whose
ancestors are all cached ends a path from the root; the paths are loaded in the order their
last block was stored, each as a request that computed them and finished at once (lookup,
allocate, finalize, release: :func:`preload_pool`), so the most recently stored stay most
recently used and a full pool keeps the newest. Blocks whose parent is not cached (the
capture started mid-stream, or the parent was evicted) are unreachable by any lookup and are
skipped, as are blocks of a LoRA adapter and host-tier (``medium`` other than GPU) blocks.
The preload publishes no KV events: sinks and a KV router see the run's own events only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from attrs import frozen

from servesim.errors import TraceError
from servesim.kv.hashing import chain_hash, local_block_hash
from servesim.kv.pool import BlockTable

if TYPE_CHECKING:
    from servesim.kv.pool import BlockPool

FORMATS = ("servesim_jsonl", "vllm_msgpack")


@frozen
class WarmBlock:
    """One cached block: servesim's sequence and token-only hashes, its parent's sequence hash
    (None at the root) and its token ids when the capture has them."""

    seq_hash: int
    local_hash: int
    parent: int | None
    tokens: tuple[int, ...] | None = None


#: One path from the root: blocks 0..n-1 of some sequence.
WarmPath = tuple[WarmBlock, ...]


class _RankState:
    """The cached blocks of one rank while the events are applied (insertion order kept)."""

    def __init__(self) -> None:
        self.blocks: dict[int, WarmBlock] = {}

    def store(self, block: WarmBlock) -> None:
        self.blocks.pop(block.seq_hash, None)  # a re-store is the newest
        self.blocks[block.seq_hash] = block

    def paths(self) -> list[WarmPath]:
        blocks = self.blocks
        has_child = {b.parent for b in blocks.values() if b.parent is not None}
        out = []
        for h, b in blocks.items():
            if h in has_child:
                continue
            path = [b]
            while path[-1].parent is not None and path[-1].parent in blocks:
                path.append(blocks[path[-1].parent])  # type: ignore[index]
            if path[-1].parent is None:  # reaches the root: every ancestor is cached
                out.append(tuple(reversed(path)))
        return out


def _int_list(v: Any, key: str, file: str, line: int) -> list[int]:
    if not isinstance(v, list) or any(not isinstance(x, int) or isinstance(x, bool) for x in v):
        raise TraceError(f"field {key!r}: expected a list of integers, got {v!r}", file=file, line=line)
    return v


def _stored(state: _RankState, hashes: Sequence[int], locals_: Sequence[int] | None,
            parent: int | None, tokens: Sequence[int] | None, block_size: int) -> None:
    for i, h in enumerate(hashes):
        blk = None if tokens is None else tuple(tokens[i * block_size:(i + 1) * block_size])
        local = locals_[i] if locals_ is not None else local_block_hash(blk)  # type: ignore[arg-type]
        state.store(WarmBlock(h, local, parent, blk))
        parent = h


def read_servesim_jsonl(path: str, block_size: int) -> dict[tuple[int, int], _RankState]:
    """servesim's KV-event JSONL, applied per ``(worker, dp_rank)``."""
    ranks: dict[tuple[int, int], _RankState] = {}
    for line, text in _lines(path):
        try:
            ev = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=path, line=line) from None
        if not isinstance(ev, dict):
            raise TraceError("expected a JSON object", file=path, line=line)
        for key in ("worker", "dp_rank"):
            if not isinstance(ev.get(key), int) or isinstance(ev.get(key), bool) or ev[key] < 0:
                raise TraceError(f"field {key!r}: expected an integer >= 0, got {ev.get(key)!r}",
                                 file=path, line=line)
        state = ranks.setdefault((ev["worker"], ev["dp_rank"]), _RankState())
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


def _lines(path: str) -> Iterator[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8") as fh:
            for n, text in enumerate(fh, start=1):
                if text.strip():
                    yield n, text
    except OSError as exc:
        raise TraceError(f"cannot read the warm cache: {exc.strerror}", file=path) from None
    except UnicodeDecodeError:
        raise TraceError("not UTF-8 text", file=path) from None


def read_vllm_msgpack(path: str, block_size: int, worker: int) -> dict[tuple[int, int], _RankState]:
    """Concatenated vLLM ``KVEventBatch`` payloads; "line" in errors is the batch's ordinal."""
    import msgpack  # a dependency of servesim, imported only for this format

    ranks: dict[tuple[int, int], _RankState] = {}
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
        state = ranks.setdefault(key, _RankState())
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


def _vllm_stored(state: _RankState, mapping: dict[Any, int], ev: dict[str, Any], block_size: int,
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


def preload_pool(pool: BlockPool, paths: Sequence[WarmPath]) -> tuple[int, int]:
    """Load ``paths`` into ``pool`` (see the module docs): ``(blocks loaded, blocks skipped)``;
    a path longer than the pool is skipped. Publishes no events."""
    if not pool.prefix_caching:
        return 0, sum(len(p) for p in paths)
    loaded = skipped = 0
    for path in paths:
        hashes = [b.seq_hash for b in path]
        cached, _ = pool.lookup(hashes)
        table = BlockTable(len(path))
        if not pool.allocate(table, len(path), hashes[:cached]):
            skipped += len(path) - cached
            continue
        pool.finalize(table, len(path), hashes, [b.local_hash for b in path])
        pool.release(table)
        loaded += len(path) - cached
    pool.discard_events()
    return loaded, skipped


__all__ = ["FORMATS", "WarmBlock", "WarmPath", "preload_pool", "read_warm_cache"]
