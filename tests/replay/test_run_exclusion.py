"""Runs that look past arrivals proved to go to another worker (servesim.fast.replay_runs).

With several workers in timestamp mode without sessions, a run on worker ``w`` may continue
past arrivals the router proves it will send elsewhere (``servesim.fast.router_exclusion``). The
results must stay byte-identical to stepping; the driver's internal checks (an arrival routed
to a worker whose run extends past it, a request finishing sooner than its planned length
allowed) turn a wrong bound into an error, so every replay here also exercises them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig
from servesim.config.sections import ReportConfig
from servesim.contract import KvBlock, KvEvent, RemovedBlocks, Request, StoredBlocks
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.fast.overlay import FastOverlay
from servesim.fast.replay_runs import _Finishers
from servesim.replay.cluster import ClusterState, build_engines
from servesim.replay.driver import Replayer, ReplayError
from servesim.replay.routers import KvRouter, RoundRobinRouter, _water_level
from servesim.report.summary import build_report, dumps, per_request_lines
from servesim.timing import PolynomialTiming
from servesim.tokens import Tokens, TokenSeq
from servesim.workload.mooncake import MooncakeTrace
from servesim_vllm.rank import VllmRank

BLOCK = 4


@st.composite
def bursts(draw: Any) -> dict:
    """Single-turn traces with same-time bursts, on 2-4 workers with small or large pools."""
    n = draw(st.integers(2, 18))
    lines, t = [], 0
    for i in range(n):
        t += draw(st.sampled_from([0, 0, 1, 7, 30, 90]))
        hashes = [draw(st.integers(0, 2))] if draw(st.booleans()) else []
        hashes += [100 + i * 10 + j for j in range(draw(st.integers(0, 5)))]
        if not hashes:
            hashes = [100 + i * 10]
        lines.append(json.dumps({"timestamp": t, "hash_ids": hashes,
                                 "output_length": draw(st.integers(1, 70))}))
    return dict(lines=lines, workers=draw(st.integers(2, 4)), kv=draw(st.booleans()),
                blocks=draw(st.sampled_from([24, 40, 4096])), caching=draw(st.booleans()))


class _ProvingKv(KvRouter):
    """The KV router with its exclusion proofs on (off by default: they cost about what they
    save on the 4-worker benchmark)."""

    exclusion_enabled = True


def _replayer(case: dict, runs: bool, router: Any = None) -> Replayer:
    workload = MooncakeTrace.parse_lines(case["lines"], "t.jsonl", BLOCK)
    workers = case["workers"]
    if router is None:
        router = (_ProvingKv if case["kv"] else RoundRobinRouter)(workers, 1, BLOCK)
    cfg = EngineConfig(num_gpu_blocks=case["blocks"], block_size=BLOCK,
                       enable_prefix_caching=case["caching"])
    factory = EngineFactory(cfg, VllmRank, PolynomialTiming(), emit_kv_events=case["kv"])
    factory.engine_class = RunEngine
    return Replayer(build_engines(factory.build, workers), workload, router=router,
                    block_size=BLOCK, record_token_times=True, speed=FastOverlay(runs=runs))


def _outputs(rp: Replayer) -> tuple[str, list[str]]:
    log = rp.run()
    return dumps(build_report(log, ReportConfig())), list(per_request_lines(log))


@settings(max_examples=60, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(bursts())
def test_runs_past_excluded_arrivals_match_stepping(case: dict) -> None:
    rp = _replayer(case, runs=True)
    assert rp.run_driver is not None and rp.run_driver.planned is not None
    assert _outputs(rp) == _outputs(_replayer(case, runs=False))


def _staggered(workers: int, kv: bool) -> dict:
    """Long decodes on every worker while arrivals keep coming: most arrivals can be proved
    to go elsewhere while a loaded worker decodes."""
    lines = [json.dumps({"timestamp": i * 20, "hash_ids": [1000 + i * 10 + j for j in range(i % 4 + 1)],
                         "output_length": 80 + (i * 37) % 90}) for i in range(24)]
    return dict(lines=lines, workers=workers, kv=kv, blocks=4096, caching=True)


def _run_counts(case: dict, extend: bool) -> tuple[int, int, tuple[str, list[str]]]:
    rp = _replayer(case, runs=True)
    assert rp.run_driver is not None
    if not extend:
        rp.run_driver.planned = None  # what the driver does where exclusion does not apply
    out = _outputs(rp)
    return rp.run_driver.committed, rp.run_driver.extended, out


@pytest.mark.parametrize("kv", [True, False])
def test_exclusion_lengthens_runs_and_keeps_results(kv: bool) -> None:
    case = _staggered(4, kv)
    n_ext, extended, out = _run_counts(case, extend=True)
    n_plain, none, plain = _run_counts(case, extend=False)
    step = _outputs(_replayer(case, runs=False))
    assert out == plain == step
    assert none == 0 and extended > 0
    assert n_ext < n_plain


def test_exclusion_is_off_where_it_is_not_argued() -> None:
    plain_kv = _replayer(_staggered(2, True), runs=True, router=KvRouter(2, 1, BLOCK))
    assert plain_kv.run_driver.planned is None  # type: ignore[union-attr] # off by default
    case = _staggered(1, True)
    assert _replayer(case, runs=True).run_driver.planned is None  # type: ignore[union-attr]
    sess = dict(_staggered(2, True))
    sess["lines"] = [json.dumps({**json.loads(x), "session_id": "s"}) for x in sess["lines"]]
    assert _replayer(sess, runs=True).run_driver.planned is None  # type: ignore[union-attr]


class _Overconfident(RoundRobinRouter):
    """Claims every arrival goes elsewhere: the driver's check must catch the lie."""

    def exclusion_margins(self, worker: int, arrivals: Iterable[tuple[TokenSeq, Sequence[int]]],
                          state: ClusterState) -> Iterator[float]:
        for _ in arrivals:
            yield float("inf")


