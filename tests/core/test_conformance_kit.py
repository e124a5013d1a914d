"""The conformance kit passes a correct toy rank and catches deliberately broken ones."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from attrs import define, field
from servesim.config.engine import EngineConfig
from servesim.contract import (
    APPLIED,
    NOOP,
    Admission,
    CancelRequest,
    Command,
    CommandEffects,
    CommandResult,
    KvBlock,
    KvEvent,
    Metrics,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
    RemovedBlocks,
    Request,
    StoredBlocks,
    Submit,
)
from servesim.errors import CommandRejected
from servesim.rank import CommandContext, Rank, RankPass
from servesim.testing import (
    CHECKS,
    ConformanceOptions,
    RankConformance,
    check_rank_conformance,
    default_workload,
    engine_maker,
    kv_event_problems,
    run_trace,
)
from servesim.timing import scaled_ms


@define
class _Pending:
    outputs: OutputBatch
    kv_events: list[KvEvent] = field(factory=list)


class ToyRank(Rank):
    """A correct, tiny rank: admits every waiting request, one token per request per pass,
    one KV block entry per full prompt block (shared blocks refcounted)."""

    default_block_size = 8

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.waiting: list[Request] = []
        self.running: dict[int, list[int]] = {}  # request id -> [emitted, planned]
        self.blocks: dict[int, list[int]] = {}  # request id -> held block hashes
        self.refs: dict[int, int] = {}
        self.reused: dict[int, int] = {}  # request id -> prompt tokens found held at admission
        self.next_event = 0

    # -- KV ------------------------------------------------------------------------------

    def _event(self, data: Any) -> KvEvent:
        ev = KvEvent(self.next_event, self.identity.dp_rank, data)
        self.next_event += 1
        return ev

    def _hold(self, req: Request) -> list[KvEvent]:
        seq, local = req.prompt.block_hashes(self.config.block_size)
        self.blocks[req.request_id] = list(seq)
        hits = next((i for i, h in enumerate(seq) if h not in self.refs), len(seq))
        self.reused[req.request_id] = hits * self.config.block_size
        new = []
        for i, h in enumerate(seq):
            self.refs[h] = self.refs.get(h, 0) + 1
            if self.refs[h] == 1:
                new.append((i, h))
        if not new or not self.services.emit_kv_events:
            return []
        parent = seq[new[0][0] - 1] if new[0][0] > 0 else None
        return [self._event(StoredBlocks(parent, tuple(KvBlock(h, local[i]) for i, h in new)))]

    def _release(self, rid: int) -> list[KvEvent]:
        gone = []
        for h in self.blocks.pop(rid, []):
            self.refs[h] -= 1
            if self.refs[h] == 0:
                del self.refs[h]
                gone.append(h)
        if not gone or not self.services.emit_kv_events:
            return []
        return [self._event(RemovedBlocks(tuple(gone)))]

    def _metrics(self) -> Metrics:
        return Metrics(self.identity.dp_rank, len(self.refs), 0, 1000,
                       len(self.running), len(self.waiting))

    # -- contract ------------------------------------------------------------------------

    def apply(self, command: Command, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        if isinstance(command, Submit):
            rid = command.request.request_id
            if rid in self.running or any(r.request_id == rid for r in self.waiting):
                raise CommandRejected(f"request {rid} is already active")
            self.waiting.append(command.request)
            return CommandEffects(CommandResult.submitted(rid), metrics=self._metrics())
        assert isinstance(command, CancelRequest)
        return self._cancel(command, pending)

    def _cancel(self, command: CancelRequest, pending: _Pending | None) -> CommandEffects:
        rid = command.request_id
        owned = rid in self.running or any(r.request_id == rid for r in self.waiting)
        suppressed = False
        if pending is not None and (owned or command.discard_pending_output):
            suppressed = pending.outputs.remove_request(rid)
        if not owned:
            return CommandEffects(NOOP, suppressed_pending_output=suppressed)
        self.waiting = [r for r in self.waiting if r.request_id != rid]
        self.running.pop(rid, None)
        events = self._release(rid)
        if pending is not None:  # buffered until the in-flight pass completes
            pending.kv_events.extend(events)
            events = []
        return CommandEffects(APPLIED, kv_events=tuple(events), retired_requests=(rid,),
                              metrics=self._metrics(), suppressed_pending_output=suppressed)

    def is_ready(self) -> bool:
        return bool(self.waiting or self.running)

    def is_drained(self) -> bool:
        return not self.waiting and not self.running

    def execute_pass(self, now_ms: float) -> RankPass:
        pending = _Pending(OutputBatch())
        admitted = self.waiting
        self.waiting = []
        decoding = len(self.running)
        for req in admitted:
            pending.kv_events.extend(self._hold(req))
            self.running[req.request_id] = [0, req.planned_output_tokens]
        self._emit(pending)
        timing = self.services.timing
        prefill = timing.predict_prefill_ms(len(admitted), 16, 0) if admitted else 0.0
        decode = timing.predict_decode_ms(decoding, 1, 1, 1000)
        end = now_ms + scaled_ms(prefill, 1.0) + scaled_ms(decode, 1.0)
        start = PassStartEffects(admissions=tuple(
            Admission(r.request_id, self.reused.get(r.request_id, 0)) for r in admitted))
        return RankPass(end, start, pending)

    def _emit(self, pending: _Pending) -> None:
        for rid in sorted(self.running):
            state = self.running[rid]
            if state[0] < state[1]:
                pending.outputs.token_request_ids.append(rid)
                state[0] += 1
            if state[0] >= state[1]:
                pending.outputs.completed.append(rid)
                del self.running[rid]
                pending.kv_events.extend(self._release(rid))

    def complete_pass(self, pending: Any, end_ms: float) -> PassCompletionEffects:
        return PassCompletionEffects(outputs=pending.outputs, kv_events=pending.kv_events,
                                     metrics=self._metrics())


# --------------------------------------------------------------------------- broken ranks


class DropsCompletion(ToyRank):
    """Forgets to signal the completion of request 3."""

    def _emit(self, pending: _Pending) -> None:
        super()._emit(pending)
        if 3 in pending.outputs.completed:
            pending.outputs.completed.remove(3)


class OutboxAtPassStart(ToyRank):
    """Commits each pass's outputs to a rank-level outbox when the pass starts, so a
    mid-pass cancellation can no longer suppress them (completion effects leak early)."""

    def execute_pass(self, now_ms: float) -> RankPass:
        rp = super().execute_pass(now_ms)
        self.outbox = OutputBatch(list(rp.pending.outputs.token_request_ids), None,
                                  list(rp.pending.outputs.completed))
        return rp

    def complete_pass(self, pending: Any, end_ms: float) -> PassCompletionEffects:
        effects = super().complete_pass(pending, end_ms)
        effects.outputs = self.outbox
        return effects


class DoubleCompletes(ToyRank):
    """Signals a request's completion again on the next pass."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.echo: list[int] = []

    def _emit(self, pending: _Pending) -> None:
        pending.outputs.completed.extend(self.echo)
        super()._emit(pending)
        self.echo = [r for r in pending.outputs.completed if r not in self.echo]

    def is_drained(self) -> bool:
        return super().is_drained() and not self.echo

    def is_ready(self) -> bool:
        return super().is_ready() or bool(self.echo)


