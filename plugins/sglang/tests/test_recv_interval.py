"""SGLang's ``--scheduler-recv-interval`` (``engine.sglang.scheduler_recv_interval``,
servesim_sglang.recv_interval): a request arriving while the engine decodes is read only
when the skipper's counter reaches the interval."""

from __future__ import annotations

import pytest
from servesim.config.engine import EngineConfig
from servesim.contract import Request
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.testing.driver import DriveResult, drive
from servesim.timing.builtin import FixedTiming, FixedTimingConfig
from servesim.tokens import Tokens
from servesim_sglang.config import SglangConfig, validate
from servesim_sglang.rank import SglangRank
from servesim_sglang.recv_interval import RecvSkipper


def run(interval: int, *, runs: bool = False, b_at: float = 15.0) -> DriveResult:
    """A (8-token prompt, 20 tokens) at t=0, B (8 tokens, 2) at ``b_at``; prefill passes
    take 10 ms, decode passes 2 ms."""
    factory = EngineFactory(EngineConfig(backend="sglang", num_gpu_blocks=400, block_size=1), SglangRank,
                           FixedTiming(FixedTimingConfig(prefill_ms=10.0, decode_ms=2.0)),
                           backend_config=SglangConfig(scheduler_recv_interval=interval))
    factory.engine_class = RunEngine
    engine = factory.build(0)
    arrivals = [(0.0, Request(0, Tokens(range(8)), 20)), (b_at, Request(1, Tokens(range(50, 58)), 2))]
    return drive(engine, arrivals, runs=runs)


def test_every_iteration_reads_by_default() -> None:
    # A: prefill [0, 10], decodes from 10 every 2 ms; B (t=15) is read at 16: prefill [16, 26].
    assert run(1).requests[1].token_times[0] == 26.0


@pytest.mark.parametrize("runs", [False, True])
def test_a_request_arriving_during_decode_waits_for_the_counter(runs: bool) -> None:
    # After A's prefill the counter restarts (weight 1000); the decode passes ending at 12,
    # 14, 16 count 1, 2, 3; the iteration at 18 reads B: prefill [18, 28]. Runs of decode
    # passes count their passes the same way.
    result = run(4, runs=runs)
    assert result.requests[1].token_times[0] == 28.0
    assert bool(result.runs) == runs


def test_the_iteration_after_a_prefill_reads() -> None:
    # B arrives during A's prefill pass and is read at its end, as without the skipper.
    assert run(30, b_at=1.0).requests[1].token_times[0] == run(1, b_at=1.0).requests[1].token_times[0]


def test_an_idle_engine_reads_at_once() -> None:
    # B arrives after A finished (10 + 19 * 2 = 48): nothing decodes, the loop reads it.
    assert run(30, b_at=60.0).requests[1].token_times[0] == 70.0


def test_the_counter() -> None:
    skip = RecvSkipper(3)
    assert [skip.reads(kind) for kind in ("decode", "decode", "decode", "prefill", None, "decode")] == [
        False, False, True, True, False, False]
    skip.decode_passes(5)  # 2 + 5 = 7 -> 1 after two resets at 3 and 6
    assert skip.counter == 1
    assert RecvSkipper.build(1, 1) is None and RecvSkipper.build(10, 2) is None


def test_a_bad_interval_names_its_key() -> None:
    problems = validate(EngineConfig(backend="sglang"), SglangConfig(scheduler_recv_interval=0))
    assert ("engine.sglang.scheduler_recv_interval", "must be an integer >= 1, got 0") in problems
