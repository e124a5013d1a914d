"""The Replayer against the toy rank (FixedTiming prefill 10 ms, decode 1 ms)."""

from __future__ import annotations

import json
import re

import pytest
from replay_toy import ToyRank, make_factory
from servesim.config.sections import ReportConfig
from servesim.contract import (
    EMPTY_START,
    CommandEffects,
    CommandResult,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
)
from servesim.rank import InternalWork, RankPass
from servesim.replay.cluster import build_engines
from servesim.replay.driver import Replayer, ReplayError
from servesim.replay.routers import KvRouter
from servesim.report.summary import build_report, dumps, per_request_lines
from servesim.sinks.base import FpmSink, KvEventSink
from servesim.workload.mooncake import MooncakeTrace


def trace(*records: dict) -> object:
    return MooncakeTrace.parse_lines([json.dumps(r) for r in records], "t.jsonl", 4)


def rec(ts, hash_ids, out, **kw) -> dict:
    return {"timestamp": ts, "hash_ids": hash_ids, "output_length": out, **kw}


def replay(workload, workers=1, factory=None, warmup_hold=None, **kw) -> Replayer:
    factory = factory or make_factory()
    r = Replayer(build_engines(factory.build, workers), workload, block_size=4, **kw)
    r.warmup_hold = warmup_hold
    r.run()
    return r


def test_single_request_token_times():
    r = replay(trace(rec(0, [1, 2], 3)))
    log = r.log
    # prefill pass 0→10 emits token 1; decode passes end at 11 and 12.
    assert (log.arrival[0], log.first[0], log.last[0], log.done[0]) == (0.0, 10.0, 12.0, 12.0)
    assert log.ntok[0] == 3
    assert list(log.itl) == [1.0, 1.0]
    assert r.passes == 3


def test_arrival_mid_pass_waits_for_boundary():
    r = replay(trace(rec(0, [1], 2), rec(5, [2], 1)))
    log = r.log
    # request 1 arrives during request 0's prefill (0→10); its prefill runs 10→20.
    assert log.first[1] == 20.0 and log.done[1] == 20.0
    # request 0 decodes in the same pass as request 1's prefill.
    assert log.last[0] == 20.0


def test_arrival_speedup_divides_rebased_timestamps():
    wl = trace(rec(1000, [1], 1), rec(3000, [2], 1), rec(5000, [3], 1))
    r = replay(wl, arrival_speedup_ratio=2.0)
    assert r.log.arrival == [0.0, 1000.0, 2000.0]


def test_session_turn_released_after_completion_plus_delay():
    wl = trace(
        rec(0, [1], 2, session_id="a"),
        {"hash_ids": [1, 2], "output_length": 1, "session_id": "a", "delay": 7},
        rec(100, [9], 1),
    )
    r = replay(wl)
    log = r.log
    assert log.done[0] == 11.0  # prefill 0→10, decode 10→11
    assert log.arrival[1] == 18.0
    # a turn without explicit delay uses the timestamp gap to the previous turn
    wl2 = trace(rec(0, [1], 1, session_id="s"), rec(30, [1, 2], 1, session_id="s"))
    r2 = replay(wl2)
    assert r2.log.arrival[1] == r2.log.done[0] + 30.0


def test_zero_delay_turn_joins_the_pass_starting_at_previous_completion():
    wl = trace(
        rec(0, [1], 1, session_id="a"),
        {"hash_ids": [1, 2], "output_length": 1, "session_id": "a", "delay": 0},
        rec(0, [5], 5),
    )
    log = replay(wl).log
    # turn 0 ends at 10 while request 2 keeps the engine busy; turn 1 must be in the pass
    # that starts at 10 (a prefill pass, 10 ms), not wait for a decode pass to end at 11.
    assert log.done[0] == 10.0 and log.arrival[1] == 10.0
    assert log.first[1] == 20.0


def test_concurrency_mode_keeps_n_in_flight():
    wl = trace(rec(0, [1], 2), rec(0, [2], 2), rec(500, [3], 2))
    r = replay(wl, concurrency=1)
    log = r.log
    # timestamps are ignored; each request starts when the previous finishes
    assert log.arrival == [0.0, 11.0, 22.0]
    assert log.max_in_flight == 1
    r2 = replay(wl, concurrency=2)
    assert r2.log.arrival[:2] == [0.0, 0.0] and r2.log.max_in_flight == 2


