"""Helpers for the vllm backend tests: engines with fixed or recording timing."""

from __future__ import annotations

from typing import Any

from servesim.config.engine import EngineConfig
from servesim.contract import Request
from servesim.engine import Engine
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.timing import FixedTiming, FixedTimingConfig
from servesim.timing.base import TimingModel
from servesim.tokens import Tokens
from servesim_vllm.rank import VllmRank


class RecordingTiming(TimingModel):
    """Fixed latencies that also record every call's arguments."""

    def __init__(self, prefill_ms: float = 10.0, decode_ms: float = 2.0) -> None:
        self.inner = FixedTiming(FixedTimingConfig(prefill_ms, decode_ms))
        self.prefill_calls: list[tuple[int, int, int]] = []
        self.decode_calls: list[tuple[int, int, int, int]] = []

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        self.prefill_calls.append((batch_size, mean_isl, mean_prefix))
        return self.inner.predict_prefill_ms(batch_size, mean_isl, mean_prefix)

    def predict_decode_ms(self, batch_size: int, active: int, ctx: int, total: int) -> float:
        self.decode_calls.append((batch_size, active, ctx, total))
        return self.inner.predict_decode_ms(batch_size, active, ctx, total)


def make_engine(timing: TimingModel | None = None, **kwargs: Any) -> Engine:
    """One engine of VllmRank; ``emit_kv_events`` / ``emit_forward_pass_metrics`` /
    ``record_schedule`` go to the factory, everything else to EngineConfig."""
    fkw = {k: kwargs.pop(k) for k in ("emit_kv_events", "emit_forward_pass_metrics", "record_schedule",
                                       "backend_config") if k in kwargs}
    cfg = EngineConfig(**kwargs)
    factory = EngineFactory(cfg, VllmRank, timing or RecordingTiming(), **fkw)
    factory.engine_class = RunEngine  # it may commit runs of passes (drive(runs=True))
    return factory.build(0)


def req(rid: int, prompt: list[int] | int, out: int, **kw: Any) -> Request:
    """A request; an int prompt means ``prompt`` distinct tokens unique to ``rid``."""
    toks = prompt if isinstance(prompt, list) else [rid * 100_000 + i for i in range(prompt)]
    return Request(rid, Tokens(toks), out, **kw)


def shared_prefix_requests(spec: list[tuple[int, int, int, int]]) -> list[tuple[float, Request]]:
    """``(arrival gap ms, prefix group, prompt length, output tokens)`` rows as arrivals: the
    first half of each prompt is its group's shared prefix, the rest unique to the request."""
    out, t = [], 0.0
    for i, (gap, group, plen, nout) in enumerate(spec):
        t += gap
        shared = [group * 1000 + k for k in range(plen // 2)]
        tail = [50_000 + i * 100 + k for k in range(plen - len(shared))]
        out.append((t, Request(i, Tokens(shared + tail), nout)))
    return out
