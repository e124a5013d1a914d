"""vLLM's priority scheduling policy (``engine.scheduling_policy: priority``).

With ``--scheduling-policy priority`` vLLM 0.32's v1 scheduler differs from FCFS in three
places, all modelled here and entered from :mod:`servesim_vllm.scheduler` only when the
policy is set:

* the waiting queue is a heap on ``(priority, arrival_time)``, lower first
  (``PriorityRequestQueue``, vllm/v1/core/sched/request_queue.py; ``Request.__lt__``,
  vllm/v1/request.py). "Prepending" a request (a preempted one, or one skipped for a pass)
  pushes it into the heap like a new one: it takes its place by its key, not the front;
* when a running request cannot get its KV blocks, the victim is the running request with
  the largest ``(priority, arrival_time)`` (``max(self.running, key=...)``), not the newest
  (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``). A victim that sits before the
  request being scheduled shifts the running scan back by one, and a victim already
  scheduled in this step gives its tokens back; when the victim is the request being
  scheduled, the running scan ends for this step;
* nothing else: a waiting request, however urgent, never preempts a running one in 0.32 (the
  waiting scan stops at the first request whose blocks do not fit, as under FCFS).

vLLM's ``arrival_time`` is when the request reached the engine; here it is the order in which
the rank received requests (the driver submits them in simulated-time order), so ties between
equal priorities go to the earlier arrival, as in vLLM.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from servesim.config.engine import EngineConfig, SchedulingPolicy

from servesim_vllm.request import VllmRequest


class PriorityWaiting:
    """The waiting queue as a heap on ``(priority, arrival)``, with the parts of the deque
    interface the scheduler uses: every insertion pushes by key, ``[0]`` and ``popleft`` are
    the most urgent request."""

    __slots__ = ("_heap", "_arrivals")

    def __init__(self) -> None:
        # Entries (priority, arrival, request): arrivals are unique, so requests are never compared.
        self._heap: list[tuple[int, int, VllmRequest]] = []
        self._arrivals = 0

    def key(self, req: VllmRequest) -> tuple[int, int]:
        """``(priority, arrival)``; the first call fixes the request's arrival."""
        if not req.arrival:
            self._arrivals += 1
            req.arrival = self._arrivals
        return req.request.priority, req.arrival

    def append(self, req: VllmRequest) -> None:
        p, a = self.key(req)
        heapq.heappush(self._heap, (p, a, req))

    appendleft = append  # vLLM's prepend_request: a heap has no front

    def insert(self, _pos: int, req: VllmRequest) -> None:
        self.append(req)

    def extendleft(self, reqs: Iterable[VllmRequest]) -> None:
        for req in reqs:
            self.append(req)

    def popleft(self) -> VllmRequest:
        return heapq.heappop(self._heap)[2]

    def remove(self, req: VllmRequest) -> None:
        heap = self._heap
        for i, entry in enumerate(heap):
            if entry[2] is req:
                last = heap.pop()
                if i < len(heap):
                    heap[i] = last
                    heapq.heapify(heap)
                return
        raise ValueError(f"{req!r} is not waiting")

    def __getitem__(self, index: int) -> VllmRequest:
        if index == 0:
            return self._heap[0][2]
        return sorted(self._heap)[index][2]

    def __iter__(self) -> Iterator[VllmRequest]:
        """In service order (as vLLM's ``PriorityRequestQueue.__iter__``)."""
        return (entry[2] for entry in sorted(self._heap))

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)


def lowest_priority(running: list[VllmRequest], queue: PriorityWaiting) -> VllmRequest:
    """The preemption victim: the running request with the largest ``(priority, arrival)``."""
    return max(running, key=queue.key)


def problems(config: EngineConfig) -> list[tuple[str, str]]:
    """``(key path, message)`` for settings the priority policy is not modelled with."""
    if config.scheduling_policy is not SchedulingPolicy.PRIORITY:
        return []
    if config.native_host_offload is not None:
        return [("engine.scheduling_policy",
                 "priority is not modelled with engine.native_host_offload; use fcfs")]
    return []


__all__ = ["PriorityWaiting", "lowest_priority", "problems"]