class OffByOneTokens(ToyRank):
    """Emits one token more than planned."""

    def apply(self, command: Command, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        eff = super().apply(command, ctx, pending)
        if isinstance(command, Submit) and self.waiting and self.waiting[-1] is command.request:
            self.waiting[-1] = Request(command.request.request_id, command.request.prompt,
                                       command.request.planned_output_tokens + 1)
        return eff


class JoinsInFlightPass(ToyRank):
    """Slips a request submitted mid-pass into the already committed pass."""

    def apply(self, command: Command, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        eff = super().apply(command, ctx, pending)
        if isinstance(command, Submit) and pending is not None:
            req = self.waiting.pop()
            self.running[req.request_id] = [0, req.planned_output_tokens]
            pending.kv_events.extend(self._hold(req))
            self._emit(pending)
        return eff


_instances = itertools.count()


class Nondeterministic(ToyRank):
    """Pass durations depend on how many ranks the process built before."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.jitter = next(_instances) * 0.25

    def execute_pass(self, now_ms: float) -> RankPass:
        rp = super().execute_pass(now_ms)
        return RankPass(rp.end_ms + self.jitter, rp.start_effects, rp.pending)


class DuplicateStores(ToyRank):
    """Reports every admitted block as newly stored, even when it is already cached."""

    def _hold(self, req: Request) -> list[KvEvent]:
        seq, local = req.prompt.block_hashes(self.config.block_size)
        self.blocks[req.request_id] = list(seq)
        for h in seq:
            self.refs[h] = self.refs.get(h, 0) + 1
        blocks = tuple(KvBlock(h, loc) for h, loc in zip(seq, local, strict=True))
        return [self._event(StoredBlocks(None, blocks))] if blocks else []


class AcceptsDuplicates(ToyRank):
    """Replaces an active request on a duplicate Submit instead of rejecting it."""

    def apply(self, command: Command, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        if isinstance(command, Submit):
            self.waiting = [r for r in self.waiting if r.request_id != command.request.request_id]
        return super().apply(command, ctx, pending)


class CancelIgnoresWaiting(ToyRank):
    """Reports Noop for a waiting request and keeps running it."""

    def _cancel(self, command: CancelRequest, pending: _Pending | None) -> CommandEffects:
        if any(r.request_id == command.request_id for r in self.waiting):
            return CommandEffects(NOOP)
        return super()._cancel(command, pending)


class NoAdmissions(ToyRank):
    """Never reports admissions at pass start."""

    def execute_pass(self, now_ms: float) -> RankPass:
        rp = super().execute_pass(now_ms)
        return RankPass(rp.end_ms, PassStartEffects(), rp.pending)


class CancelIgnoresRunning(ToyRank):
    """Treats a cancel of a running request as a Noop and keeps decoding it."""

    def _cancel(self, command: CancelRequest, pending: _Pending | None) -> CommandEffects:
        if command.request_id in self.running:
            return CommandEffects(NOOP)
        return super()._cancel(command, pending)


class ExplodesOnSecondPass(ToyRank):
    """Raises from execute_pass once it has work in flight."""

    def execute_pass(self, now_ms: float) -> RankPass:
        if self.running:
            raise RuntimeError("kaboom")
        return super().execute_pass(now_ms)


class PublishesNoKvEvents(ToyRank):
    """Keeps its blocks but never publishes a KV event."""

    def complete_pass(self, pending: Any, end_ms: float) -> PassCompletionEffects:
        pending.kv_events.clear()
        return super().complete_pass(pending, end_ms)


class NeverReuses(ToyRank):
    """Publishes its blocks but admits every request as if nothing were cached."""

    def _hold(self, req: Request) -> list[KvEvent]:
        events = super()._hold(req)
        self.reused[req.request_id] = 0
        return events


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("dp_size", [1, 2])
def test_kit_passes_a_correct_rank(dp_size: int) -> None:
    report = check_rank_conformance(engine_maker(ToyRank, config=EngineConfig(dp_size=dp_size)))
    assert report.ok
    assert report.checks == list(CHECKS)


def test_kit_passes_without_kv_events() -> None:
    report = check_rank_conformance(engine_maker(ToyRank, emit_kv_events=False))
    assert report.ok
    # without KV events (or without a KV cache) nothing asks for Stored events or reuse
    assert check_rank_conformance(engine_maker(PublishesNoKvEvents, emit_kv_events=False)).ok
    no_cache = ConformanceOptions(expect_kv_cache=False)
    assert check_rank_conformance(engine_maker(PublishesNoKvEvents), options=no_cache).ok
    assert check_rank_conformance(engine_maker(NeverReuses), options=no_cache).ok


def test_the_kit_sees_the_shared_prefix_reused() -> None:
    trace = run_trace(engine_maker(ToyRank)(), default_workload(ConformanceOptions()))
    # request 0 holds the shared 24 tokens (3 blocks of 8) until its one token at 10 ms; request
    # 1, admitted then, finds nothing held, and every later prompt finds request 1's blocks
    assert trace.admissions == [(0.0, 0, 0), (10.0, 1, 0), (10.0, 2, 24), (10.0, 3, 24),
                                (10.0, 4, 24), (10.0, 5, 24), (10.0, 6, 24), (20.0, 7, 24)]


@pytest.mark.parametrize(
    ("rank_class", "check", "fragment"),
    [
        (DropsCompletion, "completions", "request 3 got 0 terminal outputs, expected exactly 1"),
        (OutboxAtPassStart, "mid_pass_cancel", "cancelled while its pass was in flight, still emitted"),
        (DoubleCompletes, "completions", "got 2 terminal outputs"),
        (OffByOneTokens, "completions", "request 0 emitted 2 tokens, expected 1"),
        (OffByOneTokens, "exact_output_tokens", "request 0 emitted 4 tokens, expected 3"),
        (OffByOneTokens, "zero_output", "request 0 emitted 1 tokens, expected 0"),
        (NoAdmissions, "completions", "request 0 emitted a token at 10.0 without an Admission"),
        (CancelIgnoresRunning, "cancel_running", "gave noop retiring [], expected applied retiring [0]"),
        (CancelIgnoresRunning, "cancel_running", "still emitted 3 tokens / 1 terminals"),
        (JoinsInFlightPass, "completions", "got a token from the pass started at"),
        (Nondeterministic, "determinism", "produced different traces"),
        (DuplicateStores, "kv_events", "while it is live"),
        (PublishesNoKvEvents, "kv_events", "KV events and prefix caching are on, yet 8 prompts of "
                                           "about 48 tokens published no Stored event"),
        (NeverReuses, "kv_events", "the prompts share their first 24 tokens (3 full block(s) of 8), "
                                   "yet no admission reused a cached block"),
        (AcceptsDuplicates, "duplicate_submit", "was accepted"),
        (CancelIgnoresWaiting, "cancel_waiting", "expected applied retiring [0]"),
        (ExplodesOnSecondPass, "completions", "raised EnginePoisoned"),
    ],
)
def test_kit_fails_broken_ranks(rank_class: type, check: str, fragment: str) -> None:
    make = engine_maker(rank_class)
    report = check_rank_conformance(make, raise_on_failure=False)
    assert not report.ok
    mine = [f for f in report.failures if f.startswith(f"{check}: ")]
    assert any(fragment in f for f in mine), report.failures
    with pytest.raises(AssertionError, match="rank conformance failed"):
        check_rank_conformance(make)


def test_a_single_broken_check_can_be_isolated() -> None:
    make = engine_maker(DuplicateStores)
    others = [name for name in CHECKS if name != "kv_events"]
    assert check_rank_conformance(make, skip=["kv_events"]).checks == others
    report = check_rank_conformance(make, skip=others, raise_on_failure=False)
    assert report.checks == ["kv_events"] and len(report.failures) >= 1


def test_unknown_skip_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown checks"):
        check_rank_conformance(engine_maker(ToyRank), skip=["nope"])


def test_kv_event_replay_flags_unknown_removal_and_sinking_ids() -> None:
    events = [
        (0, 1.0, KvEvent(0, 0, StoredBlocks(None, (KvBlock(1, 1),)))),
        (0, 2.0, KvEvent(1, 0, RemovedBlocks((2,)))),
        (0, 3.0, KvEvent(1, 0, RemovedBlocks((1,)))),
        (1, 3.0, KvEvent(0, 1, RemovedBlocks(()))),
    ]
    assert kv_event_problems(events) == [
        "rank 0 removed unknown block 2 at 2.0 ms",
        "rank 0 event id 1 at 3.0 ms does not rise after 1",
    ]


def test_options_shape_the_workload() -> None:
    opts = ConformanceOptions(num_requests=3, prompt_len=16, max_output_tokens=2)
    report = check_rank_conformance(engine_maker(ToyRank), options=opts)
    assert report.ok


class TestToyRankThroughTheBaseClass(RankConformance):
    """How a backend author uses the kit: one pytest test per check."""

    make_engine = staticmethod(engine_maker(ToyRank, config=EngineConfig(dp_size=2)))


def test_base_class_skip_checks_skip_only_the_named_checks() -> None:
    class Skips(RankConformance):
        make_engine = staticmethod(engine_maker(DuplicateStores))
        skip_checks = ("kv_events",)

    with pytest.raises(pytest.skip.Exception, match="kv_events skipped by Skips.skip_checks"):
        Skips().test_kv_events()
    Skips().test_completions()  # the other checks still run (and pass)


def test_base_class_raises_on_a_broken_rank() -> None:
    class Broken(RankConformance):
        make_engine = staticmethod(engine_maker(DropsCompletion))

    with pytest.raises(AssertionError, match="completions: request 3 got 0 terminal outputs"):
        Broken().test_completions()


def test_pytest_plugin_fixtures_give_a_fresh_manager(plugin_manager: Any, plugins: Any) -> None:
    assert plugins.pm is plugin_manager
    assert "servesim.builtins.timing" in dict(plugin_manager.list_name_plugin())

    class ToyPlugin:
        @staticmethod
        def servesim_register_backends(registry: Any) -> None:
            registry.add("toy", ToyRank)

    from servesim import hookimpl

    ToyPlugin.servesim_register_backends = hookimpl(ToyPlugin.servesim_register_backends)
    plugin_manager.register(ToyPlugin, name="toy")  # before the first registry lookup
    assert plugins.backends().get("toy") is ToyRank
    assert "fixed" in plugins.timing_models()
