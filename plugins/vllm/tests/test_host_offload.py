"""Host KV offload G2 on the vllm rank (aisimulate-engine.md §9).

Fixed timing (prefill 10 ms, decode 2 ms); blocks of 4 tokens at 1e6 bytes per token make
every host transfer 4 ms per block at 1 GB/s.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig
from servesim.contract import (
    APPLIED,
    CacheTierAttribution,
    CancelRequest,
    Request,
    StoredBlocks,
    Submit,
    WorkerType,
)
from servesim.engine import Engine
from servesim.kv.host_tier import Lookup, NativeHostOffloadConfig
from servesim.testing.trace import run_trace
from servesim.tokens import Tokens
from servesim_vllm.rank import VllmRank
from vllm_helpers import RecordingTiming, make_engine, shared_prefix_requests

A = list(range(8))  # two full blocks


def host_engine(host_blocks: int = 16, gbps: float = 1.0, **kw) -> Engine:
    kw.setdefault("num_gpu_blocks", 4)
    return make_engine(RecordingTiming(), block_size=4, kv_bytes_per_token=1e6,
                       native_host_offload=NativeHostOffloadConfig(
                           num_host_blocks=host_blocks, d2h_bandwidth_gbps=gbps,
                           h2d_bandwidth_gbps=gbps), **kw)


def run_pass(eng: Engine, now: float):
    s = eng.execute_pass(now)
    assert s is not None
    return s, eng.complete_pass(s.pass_id, s.end_ms).by_rank[0].effects


def evict_a_from_g1(eng: Engine) -> float:
    """Request 1 (prompt A) finishes, its blocks go to the host; request 2 evicts them from
    the 4-block G1 pool. Returns the time the rank is idle again."""
    eng.apply(0, Submit(Request(1, Tokens(A), 1)), 0.0)
    s, eff = run_pass(eng, 0.0)  # prefill + first token: done at 10 ms, store submitted
    assert s.end_ms == 10.0 and eff.outputs.completed == [1]
    tier = eng.ranks[0].host_tier
    assert tier.num_blocks == 2 and eng.next_internal_deadline_ms() == 18.0  # 2 blocks x 4 ms
    eng.process_internal_work(18.0)
    eng.apply(0, Submit(Request(2, Tokens(list(range(100, 116))), 1)), 18.0)
    s, _ = run_pass(eng, 18.0)  # needs all 4 blocks: A's are evicted from G1
    eng.process_internal_work(s.end_ms + 100)  # request 2's stores
    return s.end_ms + 100


def test_an_evicted_prefix_comes_back_from_the_host_through_internal_work() -> None:
    eng = host_engine(emit_kv_events=True)
    now = evict_a_from_g1(eng)
    pool = eng.ranks[0].sched.pool
    assert pool.num_active == 0
    eng.apply(0, Submit(Request(3, Tokens(A + [50, 51]), 1)), now)
    s, _ = run_pass(eng, now)
    # Parked on its load: no admission, no model work, G1 blocks reserved for the prefix.
    assert s.by_rank[0].effects.admissions == () and s.end_ms == now
    assert pool.num_active == 2 and not eng.is_ready()
    deadline = eng.next_internal_deadline_ms()
    assert deadline == now + 8.0
    ((_, start),) = eng.process_internal_work(deadline)
    stored = [e.data for e in start.kv_events if isinstance(e.data, StoredBlocks)]
    assert [d.medium for d in stored] == [None] and len(stored[0].blocks) == 2  # back in G1
    s, _ = run_pass(eng, deadline)
    (adm,) = s.by_rank[0].effects.admissions
    assert adm.reused_input_tokens == 8
    assert adm.cache_tier_attribution == CacheTierAttribution(0, 8)
    assert eng.ranks[0].host_tier.totals.loads == 1


def test_host_events_carry_the_cpu_medium() -> None:
    eng = host_engine(emit_kv_events=True)
    eng.apply(0, Submit(Request(1, Tokens(A), 1)), 0.0)
    _, eff = run_pass(eng, 0.0)
    assert all(e.data.medium is None for e in eff.kv_events)  # the store is still in flight
    device = [b for e in eff.kv_events if isinstance(e.data, StoredBlocks) for b in e.data.blocks]
    ((_, start),) = eng.process_internal_work(18.0)
    (ev,) = start.kv_events
    assert ev.data.medium == "CPU" and ev.data.parent_hash is None
    assert ev.data.blocks == tuple(device)  # the same sequence and token hashes as in G1
    assert ev.event_id == eff.kv_events[-1].event_id + 1  # one event stream per rank


def test_a_load_due_during_a_pass_waits_for_the_pass_boundary() -> None:
    eng = host_engine(num_gpu_blocks=5)
    now = evict_a_from_g1(eng)
    eng.apply(0, Submit(Request(3, Tokens(A + [50]), 1)), now)
    eng.apply(0, Submit(Request(4, Tokens([900, 901]), 3)), now)
    s = eng.execute_pass(now)  # 3 parks (load due at now + 8), 4 prefills until now + 10
    assert [a.request_id for a in s.by_rank[0].effects.admissions] == [4]
    assert eng.next_internal_deadline_ms() is None  # masked while the pass is in flight
    assert eng.ranks[0].process_internal_work(now + 8, True).kv_events == ()
    eng.complete_pass(s.pass_id, s.end_ms)  # the load completes at this boundary
    s2 = eng.execute_pass(s.end_ms)
    assert [a.request_id for a in s2.by_rank[0].effects.admissions] == [3]


def test_cancelling_a_loading_request_frees_its_reservation_at_command_time() -> None:
    eng = host_engine()
    now = evict_a_from_g1(eng)
    eng.apply(0, Submit(Request(3, Tokens(A + [50]), 1)), now)
    run_pass(eng, now)
    sched = eng.ranks[0].sched
    assert sched.pool.num_active == 2
    eff = eng.apply(0, CancelRequest(3), now + 1)
    assert eff.result == APPLIED and eff.retired_requests == (3,)
    assert sched.pool.num_active == 0 and not sched.requests
    tier = eng.ranks[0].host_tier
    assert tier.totals.cancelled_loads == 1 and eng.next_internal_deadline_ms() is None
    assert eng.is_drained()


def test_host_offload_is_refused_where_the_reference_refuses_it() -> None:
    host = NativeHostOffloadConfig(num_host_blocks=4)
    assert [p[0] for p in VllmRank.validate_config(EngineConfig(native_host_offload=host), None)] == [
        "engine.native_host_offload"]  # no bytes per token
    bad = EngineConfig(native_host_offload=host, kv_bytes_per_token=2.0, dp_size=2, aic_nextn=1,
                       enable_prefix_caching=False, worker_type=WorkerType.DECODE)
    messages = [m for _, m in VllmRank.validate_config(bad, None)]
    assert messages == ["needs an aggregated worker (not a prefill or decode role)",
                        "needs dp_size 1, got 2", "needs enable_prefix_caching: true",
                        "cannot be combined with aic_nextn"]
    geometry = EngineConfig(native_host_offload=host, num_layers=2, num_kv_heads=2, head_dim=8)
    assert VllmRank.validate_config(geometry, None) == []


workloads = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), st.integers(1, 20),
                               st.integers(0, 8)), min_size=1, max_size=12)


@settings(max_examples=60, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=workloads, g1=st.integers(6, 16), host=st.integers(1, 12),
       gbps=st.sampled_from([0.0, 0.5, 4.0]), cancel=st.integers(-1, 11))
def test_random_host_workloads_drain_without_leaks(spec: list, g1: int, host: int, gbps: float,
                                                   cancel: int) -> None:
    arrivals = shared_prefix_requests(spec)
    eng = host_engine(host_blocks=host, gbps=gbps, num_gpu_blocks=g1, emit_kv_events=True)

    def mid_pass(engine: Engine, now: float, trace) -> None:
        if 0 <= cancel < len(arrivals) and cancel in engine.ranks[0].sched.requests:
            engine.apply(0, CancelRequest(cancel), now)

    trace = run_trace(eng, arrivals, mid_pass=mid_pass, max_passes=20_000)
    assert trace.drained and not trace.failures
    for _, rq in arrivals:
        if rq.request_id != cancel and trace.terminals.get(rq.request_id, [(0, True)])[-1][1] is False:
            assert len(trace.tokens.get(rq.request_id, [])) == rq.max_output_tokens  # once each
    rank = eng.ranks[0]
    tier = rank.host_tier
    assert rank.sched.pool.num_active == 0 and not rank.sched.host.parked  # no leaked G1 blocks
    # no pin outlives its transfer (HostTier has no public view of its pins yet:
    # tests/qa/test_private_access.py, AWAITING_CORE)
    assert tier.pinned == 0 and not tier.busy and tier.num_blocks <= host
    cpu = [e for _, _, e in trace.kv_events if e.data.medium == "CPU"]
    resident: set[int] = set()
    for e in cpu:  # the host events replay onto exactly the tier's residency
        if isinstance(e.data, StoredBlocks):
            resident.update(b.block_hash for b in e.data.blocks)
        else:
            resident.difference_update(e.data.block_hashes)
    # nothing in flight (not busy): every block the tier holds is resident
    assert tier.num_blocks == len(resident)
    assert all(tier.lookup(k) is Lookup.HIT for k in resident)
