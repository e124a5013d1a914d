"""SGLang's overlap loop (``engine.sglang.overlap_schedule``, servesim_sglang.overlap).

The oracle goldens (tests/golden/sglang_oracle/overlap_*) pin the step log; these tests pin
what the oracle cannot show: what the client sees, the decode step that waits for a finishing
request's KV (it needs ``ignore_eos`` off, which the oracle's overlap loop refuses), cancels
and the workers the loop does not apply to.
"""

from __future__ import annotations

from typing import Any

from servesim.config.engine import EngineConfig
from servesim.contract import CancelRequest, Request, Submit, WorkerType
from servesim.factory import EngineFactory
from servesim.timing.builtin import FixedTiming
from servesim.tokens import Tokens
from servesim_sglang.behaviour import resolve
from servesim_sglang.config import SglangConfig
from servesim_sglang.conformance import SglangOracleOptions
from servesim_sglang.rank import SglangRank


def _engine(pool: int, reqs: list[tuple[int, int]], **sg: Any):
    config = SglangConfig(profile="sglang-0.5.23", **sg)
    engine = EngineFactory(EngineConfig(backend="sglang", num_gpu_blocks=pool, block_size=1), SglangRank,
                           FixedTiming(), backend_config=config, record_schedule=True).build(0)
    for i, (prompt, out) in enumerate(reqs):
        engine.apply(0, Submit(Request(i, Tokens([i * 1000 + t for t in range(prompt)]), out)), 0.0)
    return engine


def _passes(engine, limit: int = 500) -> list[dict[str, Any]]:
    """Per pass: tokens and completions the client got, and the pass-log fields."""
    now, out = 0.0, []
    while not engine.is_drained():
        assert len(out) < limit
        started = engine.execute_pass(now)
        now = started.end_ms
        eff = engine.complete_pass(started.pass_id, now).by_rank[0].effects
        rec = eff.schedule
        out.append(dict(tokens=list(eff.outputs.token_request_ids), completed=list(eff.outputs.completed),
                        finished=list(rec.finished), mode=rec.engine_fields["mode"],
                        running_batch=rec.engine_fields["running_batch"], running=rec.running,
                        retracted=list(rec.engine_fields["retracted"]),
                        free=rec.engine_fields["free_tokens"], end=now))
    return out


def test_the_profile_has_sglangs_default_loop_and_the_oracle_options_name_theirs() -> None:
    assert resolve(SglangConfig(profile="sglang-0.5.23")).overlap_schedule
    assert not resolve(SglangConfig()).overlap_schedule
    assert SglangOracleOptions().backend_settings()["overlap_schedule"] is False
    assert SglangOracleOptions(overlap=True).backend_settings()["overlap_schedule"] is True


def test_tokens_reach_the_client_when_their_pass_ends_and_finishes_are_processed_a_pass_later() -> None:
    reqs = [(20, 3), (30, 5), (25, 1)]
    off = _passes(_engine(400, reqs, overlap_schedule=False))
    on = _passes(_engine(400, reqs, overlap_schedule=True))
    # the client sees the same tokens and completions at the same passes and times
    assert [(p["tokens"], p["completed"], p["end"]) for p in on[:len(off)]] == \
        [(p["tokens"], p["completed"], p["end"]) for p in off]
    assert [p["completed"] for p in off] == [[2], [], [0], [], [1]]
    # the scheduler processes each finish one pass later; one more pass (no model work,
    # no time) processes the last
    assert [p["finished"] for p in off] == [[2], [], [0], [], [1]]
    assert [p["finished"] for p in on] == [[], [2], [], [0], [], [1]]
    assert on[-1] == dict(tokens=[], completed=[], finished=[1], mode="idle", running_batch=0,
                          running=0, retracted=[], free=319, end=off[-1]["end"])
    # request 2 (one output token) counts as running until its result is processed
    assert [p["running"] for p in off] == [2, 2, 1, 1, 0]
    assert [p["running"] for p in on] == [3, 2, 2, 1, 1, 0]
    # KV: the same allocations (freed KV stays cached, so free tokens do not rise)
    assert [p["free"] for p in on[:-1]] == [p["free"] for p in off] == [325, 323, 321, 320, 319]


def test_a_decode_step_waits_for_a_finishing_request_instead_of_retracting() -> None:
    """``update_running_batch``: request 1's next token does not fit while request 0's last
    one is in flight, so the step decodes nothing; request 0's KV comes back at its end."""
    reqs = [(6, 33), (15, 37), (29, 20)]
    sg = dict(ignore_eos_reserves_full_output=False)
    on = _passes(_engine(85, reqs, overlap_schedule=True, **sg))
    off = _passes(_engine(85, reqs, overlap_schedule=False, **sg))
    assert [(p["mode"], p["running_batch"], p["finished"], p["free"]) for p in on[32:36]] == [
        ("decode", 2, [], 2), ("decode", 2, [], 0), ("idle", 1, [0], 0), ("decode", 1, [], 31)]
    assert on[33]["completed"] == [0] and on[34]["tokens"] == []
    assert off[33]["finished"] == [0] and off[34]["free"] == 31
    assert not any(p["retracted"] for p in on + off)
    assert (len(on), len(off)) == (61, 58)
    for passes in (on, off):
        tokens = [rid for p in passes for rid in p["tokens"]]
        assert [tokens.count(i) for i in range(3)] == [33, 37, 20]