def test_concurrency_caps_sessions_not_requests():
    # cap 1: session a holds its slot through its 5 ms think time; b waits for a to end
    wl = trace(
        rec(0, [1], 1, session_id="a"),
        {"hash_ids": [1, 2], "output_length": 1, "session_id": "a", "delay": 5},
        rec(0, [7], 1, session_id="b"),
    )
    log = replay(wl, concurrency=1).log
    assert log.arrival == [0.0, 15.0, 25.0]  # a0 done 10, a1 due 15 (done 25), then b
    # sessions start in file order, not timestamp order
    wl = trace(rec(900, [1], 1), rec(5, [2], 1))
    assert replay(wl, concurrency=1).log.arrival == [0.0, 10.0]


def test_max_concurrency_keeps_timestamps_and_caps_sessions():
    # a benchmark client's --max-concurrency with a finite --request-rate: a request due while
    # the cap is reached waits for a slot and its TTFT counts from its dispatch
    wl = trace(rec(0, [1], 2), rec(5, [2], 2), rec(500, [3], 2))
    log = replay(wl, max_concurrency=1).log
    # request 0: prefill 0-10, decode 10-11; request 1 (due 5) starts at 11; request 2 at its
    # own timestamp, the slot being free by then
    assert log.arrival == [0.0, 11.0, 500.0]
    assert [f - a for f, a in zip(log.first, log.arrival, strict=True)] == [10.0, 10.0, 10.0]
    assert log.max_in_flight == 1
    assert replay(wl, concurrency=1).log.arrival == [0.0, 11.0, 22.0]  # closed loop
    assert replay(wl).log.arrival == [0.0, 5.0, 500.0]  # no cap
    assert replay(wl, max_concurrency=2).log.arrival == [0.0, 5.0, 500.0]


def test_max_concurrency_waiters_start_in_the_order_they_were_due():
    # due at 9, 3 and 0 (file order 0, 1, 2): the earliest-due waiter takes each free slot
    assert replay(trace(rec(9, [1], 1), rec(3, [2], 1), rec(0, [3], 1)),
                  max_concurrency=1).log.arrival == [20.0, 10.0, 0.0]
    # due at the same time: in file order
    assert replay(trace(rec(0, [1], 1), rec(2, [2], 1), rec(2, [3], 1)),
                  max_concurrency=1).log.arrival == [0.0, 10.0, 20.0]
    # a slot freed at 10 goes to the request waiting since 5, not to the one due at 10
    assert replay(trace(rec(0, [1], 1), rec(5, [2], 1), rec(10, [3], 1)),
                  max_concurrency=1).log.arrival == [0.0, 10.0, 20.0]


def test_max_concurrency_caps_sessions_not_requests():
    # session a holds its slot through its 5 ms think time; b, due at 3, waits for a to end
    wl = trace(
        rec(0, [1], 1, session_id="a"),
        {"hash_ids": [1, 2], "output_length": 1, "session_id": "a", "delay": 5},
        rec(3, [7], 1, session_id="b"),
    )
    assert replay(wl, max_concurrency=1).log.arrival == [0.0, 15.0, 25.0]
    assert replay(wl, max_concurrency=2).log.arrival == [0.0, 15.0, 3.0]


def test_max_concurrency_refuses_concurrency():
    with pytest.raises(ValueError, match="without concurrency"):
        replay(trace(rec(0, [1], 1)), concurrency=1, max_concurrency=1)


def test_warmup_barrier_stops_the_trace_clock_until_the_warmup_ends():
    wl = trace(rec(0, [1], 2), rec(5, [2], 2), rec(20, [3], 2))
    r = replay(wl, warmup_hold=1)
    # request 0 (the warmup) ends at 11: the clock, stopped at its timestamp 0, resumes at 11
    assert r.log.arrival == [0.0, 16.0, 31.0]
    assert r.warm_sessions == {0}
    assert replay(wl).log.arrival == [0.0, 5.0, 20.0]
    # two warmup sessions: the clock stops at the second one's timestamp (5) until both end
    # (request 1's prefill shares the pass 10-20 with request 0's last token; it ends at 21)
    r = replay(wl, warmup_hold=2)
    assert r.log.done[:2] == [20.0, 21.0] and r.log.arrival == [0.0, 5.0, 36.0]
    # a cap delays the warmups themselves; the barrier waits for all of them
    r = replay(trace(rec(0, [1], 2), rec(0, [2], 2), rec(0, [3], 2)), warmup_hold=2, max_concurrency=1)
    assert r.log.arrival == [0.0, 11.0, 22.0]


