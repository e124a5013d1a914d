"""Who reads what a rank emits: an optional rank protocol that lets a rank skip work.

In a replay the composition point knows every reader of the ranks' output: the KV-event sinks,
the router, observers, the timeline. :meth:`servesim.factory.EngineFactory.fit_to_readers`
sums that up in :class:`EventReaders`, and each rank built afterwards that declares the
capability :class:`FitsReaders` is handed it once, right after construction. A rank without
it emits everything in full, with the same results; none of this is part of ``Rank`` itself.
"""

from __future__ import annotations

from abc import abstractmethod

from attrs import frozen

from servesim.rank import Capability


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
        when the replay has named the readers (``EngineFactory.fit_to_readers``)."""


__all__ = ["ALL_READ", "EventReaders", "FitsReaders"]
