"""Compact KV event records: several consecutive events of one rank in one small object.

A :class:`~servesim.kv.pool.BlockPool` with ``event_records`` on publishes its device-tier
events as records instead of :class:`~servesim.contract.KvEvent` objects: one
:class:`RemovedRun` for the one-hash ``Removed`` events of an eviction, one :class:`StoredRun`
per ``Stored`` event without token ids. The KV router's index applies a record with one set
operation and the JSONL sink formats it with C-level joins, so the ``KvEvent``, ``RemovedBlocks``,
``StoredBlocks`` and ``KvBlock`` objects are never built. A batch may mix records and
``KvEvent`` objects (host-tier events, other producers); :func:`materialise` turns any batch
into the ``KvEvent`` list it stands for, with the same ids and fields.

The replay turns records on only when every reader of the events accepts them
(:func:`accepts_kv_records`); every other reader gets ``KvEvent`` objects as before. A reader
opts in, for speed only, by setting the class attribute ``accepts_kv_records = True`` on the
class that defines its reading methods (a sink's ``publish`` and ``encode``, a router's
``on_kv_events``); it is not part of the ``KvEventSink`` or ``Router`` interfaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.contract import KvEvent
from servesim.kv.event_build import kv_blocks, kv_event, removed_events, stored_blocks
from servesim.sinks.base import declares


class RemovedRun:
    """``len(hashes)`` device-tier ``Removed`` events of one hash each, with ids
    ``event_id``, ``event_id + 1``, ... in the order of ``hashes``."""

    __slots__ = ("event_id", "dp_rank", "hashes")

    def __init__(self, event_id: int, dp_rank: int, hashes: list[int]) -> None:
        self.event_id = event_id
        self.dp_rank = dp_rank
        self.hashes = hashes

    def events(self) -> list[KvEvent]:
        return removed_events(self.event_id, self.dp_rank, self.hashes)

    def __repr__(self) -> str:
        return f"RemovedRun({self.event_id}, {self.dp_rank}, {self.hashes!r})"


#: :attr:`StoredRun.shared` (and ``BlockTable.shared``) when every block may be shared.
ALL_SHARED = 1 << 62


class StoredRun:
    """One device-tier ``Stored`` event without token ids or start position: blocks
    ``hashes[i]`` with token-only hashes ``tokens_hashes[i]``, after ``parent_hash``.

    ``shared``: only the first ``shared`` blocks can ever match another request's prompt
    (the rest hold tokens no prompt of the replay holds: trace-unique prompt blocks,
    generated pseudo tokens; servesim.kv.pool.BlockTable.shared). The event is the same
    either way; the KV router's index, whose lookups are prompts, keeps only those."""

    __slots__ = ("event_id", "dp_rank", "parent_hash", "hashes", "tokens_hashes", "shared")

    def __init__(self, event_id: int, dp_rank: int, parent_hash: int | None,
                 hashes: Sequence[int], tokens_hashes: Sequence[int],
                 shared: int = ALL_SHARED) -> None:
        self.event_id = event_id
        self.dp_rank = dp_rank
        self.parent_hash = parent_hash
        self.hashes = hashes
        self.tokens_hashes = tokens_hashes
        self.shared = shared

    def events(self) -> list[KvEvent]:
        blocks = kv_blocks(self.hashes, self.tokens_hashes)
        return [kv_event(self.event_id, self.dp_rank, stored_blocks(self.parent_hash, blocks, None))]

    def __repr__(self) -> str:
        return (f"StoredRun({self.event_id}, {self.dp_rank}, {self.parent_hash}, "
                f"{list(self.hashes)!r}, {list(self.tokens_hashes)!r})")


RECORD_TYPES = (RemovedRun, StoredRun)


def materialise(events: Sequence[Any]) -> Sequence[KvEvent]:
    """The ``KvEvent`` objects a batch of events and records stands for, in order (the batch
    itself when it holds no record)."""
    if not any(type(e) in RECORD_TYPES for e in events):
        return events
    out: list[KvEvent] = []
    for e in events:
        if type(e) in RECORD_TYPES:
            out.extend(e.events())
        else:
            out.append(e)
    return out


def count_events(events: Sequence[Any]) -> int:
    """How many ``KvEvent`` objects a batch stands for."""
    return sum(len(e.hashes) if type(e) is RemovedRun else 1 for e in events)


def accepts_kv_records(reader: Any, methods: tuple[str, ...]) -> bool:
    """Whether ``reader`` (a sink or router, or its class) takes batches that hold records in
    the methods ``methods`` (``accepts_kv_records = True`` declared at or below every class
    that defines them; servesim.sinks.base.declares)."""
    return declares(reader, "accepts_kv_records", methods)


#: The methods through which a KV-event sink and a router read events.
SINK_METHODS = ("publish", "encode")
ROUTER_METHODS = ("on_kv_events",)

__all__ = ["ALL_SHARED", "RECORD_TYPES", "ROUTER_METHODS", "RemovedRun", "SINK_METHODS", "StoredRun",
           "accepts_kv_records", "count_events", "materialise"]
