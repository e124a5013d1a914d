"""The check kits of servesim.testing pass on the built-ins and fail, naming the check, on
deliberately broken implementations."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from servesim.contract import WorkerType
from servesim.plugins import Plugins
from servesim.replay.planning import PlannerDecision, ScaleAction, StaticPlanner
from servesim.replay.routers import RoundRobinRouter, Router
from servesim.sinks.builtin import JsonlKvEventSink, JsonlSinkConfig, MemoryFpmSink, MemoryKvEventSink
from servesim.sinks.compose import SampleConfig, SampleKvEventSink, TeeKvEventSink
from servesim.testing import (
    check_fpm_sink,
    check_kv_event_sink,
    check_planner,
    check_router,
    check_timing_model,
    check_trace_format,
)
from servesim.timing.builtin import FixedTiming, PolynomialTiming


def _failed(report: Any) -> set[str]:
    return {f.split(":", 1)[0] for f in report.failures}


# --------------------------------------------------------------------------- timing models


class NegativeDecode(PolynomialTiming):
    def predict_decode_ms(self, batch_size: int, active: int, mean: int, total: int) -> float:
        return -1.0 if batch_size > 100 else super().predict_decode_ms(batch_size, active, mean, total)


class Drifting(PolynomialTiming):
    """Hidden state: every call is a little slower."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        self.calls += 1
        return super().predict_prefill_ms(batch_size, mean_isl, mean_prefix) + self.calls * 1e-3


class SloppyMany(PolynomialTiming):
    def predict_decode_ms_many(self, batch_size: int, active: np.ndarray, total: int) -> np.ndarray:
        return super().predict_decode_ms_many(batch_size, active, total) * (1 + 1e-12)


class BusyIdle(PolynomialTiming):
    def predict_pass_ms(self, shape: Any) -> float:
        return 0.5 + super().predict_pass_ms(shape)


class NanPass(PolynomialTiming):
    def predict_pass_ms(self, shape: Any) -> float:
        return float("nan") if shape.decode else super().predict_pass_ms(shape)


class IgnoresSpeedups(PolynomialTiming):
    """Prices whole passes, with neither speed-up."""

    def predict_pass_ms(self, shape: Any) -> float:
        return super().predict_pass_ms(attrs.evolve(shape, speedup_ratio=1.0, decode_speedup=1.0))


class OneSpeedupForAll(PolynomialTiming):
    """Scales decode by ``speedup_ratio`` too, ignoring ``decode_speedup``."""

    def predict_pass_ms(self, shape: Any) -> float:
        return super().predict_pass_ms(attrs.evolve(shape, decode_speedup=shape.speedup_ratio))


class RoleBlind(PolynomialTiming):
    """Prices every worker as an aggregated one."""

    def predict_pass_ms(self, shape: Any) -> float:
        return super().predict_pass_ms(attrs.evolve(shape, worker_type=WorkerType.AGGREGATED))


def test_timing_kit_passes_builtins() -> None:
    assert check_timing_model(PolynomialTiming).ok
    assert check_timing_model(lambda: FixedTiming(None)).ok


@pytest.mark.parametrize(
    ("cls", "failing"),
    [
        (NegativeDecode, {"durations_valid", "pure", "default_pass_matches_methods"}),
        (Drifting, {"pure", "default_pass_matches_methods", "speedups_applied", "worker_role_zeros"}),
        (SloppyMany, {"many_matches_scalar"}),
        # 0.5 ms a pass that no speed-up scales and no role zeroes
        (BusyIdle, {"empty_pass_is_free", "speedups_applied", "worker_role_zeros"}),
        (NanPass, {"durations_valid", "speedups_applied", "worker_role_zeros"}),
        (IgnoresSpeedups, {"speedups_applied"}),
        (OneSpeedupForAll, {"speedups_applied"}),
        (RoleBlind, {"worker_role_zeros"}),
    ],
)
def test_timing_kit_catches(cls: type, failing: set[str]) -> None:
    report = check_timing_model(cls, raise_on_failure=False)
    assert _failed(report) == failing, report.failures
    with pytest.raises(AssertionError, match=r"timing model conformance failed"):
        check_timing_model(cls)


def test_timing_kit_names_the_speed_up_and_the_role() -> None:
    speed = check_timing_model(OneSpeedupForAll, raise_on_failure=False).failures
    assert len(speed) == 2 and speed[0].startswith(
        "speedups_applied: a decode-only pass lasts ") and speed[0].endswith(
        "(the pass divided by decode_speedup)")
    assert speed[1].endswith("ms with 1: speedup_ratio must leave it alone")
    roles = check_timing_model(RoleBlind, raise_on_failure=False).failures
    assert [f.split(" lasts ")[0] for f in roles] == [
        "worker_role_zeros: a prefill-only pass on a decode worker",
        "worker_role_zeros: a decode-only pass on a prefill worker",
        "worker_role_zeros: a mixed pass on a decode worker",
        "worker_role_zeros: a mixed pass on a prefill worker",
    ]


