"""``GET /metrics``: the backend's Prometheus metric set with vLLM's names (or SGLang's), kept by
servesim-prometheus's :class:`~servesim_prometheus.metrics.EngineMetrics` and fed by
:class:`servesim_serve.vllm_metrics.EngineMetricsObserver`.

``engine`` labels are the rank's slot ``worker * dp_size + dp_rank`` (vLLM numbers its
data-parallel engines the same way). Latency histograms observe simulated seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim_serve.observer import Observer

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig


def make_observer(model: str, loaded: LoadedConfig) -> Observer:
    """The ``/metrics`` observer for this server."""
    from servesim_prometheus.metrics import EngineMetrics, FinishedRequest

    from servesim_serve.cluster import serve_workers
    from servesim_serve.vllm_metrics import EngineMetricsObserver

    engine = loaded.sim.engine
    engines = [str(i) for i in range(serve_workers(loaded) * engine.dp_size)]
    metrics = EngineMetrics(engine.backend, model_name=model, engines=engines,
                            max_model_len=engine.max_model_len,
                            kv_capacity_tokens=engine.num_gpu_blocks * engine.bs)
    observer = EngineMetricsObserver(metrics, FinishedRequest, engine.dp_size)
    if engine.enable_lora:
        from servesim.mechanics.lora import adapter_name

        metrics.enable_lora(engine.max_loras)
        observer.lora_names = {m.id: m.name if m.name is not None else adapter_name(m.id)
                               for m in engine.lora_modules}
    return observer