def test_warmup_barrier_in_concurrency_mode_starts_the_freed_slots_together():
    wl = trace(rec(0, [1], 2), rec(0, [2], 2), rec(0, [3], 2))
    r = replay(wl, warmup_hold=1, concurrency=2)
    # session 0 warms up alone; sessions 1 and 2 both start when it ends
    assert r.log.arrival == [0.0, 11.0, 11.0]
    assert replay(wl, concurrency=2).log.arrival == [0.0, 0.0, 11.0]


def test_warmup_barrier_waits_for_a_whole_session():
    wl = trace(
        rec(0, [1], 1, session_id="a"),
        {"hash_ids": [1, 2], "output_length": 1, "session_id": "a", "delay": 5},
        rec(3, [7], 1, session_id="b"),
    )
    r = replay(wl, warmup_hold=1)
    # a0 done 10, a1 due 15, done 25: b (due 3) waits for the session's end
    assert r.log.arrival == [0.0, 15.0, 28.0]


def test_speedup_divides_inter_turn_delays_too():
    wl = trace(rec(0, [1], 1, session_id="a"),
               {"hash_ids": [1, 2], "output_length": 1, "session_id": "a", "delay": 40})
    log = replay(wl, arrival_speedup_ratio=4.0).log
    assert log.arrival[1] == log.done[0] + 10.0


def test_timestamp_mode_needs_first_turn_timestamps():
    from servesim.errors import TraceError

    wl = trace(rec(0, [1], 1), {"hash_ids": [2], "output_length": 1})
    with pytest.raises(TraceError, match="t.jsonl:2: timestamp mode needs"):
        replay(wl)
    assert replay(wl, concurrency=2).log.arrival == [0.0, 0.0]


def test_same_time_arrivals_dispatch_in_session_order():
    wl = trace(rec(7, [1], 1), rec(3, [2], 1), rec(7, [3], 1))
    # rebased: 4, 0, 4; round robin over 2 workers follows dispatch order 1, 0, 2
    assert replay(wl, workers=2).log.worker == [1, 0, 0]


def test_first_turns_enter_the_heap_one_at_a_time_in_time_then_session_order():
    wl = trace(rec(5, [1], 1), rec(0, [2], 1), rec(5, [3], 1), rec(2, [4], 1), rec(0, [5], 1))
    r = Replayer(build_engines(make_factory().build, 3), wl, block_size=4)
    r._schedule_first_turns()  # noqa: SLF001
    assert [ev[3] for ev in r._heap] == [1]  # noqa: SLF001 - only the earliest waits there
    r = replay(wl, workers=3)
    # dispatch order 1, 4 (t=0), 3 (t=2), 0, 2 (t=5): round robin gives 0, 1, 2, 0, 1
    assert r.log.worker == [0, 0, 1, 2, 1]
    assert r.log.arrival == [5.0, 0.0, 5.0, 2.0, 0.0]


def test_round_robin_order_across_workers():
    wl = trace(*[rec(i, [i + 1], 1) for i in range(5)])
    r = replay(wl, workers=2)
    assert r.log.worker == [0, 1, 0, 1, 0]


def test_kv_router_picks_worker_holding_prefix_and_balances_when_equal():
    f = make_factory(kv_events=True)
    engines = build_engines(f.build, 3)
    wl = trace(
        rec(0, [1, 2, 3], 1),        # -> worker 0 (all equal, rotation starts at 0)
        rec(100, [7, 8], 1),         # -> worker 1 (equal, rotation moved on)
        rec(200, [9], 1),            # -> worker 2
        rec(300, [1, 2, 3, 4], 1),   # shares 3 blocks with request 0 -> worker 0
        rec(400, [7, 8, 5], 1),      # shares 2 blocks with request 1 -> worker 1
    )
    router = KvRouter(3, 1, 4)
    r = Replayer(engines, wl, router=router, block_size=4)
    r.run()
    assert r.log.worker == [0, 1, 2, 0, 1]
    assert r.log.reused[3] == 12 and r.log.reused[4] == 8


