"""vLLM's async scheduling: new requests are read one pass late while passes overlap.

With ``async_scheduling`` on, vLLM's engine core keeps two batches in flight
(``VllmConfig.max_concurrent_batches`` is 2 without pipeline parallelism, vllm/config/vllm.py,
so ``EngineCore.batch_queue`` holds two) and steps with ``EngineCore.step_with_batch_queue``
(vllm/v1/engine/core.py, v0.32). Each turn of ``EngineCore.run_busy_loop`` first drains the
input queue (``_process_input_queue``: it blocks for a request only while the engine has no
work, ``has_work``), then steps once: ``step_with_batch_queue`` schedules and launches pass k+1
without blocking while pass k is still queued, and only when the queue is full pops and waits
for pass k, then processes its outputs (``update_from_output``: tokens and completions reach
the client then). So pass k+1 is chosen from the requests read when pass k's predecessor was
processed, that is when pass k starts on the GPU: a request that arrives while pass k-1 runs
misses pass k and joins pass k+1 at the earliest. ``AsyncScheduler``
(vllm/v1/core/sched/async_scheduler.py) schedules a running request's next decode in pass k+1
on an output placeholder, so running requests lose nothing; only new requests wait. This is
the rule of :mod:`servesim.mechanics.overlap_inbox`, which this module applies:

* a ``Submit`` (and a prefill worker's handoff submit) is held as unread;
* each pass start reads what the rule lets it read (the rank is busy when its scheduler has
  running or waiting requests) into the scheduler's waiting queue, in arrival order;
* when the scheduler holds nothing, vLLM's loop blocks on the input queue (or steps the empty
  pass it had chosen, which returns at once) and reads the request straight away: the pass
  after it can take it (a request to an idle engine is scheduled at once);
* the rank is ready, and not drained, while it holds unread requests; a cancel of one drops it;
  runs of passes (servesim_vllm.fast.runs) are declined while it holds any, and a run's last
  pass start and end are kept for the rule.

The scheduler's running and waiting counts (``Metrics``, the forward-pass metrics' queues)
leave unread requests out, as vLLM's ``SchedulerStats`` do: they sit in the engine core's
input queue, not in the scheduler.

vLLM enables async scheduling by default from v0.14.0 (vLLM PR #27614; the v0.14.0 release
notes exclude pipeline parallelism, the CPU backend and speculative decoding other than
EAGLE/MTP). In vLLM 0.32, ``SchedulerConfig.async_scheduling`` is None unless set and
``VllmConfig.__post_init__`` (vllm/config/vllm.py) turns it on unless the model is a pooling
model, speculative decoding is of another kind than EAGLE/MTP/draft model/n-gram on GPU (and
DSpark/DFlash), the drafter batch is unpadded, the executor backend lacks
``supports_async_scheduling``, ROCm DeepEP high-throughput DBO is used, or pipeline
parallelism runs on the V1 model runner. ``engine.vllm.async_scheduling`` defaults to false,
the reference's loop (dynamo-mocker.md), which reads every request before the next pass.

Data parallelism: every vLLM DP rank runs its own engine-core loop
(``DPEngineCoreProc.run_busy_loop``), and a rank without requests steps dummy batches
synchronously, reading its input queue between them; so the rule applies per rank, with the
pass boundaries its engine's group passes give it (an idle rank reads at once). A decode
worker of a prefill/decode split takes its requests by KV handoff (``ReserveDestination``),
whose arrival vLLM notices in ``update_from_output`` of the pass that received it; that lag is
not modelled, so the option is refused on a decode worker.

Not modelled (as in :mod:`servesim.mechanics.overlap_inbox`): a request that stops on an end
token is scheduled once more on its placeholder, and its slot and KV come back a pass later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim.config.engine import EngineConfig
from servesim.contract import Request, WorkerType
from servesim.mechanics.overlap_inbox import OverlapInbox

if TYPE_CHECKING:
    from servesim_vllm.scheduler import VllmScheduler

KEY = "engine.vllm.async_scheduling"


class AsyncScheduling:
    """One rank's requests its engine-core loop has not read yet."""

    __slots__ = ("inbox", "now_ms")

    def __init__(self) -> None:
        self.inbox: OverlapInbox[Request] = OverlapInbox()
        # The time of the command being applied (VllmRank.apply): a request's arrival.
        self.now_ms = 0.0

    @classmethod
    def build(cls, backend_config: Any) -> AsyncScheduling | None:
        """The inbox, or None where every request is read before the next pass."""
        return cls() if getattr(backend_config, "async_scheduling", False) else None

    def holds(self, request_id: int) -> bool:
        return self.inbox.holds(request_id)

    def hold(self, request: Request) -> None:
        """A request reached the rank (at the time of the command being applied)."""
        self.inbox.hold(self.now_ms, request.request_id, request)

    def drop(self, request_id: int) -> bool:
        """Cancel an unread request; whether it was held."""
        return self.inbox.drop(request_id)

    def read(self, sched: VllmScheduler, now_ms: float) -> None:
        """A pass starts at ``now_ms``: queue the requests read in time for it."""
        for request in self.inbox.pass_starts(now_ms, bool(sched.running or sched.waiting)):
            sched.submit(request)

    def pass_ends(self, end_ms: float) -> None:
        self.inbox.pass_ends(end_ms)

    def run_ends(self, started_at_ms: float, ends: list[float]) -> None:
        """A run of passes that began at ``started_at_ms`` ended (``ends``: the passes'
        modelled ends)."""
        self.inbox.run_ends(started_at_ms, ends)


def problems(config: EngineConfig, backend_config: Any) -> list[tuple[str, str]]:
    """``[(key path, message)]`` for a worker the option cannot model."""
    if getattr(backend_config, "async_scheduling", False) and config.worker_type is WorkerType.DECODE:
        return [(KEY, "is not modelled on a decode worker (its requests arrive by KV handoff)")]
    return []


__all__ = ["AsyncScheduling", "KEY", "problems"]
