"""Prefill→decode handoff bookkeeping shared by every backend (aisimulate-engine.md §3, §8).

A rank that supports disaggregation keeps one :class:`HandoffBook`. The book implements the
six handoff commands of the neutral contract (§4.2) on top of a small backend
:class:`HandoffAdapter` that knows how the backend allocates, holds and frees KV:

* **Source side** (``SubmitHandoffPrefill``): the request runs like an ordinary one; when it
  completes, the backend asks :meth:`HandoffBook.on_source_complete` whether to keep its KV.
  A tracked request's KV is *held* and a ``SourceHeld`` lifecycle event is queued for the
  pass's completion effects (§4.8). ``ReleaseSource`` / ``CancelSource`` free it.
* **Destination side** (``ReserveDestination``): a FIFO of pending destinations is probed
  in order; a reservation that succeeds yields ``DestinationReserved`` (at once when no pass
  is in flight, else at the next pass boundary). A blocked head is re-probed only when the
  rank's *capacity generation* changed (§4.8, ``unchanged_capacity_generation_does_not_
  reprobe_pending_destination``) or when the head itself changed (a cancellation, §8.2
  step 7). ``ActivateDestination`` hands the reserved KV to the backend's waiting queue.
* **Suppression** (§3 step 4): a command that removes a request's state while a pass is in
  flight drops that request's retained outputs and lifecycle events from the pending pass.

Results follow §8.2: cancels are ``Applied`` on first use and ``Noop`` afterwards, and every
command whose request's ownership ends lists it in ``retired_requests``.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from attrs import define

from servesim.contract import (
    APPLIED,
    NOOP,
    ActivateDestination,
    CancelDestination,
    CancelSource,
    Command,
    CommandEffects,
    CommandResult,
    DestinationReserved,
    HandoffId,
    HandoffTransferTiming,
    KvEvent,
    LifecycleEvent,
    Metrics,
    PassCompletionEffects,
    ReleaseSource,
    Request,
    RequestId,
    ReserveDestination,
    SourceHeld,
    SubmitHandoffPrefill,
)
from servesim.errors import CommandRejected

PENDING, RESERVED, ACTIVE = "pending", "reserved", "active"


def model_kv_bytes_per_token(
    num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: float
) -> float:
    """KV bytes per token of a decoder: ``num_layers * 2 * num_kv_heads * head_dim *
    dtype_bytes`` (one K and one V vector per layer; the Python mocker CLI's formula,
    dynamo-mocker.md §1.3)."""
    return float(num_layers * 2 * num_kv_heads * head_dim * dtype_bytes)


def kv_bytes_per_token(config: Any) -> float | None:
    """``engine.kv_bytes_per_token`` if set, else computed from the model geometry keys
    (``num_layers``, ``num_kv_heads``, ``head_dim``, ``kv_dtype_bytes``) when all are set."""
    explicit = getattr(config, "kv_bytes_per_token", None)
    if explicit is not None:
        return float(explicit)
    layers = getattr(config, "num_layers", None)
    heads = getattr(config, "num_kv_heads", None)
    dim = getattr(config, "head_dim", None)
    if layers is None or heads is None or dim is None:
        return None
    return model_kv_bytes_per_token(layers, heads, dim, getattr(config, "kv_dtype_bytes", 2))


def transfer_timing(config: Any, prompt_tokens: int) -> HandoffTransferTiming:
    """The ``SourceHeld`` timing a source rank publishes (aisimulate-engine.md §8.1)."""
    return HandoffTransferTiming(
        mode=config.kv_transfer_timing_mode,
        full_prompt_tokens=prompt_tokens,
        kv_bytes_per_token=kv_bytes_per_token(config),
        bandwidth_gb_s=config.kv_transfer_bandwidth,
    )


def suppress_request(effects: PassCompletionEffects, request_id: RequestId) -> bool:
    """Drop a request's outputs and lifecycle events from a retained pass (§3 step 4);
    True when some output was removed."""
    removed = effects.outputs.remove_request(request_id)
    if effects.lifecycle_events:
        effects.lifecycle_events = [
            e for e in effects.lifecycle_events if e.request_id != request_id
        ]
    return removed


@define(slots=True)
class SourceEntry:
    """A ``SubmitHandoffPrefill`` request: pending until its prefill completes, then held."""

    handoff_id: HandoffId
    request_id: RequestId
    prompt_tokens: int
    held: bool = False
    state: Any = None  # the backend's held KV (a block table, a radix lease ...)


@define(slots=True)
class DestEntry:
    """A ``ReserveDestination``: pending in the FIFO, reserved, then active once activated."""

    handoff_id: HandoffId
    request: Request
    seq: int
    phase: str = PENDING
    state: Any = None  # the backend's reserved request state


class HandoffAdapter(Protocol):
    """What a backend provides to a :class:`HandoffBook`."""

    def submit_source(self, request: Request) -> None:
        """Enqueue a prefill request like ``Submit`` (raise CommandRejected if refused)."""

    def cancel_request(self, request_id: RequestId) -> bool:
        """Remove a live (waiting/running) request and free its KV; False if unknown."""

    def release_held(self, entry: SourceEntry) -> None:
        """Free a held source's KV."""

    def destination_problem(self, request: Request) -> str | None:
        """Why the request can never be reserved here (e.g. larger than the pool), or None."""

    def try_reserve(self, entry: DestEntry) -> int | None:
        """Reserve the prompt KV now: the transferable prompt tokens, or None (no room)."""

    def release_reserved(self, entry: DestEntry) -> None:
        """Free a reserved, not yet activated destination."""

    def activate(self, entry: DestEntry) -> None:
        """Make the reserved request runnable with its prompt computed."""

    def capacity_generation(self) -> int:
        """A counter that changes whenever KV capacity is freed."""

    def metrics(self) -> Metrics | None:
        """The rank's current metrics (None when nothing reads them, ``EventReaders.occupancy``)."""

    def drain_kv_events(self) -> list[KvEvent]:
        """KV events buffered by the backend since the last drain."""


