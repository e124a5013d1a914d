"""Who reads what a rank emits: an optional rank protocol that lets a rank skip work.

In a replay the composition point knows every reader of the ranks' output: the KV-event sinks,
the router, observers, the timeline. :func:`fit_to_readers` sums that up in
:class:`EventReaders`, and each rank the engine factory builds afterwards that declares the
capability :class:`FitsReaders` is handed it once, right after construction
(``EngineFactory.rank_setup``). A rank without
it emits everything in full, with the same results; none of this is part of ``Rank`` itself.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from attrs import frozen

from servesim.factory import EngineFactory
from servesim.kv.event_records import ROUTER_METHODS, SINK_METHODS, accepts_kv_records
from servesim.rank import Capability, Rank


@frozen
class EventReaders:
    """The readers of a rank's output in one replay."""

    #: The only consumer of the KV events is an index of which hashes each slot caches (the
    #: replay's KV router, no event sink): a rank may coalesce events (e.g. one ``Removed``
    #: per allocation) as long as applying them in order gives the same index.
    kv_router_only: bool = False
    #: Every reader of the KV events accepts compact records (servesim.kv.event_records): a
    #: rank may publish them in place of ``KvEvent`` objects (``BlockPool.event_records``).
    kv_records: bool = False
    #: Something reads the occupancy snapshots (``CommandEffects.metrics``,
    #: ``PassCompletionEffects.metrics``); when false a rank may leave them None.
    occupancy: bool = True


#: What a rank assumes before it is told anything: every output read in full.
ALL_READ = EventReaders()


class FitsReaders(Capability):
    """Capability: a rank that adapts what it emits to its readers (speed only)."""

    @abstractmethod
    def fit_readers(self, readers: EventReaders) -> None:
        """Called once by the engine factory, after construction and before the first pass,
        when the replay has named the readers (:func:`fit_to_readers`)."""


def fit_to_readers(factory: EngineFactory, kv_sinks: list[Any], *, router_reads_events: bool,
                   record_metrics: bool, router: Any = None, observed: bool = False) -> EventReaders:
    """Tell the ranks ``factory`` builds from now on who reads what they emit in a replay
    (:class:`EventReaders`, handed to ranks that implement :class:`FitsReaders`): KV events
    read by the router alone (so trace-unique blocks may be elided), KV events as compact
    records when the caller names every other reader of them, the router (``router``, its
    class or instance; None declines) with ``observed`` telling whether an observer plugin
    sees the passes' effects, and the sinks and router all accept records, and occupancy
    snapshots only when something (the timeline) reads them. Returns the readers."""
    router_only = router_reads_events and not kv_sinks
    records = (not router_only and router is not None and not observed and bool(kv_sinks)
               and all(accepts_kv_records(s, SINK_METHODS) for s in kv_sinks)
               and (not router_reads_events or accepts_kv_records(router, ROUTER_METHODS)))
    readers = EventReaders(kv_router_only=router_only, kv_records=records,
                           occupancy=record_metrics)
    hand_readers(factory, readers)
    return readers


def hand_readers(factory: EngineFactory, readers: EventReaders) -> None:
    """Hand ``readers`` to every rank ``factory`` builds from now on that declares
    :class:`FitsReaders`."""
    factory.rank_setup = _ReadersFitter(readers)


class _ReadersFitter:
    """``EngineFactory.rank_setup``: hands the readers to a rank that fits them."""

    __slots__ = ("readers",)

    def __init__(self, readers: EventReaders) -> None:
        self.readers = readers

    def __call__(self, rank: Rank) -> None:
        if isinstance(rank, FitsReaders):
            rank.fit_readers(self.readers)


__all__ = ["ALL_READ", "EventReaders", "FitsReaders", "fit_to_readers", "hand_readers"]
