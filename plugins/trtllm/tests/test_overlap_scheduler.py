"""TensorRT-LLM's overlap scheduler (``engine.trtllm.disable_overlap_scheduler: false``): a
step is chosen while the one before it runs, so a new request joins one step later
(servesim.mechanics.overlap_inbox). Fixed timing: a context step 10 ms + 2 ms decode call
when decodes ride along, a decode step 2 ms."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from servesim.config.loader import load_config
from servesim.contract import CancelRequest, Request, Submit
from servesim.engine import Engine
from servesim.errors import CommandRejected
from servesim.mechanics.overlap_inbox import OverlapInbox
from servesim.testing.driver import DriveResult, drive
from servesim.tokens import Tokens

MakeEngine = Callable[..., Engine]


def a_then_b(b_at: float) -> list[tuple[float, Request]]:
    """A (8-token prompt, 10 tokens) at t=0; B (8-token prompt, 2 tokens) at ``b_at``."""
    return [(0.0, Request(0, Tokens(range(8)), 10)), (b_at, Request(1, Tokens(range(50, 58)), 2))]


def run(make_engine: MakeEngine, b_at: float, overlap: bool) -> DriveResult:
    engine = make_engine(block_size=4, trt={"max_num_tokens": 1000,
                                            "disable_overlap_scheduler": not overlap})
    return drive(engine, a_then_b(b_at))


def test_without_overlap_a_request_joins_the_next_step(make_engine: MakeEngine) -> None:
    # A's context [0, 10]; B (t=1) joins the step at 10 beside A's decode: 10 + 10 + 2.
    assert run(make_engine, 1.0, overlap=False).requests[1].token_times[0] == 22.0


def test_a_request_arriving_during_a_step_joins_the_step_after_next(make_engine: MakeEngine) -> None:
    # The step at 10 was chosen when A's context started (t=0), before B arrived (t=1); the
    # step at 12 was chosen at 10 and reads B: its context runs [12, 24].
    result = run(make_engine, 1.0, overlap=True)
    assert result.requests[1].token_times == [24.0, 26.0]
    assert result.requests[0].token_times[:4] == [10.0, 12.0, 24.0, 26.0]


def test_a_request_arriving_as_a_step_starts_waits_two_steps(make_engine: MakeEngine) -> None:
    # B arrives at 10, the instant A's context ends and the next step starts: the step at 12
    # was chosen at 10 by a read that B missed, so B's context runs [14, 26].
    assert run(make_engine, 10.0, overlap=False).requests[1].token_times[0] == 22.0
    assert run(make_engine, 10.0, overlap=True).requests[1].token_times[0] == 26.0


def test_an_idle_engine_reads_at_once(make_engine: MakeEngine) -> None:
    # Nothing else to run: the loop reads B as it arrives (A finished at 28).
    late = [(0.0, Request(0, Tokens(range(8)), 10)), (40.0, Request(1, Tokens(range(50, 58)), 2))]
    for overlap in (False, True):
        engine = make_engine(block_size=4, trt={"disable_overlap_scheduler": not overlap})
        result = drive(engine, late)
        assert result.requests[0].token_times[0] == 10.0
        assert result.requests[1].token_times == [50.0, 52.0]


def test_an_unread_request_can_be_cancelled_and_is_counted_waiting(make_engine: MakeEngine) -> None:
    engine = make_engine(block_size=4, trt={"disable_overlap_scheduler": False}, record=True)
    engine.apply(0, Submit(Request(0, Tokens(range(8)), 10)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None
    effects = engine.apply(0, Submit(Request(1, Tokens(range(50, 58)), 2)), 1.0)
    assert effects.metrics is not None and effects.metrics.waiting_requests == 1
    with pytest.raises(CommandRejected, match="already active"):
        engine.apply(0, Submit(Request(1, Tokens(range(50, 58)), 2)), 1.0)
    cancel = engine.apply(0, CancelRequest(1), 2.0)
    assert cancel.retired_requests == (1,)
    assert cancel.metrics is not None and cancel.metrics.waiting_requests == 0
    engine.complete_pass(started.pass_id, started.end_ms)
    rank = engine.ranks[0]
    assert not rank.inbox  # type: ignore[attr-defined]


def test_the_inbox_rule() -> None:
    inbox: OverlapInbox[str] = OverlapInbox()
    assert inbox.pass_starts(0.0, busy=False) == []
    inbox.pass_ends(10.0)
    inbox.hold(5.0, 1, "a")   # during the step [0, 10]
    inbox.hold(10.0, 2, "b")  # as the next step starts
    assert inbox.pass_starts(10.0, busy=True) == []  # chosen at 0
    inbox.pass_ends(12.0)
    assert inbox.pass_starts(12.0, busy=True) == ["a"]  # chosen at 10: read a, not b
    inbox.pass_ends(14.0)
    assert inbox.pass_starts(20.0, busy=True) == ["b"]  # an idle gap: read at once
    assert len(inbox) == 0
    inbox.run_ends(20.0, [22.0, 24.0])  # a run of two passes: the last began at 22
    inbox.hold(23.0, 3, "c")
    assert inbox.pass_starts(24.0, busy=True) == []  # chosen at 22, before c arrived
    inbox.run_ends(24.0, [26.0])
    assert inbox.pass_starts(26.0, busy=True) == ["c"]


def test_the_option_is_read_from_yaml_and_defaults_to_the_reference() -> None:
    on = load_config(None, ["engine.backend=trtllm", "engine.trtllm.disable_overlap_scheduler=false"])
    off = load_config(None, ["engine.backend=trtllm"])
    assert on.backend_config.disable_overlap_scheduler is False
    assert off.backend_config.disable_overlap_scheduler is True
