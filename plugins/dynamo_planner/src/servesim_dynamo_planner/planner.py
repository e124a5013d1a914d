"""The ``dynamo`` planner: NVIDIA Dynamo's own planner, unchanged, in servesim's loop.

Dynamo's offline replay drives its planner through
``dynamo.planner.offline.replay_adapter.ReplayPlannerAdapter`` (ai-dynamo 1.6.1):
``initial_tick_ms()``, then ``on_tick(payload)`` at each scaling tick returning
``{target_prefill, target_decode, next_tick_ms}``, then ``finalize()``. This planner builds
the adapter as ``dynamo.replay.planner.prepare_planner_replay`` does for the modes that need
no AIS performance model (``optimization_target`` other than ``sla``: the config marked
advisory, capabilities per engine role), feeds it the payload servesim's windows convert to
(servesim_dynamo_planner.convert) on Dynamo's own tick times, and applies its targets: agg
mode sizes one pool, disagg mode a prefill and a decode pool.

Dynamo's planner is an optional dependency, imported when a ``dynamo`` planner is built;
without it the configuration is refused (a ConfigError at ``planner``). ``recorded: PATH``
replays decisions recorded from Dynamo's planner instead (servesim_dynamo_planner.recorded),
with no Dynamo installed.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import field, frozen
from servesim.replay.planning import Planner, PlannerDecision, PlannerSnapshot, PoolSnapshot

from servesim_dynamo_planner.convert import TickPayload

DISTRIBUTION = "servesim-dynamo-planner"
INSTALL_HINT = (
    "pip install 'ai-dynamo-runtime==1.6.1' && pip install --no-deps 'ai-dynamo==1.6.1' && "
    "pip install numpy msgspec pydantic scikit-learn kubernetes plotly prometheus-client "
    "prometheus-api-client pmdarima filterpy prophet aiconfigurator-core==0.12.0, and "
    "aisimulate_core (docs/elastic.md, \"The dynamo planner\")")


@frozen(kw_only=True)
class Capabilities:
    """One engine role as Dynamo's planner sees it (``EngineCapabilities``; the reference
    derives them from the mocker's engine arguments: ``num_gpu`` tp x pp x dp,
    ``max_kv_tokens`` num_gpu_blocks x block_size x dp)."""

    num_gpu: int | None = 1
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    context_length: int | None = None
    max_kv_tokens: int | None = None
    speculative_nextn: int | None = None


@frozen(kw_only=True)
class DynamoPlannerConfig:
    """``planner_config``: Dynamo's ``PlannerConfig`` keys (``mode`` agg when unset);
    ``pool`` the agg pool (default: the only pool, else ``decode``); ``prefill_pool`` and
    ``decode_pool`` for disagg; ``capabilities`` / ``prefill_capabilities`` per role;
    ``dp_size`` the workers' DP ranks; ``recorded`` a file of recorded decisions to replay
    instead of Dynamo's planner; ``record_to`` a file to write each tick's payload and
    decision to after the replay (the form ``recorded`` reads)."""

    planner_config: dict[str, Any] = field(factory=dict)
    pool: str | None = None
    prefill_pool: str = "prefill"
    decode_pool: str = "decode"
    capabilities: Capabilities = field(factory=Capabilities)
    prefill_capabilities: Capabilities | None = None
    dp_size: int = 1
    recorded: str | None = None
    record_to: str | None = None


def _caps(c: Capabilities) -> Any:
    from dynamo.planner.core.types import EngineCapabilities

    return EngineCapabilities(
        num_gpu=c.num_gpu, max_num_batched_tokens=c.max_num_batched_tokens,
        max_num_seqs=c.max_num_seqs, context_length=c.context_length,
        max_kv_tokens=c.max_kv_tokens, speculative_nextn=c.speculative_nextn)


def dynamo_adapter(cfg: DynamoPlannerConfig, planner_config: Mapping[str, Any]) -> Any:
    """Dynamo's ``ReplayPlannerAdapter`` for ``planner_config``, built as the reference's
    replay builds it for the modes without an AIS bootstrap."""
    try:
        from dynamo.planner.config.planner_config import PlannerConfig
        from dynamo.planner.core.types import WorkerCapabilities
        from dynamo.planner.offline.replay_adapter import create_replay_planner_adapter
        from dynamo.planner.offline.trace_data import extract_traffic_observations_from_trace
    except ImportError as exc:
        raise ValueError(
            f"the 'dynamo' planner (plugin servesim_dynamo_planner, distribution {DISTRIBUTION}) "
            f"needs Dynamo's planner, which cannot be imported ({exc}); install it: "
            f"{INSTALL_HINT}") from None
    try:
        pc = PlannerConfig.from_config_arg(json.dumps(dict(planner_config)))
    except Exception as exc:  # pydantic's ValidationError and friends
        raise ValueError(f"planner_config: {exc}") from None
    if pc.optimization_target == "sla":
        raise ValueError("planner_config.optimization_target 'sla' needs Dynamo's AIS "
                         "performance-model bootstrap, which this planner does not run; use "
                         "'throughput', 'latency' or 'load'")
    pc.advisory = True
    decode = _caps(cfg.capabilities)
    if pc.mode == "agg":
        capabilities = WorkerCapabilities(decode=decode)
    elif pc.mode == "disagg":
        capabilities = WorkerCapabilities(
            prefill=_caps(cfg.prefill_capabilities or cfg.capabilities), decode=decode)
    else:
        raise ValueError(f"planner_config.mode must be 'agg' or 'disagg', got {pc.mode!r}")
    warmup = None
    if pc.load_predictor_warmup_trace is not None:
        warmup = extract_traffic_observations_from_trace(
            pc.load_predictor_warmup_trace, pc.throughput_adjustment_interval_seconds)
    adapter = create_replay_planner_adapter(
        planner_config=pc, capabilities=capabilities, warmup_observations=warmup,
        capture_details=False)
    adapter.set_bootstrap_metadata({"status": "not_required"})
    return adapter


class DynamoPlanner(Planner):
    """Dynamo's planner through its replay adapter (see the module docs)."""

    config_class = DynamoPlannerConfig

    def __init__(self, config: Any, pools: Mapping[str, int], interval_s: float) -> None:
        cfg = config or DynamoPlannerConfig()
        super().__init__(cfg, pools, interval_s)
        pc = dict(cfg.planner_config)
        pc.setdefault("mode", "agg")
        self.disagg = pc["mode"] == "disagg"
        names = list(self.pools)
        if self.disagg:
            for key in ("prefill_pool", "decode_pool"):
                if getattr(cfg, key) not in self.pools:
                    raise ValueError(f"{key} {getattr(cfg, key)!r} is not a pool ({', '.join(names)})")
            self.prefill_name: str | None = cfg.prefill_pool
            self.decode_name = cfg.decode_pool
        else:
            self.prefill_name = None
            if cfg.pool is not None:
                if cfg.pool not in self.pools:
                    raise ValueError(f"pool {cfg.pool!r} is not a pool ({', '.join(names)})")
                self.decode_name = cfg.pool
            elif len(names) == 1:
                self.decode_name = names[0]
            elif cfg.decode_pool in self.pools:
                self.decode_name = cfg.decode_pool
            else:
                raise ValueError(f"pool is required with several pools ({', '.join(names)})")
        if cfg.dp_size < 1:
            raise ValueError(f"dp_size must be >= 1, got {cfg.dp_size}")
        if cfg.recorded is not None:
            from servesim_dynamo_planner.recorded import RecordedAdapter

            self.adapter: Any = RecordedAdapter.load(cfg.recorded)
        else:
            self.adapter = dynamo_adapter(cfg, pc)
            # The adapter owns an event loop: close it with the planner even when no
            # finish() comes (an aborted replay, a planner driven by the check kit).
            weakref.finalize(self, self.adapter.close)
        self.payload = TickPayload(self.disagg, cfg.dp_size)
        self.due_ms: float | None = float(self.adapter.initial_tick_ms())
        self.initial_ms = self.due_ms
        self.ticks: list[dict[str, Any]] = []

    def _pools(self, snapshot: PlannerSnapshot) -> tuple[PoolSnapshot | None, PoolSnapshot]:
        prefill = snapshot.pool(self.prefill_name) if self.prefill_name is not None else None
        return prefill, snapshot.pool(self.decode_name)

    def tick(self, snapshot: PlannerSnapshot) -> PlannerDecision | None:
        prefill, decode = self._pools(snapshot)
        self.payload.observe(prefill, decode, snapshot.traffic, snapshot.now_ms)
        if self.due_ms is None:
            return None
        if snapshot.now_ms < self.due_ms:
            return PlannerDecision(next_tick_ms=self.due_ms)
        payload = self.payload.build(prefill, decode, snapshot.now_ms)
        decision = self.adapter.on_tick(payload)
        if self.config.record_to is not None:
            self.ticks.append({"input": payload, "decision": dict(decision)})
        nxt = decision.get("next_tick_ms")
        self.due_ms = float(nxt) if nxt is not None else None
        targets: dict[str, int] = {}
        if decision.get("target_decode") is not None:
            targets[self.decode_name] = int(decision["target_decode"])
        if self.prefill_name is not None and decision.get("target_prefill") is not None:
            targets[self.prefill_name] = int(decision["target_prefill"])
        return PlannerDecision(targets=targets, reason="dynamo planner", next_tick_ms=self.due_ms)

    def finish(self) -> Mapping[str, Any] | None:
        """The planner's scaling events and tick count (``elastic.planner``)."""
        details = self.adapter.finalize()
        close = getattr(self.adapter, "close", None)
        if close is not None:
            close()
        events = [{"at_s": e.at_s, "component": e.component, "from_count": e.from_count,
                   "to_count": e.to_count, "reason": e.reason} for e in details.scaling_events]
        out: dict[str, Any] = {"ticks": details.total_ticks, "scaling_events": events}
        if self.config.record_to is not None:
            Path(self.config.record_to).write_text(json.dumps(
                {"initial_tick_ms": self.initial_ms, "ticks": self.ticks}, indent=1) + "\n")
        mismatches = getattr(self.adapter, "mismatches", None)
        if mismatches is not None:
            out["input_mismatches"] = list(mismatches)
        return out


__all__ = ["Capabilities", "DynamoPlanner", "DynamoPlannerConfig", "dynamo_adapter"]
