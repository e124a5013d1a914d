"""A toy backend: first-come first-served, no KV cache, one token per request per pass.

Each pass admits waiting requests up to ``max_running`` and emits one token for every
running request. A pass that admits requests lasts ``predict_prefill_ms``; any other pass
lasts ``predict_decode_ms`` — both from the injected timing model, scaled by the engine's
speed-up ratios. Requests finish when they have emitted their planned output tokens.
"""

from __future__ import annotations

from collections import deque

from attrs import define, field, frozen
from servesim import (
    APPLIED,
    NOOP,
    CancelRequest,
    CommandContext,
    CommandEffects,
    CommandRejected,
    CommandResult,
    ForwardPassMetrics,
    Metrics,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
    Rank,
    RankIdentity,
    RankPass,
    RankServices,
    Request,
    Submit,
)
from servesim.config.engine import EngineConfig
from servesim.contract import Admission, Command
from servesim.timing import scaled_ms
from servesim.timing.pricing import ShapePricer
from servesim.timing.shape import PrefillChunk


@frozen
class ToyConfig:
    """The ``engine.toy:`` section."""

    max_running: int = 4


@define
class _Running:
    request: Request
    emitted: int = 0


@define
class _Pending:
    """One committed pass, released by ``complete_pass``."""

    outputs: OutputBatch
    metrics: ForwardPassMetrics
    finished: list[int] = field(factory=list)


class ToyRank(Rank[_Pending, ToyConfig]):
    """Only what every backend implements (servesim.rank.Rank); no capability."""

    config_class = ToyConfig
    default_block_size = 16

    def __init__(
        self, identity: RankIdentity, config: EngineConfig, backend_config: ToyConfig, services: RankServices
    ) -> None:
        super().__init__(identity, config, backend_config, services)
        self.waiting: deque[Request] = deque()
        self.running: list[_Running] = []
        self.owned: set[int] = set()  # submitted and not yet finished or cancelled
        self.in_flight = False
        self.passes = 0
        # Set when the timing model prices whole passes (servesim.timing.shape); else None
        # and the two batch-mean methods price each pass, as the lines below show.
        self.shapes = ShapePricer.for_rank(services.timing, config, identity.dp_rank)

    @classmethod
    def validate_config(cls, config: EngineConfig, backend_config: ToyConfig) -> list[tuple[str, str]]:
        if backend_config.max_running < 1:
            return [("engine.toy.max_running", f"expected an int >= 1, got {backend_config.max_running}")]
        return []

    def apply(self, command: Command, ctx: CommandContext, pending: _Pending | None) -> CommandEffects:
        if isinstance(command, Submit):
            rid = command.request.request_id
            if rid in self.owned:
                raise CommandRejected(f"request {rid} is already active on this rank")
            self.owned.add(rid)
            self.waiting.append(command.request)
            return CommandEffects(CommandResult.submitted(command.request.request_id))
        if isinstance(command, CancelRequest):
            return self._cancel(command, pending)
        raise CommandRejected(f"the toy backend does not support {type(command).__name__}")

    def _cancel(self, command: CancelRequest, pending: _Pending | None) -> CommandEffects:
        rid = command.request_id
        owned = rid in self.owned
        self.owned.discard(rid)
        self.waiting = deque(r for r in self.waiting if r.request_id != rid)
        self.running = [r for r in self.running if r.request.request_id != rid]
        suppressed = False
        if pending is not None and (owned or command.discard_pending_output or rid in pending.finished):
            suppressed = pending.outputs.remove_request(rid)
        result = APPLIED if owned or suppressed else NOOP
        retired = (rid,) if owned else ()
        return CommandEffects(result, retired_requests=retired, suppressed_pending_output=suppressed)

    def is_ready(self) -> bool:
        return not self.in_flight and bool(self.waiting or self.running)

    def is_drained(self) -> bool:
        return not self.in_flight and not self.waiting and not self.running

    def execute_pass(self, now_ms: float) -> RankPass[_Pending]:
        # Context lengths of the requests running before this pass, for a pass shape.
        contexts = [run.request.prompt_len + run.emitted for run in self.running]
        admitted: list[Request] = []
        while self.waiting and len(self.running) < self.backend_config.max_running:
            req = self.waiting.popleft()
            admitted.append(req)
            self.running.append(_Running(req))
        outputs = OutputBatch()
        for req in admitted:
            outputs.cached_tokens[req.request_id] = 0
        still_running = []
        for run in self.running:
            rid = run.request.request_id
            if run.emitted < run.request.planned_output_tokens:
                outputs.token_request_ids.append(rid)
                run.emitted += 1
            if run.emitted >= run.request.planned_output_tokens:
                outputs.completed.append(rid)
                self.owned.discard(rid)
            else:
                still_running.append(run)
        decoding = len(self.running) - len(admitted)
        self.running = still_running
        duration = self._duration(admitted, decoding, contexts)
        fpm = ForwardPassMetrics(
            worker_id=self.identity.worker_id,
            dp_rank=self.identity.dp_rank,
            counter_id=self.passes,
            num_prefill_requests=len(admitted),
            sum_prefill_tokens=sum(r.prompt_len for r in admitted),
            num_decode_requests=decoding,
            num_queued_prefill=len(self.waiting),
            duration_ms=duration,
        )
        self.passes += 1
        self.in_flight = True
        start = PassStartEffects(admissions=tuple(Admission(r.request_id, 0) for r in admitted))
        return RankPass(now_ms + duration, start, _Pending(outputs, fpm, list(outputs.completed)))

    def _duration(self, admitted: list[Request], decoding: int, contexts: list[int]) -> float:
        timing, cfg = self.services.timing, self.config
        if self.shapes is not None:  # the model prices whole passes from their shape
            if admitted:
                return self.shapes.price([PrefillChunk(r.prompt_len, 0) for r in admitted], [], 0, 0)
            return self.shapes.price([], contexts, sum(contexts), 0)
        if admitted:
            mean_isl = sum(r.prompt_len for r in admitted) // len(admitted)
            return scaled_ms(timing.predict_prefill_ms(len(admitted), mean_isl, 0), cfg.speedup_ratio)
        return scaled_ms(timing.predict_decode_ms(decoding, 0, 0, 0), cfg.decode_speedup)

    def complete_pass(self, pending: _Pending, end_ms: float) -> PassCompletionEffects:
        self.in_flight = False
        metrics = Metrics(
            dp_rank=self.identity.dp_rank,
            running_requests=len(self.running),
            waiting_requests=len(self.waiting),
        )
        fpm = pending.metrics if self.services.emit_forward_pass_metrics else None
        return PassCompletionEffects(outputs=pending.outputs, metrics=metrics, forward_pass_metrics=fpm)