def test_a_wrong_exclusion_is_an_internal_error() -> None:
    case = _staggered(2, False)
    rp = _replayer(case, runs=True, router=_Overconfident(2, 1, BLOCK))
    with pytest.raises(ReplayError, match="internal: an arrival"):
        rp.run()


def test_water_level_is_the_best_minimum_of_any_split() -> None:
    assert _water_level([1.0, 5.0, 9.0], 0.0) == 1.0
    assert _water_level([1.0, 5.0, 9.0], 2.0) == 3.0
    assert _water_level([1.0, 5.0, 9.0], 4.0) == 5.0
    assert _water_level([1.0, 5.0, 9.0], 12.0) == 9.0  # 4 to the first, 8 shared by two
    assert _water_level([1.0, 5.0, 9.0], 15.0) == 10.0
    assert _water_level([2.0], 3.5) == 5.5


def test_largest_cap_counts_requests_that_may_finish() -> None:
    state = ClusterState(2, 1)
    for rid, blocks in ((0, 3), (1, 5), (2, 4)):
        state.add(rid, 0, 0, blocks)

    def relief(st: ClusterState, rid: int) -> float:
        return float(st.release_bound(rid)[0])

    # (tokens left, request id): (9, 2), (2, 0), (4, 1)
    left = _Finishers([9 << 32 | 2, 2 << 32 | 0, 4 << 32 | 1], state, relief)
    assert left.largest_cap(12.5) == 1 << 30
    assert left.largest_cap(3.5) == 3  # request 0 may finish, request 1 not
    assert left.largest_cap(3.0) == 1  # request 0 must not finish
    assert left.largest_cap(0.0) == 0
    assert _Finishers([], state, relief).largest_cap(1.0) == 1 << 30


def test_release_bound_covers_blocks_a_request_did_not_count() -> None:
    state = ClusterState(1, 1)
    state.add(0, 0, 8, 3, (11, 12))  # 2 hashed blocks + a tail block
    state.add(1, 0, 8, 3, (11, 12))  # shares both: counts only its tail
    assert state.active_blocks == [4]
    assert state.release_bound(1) == (3, 8)
    state.finish(0)
    assert state.active_blocks == [3]  # request 1's finish now frees 3 > its counted 1
    state.prefill_done(1)
    assert state.release_bound(1) == (3, 0)
    state.finish(1)
    assert state.active_blocks == [0] and state.on_slot == [{}]


def _stored(hashes: Sequence[int]) -> list[KvEvent]:
    blocks = tuple(KvBlock(h, h) for h in hashes)
    return [KvEvent(0, 0, StoredBlocks(None, blocks))]


def _removed(hashes: Sequence[int]) -> list[KvEvent]:
    return [KvEvent(0, 0, RemovedBlocks(tuple(hashes)))]


@settings(max_examples=100, derandomize=True, deadline=None)
@given(st.data())
def test_kv_margins_are_safe_bounds(data: Any) -> None:
    """Positive margins (less the relief of what finished on ``w``) exclude ``w`` whatever
    the argued changes do before each arrival: other slots finish requests, emit first tokens,
    store and evict blocks; ``w`` finishes requests within the margin and evicts blocks."""
    workers = data.draw(st.integers(2, 4))
    router = KvRouter(workers, 1, BLOCK)
    state = ClusterState(workers, 1)
    lengths = st.integers(1, 24)
    prompts = [_prompt(data.draw(lengths)) for _ in range(data.draw(st.integers(1, 5)))]
    hashed = [(p, p.block_hashes_elided(BLOCK)[0]) for p in prompts]
    rid = 0
    for s in range(workers):  # requests in flight (some sharing the arrivals' prompts)
        for _ in range(data.draw(st.integers(0, 4))):
            p, hashes = hashed[data.draw(st.integers(0, len(hashed) - 1))] if data.draw(
                st.booleans()) else (_prompt(data.draw(lengths)), None)
            isl = len(p)
            state.add(rid, s, data.draw(st.sampled_from([0, isl])), -(-isl // BLOCK),
                      list(hashes) if hashes is not None else None)
            rid += 1
        for _p, hashes in hashed:  # cached prefixes
            if hashes and data.draw(st.booleans()):
                router.on_kv_events(s, _stored(hashes[:data.draw(st.integers(1, len(hashes)))]))
    w = data.draw(st.integers(0, workers - 1))
    margins = list(router.exclusion_margins(w, hashed, state))
    relief = 0.0
    for i, (p, hashes) in enumerate(hashed):
        if i >= len(margins) or not margins[i] - relief > 0:
            break
        for r in list(state._req):
            slot = state._req[r][0]
            choice = data.draw(st.sampled_from(["keep", "first", "finish"]))
            if slot != w and choice == "first":
                state.prefill_done(r)
            elif choice == "finish":
                extra = router.exclusion_relief(state, r) if slot == w else 0.0
                if slot == w and not margins[i] - (relief + extra) > 0:
                    continue
                relief += extra
                state.finish(r)
        for s in range(workers):
            if hashes and data.draw(st.booleans()):
                router.on_kv_events(s, _removed(hashes[-1:]))
            elif s != w and hashes and data.draw(st.booleans()):
                router.on_kv_events(s, _stored(hashes))
        req = Request(rid, p, 1)
        worker, dp = router.select(req, hashes, state)
        assert worker != w
        router.routed(req, worker, dp, state)
        rid += 1


def _prompt(n: int) -> TokenSeq:
    """``n`` tokens; prompts of equal length are equal (so they share blocks)."""
    return Tokens(list(range(7000 + n * 100, 7000 + n * 101)))