def test_timing_kit_rejects_a_non_model() -> None:
    report = check_timing_model(lambda: object(), raise_on_failure=False)
    assert "is_timing_model" in _failed(report)


# --------------------------------------------------------------------------- sinks


class Dropping(MemoryKvEventSink):
    def publish(self, worker_id: int, at_ms: float, events: Sequence[Any]) -> None:
        if not self.closed:
            super().publish(worker_id, at_ms, events)


class Consuming(MemoryKvEventSink):
    def publish(self, worker_id: int, at_ms: float, events: Sequence[Any]) -> None:
        super().publish(worker_id, at_ms, events)
        events.clear()  # type: ignore[attr-defined]


class CloseOnce(MemoryFpmSink):
    def close(self) -> None:
        if self.closed:
            raise RuntimeError("already closed")
        super().close()


_ids = itertools.count()


class Unrepeatable(MemoryFpmSink):
    def __init__(self) -> None:
        super().__init__()
        self.tag = next(_ids)


class NotASink:
    def publish(self, *a: Any) -> None: ...

    def close(self) -> None: ...


def test_sink_kit_passes_builtins(tmp_path: Path) -> None:
    out = tmp_path / "k.jsonl"
    assert check_kv_event_sink(
        lambda: JsonlKvEventSink(JsonlSinkConfig(str(out))), read_back=lambda s: out.read_text()
    ).ok
    assert check_kv_event_sink(
        lambda: TeeKvEventSink([MemoryKvEventSink()]), read_back=lambda s: s.sinks[0].events
    ).ok
    assert check_kv_event_sink(
        lambda: SampleKvEventSink([MemoryKvEventSink()], SampleConfig(sinks=({},), every=2))
    ).ok
    assert check_fpm_sink(MemoryFpmSink, read_back=lambda s: s.metrics).ok


@pytest.mark.parametrize(
    ("make", "kind", "failing"),
    [
        (Dropping, "kv", {"no_silent_drop_after_close"}),
        (Consuming, "kv", {"leaves_input_alone"}),
        (CloseOnce, "fpm", {"close_once_is_enough"}),
        (Unrepeatable, "fpm", {"repeatable"}),
        (NotASink, "kv", {"is_sink", "no_silent_drop_after_close"}),
    ],
)
def test_sink_kit_catches(make: Any, kind: str, failing: set[str]) -> None:
    check = check_kv_event_sink if kind == "kv" else check_fpm_sink
    report = check(
        make,
        read_back=lambda s: (getattr(s, "tag", None), getattr(s, "metrics", None)),
        raise_on_failure=False,
    )
    assert _failed(report) == failing, report.failures


# --------------------------------------------------------------------------- routers


class OffByOne(RoundRobinRouter):
    def select(self, request: Any, block_hashes: Sequence[int], state: Any) -> tuple[int, int]:
        worker, dp = super().select(request, block_hashes, state)
        return worker + 1, dp


_calls = itertools.count()


class Moody(Router):
    def select(self, request: Any, block_hashes: Sequence[int], state: Any) -> tuple[int, int]:
        return next(_calls) % self.num_workers, 0


class Meddling(RoundRobinRouter):
    def select(self, request: Any, block_hashes: Sequence[int], state: Any) -> tuple[int, int]:
        state.active_requests[0] += 1
        return super().select(request, block_hashes, state)


class Forgetful(RoundRobinRouter):
    def routed(self, request: Any, worker: int, dp_rank: int, state: Any) -> None:
        pass


def test_router_kit_passes_builtins() -> None:
    routers = Plugins().routers()
    for name in routers.names():
        assert check_router(routers.get(name)).ok, name


@pytest.mark.parametrize(
    ("cls", "failing"),
    [
        # out of range: the driver's own bookkeeping then fails too
        (OffByOne, {"choices_in_range", "select_leaves_state_alone", "deterministic"}),
        (Moody, {"deterministic"}),
        (Meddling, {"select_leaves_state_alone"}),
        (Forgetful, {"records_routed"}),
        (
            int,
            {"is_router", "choices_in_range", "select_leaves_state_alone", "deterministic", "records_routed"},
        ),
    ],
)
def test_router_kit_catches(cls: type, failing: set[str]) -> None:
    assert _failed(check_router(cls, raise_on_failure=False)) == failing