def test_kv_router_prefers_less_loaded_worker_without_overlap():
    f = make_factory(prefill_ms=50.0, kv_events=True)
    engines = build_engines(f.build, 2)
    wl = trace(rec(0, [1, 2, 3, 4], 5), rec(1, [5], 5), rec(2, [6, 7], 5))
    r = Replayer(engines, wl, router=KvRouter(2, 1, 4), block_size=4)
    r.run()
    # request 2 arrives while 0 (4 blocks) and 1 (1 block) are prefilling: worker 1 is cheaper
    assert r.log.worker == [0, 1, 1]


def test_kv_router_forgets_removed_blocks():
    f = make_factory(kv_events=True)
    engines = build_engines(f.build, 2)
    router = KvRouter(2, 1, 4)
    wl = trace(rec(0, [1, 2], 1))
    Replayer(engines, wl, router=router, block_size=4).run()
    assert len(router.index) == 2
    router.on_kv_events(0, [engines[0].ranks[0].evict()])
    assert len(router.index) == 0


class _Collect(KvEventSink, FpmSink):
    def __init__(self) -> None:
        self.kv: list = []
        self.fpm: list = []

    def publish(self, worker_id, at_ms, payload) -> None:
        if isinstance(payload, (list, tuple)):
            self.kv.append((worker_id, at_ms, [e.event_id for e in payload]))
        else:
            self.fpm.append((worker_id, at_ms, payload.num_prefill_requests))


def test_sinks_receive_kv_events_and_fpms_in_order():
    sink = _Collect()
    f = make_factory(kv_events=True, fpm=True)
    wl = trace(rec(0, [1, 2], 2), rec(50, [3], 1))
    r = Replayer(build_engines(f.build, 1), wl, block_size=4, kv_sinks=[sink], fpm_sinks=[sink])
    r.run()
    assert sink.kv == [(0, 10.0, [0]), (0, 60.0, [1])]
    assert sink.fpm == [(0, 10.0, 1), (0, 11.0, 0), (0, 60.0, 1)]


def test_rejected_requests_count_as_failed_and_release_next_turn():
    f = make_factory(max_model_len=8)
    wl = trace(rec(0, [1, 2, 3], 2, session_id="s"), {"hash_ids": [1], "output_length": 1,
                                                       "session_id": "s", "delay": 1})
    r = replay(wl, factory=f)
    assert r.log.rejected == [True, False]
    assert r.log.arrival[1] == 1.0  # rejected at the first boundary (0 ms), then +1 ms delay
    rep = build_report(r.log, ReportConfig())
    assert rep["failed"] == 1 and rep["completed"] == 1


def test_determinism_identical_json_bytes():
    def once() -> str:
        wl = trace(*[rec(i * 3, [i % 3, 10 + i], 1 + i % 4) for i in range(30)])
        r = Replayer(build_engines(make_factory(kv_events=True).build, 3), wl,
                     router=KvRouter(3, 1, 4), block_size=4, record_token_times=True)
        r.run()
        return dumps(build_report(r.log, ReportConfig(), {"x": 1})) + "".join(per_request_lines(r.log))

    assert once() == once()


class _Spinner(ToyRank):
    """Ready forever, but every pass is zero-duration and effect-free."""

    def is_ready(self) -> bool:
        return True

    def execute_pass(self, now_ms):
        return RankPass(now_ms, EMPTY_START, None)

    def complete_pass(self, pending, end_ms):
        return PassCompletionEffects(outputs=OutputBatch())

    def apply(self, command, ctx, pending):
        return CommandEffects(CommandResult.submitted(0))


def test_livelock_guard_names_in_flight_requests():
    f = make_factory(rank_class=_Spinner)
    r = Replayer(build_engines(f.build, 1), trace(rec(0, [1], 1)), block_size=4)
    with pytest.raises(ReplayError, match="effect-free zero-duration pass .* 1 in-flight"):
        r.run()


