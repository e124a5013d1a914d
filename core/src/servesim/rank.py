"""The backend plugin boundary: one scheduler rank behind the neutral contract.

Mirrors ``RankEngine`` in aisimulate-engine.md §2.3. A backend plugin subclasses
:class:`Rank`; :class:`servesim.engine.Engine` composes ``dp_size`` ranks (attention data
parallelism) behind the same contract. A rank never reads a clock: every time it sees is an
argument from the driver.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import frozen

from servesim.contract import (
    EMPTY_START,
    Command,
    CommandEffects,
    ForwardPassMetrics,
    PassCompletionEffects,
    PassStartEffects,
)

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig
    from servesim.kv.eviction import EvictionPolicy
    from servesim.timing.base import TimingModel


@frozen(slots=True)
class RankIdentity:
    """``worker_id`` is the logical worker; ``dp_rank`` is zero-based within ``dp_size``."""

    worker_id: int
    dp_rank: int
    dp_size: int

    @property
    def seed_offset(self) -> int:
        """Distinct, deterministic per-rank seed offset (aisimulate-engine.md §3)."""
        return self.worker_id * self.dp_size + self.dp_rank


@frozen(slots=True)
class CommandContext:
    """``pass_in_flight`` is group-wide: true for an idle sibling while another rank runs."""

    now_ms: float
    pass_in_flight: bool

    @property
    def allow_immediate_admission(self) -> bool:
        return not self.pass_in_flight


class SameTimestampRetry(enum.Enum):
    """Driver hint after an effect-free, zero-duration pass (aisimulate-engine.md §2.2)."""

    NOT_APPLICABLE = "not_applicable"
    RETRY = "retry"
    COUNTDOWN = "countdown"
    EXHAUSTED = "exhausted"


@frozen(slots=True)
class RetryHint:
    kind: SameTimestampRetry = SameTimestampRetry.NOT_APPLICABLE
    remaining: int = 0

    def fold(self, new: RetryHint) -> RetryHint:
        """Group aggregation over executed ranks (reference §2.2)."""
        C, R, E = SameTimestampRetry.COUNTDOWN, SameTimestampRetry.RETRY, SameTimestampRetry.EXHAUSTED
        if self.kind is C and new.kind is C:
            return RetryHint(C, max(self.remaining, new.remaining))
        if self.kind is C:
            return self
        if new.kind is C:
            return new
        if R in (self.kind, new.kind):
            return RetryHint(R)
        if new.kind is E:
            return new
        return self


NO_RETRY_HINT = RetryHint()


@frozen(slots=True)
class RankPass:
    """What a rank returns when it eagerly commits a pass.

    ``pending`` is opaque to the engine and handed back to ``complete_pass``; a command
    applied mid-pass receives it and may mutate it (e.g. suppress a cancelled request's
    outputs).
    """

    end_ms: float
    start_effects: PassStartEffects
    pending: Any
    retry: RetryHint = NO_RETRY_HINT


@frozen(slots=True)
class RankServices:
    """Process-local collaborators injected into every rank by the EngineFactory."""

    timing: TimingModel
    make_eviction_policy: Any  # Callable[[], EvictionPolicy]
    emit_kv_events: bool = False
    emit_forward_pass_metrics: bool = True
    record_schedule: bool = False
    #: The only consumer of the KV events is an index of which hashes each slot caches (the
    #: replay's KV router, no event sink): a rank may then coalesce events (e.g. one
    #: ``Removed`` per allocation) as long as applying them in order gives the same index.
    kv_events_router_only: bool = False
    #: Every reader of the KV events accepts compact records (servesim.kv.event_records):
    #: a rank may publish them in place of ``KvEvent`` objects (``BlockPool.event_records``).
    kv_event_records: bool = False
    #: Nobody reads the occupancy snapshots (``CommandEffects.metrics``,
    #: ``PassCompletionEffects.metrics``; the replay does not): a rank may leave them None.
    record_metrics: bool = True

    def new_eviction_policy(self) -> EvictionPolicy:
        return self.make_eviction_policy()


class Rank(ABC):
    """One scheduler rank. Subclass it in a backend plugin and register it by name.

    Class attributes a backend sets:

    * ``config_class``: attrs class for the backend's own YAML section (``engine.<name>:``),
      or None if it has none.
    * ``default_block_size``: block/page size when ``engine.block_size`` is unset.
    """

    config_class: ClassVar[type | None] = None
    default_block_size: ClassVar[int] = 16
    #: The ``engine.eviction_policy`` kinds the backend's KV cache drives, checked at
    #: validation (servesim.kv.eviction.eviction_refusal): "lru" (the built-in only), "ids"
    #: (any EvictionPolicy), "records" (a RecordEvictionPolicy).
    eviction_support: ClassVar[frozenset[str]] = frozenset({"lru"})
    #: Whether the rank takes part in a prefill/decode split: on a prefill worker it accepts
    #: ``SubmitHandoffPrefill`` and holds the source until released, on a decode worker it
    #: accepts ``ReserveDestination``/``ActivateDestination`` (aisimulate-engine.md §8).
    #: ``cluster.prefill_workers``/``decode_workers`` need it; validation checks it.
    supports_handoff: ClassVar[bool] = False

    def __init__(
        self,
        identity: RankIdentity,
        config: EngineConfig,
        backend_config: Any,
        services: RankServices,
    ) -> None:
        self.identity = identity
        self.config = config
        self.backend_config = backend_config
        self.services = services

    @classmethod
    def default_block_size_for(cls, backend_config: Any) -> int:
        """The block size used when ``engine.block_size`` is unset. A backend whose own section
        can set it (SGLang's ``page_size``) overrides this; by default ``default_block_size``."""
        return cls.default_block_size

    @classmethod
    def validate_config(cls, config: EngineConfig, backend_config: Any) -> list[tuple[str, str]]:
        """Return ``(key_path, message)`` problems with a config, checked before any rank is
        built (e.g. ``("engine.max_model_len", "not supported by sglang")``)."""
        return []

    # -- commands -------------------------------------------------------------------------

    @abstractmethod
    def apply(self, command: Command, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        """Apply one command. Must be error-atomic: on an exception nothing changed.

        ``pending`` is this rank's retained pass if it executed in the in-flight group pass.
        Raise :class:`servesim.errors.CommandRejected` for recoverable rejections.
        """

    # -- readiness ------------------------------------------------------------------------

    @abstractmethod
    def is_ready(self) -> bool:
        """Whether the rank can commit a pass now."""

    def waiting_for_external_command(self) -> bool:
        """True only when ready work is blocked solely on a held source/reserved destination."""
        return False

    @abstractmethod
    def is_drained(self) -> bool:
        """The rank owns no request, pass or internal work."""

    # -- group pass hooks ---------------------------------------------------------------

    def prepare_group_pass(self, wave_step: int, dp_size: int) -> None:
        """Called on every rank before each pass of its engine (``wave_step`` counts the
        engine's passes; ``dp_size`` is its number of ranks), before any ``execute_pass``."""

    def prefill_in_pass(self) -> bool:
        """Asked after every rank's ``execute_pass`` of the pass: whether this rank's pass
        computes prefill tokens. The engine passes whether any rank did to
        :meth:`finish_group_pass` (attention-DP ranks that must agree on a pass's kind, as
        SGLang's do, read it there). The default: no prefill."""
        return False

    def model_work_in_pass(self) -> bool:
        """Asked with :meth:`prefill_in_pass`: whether this rank's pass runs the model at all
        (a decode-only rank does; an idle one does not). The default: when it prefills."""
        return self.prefill_in_pass()

    def finish_group_pass(self, any_rank_prefilled: bool, any_rank_ran_model: bool) -> None:
        """Called on every rank after all ranks selected work, with whether any rank of the
        engine prefilled or ran the model in this pass. A failure here poisons the engine:
        the ranks have committed their passes."""

    # -- passes ---------------------------------------------------------------------------

    @abstractmethod
    def execute_pass(self, now_ms: float) -> RankPass:
        """Eagerly commit one batch; completion effects stay inside ``pending``."""

    @abstractmethod
    def complete_pass(self, pending: Any, end_ms: float) -> PassCompletionEffects:
        """Release a pass's effects at the shared (modelled) group boundary ``end_ms``."""

    def complete_idle_group_pass(
        self, started_at_ms: float, end_ms: float
    ) -> PassCompletionEffects | None:
        """For a rank held idle by the DP barrier; None means no boundary effects."""
        return None

    def idle_forward_pass_metrics(
        self, started_at_ms: float, end_ms: float
    ) -> ForwardPassMetrics | None:
        """The all-zero FPM of an idle barrier pass (aisimulate-engine.md §3), or None when
        the rank was built without FPM capture."""
        if not self.services.emit_forward_pass_metrics:
            return None
        return ForwardPassMetrics(
            worker_id=self.identity.worker_id,
            dp_rank=self.identity.dp_rank,
            duration_ms=max(0.0, end_ms - started_at_ms),
        )

    # -- runs of passes (docs/architecture.md, "Speed by design"; servesim.fast.runs) ----------------------------------------

    def execute_run(self, now_ms: float, horizon_ms: float, max_passes: int) -> Any | None:
        """Commit ``k >= 1`` consecutive passes (:class:`servesim.fast.runs.RankRun`) or decline.

        Pass 0 starts at ``now_ms``, each next pass at the previous one's end, every pass
        strictly before ``horizon_ms``; the run stops at the first pass whose batch would
        differ from stepping's steady batch (a completion may be the last pass). The result
        must be identical to ``k`` calls of :meth:`execute_pass`/:meth:`complete_pass` with no
        command in between (``prepare_group_pass``/``finish_group_pass`` are not called around
        a run: only dp_size-1 engines run them). A command applied while the run is in flight
        belongs to its last pass and receives the run's ``pending``. The default declines.
        """
        return None

    def complete_run(self, pending: Any, end_ms: float) -> Any:
        """Release a run's effects (:class:`servesim.fast.runs.RunEffects`) at its last boundary."""
        raise NotImplementedError(f"{type(self).__name__} does not support runs")

    def take_run_kv_events(self, pending: Any, before_pass: int) -> dict[int, list[Any]]:
        """Hand over (and forget) the KV events of a run's passes ``< before_pass``."""
        return {}

    # -- internal work --------------------------------------------------------------------

    def next_internal_deadline_ms(self) -> float | None:
        return None

    def process_internal_work(self, now_ms: float, pass_in_flight: bool) -> PassStartEffects:
        return EMPTY_START