# --------------------------------------------------------------------------- trace formats

GOOD = (
    '{"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [1, 2, 3]}\n'
    '{"timestamp": 5, "input_length": 20, "output_length": 2, "hash_ids": [1, 2]}\n'
)


@pytest.fixture
def samples(tmp_path: Path) -> tuple[str, str]:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(GOOD)
    bad.write_text(GOOD + '{"timestamp": 9, "input_len\n')
    return str(good), str(bad)


def test_trace_kit_passes_mooncake(samples: tuple[str, str]) -> None:
    assert check_trace_format(Plugins().trace_formats().get("mooncake"), *samples).ok


def _reader(read: Any) -> Any:
    return type("Reader", (), {"read": staticmethod(read)})


def test_trace_kit_catches(samples: tuple[str, str]) -> None:
    from servesim.tokens import Tokens
    from servesim.workload.model import Session, Turn, Workload

    mooncake = Plugins().trace_formats().get("mooncake")

    def oserror(path: str, *, trace_block_size: int, options: Any = None) -> Any:
        with open(path) as fh:  # a missing file escapes as OSError; a bad line as ValueError
            return (
                mooncake.read(fh.name, trace_block_size=trace_block_size) if "bad" not in path else int("x")
            )

    def sparse_ids(path: str, *, trace_block_size: int, options: Any = None) -> Any:
        w = mooncake.read(path, trace_block_size=trace_block_size)
        for s in w.sessions:
            for t in s.turns:
                t.request_id += 10
        return w

    def empty_prompt(path: str, *, trace_block_size: int, options: Any = None) -> Any:
        return Workload((Session("s", 0.0, [Turn(0, Tokens([]), 1, delay_ms=-1.0)]),))

    cases = [
        (oserror, {"missing_file_is_user_error", "malformed_names_line"}),
        (sparse_ids, {"request_ids_dense"}),
        (empty_prompt, {"turns_valid", "missing_file_is_user_error", "malformed_names_line"}),
    ]
    for read, failing in cases:
        report = check_trace_format(_reader(read), *samples, raise_on_failure=False)
        assert _failed(report) == failing, (read.__name__, report.failures)
    # a stream that reads other prompts than read does (twice the block size)
    skewed = type("Reader", (), {"read": staticmethod(mooncake.read), "stream": staticmethod(
        lambda path, *, trace_block_size, options=None: mooncake.stream(path, trace_block_size=2 * trace_block_size))})
    report = check_trace_format(skewed, *samples, raise_on_failure=False)
    assert _failed(report) == {"streams_as_read"}
    assert any("sessions differ" in f for f in report.failures), report.failures


# --------------------------------------------------------------------------- planners


class Negative(StaticPlanner):
    def tick(self, snapshot: Any) -> Any:
        return PlannerDecision(targets={"default": -1, "prefill": -1})


class Stranger(StaticPlanner):
    def tick(self, snapshot: Any) -> Any:
        return PlannerDecision(actions=(ScaleAction("elsewhere", 1),), next_tick_ms=snapshot.now_ms)


_moods = itertools.count()


class Restless(StaticPlanner):
    def tick(self, snapshot: Any) -> Any:
        return {"default": next(_moods) % 5}  # a mapping, not a PlannerDecision, and unstable


class Divides(StaticPlanner):
    def tick(self, snapshot: Any) -> Any:
        return PlannerDecision(targets={p.name: int(p.output_tokens_per_s / p.request_throughput)
                                        for p in snapshot.pools})

    def finish(self) -> Any:
        return ["not", "a", "mapping"]


def test_planner_kit_passes_builtins() -> None:
    planners = Plugins().planners()
    assert {"schedule", "static"} <= set(planners.names())
    for name in planners.names():
        if name == "dynamo" and importlib.util.find_spec("dynamo") is None:
            continue  # Dynamo's planner is optional; its plugin's tests run the kit on recorded decisions
        assert check_planner(planners.get(name)).ok, name


@pytest.mark.parametrize(
    ("cls", "failing"),
    [
        (Negative, {"decisions_well_formed", "quiet_cluster"}),
        (Stranger, {"decisions_well_formed", "quiet_cluster"}),
        (Restless, {"decisions_well_formed", "deterministic", "quiet_cluster"}),
        # divides by a zero throughput when nothing finished
        (Divides, {"quiet_cluster", "finish_is_a_mapping"}),
        (int, {"is_planner", "decisions_well_formed", "deterministic", "quiet_cluster",
               "finish_is_a_mapping"}),
    ],
)
def test_planner_kit_catches(cls: type, failing: set[str]) -> None:
    assert _failed(check_planner(cls, raise_on_failure=False)) == failing