def test_round_robin_and_kv_router_cover_dp_ranks():
    f = make_factory(dp_size=2)
    wl = trace(*[rec(100 * i, [i + 1], 1) for i in range(5)])
    r = Replayer(build_engines(f.build, 2), wl, block_size=4)
    r.run()
    assert list(zip(r.log.worker, r.log.dp_rank, strict=False)) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 0)]
    f = make_factory(dp_size=2, kv_events=True)
    wl = trace(rec(0, [1, 2], 1), rec(100, [3], 1), rec(200, [1, 2, 5], 1))
    r = Replayer(build_engines(f.build, 2), wl, router=KvRouter(2, 2, 4), block_size=4)
    r.run()
    # slots are worker * dp_size + dp_rank; request 2 returns to request 0's rank
    assert list(zip(r.log.worker, r.log.dp_rank, strict=False)) == [(0, 0), (0, 1), (0, 0)]
    assert r.log.reused[2] == 8


def test_progress_reports_completed_and_simulated_time():
    seen = []
    wl = trace(*[rec(10 * i, [i + 1], 2) for i in range(200)])
    r = Replayer(build_engines(make_factory().build, 1), wl, block_size=4,
                 progress=lambda done, total, now: seen.append((done, total, now)))
    r.run()
    assert seen[-1] == (200, 200, r.log.done[-1])
    assert len(seen) > 2 and all(a[0] <= b[0] and a[2] <= b[2] for a, b in zip(seen, seen[1:], strict=False))


def test_progress_bar_renders_only_after_delay():
    import io

    from servesim.cli.progress import RunProgress

    stream = io.StringIO()
    p = RunProgress(stream, delay_s=3600.0)
    p(1, 10, 500.0)
    p.finish()
    assert stream.getvalue() == ""
    p = RunProgress(stream, delay_s=0.0, interval_s=0.0)
    p(5, 10, 1500.0)
    p(10, 10, 3000.0)
    p.finish()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    lines = [ln for ln in text.replace("\r", "\n").split("\n") if ln.strip()]
    assert re.fullmatch(r"\S+ 5/10 requests sim 1\.5 s wall \d:\d\d:\d\d ETA \S+ [\d,]+ req/s", lines[0])
    assert re.fullmatch(r"━+ 10/10 requests sim 3\.0 s wall \d:\d\d:\d\d ETA 0:00:00 [\d,]+ req/s",
                        lines[-1])
    assert text.endswith("\n")


def test_cluster_state_counts_shared_active_blocks_once():
    from servesim.replay.cluster import ClusterState

    st = ClusterState(2, 1)
    st.add(0, 1, prefill_tokens=10, blocks=3, block_hashes=(11, 12))  # 2 full blocks + tail
    st.add(1, 1, prefill_tokens=4, blocks=3, block_hashes=(11, 13, 14))
    assert st.active_blocks == [0, 3 + 2] and st.active_requests == [0, 2]
    assert st.prefill_tokens == [0, 14]
    st.prefill_done(0)
    assert st.prefill_tokens == [0, 4]
    st.finish(0)
    assert st.active_blocks == [0, 3] and st.active_hashes[1] == {11: 1, 13: 1, 14: 1}
    st.finish(1)
    st.finish(1)  # finishing twice is harmless
    assert st.active_blocks == [0, 0] and st.active_requests == [0, 0] and st.prefill_tokens == [0, 0]


def test_kv_router_cost_formula():
    # slot 0 caches the request's first 2 blocks and runs one request with 3 distinct blocks,
    # one of them shared with the new request; slot 1 is empty.
    from servesim.contract import KvBlock, KvEvent, Request, StoredBlocks
    from servesim.replay.cluster import ClusterState
    from servesim.tokens import Tokens

    router = KvRouter(2, 1, 4, None)
    req = Request(9, Tokens(range(14)), 1)  # 14 tokens: 3 full blocks + a tail of 2
    hashes = req.prompt.block_hashes(4)[0]
    router.on_kv_events(0, [KvEvent(0, 0, StoredBlocks(None, tuple(KvBlock(h, h) for h in hashes[:2])))])
    st = ClusterState(2, 1)
    st.add(5, 0, prefill_tokens=8, blocks=3, block_hashes=(hashes[0], 100, 101))
    cost, new = router.costs(req, hashes, st)
    # slot 0: prefill (8 queued + 14 - 2*4 new) / 4 = 3.5; active 3; new blocks 4 - 1 = 3
    # slot 1: prefill 14 / 4 = 3.5; active 0; new blocks 4
    assert new == [6, 14]
    assert cost == [3.5 + 3 + 3, 3.5 + 0 + 4]
    assert router.select(req, hashes, st) == (1, 0)


