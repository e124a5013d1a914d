"""Runs of passes past arrivals a router proves go elsewhere: an optional router protocol.

While a worker runs steady decode passes, the next arrivals would end its run unless the
router can prove they go to another worker (:mod:`servesim.fast.replay_runs`). A router that
can implements :class:`ProvesExclusion`; it needs no import of this module (the check is
structural). Every other router proves nothing, and runs stop at each arrival. A wrong proof
is caught: the replay stops with an internal error rather than give a different result.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from servesim.replay.cluster import ClusterState
    from servesim.tokens import TokenSeq


@runtime_checkable
class ProvesExclusion(Protocol):
    """A router that bounds where its next arrivals may go (a dp_size-1 cluster)."""

    #: Whether :meth:`exclusion_margins` can prove anything now (a property may depend on the
    #: router's configuration); runs skip the look-ahead when it is false.
    proves_exclusion: bool

    def exclusion_margins(
        self, worker: int, arrivals: Iterable[tuple[TokenSeq, Sequence[int]]], state: ClusterState
    ) -> Iterator[float]:
        """Margins proving the next arrivals go to a worker other than ``worker`` while it
        runs steady decode passes.

        ``arrivals``: the next requests' prompts with their block hashes (as ``select`` gets
        them), in routing order. Yields one margin per arrival, consumed lazily, valid if
        every earlier one went elsewhere and meanwhile (a) ``worker`` receives nothing and
        emits no first token, stores no block of a prompt, and its costs change only through
        its own evictions and the finishes of its in-flight requests, and (b) every other
        worker changes only through its own progress (finishes, first tokens, KV events) and
        the arrivals routed to it. The arrival provably goes elsewhere when its margin
        exceeds the summed :meth:`exclusion_relief` of ``worker``'s requests that may finish
        before it. Stop yielding when nothing more can be proved.
        """
        ...

    def exclusion_relief(self, state: ClusterState, request_id: int) -> float:
        """How much the finish of an in-flight request may lower its worker's margin."""
        ...


def proves_exclusion(router: Any) -> bool:
    """Whether ``router`` implements :class:`ProvesExclusion` and can prove something now."""
    return isinstance(router, ProvesExclusion) and bool(router.proves_exclusion)


__all__ = ["ProvesExclusion", "proves_exclusion"]
