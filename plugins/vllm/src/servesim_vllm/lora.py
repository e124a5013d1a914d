"""LoRA in the ``vllm`` rank: vLLM 0.32's ``max_loras`` admission rule and adapter loading.

Scheduling (vllm/v1/core/sched/scheduler.py, v0.32, ``Scheduler.schedule``): after the running
requests are scheduled, the adapters of those that were (ids >= 1) form the pass's adapter set.
A waiting request whose adapter is not in the set while the set already holds ``max_loras``
adapters is skipped for this pass (``skip_request``: popped, the scan goes on with the next
request) and every skipped request goes back to the front of the queue, in its old order,
when the scan ends. An admitted request's adapter joins the set. Running requests are never
held back by the rule: only admissions keep the set within ``max_loras``.

Loading (servesim.mechanics.lora.AdapterCache): before the forward, the pass's adapters are
activated in batch order; disk and host-to-device copies add their time to the pass, and the
timing model's :meth:`~servesim.timing.base.TimingModel.predict_lora_ms` adds the compute
overhead of the adapters in the batch (scaled by ``speedup_ratio``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from servesim.mechanics.lora import AdapterCache, AdapterTable, adapter_name
from servesim.timing.base import scaled_ms

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig
    from servesim.timing.base import TimingModel

    from servesim_vllm.pass_result import PassResult
    from servesim_vllm.priority import PriorityWaiting
    from servesim_vllm.request import VllmRequest


class VllmLora:
    """The adapter set of the pass being scheduled, the requests skipped for it, and the
    rank's adapter cache."""

    __slots__ = ("max_loras", "ids", "skipped", "cache")

    def __init__(self, config: EngineConfig) -> None:
        self.max_loras = config.max_loras
        self.ids: set[int] = set()
        self.skipped: list[VllmRequest] = []
        table = AdapterTable(config.lora_modules, config.max_lora_rank, config.lora_loading)
        cpu = config.max_cpu_loras if config.max_cpu_loras is not None else config.max_loras
        self.cache = AdapterCache(table, config.max_loras, cpu)

    @classmethod
    def build(cls, config: EngineConfig) -> VllmLora | None:
        return cls(config) if config.enable_lora else None

    # -- scheduling -----------------------------------------------------------------------

    def begin(self, scheduled: list[VllmRequest]) -> None:
        """The adapters of the running requests scheduled so far in this pass."""
        self.ids = {r.request.lora for r in scheduled if r.request.lora}

    def skips(self, req: VllmRequest) -> bool:
        """Whether admitting ``req`` would exceed ``max_loras``."""
        lora = req.request.lora
        return bool(lora) and lora not in self.ids and len(self.ids) >= self.max_loras

    def admitted(self, req: VllmRequest) -> None:
        """``req`` was admitted (before its first admission sets ``cached_prefix``)."""
        lora = req.request.lora
        if lora:
            self.ids.add(lora)
        if req.cached_prefix is None:
            self.cache.count_request(lora)

    def restore(self, waiting: deque[VllmRequest] | PriorityWaiting) -> None:
        """Put the skipped requests back at the front of the queue, in their order (vLLM's
        ``prepend_requests``: one ``appendleft`` each, last first, so a queue that orders by
        key, such as a priority heap, places each by its key instead)."""
        skipped = self.skipped
        if skipped:
            for req in reversed(skipped):
                waiting.appendleft(req)
            self.skipped = []

    # -- the forward ----------------------------------------------------------------------

    def pass_ms(self, res: PassResult, timing: TimingModel, speedup: float) -> float:
        """Milliseconds LoRA adds to the pass of ``res``: loading its adapters (batch order)
        and their compute overhead; 0 for a pass without adapters."""
        seen: dict[int, None] = {}
        for req in res.order:
            if req.request.lora:
                seen[req.request.lora] = None
        if not seen:
            return 0.0
        loras = list(seen)
        load = self.cache.activate(loras)
        table = self.cache.table
        tokens = res.plain[0] + sum(w.tokens for w in res.work.values())
        overhead = timing.predict_lora_ms([table.get(i).rank for i in loras], tokens)
        return round(load * 1e6) / 1e6 + scaled_ms(overhead, speedup)


def served_name(lora: VllmLora | None, lora_id: int) -> str:
    """The name adapter ``lora_id`` is served under (``engine.lora_modules``' ``name``, else
    ``adapter-<id>``): vLLM's ``LoRARequest.lora_name``, which its ``BlockStored`` events carry
    (``lora_name`` and ``extra_keys``; vllm/v1/core/block_pool.py, v0.32)."""
    return lora.cache.table.get(lora_id).name if lora is not None else adapter_name(lora_id)


__all__ = ["VllmLora", "served_name"]