def test_a_request_cancelled_with_its_token_in_flight_frees_its_kv() -> None:
    engine = _engine(400, [(20, 10), (30, 10)], overlap_schedule=True)
    for _ in range(3):
        started = engine.execute_pass(0.0)
        engine.complete_pass(started.pass_id, started.end_ms)
    engine.apply(0, CancelRequest(0), 0.0)
    rest = _passes(engine)
    assert [rid for p in rest for rid in p["tokens"]] == [1] * 7
    assert rest[-1]["finished"] == [1] and engine.ranks[0].sched.running == []


def test_the_loop_applies_to_aggregated_workers_without_speculative_decoding_only() -> None:
    def rank(worker_type: WorkerType) -> SglangRank:
        config = EngineConfig(backend="sglang", num_gpu_blocks=100, worker_type=worker_type)
        engine = EngineFactory(config, SglangRank, FixedTiming(),
                               backend_config=SglangConfig(profile="sglang-0.5.23")).build(0)
        return engine.ranks[0]

    assert rank(WorkerType.AGGREGATED).sched.overlap
    assert not rank(WorkerType.PREFILL).sched.overlap
    assert not rank(WorkerType.DECODE).sched.overlap


def test_a_closed_loop_at_max_running_requests_waits_for_the_processing_pass() -> None:
    """A closed-loop client at ``max_running_requests`` with fixed lengths: the whole batch
    finishes in one pass and the next round arrives as it ends. The old requests hold their
    slots until the overlap loop's next (empty, zero-duration) pass processes their finishes;
    the pass after it, at the same instant, admits the new round. That empty pass changed
    what can be admitted, so it is not a livelock (it was a ReplayError)."""
    from servesim.replay.driver import Replayer
    from servesim.workload.model import Session, Turn, Workload

    sessions = tuple(Session(f"s{i}", 0.0, [Turn(i, Tokens([i * 100 + t for t in range(16)]), 3)])
                     for i in range(4))
    config = SglangConfig(overlap_schedule=True)
    factory = EngineFactory(EngineConfig(backend="sglang", num_gpu_blocks=400, block_size=1,
                                         max_num_seqs=2), SglangRank, FixedTiming(),
                            backend_config=config)
    replayer = Replayer([factory.build(0)], Workload(sessions), concurrency=2, record_token_times=True)
    log = replayer.run()
    assert log.ntok == [3, 3, 3, 3]
    # FixedTiming: a prefill pass 10 ms, a decode pass 1 ms. Round one is prefilled [0, 10]
    # and decodes at 11 and 12, where both finish; round two arrives at 12, waits for the
    # zero-duration pass that processes those finishes, and is prefilled [12, 22].
    assert log.token_times == [[10.0, 11.0, 12.0]] * 2 + [[22.0, 23.0, 24.0]] * 2
    assert log.done == [12.0, 12.0, 24.0, 24.0]


def _lag_engine(lag: bool):
    config = SglangConfig(overlap_schedule=True, overlap_read_lag=lag)
    return EngineFactory(EngineConfig(backend="sglang", num_gpu_blocks=400, block_size=1), SglangRank,
                         FixedTiming(), backend_config=config).build(0)


def test_the_read_lag_puts_a_request_arriving_during_a_pass_two_passes_on() -> None:
    """FixedTiming: prefill 10 ms, decode 1 ms. A (16 tokens, 6 out) at 0; B at 5, while A's
    prefill runs. Without the lag B's prefill is the pass at 10 (first token 20); with it the
    pass at 10 (A's decode) was chosen at 0, and B is read for the pass after it: [11, 21]
    (a prefill pass leaves A's decode out)."""
    from servesim.testing.driver import drive

    a = Request(0, Tokens(range(16)), 6)
    b = Request(1, Tokens(range(100, 116)), 2)
    off = drive(_lag_engine(False), [(0.0, a), (5.0, b)])
    on = drive(_lag_engine(True), [(0.0, a), (5.0, b)])
    assert off.requests[1].token_times[0] == 20.0
    assert on.requests[1].token_times[0] == 21.0
    assert on.requests[0].token_times[:3] == [10.0, 11.0, 22.0]
    assert off.requests[0].token_times[:3] == [10.0, 21.0, 22.0]


def test_the_read_lag_follows_the_profile_and_the_oracle_turns_it_off() -> None:
    assert resolve(SglangConfig(profile="sglang-0.5.23")).overlap_read_lag
    assert not resolve(SglangConfig()).overlap_read_lag
    assert SglangOracleOptions(overlap=True).backend_settings()["overlap_read_lag"] is False


def test_an_unread_request_can_be_cancelled() -> None:
    engine = _lag_engine(True)
    engine.apply(0, Submit(Request(0, Tokens(range(16)), 6)), 0.0)
    started = engine.execute_pass(0.0)
    engine.apply(0, Submit(Request(1, Tokens(range(100, 116)), 2)), 5.0)
    assert len(engine.ranks[0].read_lag) == 1  # type: ignore[attr-defined]
    cancel = engine.apply(0, CancelRequest(1), 6.0)
    assert cancel.retired_requests == (1,)
    engine.complete_pass(started.pass_id, started.end_ms)
    assert not engine.ranks[0].read_lag  # type: ignore[attr-defined]