class HandoffBook:
    """Handoff state of one rank (aisimulate-engine.md §3 "handoff tracking", §8.2)."""

    def __init__(self, adapter: HandoffAdapter) -> None:
        self.adapter = adapter
        # Keyed by ``HandoffId.value`` (its equality and hash are the value's): int keys
        # hash and compare without a call into the attrs-generated methods.
        self.sources: dict[int, SourceEntry] = {}
        self.source_of: dict[RequestId, int] = {}
        self.dests: dict[int, DestEntry] = {}
        self.dest_of: dict[RequestId, int] = {}
        self.fifo: deque[DestEntry] = deque()
        self.events: list[LifecycleEvent] = []
        self.probes = 0  # reservation attempts (tests pin the no-reprobe rule)
        self._probed: tuple[int, int] | None = None  # (generation, head seq) of a failed probe
        self._seq = 0
        self._unactivated = 0  # destinations pending or reserved

    # -- state ----------------------------------------------------------------------------

    @property
    def holding(self) -> bool:
        """Held or pending sources, or destinations not yet activated: not drained."""
        return bool(self.sources) or self._unactivated > 0

    @property
    def only_active(self) -> bool:
        """Nothing but activated destinations (no source, no destination pending or reserved,
        no queued event): the rank's passes are then plain passes, and a run of passes may
        cover them (servesim.fast.runs) if :meth:`at_run_end` closes it."""
        return not self.sources and self._unactivated == 0 and not self.events

    def at_run_end(self, completed: list[RequestId]) -> list[LifecycleEvent]:
        """A run of passes ended (servesim.fast.runs): what :meth:`at_pass_boundary` would have
        done at each of its boundaries. ``completed`` are the run's completions; while the run
        was committed the book held only active destinations, so its earlier boundaries had
        nothing to retry, and commands during its last pass (a ``ReserveDestination``) are
        retried now. Returns the lifecycle events of the last boundary."""
        if not (self.sources or self.dests):
            return []
        if completed:
            self.on_terminal(completed)
        self.retry()
        return self.drain_events() if self.events else []

    @property
    def blocks_admission(self) -> bool:
        """A pending destination blocks fresh KV admission on this rank (§8.2 step 3)."""
        return bool(self.fifo)

    @property
    def can_retry(self) -> bool:
        """A pending destination that a probe now could reserve: capacity was freed, or the
        head changed, since the last failed probe. The rank is then ready for an (empty)
        pass whose boundary retries the FIFO."""
        fifo = self.fifo
        return bool(fifo) and self._probed != (self.adapter.capacity_generation(), fifo[0].seq)

    def unactivated_prompt_stats(self) -> tuple[int, int, int]:
        """``(count, Σ prompt, Σ prompt²)`` of destinations pending or reserved: forward-pass
        metrics count them as queued decodes (aisimulate-engine.md §4.9)."""
        n = total = sq = 0
        for d in self.dests.values():
            if d.phase != ACTIVE:
                x = len(d.request.prompt)
                n += 1
                total += x
                sq += x * x
        return n, total, sq

    @property
    def held_sources(self) -> int:
        return sum(1 for s in self.sources.values() if s.held)

    def drain_events(self) -> list[LifecycleEvent]:
        events = self.events
        self.events = []
        return events

    # -- hooks called by the backend ------------------------------------------------------

    def on_source_complete(self, request_id: RequestId, state: Any, timing_config: Any) -> bool:
        """A request finished its prefill: hold its KV if it is a tracked source."""
        key = self.source_of.get(request_id)
        if key is None:
            return False
        entry = self.sources[key]
        entry.held = True
        entry.state = state
        self.events.append(SourceHeld(
            entry.handoff_id, request_id, transfer_timing(timing_config, entry.prompt_tokens)
        ))
        return True

    def on_terminal(self, request_ids: list[RequestId]) -> None:
        """Terminal outputs end tracking: active destinations, and sources that ended
        without being held (rejected at admission)."""
        dests, dest_of, source_of = self.dests, self.dest_of, self.source_of
        for rid in request_ids:
            key = dest_of.get(rid)
            if key is not None and dests[key].phase == ACTIVE:
                del dests[key]
                del dest_of[rid]
            if source_of:  # (a decode rank has none)
                key = source_of.get(rid)
                if key is not None and not self.sources[key].held:
                    del self.sources[key]
                    del source_of[rid]

    def retry(self, force: bool = False, limit: int | None = 1) -> None:
        """Probe pending destinations in FIFO order (aisimulate-engine.md §4.8), reserving
        at most ``limit`` of them.

        One reservation per wake-up (a pass boundary or a command on an idle rank) is what
        the reference's disaggregated replay shows: two destinations left pending by one
        mid-pass prefill completion are reserved at consecutive decode pass boundaries, or
        at one boundary when an activation command follows it (golden case ``vllm_1p1d``).
        """
        fifo = self.fifo
        if not fifo:
            return
        gen = self.adapter.capacity_generation()
        if not force and self._probed == (gen, fifo[0].seq):
            return
        while fifo and (limit is None or limit > 0):
            if limit is not None:
                limit -= 1
            head = fifo[0]
            self.probes += 1
            tokens = self.adapter.try_reserve(head)
            if tokens is None:
                self._probed = (gen, head.seq)
                return
            fifo.popleft()
            head.phase = RESERVED
            self.events.append(
                DestinationReserved(head.handoff_id, head.request.request_id, tokens)
            )
        self._probed = None

    # -- commands -------------------------------------------------------------------------

    def _known(self, hid: HandoffId) -> bool:
        key = hid.value
        return key in self.sources or key in self.dests

    def at_pass_boundary(self, effects: PassCompletionEffects) -> None:
        """At a pass boundary: terminal outputs end handoff tracking, pending destinations
        are retried, and the resulting lifecycle events join ``effects``
        (aisimulate-engine.md §3, complete_pass steps 2 and 6)."""
        if not (self.sources or self.dests):
            return
        if effects.outputs.completed:
            self.on_terminal(effects.outputs.completed)
        self.retry()
        if self.events:
            effects.lifecycle_events.extend(self.drain_events())

    def apply(
        self, command: Command, busy: bool, retained: PassCompletionEffects | None
    ) -> CommandEffects:
        """Dispatch one of the six handoff commands (aisimulate-engine.md §4.2, §8.2).

        ``busy`` is the group-wide ``pass_in_flight``; ``retained`` is this rank's in-flight
        pass effects, from which a cancel suppresses the request's outputs. Any other command
        is rejected.
        """
        if isinstance(command, SubmitHandoffPrefill):
            return self.submit_prefill(command.handoff_id, command.request)
        if isinstance(command, ReserveDestination):
            return self.reserve(command.handoff_id, command.request, busy)
        if isinstance(command, ActivateDestination):
            return self.activate(command.handoff_id, busy)
        if isinstance(command, ReleaseSource):
            return self.release_source(command.handoff_id, busy)
        if isinstance(command, CancelSource):
            return self.cancel_source(command.handoff_id, busy, retained)
        if isinstance(command, CancelDestination):
            return self.cancel_destination(command.handoff_id, busy, retained)
        raise CommandRejected(f"unsupported command {type(command).__name__}")

    def submit_prefill(self, hid: HandoffId, request: Request) -> CommandEffects:
        if self._known(hid):
            raise CommandRejected(f"handoff {hid.value} is already registered")
        rid = request.request_id
        if rid in self.source_of or rid in self.dest_of:
            raise CommandRejected(f"request {rid} is already active")
        self.adapter.submit_source(request)
        self.sources[hid.value] = SourceEntry(hid, rid, len(request.prompt))
        self.source_of[rid] = hid.value
        return self._effects(CommandResult.submitted(rid))

    def reserve(self, hid: HandoffId, request: Request, pass_in_flight: bool) -> CommandEffects:
        if self._known(hid):
            raise CommandRejected(f"handoff {hid.value} is already registered")
        rid = request.request_id
        if rid in self.dest_of or rid in self.source_of:
            raise CommandRejected(f"request {rid} is already active")
        problem = self.adapter.destination_problem(request)
        if problem is not None:
            raise CommandRejected(f"ReserveDestination {hid.value}: {problem}")
        entry = DestEntry(hid, request, self._seq)
        self._seq += 1
        self.dests[hid.value] = entry
        self.dest_of[rid] = hid.value
        self.fifo.append(entry)
        self._unactivated += 1
        if not pass_in_flight:
            self.retry()
        return self._effects(CommandResult.destination_accepted(rid), pass_in_flight)

    def activate(self, hid: HandoffId, pass_in_flight: bool) -> CommandEffects:
        entry = self.dests.get(hid.value)
        if entry is None:
            raise CommandRejected(f"ActivateDestination: unknown handoff {hid.value}")
        if entry.phase != RESERVED:
            raise CommandRejected(
                f"ActivateDestination: handoff {hid.value} is {entry.phase}, not reserved"
            )
        self.adapter.activate(entry)
        entry.phase = ACTIVE
        self._unactivated -= 1
        if not pass_in_flight:
            self.retry()
        return self._effects(APPLIED, pass_in_flight)

    def release_source(self, hid: HandoffId, pass_in_flight: bool) -> CommandEffects:
        entry = self.sources.get(hid.value)
        if entry is None:
            return self._effects(NOOP, pass_in_flight)
        if not entry.held:
            raise CommandRejected(f"ReleaseSource: handoff {hid.value} is not held yet")
        self.adapter.release_held(entry)
        self._drop_source(entry)
        if not pass_in_flight:
            self.retry()
        return self._effects(APPLIED, pass_in_flight, retired=(entry.request_id,))

    def cancel_source(
        self, hid: HandoffId, pass_in_flight: bool, pending: PassCompletionEffects | None
    ) -> CommandEffects:
        entry = self.sources.get(hid.value)
        if entry is None:
            return self._effects(NOOP, pass_in_flight)
        if entry.held:
            self.adapter.release_held(entry)
        else:
            self.adapter.cancel_request(entry.request_id)
        self._drop_source(entry)
        if not pass_in_flight:
            self.retry()
        return self._cancelled(entry.request_id, pass_in_flight, pending)

    def cancel_destination(
        self, hid: HandoffId, pass_in_flight: bool, pending: PassCompletionEffects | None
    ) -> CommandEffects:
        entry = self.dests.get(hid.value)
        if entry is None:
            return self._effects(NOOP, pass_in_flight)
        rid = entry.request.request_id
        if entry.phase == PENDING:
            self.fifo.remove(entry)
        elif entry.phase == RESERVED:
            self.adapter.release_reserved(entry)
        elif not self.adapter.cancel_request(rid):
            # Finished inside the in-flight pass: its terminal output stays (§13.2
            # ``ordinary_noop_cancel_preserves_pending_output``); completion ends tracking.
            return self._effects(NOOP, pass_in_flight)
        if entry.phase != ACTIVE:
            self._unactivated -= 1
        del self.dests[hid.value]
        del self.dest_of[rid]
        if not pass_in_flight:
            self.retry(force=True)  # the blocked head may have changed (§8.2 step 7)
        return self._cancelled(rid, pass_in_flight, pending)

    def forget_request(self, request_id: RequestId) -> bool:
        """``CancelRequest`` for a request: stop tracking its handoffs (§3 step 5) and free
        handoff state the scheduler does not own (a held source, a pending or reserved
        destination). True when such state was freed."""
        freed = False
        key = self.source_of.pop(request_id, None)
        if key is not None:
            entry = self.sources.pop(key)
            if entry.held:
                self.adapter.release_held(entry)
                freed = True
        key = self.dest_of.pop(request_id, None)
        if key is not None:
            entry2 = self.dests.pop(key)
            if entry2.phase != ACTIVE:
                self._unactivated -= 1
                freed = True
            if entry2.phase == PENDING:
                self.fifo.remove(entry2)
            elif entry2.phase == RESERVED:
                self.adapter.release_reserved(entry2)
        return freed

    # -- helpers --------------------------------------------------------------------------

    def _drop_source(self, entry: SourceEntry) -> None:
        del self.sources[entry.handoff_id.value]
        del self.source_of[entry.request_id]

    def _cancelled(
        self, rid: RequestId, pass_in_flight: bool, pending: PassCompletionEffects | None
    ) -> CommandEffects:
        suppressed = pending is not None and suppress_request(pending, rid)
        return self._effects(
            APPLIED, pass_in_flight, retired=(rid,), suppressed=suppressed
        )

    def _effects(
        self,
        result: CommandResult,
        pass_in_flight: bool = False,
        retired: tuple[RequestId, ...] = (),
        suppressed: bool = False,
    ) -> CommandEffects:
        """Command effects: lifecycle events produced now and, outside a pass, the KV events
        the command produced (mid-pass they wait for the completion boundary, §4.6)."""
        lifecycle: tuple[LifecycleEvent, ...] = ()
        kv: tuple[KvEvent, ...] = ()
        adapter = self.adapter
        if not pass_in_flight:
            events = self.events
            if events:
                lifecycle = tuple(events)
                self.events = []
            drained = adapter.drain_kv_events()
            if drained:
                kv = tuple(drained)
        return CommandEffects(result, lifecycle, kv, retired, adapter.metrics(), suppressed)


__all__ = [
    "ACTIVE",
    "DestEntry",
    "HandoffAdapter",
    "HandoffBook",
    "PENDING",
    "RESERVED",
    "SourceEntry",
    "kv_bytes_per_token",
    "model_kv_bytes_per_token",
    "suppress_request",
    "transfer_timing",
]