class _Janitor(ToyRank, InternalWork):
    """Evicts its cache 5 ms after each pass that completed a request (internal work)."""

    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.dues: list[float] = []
        self.swept: list[float] = []

    def complete_pass(self, pending, end_ms):
        if pending.outputs.completed:
            self.dues.append(end_ms + 5.0)
        return pending

    def is_drained(self) -> bool:
        return super().is_drained() and not self.dues

    def next_internal_deadline_ms(self):
        return min(self.dues) if self.dues else None

    def process_internal_work(self, now_ms, pass_in_flight):
        assert self.dues and min(self.dues) <= now_ms and not pass_in_flight
        self.dues = [d for d in self.dues if d > now_ms]
        self.swept.append(now_ms)
        return PassStartEffects(kv_events=(self.evict(),))


def test_internal_work_runs_at_its_deadline_and_feeds_sinks():
    sink = _Collect()
    f = make_factory(kv_events=True, rank_class=_Janitor)
    engines = build_engines(f.build, 1)
    wl = trace(rec(0, [1], 1), rec(12, [2], 1), rec(100, [3], 1))
    r = Replayer(engines, wl, block_size=4, kv_sinks=[sink])
    r.run()
    # request 0 ends at 10 -> sweep due 15, but request 1 arrived at 12 and its pass (12-22)
    # masks the deadline; the sweep runs when the engine is idle again, at 22, then 27 after
    # request 1 completes; request 2 ends at 110 -> sweep at 115.
    assert engines[0].ranks[0].swept == [22.0, 27.0, 115.0]
    # Stored events at pass ends (ids 0, 1, 4), Removed events at the sweeps (2, 3, 5)
    assert sink.kv == [(0, 10.0, [0]), (0, 22.0, [1]), (0, 22.0, [2]), (0, 27.0, [3]),
                       (0, 110.0, [4]), (0, 115.0, [5])]
    assert r.log.done == [10.0, 22.0, 110.0]


class _Picky(ToyRank):
    """Refuses prompts of more than one block at submit time."""

    def apply(self, command, ctx, pending):
        from servesim.errors import CommandRejected

        if command.request.prompt_len > 4:
            raise CommandRejected("prompt too long")
        return super().apply(command, ctx, pending)


def test_submit_refused_by_the_engine_counts_as_failed():
    f = make_factory(rank_class=_Picky)
    wl = trace(rec(0, [1, 2], 3, session_id="s"),
               {"hash_ids": [1], "output_length": 1, "session_id": "s", "delay": 2},
               rec(50, [7], 1))
    r = replay(wl, factory=f)
    assert r.log.rejected == [True, False, False]
    assert r.log.done[0] == 0.0 and r.log.arrival[1] == 2.0  # the session goes on
    rep = build_report(r.log, ReportConfig())
    assert rep["failed"] == 1 and rep["completed"] == 2


def test_forgetting_the_workload_keeps_the_report_and_records():
    """After a run the replayer may drop the trace's requests (the runner does before the
    report): the report and per-request records read only the log and ``session_of``."""
    r = replay(trace(rec(0, [1, 2], 3), rec(5, [1, 3], 2, session_id="s"),
                     {"hash_ids": [1, 3, 4], "output_length": 2, "session_id": "s",
                      "delay": 7}), workers=2)
    cfg = ReportConfig()
    before = dumps(build_report(r.log, cfg)), list(per_request_lines(r.log, r.session_of))
    r.forget_workload()
    assert r.turns == [] and r.workload.sessions == () and r.workload.source == "t.jsonl"
    assert len(r.first_turns) == 0 and r.next_turn == [] and r.session_index == []
    assert (dumps(build_report(r.log, cfg)), list(per_request_lines(r.log, r.session_of))) == before
    assert json.loads(before[1][2])["session_id"] == "s" and r.log.done[2] > r.log.done[1]
