"""A conformance kit: the contract's invariants, checked against any rank class.

A backend author calls :func:`check_rank_conformance` with a zero-argument callable that
builds a fresh :class:`~servesim.engine.Engine` of their rank (see :func:`engine_maker`), or
subclasses :class:`RankConformance` in a pytest module to get one test per check::

    from servesim.testing import RankConformance, engine_maker

    class TestMyRank(RankConformance):
        make_engine = staticmethod(engine_maker(MyRank, emit_kv_events=True))

Every check drives the engine through the canonical loop of aisimulate-engine.md §12 and
asserts what the contract promises (§2.4, §4):

* every submitted request gets exactly one terminal output; an accepted one emits exactly
  ``planned_output_tokens`` tokens (``output_token_ids`` length if given; none for
  ``max_output_tokens = 0``), a rejected one none; a request is admitted (``Admission`` in a
  pass start) no later than the pass of its first token;
* tokens appear only in the completion of a pass that started after the request was
  submitted, stamped with that pass's end, so per-request times never decrease;
* a command applied mid-pass never exposes the pass's completion effects early, and a
  ``CancelRequest(discard_pending_output=True)`` suppresses the in-flight pass's outputs;
* ``execute_pass`` returns None on an idle engine; a duplicate ``Submit`` raises and changes
  nothing; cancelling a waiting request retires it once, later cancels are ``Noop``;
  cancelling a running request between passes retires it with no further output;
* the engine drains, and reports no running/waiting requests (and, unless told otherwise,
  no active blocks) once drained;
* two fresh engines given the same inputs produce identical traces;
* replaying the KV events onto an empty set never removes an unknown hash nor stores a hash
  that is already live, and event ids rise per rank;
* with KV events on (``RankServices.emit_kv_events``) and prefix caching on
  (``EngineConfig.enable_prefix_caching``), a rank with a KV cache (``expect_kv_cache``)
  publishes ``Stored`` events for the prompts it computed, and, since the workload's prompts
  share their first half, a later request reuses a cached block (an ``Admission`` with
  ``reused_input_tokens > 0``) whenever that half holds a full block;
* time arguments that are NaN, infinite or negative are rejected without poisoning.

Failures are collected in a :class:`ConformanceReport`; :func:`check_rank_conformance`
raises ``AssertionError`` listing all of them unless ``raise_on_failure=False``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from attrs import define, field, frozen

from servesim.contract import NOOP, CancelRequest, Command, Request, ResultKind, StoredBlocks, Submit
from servesim.engine import Engine
from servesim.testing.runs_check import check_runs_match_stepping
from servesim.testing.trace import Trace, kv_event_problems, run_trace
from servesim.tokens import Tokens

MakeEngine = Callable[[], Engine]

__all__ = [
    "CHECKS",
    "ConformanceOptions",
    "ConformanceReport",
    "RankConformance",
    "Trace",
    "check_rank_conformance",
    "default_workload",
    "engine_maker",
    "kv_event_problems",
    "run_trace",
]


@frozen(kw_only=True)
class ConformanceOptions:
    """Workload shape and expectations. Defaults suit a block-based aggregated backend.

    * ``num_requests`` requests with prompts of about ``prompt_len`` tokens (the first half
      shared, so prefix caching is exercised) and 1..``max_output_tokens`` outputs, arriving
      every ``arrival_gap_ms`` (so some arrive while a pass is in flight);
    * ``expect_empty_pool_after_drain``: check ``Metrics.active_blocks == 0`` once drained
      (set False for backends that count cached pages as active, e.g. SGLang's radix cache);
    * ``max_passes`` bounds a run so a livelocked rank fails instead of hanging;
    * ``expect_kv_cache``: the rank keeps a prefix-cached KV cache, so with KV events and
      prefix caching on it must publish ``Stored`` events and reuse the shared prefix (set
      False for a backend without a KV cache, such as servesim-toy's ``toy``).
    """

    num_requests: int = 8
    prompt_len: int = 48
    max_output_tokens: int = 6
    arrival_gap_ms: float = 1.5
    expect_empty_pool_after_drain: bool = True
    max_passes: int = 100_000
    expect_kv_cache: bool = True


@define
class ConformanceReport:
    """What ran and what failed; ``ok`` when nothing failed."""

    checks: list[str] = field(factory=list)
    failures: list[str] = field(factory=list)
    #: What was checked, for the failure message ("rank", "eviction policy", ...).
    subject: str = "rank"

    @property
    def ok(self) -> bool:
        return not self.failures

    def raise_if_failed(self) -> None:
        if self.failures:
            lines = "\n  - ".join(self.failures)
            raise AssertionError(f"{self.subject} conformance failed ({len(self.failures)}):\n  - {lines}")


# --------------------------------------------------------------------------- workload


def default_workload(options: ConformanceOptions) -> list[tuple[float, Request]]:
    """Deterministic arrivals: shared half-prefix prompts, varied lengths and outputs."""
    out = []
    shared = list(range(1000, 1000 + options.prompt_len // 2))
    for i in range(options.num_requests):
        n = max(1, options.prompt_len - (i % 3) * (options.prompt_len // 4))
        tail = [20_000 + 97 * i + k for k in range(max(0, n - len(shared)))]
        prompt = Tokens((shared + tail)[:n])
        max_out = 1 + (i * 5) % max(1, options.max_output_tokens)
        out.append((i * options.arrival_gap_ms, Request(i, prompt, max_out)))
    return out


def engine_maker(
    rank_class: type,
    *,
    config: Any = None,
    timing: Any = None,
    backend_config: Any = None,
    emit_kv_events: bool = True,
    worker_id: int = 0,
) -> MakeEngine:
    """A ``make_engine`` for the kit: an :class:`EngineFactory` with fixed 10/1 ms timing by
    default (so pass boundaries are easy to read in failure messages)."""
    from servesim.config.engine import EngineConfig
    from servesim.factory import EngineFactory
    from servesim.timing.builtin import FixedTiming, FixedTimingConfig

    def make() -> Engine:
        factory = EngineFactory(
            config or EngineConfig(),
            rank_class,
            timing or FixedTiming(FixedTimingConfig(prefill_ms=10.0, decode_ms=1.0)),
            backend_config=backend_config,
            emit_kv_events=emit_kv_events,
        )
        return factory.build(worker_id)

    return make


# --------------------------------------------------------------------------- checks


def _check_requests(trace: Trace, requests: dict[int, Request], options: ConformanceOptions) -> list[str]:
    out = list(trace.failures)
    admitted: dict[int, float] = {}
    for at, rid, _ in trace.admissions:
        admitted.setdefault(rid, at)
    for rid, req in requests.items():
        out.extend(_request_problems(trace, rid, req, admitted.get(rid)))
    if not trace.drained:
        out.append("engine is not drained after every request finished")
    for dp_rank, m in sorted(trace.metrics.items()):
        if m.running_requests or m.waiting_requests:
            out.append(f"rank {dp_rank} reports {m.running_requests} running/{m.waiting_requests} "
                       "waiting requests after drain")
        if options.expect_empty_pool_after_drain and m.active_blocks:
            out.append(f"rank {dp_rank} reports {m.active_blocks} active blocks after drain")
    return out


def _request_problems(trace: Trace, rid: int, req: Request, first_admission: float | None) -> list[str]:
    terms = trace.terminals.get(rid, [])
    times = trace.tokens.get(rid, [])
    if len(terms) != 1:
        return [f"request {rid} got {len(terms)} terminal outputs, expected exactly 1"]
    out = []
    _, rejected = terms[0]
    want = 0 if rejected else req.planned_output_tokens
    if len(times) != want:
        kind = "rejected " if rejected else ""
        out.append(f"{kind}request {rid} emitted {len(times)} tokens, expected {want}")
    if any(b < a for a, b in zip(times, times[1:])):
        out.append(f"request {rid} token times decrease: {times}")
    if times and not rejected and (first_admission is None or first_admission > times[0]):
        out.append(f"request {rid} emitted a token at {times[0]} without an Admission in an earlier "
                   "pass start (reference §4.4)")
    if req.output_token_ids is not None and rid in trace.token_ids and not rejected:
        if tuple(trace.token_ids[rid]) != req.output_token_ids:
            out.append(f"request {rid} emitted {trace.token_ids[rid]}, not its output_token_ids")
    return out


def check_completions(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """Exactly one terminal per request, exact token counts, ordered times, clean drain."""
    work = default_workload(options)
    trace = run_trace(make_engine(), work, max_passes=options.max_passes)
    return _check_requests(trace, {r.request_id: r for _, r in work}, options)


def check_exact_output_tokens(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """``output_token_ids`` fixes the outputs; its length overrides ``max_output_tokens``."""
    req = Request(0, Tokens(list(range(7, 7 + options.prompt_len))), 1, output_token_ids=(5, 6, 7))
    trace = run_trace(make_engine(), [(0.0, req)], max_passes=options.max_passes)
    return _check_requests(trace, {0: req}, options)


def check_zero_output(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """``max_output_tokens = 0`` ends with one terminal output carrying no token (§4.5)."""
    req = Request(0, Tokens(list(range(11, 11 + options.prompt_len))), 0)
    trace = run_trace(make_engine(), [(0.0, req)], max_passes=options.max_passes)
    return _check_requests(trace, {0: req}, options)


def check_cancel_running(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """Cancelling a request between passes, once it has emitted a token, retires it at once:
    no later token or terminal output, and the engine drains."""
    req = Request(0, Tokens(list(range(3, 3 + options.prompt_len))), 4)
    engine = make_engine()
    engine.apply(0, Submit(req), 0.0)
    now, emitted, passes = 0.0, 0, 0
    while emitted == 0:
        passes += 1
        started = engine.execute_pass(now) if passes <= options.max_passes else None
        if started is None:
            return ["the engine stopped before the request emitted a token"]
        now = started.end_ms
        done = engine.complete_pass(started.pass_id, now)
        emitted += sum(rc.effects.outputs.token_request_ids.count(0) for rc in done.by_rank)
        if any(0 in rc.effects.outputs.completed for rc in done.by_rank):
            return [f"request 0 completed after {emitted} of 4 tokens"]
    eff = engine.apply(0, CancelRequest(0), now)
    out = []
    if eff.result.kind is not ResultKind.APPLIED or tuple(eff.retired_requests) != (0,):
        out.append(f"CancelRequest of a running request gave {eff.result.kind.value} retiring "
                   f"{list(eff.retired_requests)}, expected applied retiring [0]")
    after = run_trace(engine, [], max_passes=options.max_passes, already_submitted=[0])
    if after.tokens[0] or after.terminals[0]:
        out.append(f"the cancelled request still emitted {len(after.tokens[0])} tokens / "
                   f"{len(after.terminals[0])} terminals")
    if not after.drained:
        out.append("the engine is not drained after its only request was cancelled")
    return out + after.failures


def check_idle_engine(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """A fresh engine is drained, not ready, and ``execute_pass`` returns None."""
    engine = make_engine()
    out = []
    if not engine.is_drained():
        out.append("a fresh engine is not drained")
    if engine.is_ready():
        out.append("a fresh engine is ready with no work")
    if engine.execute_pass(0.0) is not None:
        out.append("execute_pass on an idle engine did not return None")
    return out


def check_duplicate_submit(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """A second Submit of an active id raises and leaves the engine as it was."""
    first = default_workload(options)[0][1]
    twin = Request(first.request_id, first.prompt, first.max_output_tokens + 3)
    reference = run_trace(make_engine(), [(0.0, first)], max_passes=options.max_passes)
    engine = make_engine()
    engine.apply(0, Submit(first), 0.0)
    out = []
    try:
        engine.apply(0, Submit(twin), 0.0)
        out.append(f"a duplicate Submit of active request {first.request_id} was accepted")
    except Exception:
        pass
    if engine.poisoned is not None:
        out.append("a rejected duplicate Submit poisoned the engine")
        return out
    after = run_trace(engine, [], max_passes=options.max_passes, already_submitted=[first.request_id])
    rid = first.request_id
    if (after.tokens[rid], after.terminals[rid], after.passes) != (
        reference.tokens[rid], reference.terminals[rid], reference.passes
    ):
        out.append("the rejected duplicate Submit changed what the engine did afterwards")
    out.extend(after.failures)
    return out


def check_cancel_waiting(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """Cancelling a waiting request retires it once; a second cancel is a Noop."""
    engine = make_engine()
    req = default_workload(options)[0][1]
    engine.apply(0, Submit(req), 0.0)
    eff = engine.apply(0, CancelRequest(req.request_id), 0.0)
    out = []
    if eff.result.kind is not ResultKind.APPLIED or tuple(eff.retired_requests) != (req.request_id,):
        out.append(f"CancelRequest of a waiting request gave {eff.result.kind.value} retiring "
                   f"{list(eff.retired_requests)}, expected applied retiring [{req.request_id}]")
    again = engine.apply(0, CancelRequest(req.request_id), 0.0)
    if again.result != NOOP or again.retired_requests:
        out.append(f"a second CancelRequest gave {again.result.kind.value}, expected noop")
    if engine.execute_pass(0.0) is not None:
        out.append("the engine started a pass for a cancelled request")
    if not engine.is_drained():
        out.append("the engine is not drained after its only request was cancelled")
    return out


def check_mid_pass_cancel(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """A cancel mid-pass suppresses that request's retained outputs (reference §2.3, §4.2)."""
    work = default_workload(options)
    victim = work[0][1].request_id
    state = {"cancelled": False}

    def cancel(engine: Engine, now: float, trace: Trace) -> None:
        if state["cancelled"]:
            return
        state["cancelled"] = True
        cmd: Command = CancelRequest(victim, discard_pending_output=True)
        eff = engine.apply(victim % engine.dp_size, cmd, now)
        if eff.retired_requests not in ((), (victim,)):
            trace.failures.append(f"the cancel of {victim} retired {list(eff.retired_requests)}")

    trace = run_trace(make_engine(), [(0.0, work[0][1])], max_passes=options.max_passes, mid_pass=cancel)
    out = list(trace.failures)
    if trace.tokens.get(victim) or trace.terminals.get(victim):
        out.append(f"request {victim}, cancelled while its pass was in flight, still emitted "
                   f"{len(trace.tokens[victim])} tokens / {len(trace.terminals[victim])} terminals: "
                   "outputs must stay in the retained pass until complete_pass")
    if not trace.drained:
        out.append("the engine is not drained after its only request was cancelled mid-pass")
    return out


def check_determinism(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """Two fresh engines given the same inputs produce identical traces."""
    work = default_workload(options)
    a = run_trace(make_engine(), work, max_passes=options.max_passes)
    b = run_trace(make_engine(), work, max_passes=options.max_passes)
    if a != b:
        return ["two fresh engines given the same requests produced different traces"]
    return []


def check_kv_events(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """KV events replay cleanly: no unknown removals, no duplicate stores, rising ids. With KV
    events and prefix caching on, a rank with a KV cache publishes ``Stored`` events and
    reuses the prompts' shared half (when it holds a full block)."""
    engine = make_engine()
    trace = run_trace(engine, default_workload(options), max_passes=options.max_passes)
    out = kv_event_problems(trace.kv_events)
    rank = engine.ranks[0]
    config, services = rank.config, rank.services
    if (not options.expect_kv_cache or services is None or not services.emit_kv_events
            or config is None or not config.enable_prefix_caching):
        return out
    if not any(isinstance(ev.data, StoredBlocks) for _, _, ev in trace.kv_events):
        out.append(f"KV events and prefix caching are on, yet {options.num_requests} prompts of "
                   f"about {options.prompt_len} tokens published no Stored event (set "
                   "ConformanceOptions(expect_kv_cache=False) for a backend without a KV cache)")
    shared = options.prompt_len // 2
    block = config.block_size
    if block and shared >= block and options.num_requests > 1 and not any(
            reused > 0 for _, _, reused in trace.admissions):
        out.append(f"the prompts share their first {shared} tokens ({shared // block} full "
                   f"block(s) of {block}), yet no admission reused a cached block "
                   "(Admission.reused_input_tokens is 0 for every request)")
    return out


_BAD_TIMES = (float("nan"), float("inf"), -1.0)


def check_time_validation(make_engine: MakeEngine, options: ConformanceOptions) -> list[str]:
    """NaN, infinite and negative times are rejected without poisoning."""
    engine = make_engine()
    req = default_workload(options)[0][1]
    out = []
    calls: list[tuple[str, Callable[[float], Any]]] = [
        ("apply", lambda t: engine.apply(0, Submit(req), t)),
        ("execute_pass", engine.execute_pass),
        ("process_internal_work", engine.process_internal_work),
    ]
    for name, call in calls:
        for bad in _BAD_TIMES:
            try:
                call(bad)
                out.append(f"{name}({bad}) was accepted")
            except Exception:
                pass
    if engine.poisoned is not None:
        out.append(f"invalid times poisoned the engine: {engine.poisoned}")
    trace = run_trace(engine, [(0.0, req)], max_passes=options.max_passes)
    return out + _check_requests(trace, {req.request_id: req}, options)


CHECKS: dict[str, Callable[[MakeEngine, ConformanceOptions], list[str]]] = {
    "idle_engine": check_idle_engine,
    "completions": check_completions,
    "exact_output_tokens": check_exact_output_tokens,
    "zero_output": check_zero_output,
    "duplicate_submit": check_duplicate_submit,
    "cancel_waiting": check_cancel_waiting,
    "cancel_running": check_cancel_running,
    "mid_pass_cancel": check_mid_pass_cancel,
    "determinism": check_determinism,
    "kv_events": check_kv_events,
    "time_validation": check_time_validation,
    "runs_match_stepping": check_runs_match_stepping,
}
"""Every check by name, in the order :func:`check_rank_conformance` runs them."""


def check_rank_conformance(
    make_engine: MakeEngine,
    *,
    options: ConformanceOptions | None = None,
    skip: Iterable[str] = (),
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Run every check (minus ``skip``) against engines from ``make_engine``.

    An exception escaping a check counts as that check's failure, named with the check.
    """
    options = options or ConformanceOptions()
    skipped = set(skip)
    unknown = skipped - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; known: {', '.join(CHECKS)}")
    report = ConformanceReport()
    for name, check in CHECKS.items():
        if name in skipped:
            continue
        report.checks.append(name)
        try:
            problems = check(make_engine, options)
        except Exception as exc:  # a crashing rank is a conformance failure, not a kit bug
            problems = [f"raised {type(exc).__name__}: {exc}"]
        report.failures.extend(f"{name}: {p}" for p in problems)
    if raise_on_failure:
        report.raise_if_failed()
    return report


class RankConformance:
    """Subclass as ``TestXxx`` and set ``make_engine`` (a staticmethod) to get one pytest
    test per check. Override ``conformance_options`` or list names in ``skip_checks``."""

    conformance_options: ClassVar[ConformanceOptions] = ConformanceOptions()
    skip_checks: ClassVar[tuple[str, ...]] = ()

    def make_engine(self) -> Engine:  # pragma: no cover - always overridden
        raise NotImplementedError("set make_engine = staticmethod(engine_maker(MyRank))")

    def _run(self, name: str) -> None:
        if name in self.skip_checks:
            import pytest

            pytest.skip(f"{name} skipped by {type(self).__name__}.skip_checks")
        problems = CHECKS[name](self.make_engine, self.conformance_options)
        ConformanceReport([name], [f"{name}: {p}" for p in problems]).raise_if_failed()

    def test_idle_engine(self) -> None:
        self._run("idle_engine")

    def test_completions(self) -> None:
        self._run("completions")

    def test_exact_output_tokens(self) -> None:
        self._run("exact_output_tokens")

    def test_duplicate_submit(self) -> None:
        self._run("duplicate_submit")

    def test_zero_output(self) -> None:
        self._run("zero_output")

    def test_cancel_waiting(self) -> None:
        self._run("cancel_waiting")

    def test_cancel_running(self) -> None:
        self._run("cancel_running")

    def test_mid_pass_cancel(self) -> None:
        self._run("mid_pass_cancel")

    def test_determinism(self) -> None:
        self._run("determinism")

    def test_kv_events(self) -> None:
        self._run("kv_events")

    def test_time_validation(self) -> None:
        self._run("time_validation")

    def test_runs_match_stepping(self) -> None:
        self._run("runs_match_stepping")
