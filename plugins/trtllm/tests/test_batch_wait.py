"""TensorRT-LLM's batch waiting (servesim_trtllm.batch_wait): a new context waits while
generation runs, until ``batch_wait_timeout_iters`` steps passed or the step's tokens reach
``batch_wait_max_tokens_ratio * max_num_tokens``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from servesim.config.engine import EngineConfig
from servesim.contract import Request
from servesim.engine import Engine
from servesim.testing.driver import DriveResult, drive
from servesim.tokens import Tokens
from servesim_trtllm.batch_wait import BatchWait
from servesim_trtllm.config import TrtllmConfig, validate

MakeEngine = Callable[..., Engine]


def workload() -> list[tuple[float, Request]]:
    """A (8-token prompt, 10 tokens) at t=0; B (8-token prompt, 2 tokens) at t=1."""
    return [(0.0, Request(0, Tokens(range(8)), 10)), (1.0, Request(1, Tokens(range(50, 58)), 2))]


def run(make_engine: MakeEngine, **trt: object) -> DriveResult:
    engine = make_engine("guaranteed_no_evict", block_size=4, trt={"max_num_tokens": 1000, **trt})
    return drive(engine, workload())


def test_off_by_default_the_context_joins_the_next_step(make_engine: MakeEngine) -> None:
    result = run(make_engine)
    # A's context [0, 10]; B joins the next step beside A's decode: 10 + 10 + 2.
    assert result.requests[1].token_times[0] == 22.0


def test_a_new_context_waits_the_timeout_in_decode_steps(make_engine: MakeEngine) -> None:
    result = run(make_engine, batch_wait_timeout_iters=3, batch_wait_max_tokens_ratio=0.9)
    # 9 tokens (B's 8 + A's 1) stay below 0.9 * 1000: steps at 10, 12, 14 run A alone
    # (2 ms each); at 16 the counter has reached 3 and B's context runs: 16 + 10 + 2.
    assert result.requests[1].token_times[0] == 28.0
    assert result.requests[0].token_times[:5] == [10.0, 12.0, 14.0, 16.0, 28.0]


def test_enough_tokens_end_the_wait(make_engine: MakeEngine) -> None:
    # 9 tokens >= 0.5 * 16: the contexts run at once.
    result = run(make_engine, batch_wait_timeout_iters=3, batch_wait_max_tokens_ratio=0.5,
                 max_num_tokens=16)
    assert result.requests[1].token_times[0] == 22.0


@pytest.mark.parametrize(("iters", "ratio", "dp"), [(0, 0.9, 1), (20, 0.0, 1), (20, 0.9, 2)])
def test_no_waiting_without_both_settings_or_with_attention_dp(iters: int, ratio: float, dp: int) -> None:
    trt = TrtllmConfig(batch_wait_timeout_iters=iters, batch_wait_max_tokens_ratio=ratio)
    assert BatchWait.build(trt, dp) is None


def test_a_context_alone_never_waits(make_engine: MakeEngine) -> None:
    # No generation request in the step: A's context runs at t=0 whatever the settings.
    result = run(make_engine, batch_wait_timeout_iters=50, batch_wait_max_tokens_ratio=0.9)
    assert result.requests[0].token_times[0] == 10.0


def test_bad_settings_name_their_key() -> None:
    problems = validate(EngineConfig(backend="trtllm"),
                        TrtllmConfig(batch_wait_timeout_iters=-1, batch_wait_max_tokens_ratio=1.5))
    assert ("engine.trtllm.batch_wait_timeout_iters", "must be >= 0, got -1") in problems
    assert ("engine.trtllm.batch_wait_max_tokens_ratio", "must be in [0, 1], got 1.5") in problems
