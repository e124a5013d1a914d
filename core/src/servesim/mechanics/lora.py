"""LoRA adapters of one rank: settings, and the GPU slots and host cache they load into.

The settings are vLLM's engine arguments (``engine.enable_lora``, ``max_loras``,
``max_cpu_loras``, ``max_lora_rank``; vllm/config/lora.py, v0.32) plus servesim's description
of each adapter (``engine.lora_modules``) and of the time loading one takes
(``engine.lora_loading``). docs/lora.md is the user's guide.

:class:`AdapterCache` follows vLLM's ``LRUCacheWorkerLoRAManager`` (vllm/lora/worker_manager.py
and ``LRUCacheLoRAModelManager`` in vllm/lora/model_manager.py, v0.32): before a forward pass
every adapter of the batch is added to the host cache (read from disk when it is not there,
evicting the least recently used one past ``max_cpu_loras``, which also leaves its GPU slot)
and then activated (copied into a GPU slot when it has none, evicting the least recently used
active adapter past ``max_loras``); both caches are touched on every use. vLLM does this
synchronously before the forward, so the copies lengthen the pass.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from attrs import define, field, frozen

#: engine keys of the LoRA settings: a report's resolved configuration leaves them out while
#: ``enable_lora`` is false, so configurations without LoRA dump as they always did.
LORA_ENGINE_KEYS = ("enable_lora", "max_loras", "max_cpu_loras", "max_lora_rank", "lora_modules",
                    "lora_loading")

#: vLLM 0.32's allowed ``max_lora_rank`` values (vllm/config/lora.py, ``MaxLoRARanks``).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)

#: Bytes of adapter weights per unit of rank: a LoRA on every linear layer of a Llama-3-8B
#: shape (32 layers; q,o 4096x4096, k,v 4096x1024, gate,up 4096x14336, down 14336x4096) holds
#: ``rank * (in + out)`` parameters per matrix, 81,920 per layer per rank, in 2-byte weights:
#: 32 * 81,920 * 2 = 5,242,880 bytes per rank (84 MB at rank 16).
BYTES_PER_RANK = 5_242_880


@frozen(kw_only=True)
class LoraModule:
    """One adapter of ``engine.lora_modules``: its id (a request's ``lora``), its name (what
    a ``serve`` request's ``model`` names; default ``adapter-<id>``), rank (default
    ``max_lora_rank``) and weight size in bytes (default rank x ``lora_loading.bytes_per_rank``)."""

    id: int
    name: str | None = None
    rank: int | None = None
    size_bytes: int | None = None


@frozen(kw_only=True)
class LoraLoading:
    """``engine.lora_loading``: what loading an adapter costs. Bandwidths in decimal GB/s
    (0: instantaneous). ``disk_bandwidth``: reading an adapter absent from the host cache
    (a local NVMe read, 2 GB/s by default); ``cpu_bandwidth``: copying it from host memory
    into a GPU slot (pageable host memory over PCIe 4.0, 12 GB/s by default)."""

    bytes_per_rank: int = BYTES_PER_RANK
    disk_bandwidth: float = 2.0
    cpu_bandwidth: float = 12.0


@frozen
class Adapter:
    """A resolved adapter: id, name, rank and weight bytes."""

    id: int
    name: str
    rank: int
    size_bytes: int


def adapter_name(lora: int) -> str:
    """The default name of adapter ``lora`` (vllm_sched_trace.py names its adapters so too)."""
    return f"adapter-{lora}"


def served_adapters(modules: Sequence[LoraModule]) -> dict[str, int]:
    """The adapters of ``engine.lora_modules`` by the name they are served under (``name``,
    else ``adapter-<id>``): what a ``serve`` request's ``model`` and a trace's ``lora`` name."""
    return {m.name if m.name is not None else adapter_name(m.id): m.id for m in modules}


class AdapterTable:
    """Every adapter an engine knows: the configured ones, and any other id a request names
    (default name and rank). Built from an :class:`~servesim.config.engine.EngineConfig`."""

    def __init__(self, modules: Sequence[LoraModule], max_rank: int, loading: LoraLoading) -> None:
        self.max_rank = max_rank
        self.loading = loading
        self.by_id: dict[int, Adapter] = {}
        for m in modules:
            self.by_id[m.id] = self._make(m.id, m.name, m.rank, m.size_bytes)

    def _make(self, lora: int, name: str | None, rank: int | None, size: int | None) -> Adapter:
        r = self.max_rank if rank is None else rank
        return Adapter(lora, adapter_name(lora) if name is None else name, r,
                       r * self.loading.bytes_per_rank if size is None else size)

    def get(self, lora: int) -> Adapter:
        a = self.by_id.get(lora)
        if a is None:
            a = self.by_id[lora] = self._make(lora, None, None, None)
        return a


def transfer_ms(size_bytes: int, gb_per_s: float) -> float:
    """Milliseconds to move ``size_bytes`` at ``gb_per_s`` decimal GB/s (0: instantaneous)."""
    return 0.0 if gb_per_s <= 0 else size_bytes / (gb_per_s * 1e6)


@define
class AdapterStats:
    """Counts of one cache: loads from disk into host memory, copies into GPU slots,
    evictions from each, and the milliseconds loading took."""

    disk_loads: int = 0
    gpu_loads: int = 0
    cpu_evictions: int = 0
    gpu_evictions: int = 0
    load_ms: float = 0.0
    requests: dict[int, int] = field(factory=dict)


class AdapterCache:
    """The GPU slots and host cache of one rank (module docstring)."""

    def __init__(self, table: AdapterTable, max_loras: int, max_cpu_loras: int) -> None:
        self.table = table
        self.slots = max_loras
        self.capacity = max_cpu_loras
        self.gpu: OrderedDict[int, None] = OrderedDict()
        self.cpu: OrderedDict[int, None] = OrderedDict()
        self.stats = AdapterStats()

    def activate(self, loras: Sequence[int]) -> float:
        """Make the batch's adapters (distinct ids >= 1, at most ``max_loras``) active, in
        order; the milliseconds the loads take."""
        ms = 0.0
        cpu, gpu, st, loading = self.cpu, self.gpu, self.stats, self.table.loading
        for lora in loras:
            adapter = self.table.get(lora)
            if lora not in cpu:
                ms += transfer_ms(adapter.size_bytes, loading.disk_bandwidth)
                st.disk_loads += 1
                if len(cpu) + 1 > self.capacity:
                    old, _ = cpu.popitem(last=False)
                    st.cpu_evictions += 1
                    if old in gpu:  # leaving the host cache deactivates it
                        del gpu[old]
                        st.gpu_evictions += 1
                cpu[lora] = None
            else:
                cpu.move_to_end(lora)
            if lora not in gpu:
                if len(gpu) >= self.slots:
                    gpu.popitem(last=False)
                    st.gpu_evictions += 1
                ms += transfer_ms(adapter.size_bytes, loading.cpu_bandwidth)
                st.gpu_loads += 1
                gpu[lora] = None
            else:
                gpu.move_to_end(lora)
        st.load_ms += ms
        return ms

    def loaded(self, lora: int) -> bool:
        """Whether ``lora`` holds a GPU slot."""
        return lora in self.gpu

    def count_request(self, lora: int) -> None:
        self.stats.requests[lora] = self.stats.requests.get(lora, 0) + 1


#: The default per-pass compute overhead of LoRA (servesim.timing.base.TimingModel.
#: predict_lora_ms): milliseconds per distinct adapter of the batch at rank 16, linear in the
#: rank (the batched shrink and expand kernels launch per adapter and their work grows with
#: the rank). An assumption, not a fit: about 1 % of an 8B model's decode step per adapter.
LORA_MS_PER_ADAPTER = 0.1
LORA_REFERENCE_RANK = 16


__all__ = [
    "BYTES_PER_RANK",
    "LORA_ENGINE_KEYS",
    "LORA_MS_PER_ADAPTER",
    "LORA_RANKS",
    "LORA_REFERENCE_RANK",
    "Adapter",
    "AdapterCache",
    "AdapterStats",
    "AdapterTable",
    "LoraLoading",
    "LoraModule",
    "adapter_name",
    "served_adapters",
    "transfer_ms",
]
