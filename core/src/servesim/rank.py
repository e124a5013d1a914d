"""The backend contract: one scheduler rank behind the neutral command/effect contract.

Mirrors ``RankEngine`` in aisimulate-engine.md §2.3. :class:`servesim.engine.Engine` composes
``dp_size`` ranks (attention data parallelism) behind the same contract. A rank never reads a
clock: every time it sees is an argument from the driver.

A backend plugin subclasses :class:`Rank`, which holds only what every backend implements
(five methods) and three declared class attributes. Everything else is a *capability*: a
class in this module (or :class:`servesim.fast.rank_runs.RunsOfPasses`) that the rank adds to
its bases to declare it. The engine, the replay and ``servesim validate`` read capabilities
with ``isinstance``/``issubclass`` only; a rank without one is never asked for its members,
and a configuration that needs a capability the backend lacks is a config error.

* :class:`GroupPassHooks`: hooks around each pass of an engine and the boundary effects of a
  rank held idle by the DP barrier (attention-DP ranks that must agree on a pass);
* :class:`InternalWork`: work due at the rank's own deadlines (host-tier transfers);
* :class:`Handoff`: the prefill/decode handoff commands (``cluster.prefill_workers``,
  ``cluster.decode_workers`` need it);
* :class:`HostOffload`: a host KV tier (``engine.native_host_offload`` needs it);
* :class:`SpeculativeDecoding`: draft tokens and their acceptance (``engine.aic_nextn`` needs
  it);
* :class:`WarmCache`: a KV cache filled from a captured KV-event stream before the first
  request (``workload.warm_cache`` needs it);
* :class:`LoraAdapters`: LoRA adapters and their GPU slots (``engine.enable_lora`` needs it);
* :class:`servesim.fast.rank_runs.RunsOfPasses`: runs of passes (speed only);
* :attr:`Rank.eviction_support`: the eviction policies the KV cache drives
  (``engine.eviction_policy``).

A class that defines a capability's member without declaring the capability is refused when
it is defined (:meth:`Rank.__init_subclass__`): such a member would never be called.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from attrs import frozen

from servesim.contract import (
    Command,
    CommandEffects,
    ForwardPassMetrics,
    PassCompletionEffects,
    PassStartEffects,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from servesim.config.engine import EngineConfig
    from servesim.kv.eviction import EvictionPolicy
    from servesim.kv.host_tier import HostTier
    from servesim.kv.warm_start import WarmLoad, WarmPath
    from servesim.mechanics.lora import AdapterCache
    from servesim.timing.base import TimingModel

#: What a rank keeps of a committed pass (:attr:`RankPass.pending`), handed back to
#: :meth:`Rank.complete_pass` and to commands applied while the pass is in flight.
PendingT = TypeVar("PendingT")
#: The structured ``engine.<backend>:`` section (:attr:`Rank.config_class`), or None.
ConfigT = TypeVar("ConfigT")


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
class RankPass(Generic[PendingT]):
    """What a rank returns when it eagerly commits a pass.

    ``pending`` is opaque to the engine and handed back to ``complete_pass``; a command
    applied mid-pass receives it and may mutate it (e.g. suppress a cancelled request's
    outputs).
    """

    end_ms: float
    start_effects: PassStartEffects
    pending: PendingT
    retry: RetryHint = NO_RETRY_HINT


@frozen(slots=True)
class RankServices:
    """Process-local collaborators injected into every rank by the EngineFactory."""

    timing: TimingModel
    make_eviction_policy: Any  # Callable[[], EvictionPolicy]
    emit_kv_events: bool = False
    emit_forward_pass_metrics: bool = True
    record_schedule: bool = False

    def new_eviction_policy(self) -> EvictionPolicy:
        return self.make_eviction_policy()


class Rank(ABC, Generic[PendingT, ConfigT]):
    """One scheduler rank: what every backend implements. Subclass it in a backend plugin
    and register the class by name (``servesim_add_backends``).

    The engine calls, for each pass: :meth:`is_ready`, then :meth:`execute_pass` at the
    pass's start, then :meth:`complete_pass` at its end; :meth:`apply` whenever the driver
    delivers a command (between passes or while one is in flight); :meth:`is_drained` when
    it asks whether the rank owns anything. ``PendingT`` is what :meth:`execute_pass` keeps
    of a pass; ``ConfigT`` the class of :attr:`config_class` (None without one).
    """

    #: attrs class for the backend's own YAML section (``engine.<name>:``), structured by
    #: the loader and passed as ``backend_config``; None (the default): no section.
    config_class: ClassVar[type | None] = None
    #: Block/page size in tokens when ``engine.block_size`` is unset (default 16); see
    #: :meth:`default_block_size_for`.
    default_block_size: ClassVar[int] = 16
    #: The ``engine.eviction_policy`` kinds the backend's KV cache drives, checked at
    #: validation (servesim.kv.eviction.eviction_refusal): "lru" (the built-in only), "ids"
    #: (any EvictionPolicy), "records" (a RecordEvictionPolicy). Default: ``{"lru"}``.
    eviction_support: ClassVar[frozenset[str]] = frozenset({"lru"})

    def __init__(
        self,
        identity: RankIdentity,
        config: EngineConfig,
        backend_config: ConfigT,
        services: RankServices,
    ) -> None:
        """Called once per rank by the engine factory, before any command. ``config`` is the
        resolved engine section (``block_size`` set), ``backend_config`` the structured
        ``engine.<name>:`` section (an instance of :attr:`config_class`, its defaults when
        the section is absent), ``services`` the timing model, the eviction-policy factory
        and what the readers of the rank's effects need."""
        self.identity = identity
        self.config = config
        self.backend_config = backend_config
        self.services = services

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a class that defines a capability's member without declaring the
        capability: nothing would ever call it (the engine asks only declared ranks)."""
        super().__init_subclass__(**kwargs)
        for capability in Capability.__subclasses__():
            if issubclass(cls, capability):
                continue
            stray = sorted(m for m in capability.members() if m in vars(cls))
            if stray:
                raise TypeError(
                    f"{cls.__qualname__} defines {', '.join(stray)} of the capability "
                    f"{capability.__module__}.{capability.__qualname__} without declaring it: "
                    f"add {capability.__qualname__} to the class's bases")

    @classmethod
    def default_block_size_for(cls, backend_config: ConfigT) -> int:
        """Called by the loader when ``engine.block_size`` is unset: the block size to use.
        A backend whose own section can set it (SGLang's ``page_size``) overrides this; by
        default :attr:`default_block_size`."""
        return cls.default_block_size

    @classmethod
    def validate_config(cls, config: EngineConfig, backend_config: ConfigT) -> list[tuple[str, str]]:
        """Called by the loader (``servesim validate`` and ``run``) before any rank is built:
        ``(key_path, message)`` problems with a config, reported as one config error (e.g.
        ``("engine.max_model_len", "not supported by sglang")``). Default: none. Capabilities
        are checked by the loader itself; this is for the backend's own limits."""
        return []

    @abstractmethod
    def apply(self, command: Command, ctx: CommandContext, pending: PendingT | None) -> CommandEffects:
        """Apply one command (``Submit``, ``CancelRequest``; the handoff commands too when the
        rank declares :class:`Handoff`). Must be error-atomic: on an exception nothing
        changed. Raise :class:`servesim.errors.CommandRejected` for a recoverable rejection.

        ``pending`` is this rank's retained pass when it executed in the in-flight group
        pass (else None); the command may mutate it (a cancel suppresses the request's
        outputs). A rank that runs passes (``RunsOfPasses``) receives its run's pending
        here too, so it types ``pending`` to take both."""

    @abstractmethod
    def is_ready(self) -> bool:
        """Whether the rank can commit a pass now. Asked before every pass; must not change
        state."""

    @abstractmethod
    def is_drained(self) -> bool:
        """Whether the rank owns no request, pass or internal work. Must not change state."""

    @abstractmethod
    def execute_pass(self, now_ms: float) -> RankPass[PendingT]:
        """Called at a pass's start ``now_ms`` when :meth:`is_ready`: eagerly commit one
        batch and return its modelled end (from ``services.timing``), its start effects
        (admissions) and its pending state. Completion effects (outputs, KV events,
        metrics) stay inside ``pending`` until :meth:`complete_pass`. A failure poisons the
        engine."""

    @abstractmethod
    def complete_pass(self, pending: PendingT, end_ms: float) -> PassCompletionEffects:
        """Called at the pass's boundary ``end_ms`` (the slowest rank's, for all ranks of a
        DP group) with the pass's ``pending``: release its effects. A failure poisons the
        engine."""


# -- capabilities -----------------------------------------------------------------------------


class Capability(ABC):  # noqa: B024 - a base with no abstract member of its own
    """The base of every capability class (the ones below, and
    :class:`servesim.fast.rank_runs.RunsOfPasses`). A rank declares a capability by listing
    its class among its bases."""

    @classmethod
    def members(cls) -> frozenset[str]:
        """The public members this capability adds (what a rank without it must not define)."""
        return frozenset(m for m in vars(cls) if not m.startswith("_")) - {"members"}


class GroupPassHooks(Capability):
    """Capability: hooks around every pass of the rank's engine, for ranks of an
    attention-DP group (``engine.dp_size`` > 1) that must agree on a pass (as SGLang's and
    TensorRT-LLM's do), and the boundary effects of a rank held idle by the DP barrier.

    Per pass, the engine calls :meth:`prepare_group_pass` on every rank, then every ready
    rank's ``execute_pass``, then asks every rank :meth:`prefill_in_pass` and
    :meth:`model_work_in_pass`, then calls :meth:`finish_group_pass` on every rank. A rank
    without this capability is asked none of them (as if it never prefilled)."""

    identity: RankIdentity
    services: RankServices

    def prepare_group_pass(self, wave_step: int, dp_size: int) -> None:
        """Called on every rank before each pass of its engine (``wave_step`` counts the
        engine's passes since it was last drained; ``dp_size`` is its number of ranks),
        before any ``execute_pass``. A failure poisons the engine."""

    def prefill_in_pass(self) -> bool:
        """Asked after every rank's ``execute_pass`` of the pass: whether this rank's pass
        computes prefill tokens. The engine passes whether any rank did to
        :meth:`finish_group_pass`. Default: False."""
        return False

    def model_work_in_pass(self) -> bool:
        """Asked with :meth:`prefill_in_pass`: whether this rank's pass runs the model at all
        (a decode-only rank does; an idle one does not). Default: :meth:`prefill_in_pass`."""
        return self.prefill_in_pass()

    def finish_group_pass(self, any_rank_prefilled: bool, any_rank_ran_model: bool) -> None:
        """Called on every rank after all ranks selected work, with whether any rank of the
        engine prefilled or ran the model in this pass. A failure poisons the engine: the
        ranks have committed their passes."""

    def complete_idle_group_pass(
        self, started_at_ms: float, end_ms: float
    ) -> PassCompletionEffects | None:
        """Called at a group pass's boundary on a rank that did not execute in it (held idle
        by the DP barrier): its boundary effects (KV events, metrics, the idle pass's
        forward-pass metrics), or None (the default) for none."""
        return None

    def idle_forward_pass_metrics(
        self, started_at_ms: float, end_ms: float
    ) -> ForwardPassMetrics | None:
        """A helper for :meth:`complete_idle_group_pass`: the all-zero FPM of an idle barrier
        pass (aisimulate-engine.md §3), or None when the rank was built without FPM capture."""
        if not self.services.emit_forward_pass_metrics:
            return None
        return ForwardPassMetrics(
            worker_id=self.identity.worker_id,
            dp_rank=self.identity.dp_rank,
            duration_ms=max(0.0, end_ms - started_at_ms),
        )


class InternalWork(Capability):
    """Capability: work the rank does at its own deadlines, between passes (host-tier
    transfers completing). The engine processes due work before any command at or after
    the deadline (a command at a due deadline is refused until it is processed)."""

    @property
    def internal_deadlines(self) -> bool:
        """Whether this rank instance can have deadlines at all (default True). Read once
        when a replay starts: False lets the replay skip per-event deadline checks (the vllm
        rank without a host tier)."""
        return True

    @abstractmethod
    def next_internal_deadline_ms(self) -> float | None:
        """Asked whenever no pass is in flight: the earliest time internal work is due, or
        None. Must not change state."""

    @abstractmethod
    def process_internal_work(self, now_ms: float, pass_in_flight: bool) -> PassStartEffects:
        """Called at a due deadline ``now_ms`` (between passes): do the work and return its
        effects (KV events of transfers)."""


class Handoff(Capability):
    """Capability: the rank takes part in a prefill/decode split (aisimulate-engine.md §8). On a
    prefill worker it accepts ``SubmitHandoffPrefill`` and holds the source until
    ``ReleaseSource``/``CancelSource``; on a decode worker it accepts ``ReserveDestination``/
    ``ActivateDestination``/``CancelDestination``. ``cluster.prefill_workers``/
    ``decode_workers`` need it (``servesim validate`` checks it).
    :class:`servesim.mechanics.handoff.HandoffBook` implements the bookkeeping."""

    #: The decode side reserves its KV before the prefill runs (SGLang's disaggregation):
    #: the replay then reserves before submitting the prefill. Default: False (reserve when
    #: the prefill completes).
    reserve_destination_first: ClassVar[bool] = False

    def waiting_for_external_command(self) -> bool:
        """Asked with ``is_ready``: True only when the rank's ready work is blocked solely on
        a held source or a reserved destination (the engine then does not run it). Must not
        change state. Default: False."""
        return False


class HostOffload(Capability):
    """Capability: the rank keeps a host KV tier (``engine.native_host_offload``, which needs
    it). Usually declared with :class:`InternalWork` (transfers end at deadlines)."""

    @property
    @abstractmethod
    def host_tier(self) -> HostTier | None:
        """The rank's :class:`servesim.kv.host_tier.HostTier`, or None when this instance has
        none. Read once at the end of a replay for the report's host keys."""


class SpeculativeDecoding(Capability):  # noqa: B024
    """Capability: the rank drafts and verifies tokens (``engine.aic_nextn``, which needs
    it): it builds its sampler with ``servesim.mechanics.speculative.Speculation.build`` and
    hands the tally back as ``PassCompletionEffects.decode_acceptance``. A marker: it adds no
    member."""


class WarmCache(Capability):
    """Capability: the rank's KV cache can be filled before the first request with the blocks a
    captured KV-event stream left cached (``workload.warm_cache``, which needs it;
    :mod:`servesim.kv.warm_start`). Called once per rank, after the rank is built and before
    any command; a block-pool rank implements it with
    :func:`servesim.kv.warm_start.preload_pool`."""

    @abstractmethod
    def preload_cache(self, paths: Sequence[WarmPath]) -> WarmLoad:
        """Load ``paths`` (each blocks 0..n-1 of a cached sequence, in load order, the most
        recently used last) as cached, unreferenced blocks; returns the blocks loaded and
        skipped (what the cache could not take) and the KV events the cache published while
        it loaded (its ``Stored`` and any eviction's ``Removed``, taken out of the rank: the
        replay hands them to a KV router only, and the rank numbers its next event 0)."""


class LoraAdapters(Capability):
    """Capability: the rank serves LoRA adapters (``engine.enable_lora``, which needs it):
    it schedules a request's adapter, hashes its blocks from the adapter
    (servesim.kv.adapter_hashes) and loads adapters into GPU slots."""

    @property
    @abstractmethod
    def lora_cache(self) -> AdapterCache | None:
        """The rank's :class:`servesim.mechanics.lora.AdapterCache`, or None when this
        instance has LoRA off. Read once at the end of a replay for the report's ``lora``
        section."""
