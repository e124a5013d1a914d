"""The ``prometheus`` FPM sink: a replay's vLLM (or SGLang) metrics as an OpenMetrics file.

``sinks.fpm: [{type: prometheus, path: metrics.om}]``. The sink keeps every pass it receives
and, when the replay has finished (:meth:`replay_done`, with the request log and its token
times), scrapes the whole run into ``path`` (:mod:`servesim_prometheus.replay`). Load it with
``promtool tsdb create-blocks-from openmetrics metrics.om DATA_DIR`` (docs/wire.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attrs import field, frozen, validators
from servesim.contract import ForwardPassMetrics
from servesim.errors import UserError
from servesim.sinks.base import FpmSink, SinkDeployment, SinkError

_number = validators.instance_of((int, float))


class SinkOpenError(SinkError, UserError):
    """The metrics file cannot be written (a bad path the user can fix; exit 2)."""


@frozen
class PrometheusSinkConfig:
    """``path``: the OpenMetrics file. ``model_name``: the ``model_name`` label.
    ``epoch_s``: the Unix time of simulated time 0 (default 2026-01-01T00:00:00Z).
    ``interval_s``: the simulated scrape interval."""

    path: str = field(validator=validators.instance_of(str))
    model_name: str = field(default="servesim", validator=validators.instance_of(str))
    epoch_s: float = field(default=1767225600.0, validator=[_number, validators.ge(0)])
    interval_s: float = field(default=1.0, validator=[_number, validators.gt(0)])


class PrometheusFpmSink(FpmSink):
    """Collects passes; writes the replay's metrics when the replay is done."""

    config_class = PrometheusSinkConfig
    wants_token_times = True  # inter-token latencies come from the request log's token times

    def __init__(self, config: PrometheusSinkConfig) -> None:
        self.config = config
        self.name = f"prometheus sink {config.path!r}"
        self._scrapes: Any = None
        self.scrapes = 0
        try:
            path = Path(config.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.open("w", encoding="utf-8").close()
        except OSError as exc:
            raise SinkOpenError(f"{self.name}: cannot open: {exc.strerror or exc}") from exc

    def bind(self, context: SinkDeployment) -> None:
        from servesim_prometheus.metrics import EngineMetrics
        from servesim_prometheus.replay import ReplayScrapes

        engines = [str(i) for i in range(context.num_workers * context.dp_size)]
        capacity = (context.num_gpu_blocks * context.block_size
                    if context.num_gpu_blocks is not None else None)
        metrics = EngineMetrics(context.backend, model_name=self.config.model_name, engines=engines,
                                max_model_len=context.max_model_len, kv_capacity_tokens=capacity)
        max_loras = context.max_loras
        if max_loras is not None:
            metrics.enable_lora(max_loras)
        self._scrapes = ReplayScrapes(metrics, epoch_s=self.config.epoch_s,
                                      interval_s=self.config.interval_s, dp_size=context.dp_size,
                                      lora_names=context.lora_names)

    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        if self._scrapes is None:
            raise SinkError(f"{self.name}: publish before bind")
        self._scrapes.add_pass(worker_id, at_ms, metrics)

    def replay_done(self, log: Any) -> None:
        if self._scrapes is None:
            raise SinkError(f"{self.name}: replay_done before bind")
        try:
            with open(self.config.path, "w", encoding="utf-8") as fh:
                self.scrapes = self._scrapes.write(fh, log)
        except OSError as exc:
            raise SinkError(f"{self.name}: cannot write: {exc.strerror or exc}") from exc


__all__ = ["PrometheusFpmSink", "PrometheusSinkConfig"]
