"""SGLang's ``--enable-mixed-chunk`` (``engine.sglang.enable_mixed_chunk``, servesim_sglang.mixed).

The oracle goldens (tests/golden/sglang_oracle/mixed_chunk_*) pin the step log of long runs;
these tests pin a small run's passes, token times and budgets, the decodes that sit out a
prefill step for want of KV, pricing, configuration and runs of passes.
"""

from __future__ import annotations

from typing import Any

import pytest
from servesim.config.engine import EngineConfig, WorkerType
from servesim.contract import Request, Submit
from servesim.errors import ConfigError
from servesim.factory import EngineFactory
from servesim.timing.base import TimingModel
from servesim.timing.builtin import FixedTiming, FixedTimingConfig
from servesim.tokens import Tokens
from servesim_sglang.config import SglangConfig, scheduler_params
from servesim_sglang.conformance import SglangOracleOptions
from servesim_sglang.fast import runs as runs_module
from servesim_sglang.rank import SglangRank


def _engine(pages: int, block: int, timing: Any = None, worker: WorkerType = WorkerType.AGGREGATED,
            **sg: Any):
    sg = {"profile": "sglang-0.5.23", "overlap_schedule": False, **sg}
    config = EngineConfig(backend="sglang", num_gpu_blocks=pages, block_size=block, worker_type=worker)
    timing = timing or FixedTiming(FixedTimingConfig(prefill_ms=10.0, decode_ms=1.0))
    return EngineFactory(config, SglangRank, timing, backend_config=SglangConfig(**sg),
                         record_schedule=True).build(0)


def _passes(engine, arrivals: dict[int, list[tuple[int, int, int]]]) -> list[tuple]:
    """Per pass: (mode, prefill, decode, extend tokens, running batch, tokens, completed, end);
    ``arrivals[k]`` are ``(rid, prompt, outputs)`` submitted before pass ``k``."""
    now, out = 0.0, []
    while True:
        for rid, prompt, n in arrivals.get(len(out), []):
            tokens = Tokens([rid * 1000 + t for t in range(prompt)])
            engine.apply(0, Submit(Request(rid, tokens, n)), now)
        if engine.is_drained():
            return out
        assert len(out) < 100
        started = engine.execute_pass(now)
        now = started.end_ms
        eff = engine.complete_pass(started.pass_id, now).by_rank[0].effects
        f = eff.schedule.engine_fields
        out.append((f["mode"], f["prefill"], f["decode"], f["extend_tokens"], f["running_batch"],
                    list(eff.outputs.token_request_ids), list(eff.outputs.completed), now))


SMALL = {0: [(0, 20, 4)], 1: [(1, 150, 2), (2, 10, 3)]}


def test_running_decodes_ride_the_prefill_batch_whose_chunk_budget_shrinks_by_them() -> None:
    """Chunks of 64 tokens, one request decoding: each chunk is 63 tokens (64 less the
    running batch), the decode rides the pass (10 + 1 ms), extend_num_tokens counts it, the
    running batch is empty after a mixed pass, and the next batch order is the prefill
    requests first, then the old running ones."""
    mixed = _passes(_engine(1000, 1, chunked_prefill_size=64, enable_mixed_chunk=True), SMALL)
    assert mixed == [
        ("prefill", {0: 20}, [], 20, 0, [0], [], 10.0),
        ("mixed", {1: 63}, [0], 64, 0, [0], [], 21.0),
        ("mixed", {1: 63}, [0], 64, 0, [0], [], 32.0),
        ("mixed", {1: 24, 2: 10}, [0], 35, 0, [1, 2, 0], [0], 43.0),
        ("decode", {}, [1, 2], 0, 2, [1, 2], [1], 44.0),
        ("decode", {}, [2], 0, 1, [2], [2], 45.0),
    ]
    # without the option request 0 waits out request 1's three prefill chunks of 64
    plain = _passes(_engine(1000, 1, chunked_prefill_size=64), SMALL)
    assert [p[:3] for p in plain] == [
        ("prefill", {0: 20}, []),
        ("prefill", {1: 64}, []),
        ("prefill", {1: 64}, []),
        ("prefill", {1: 22, 2: 10}, []),
        ("decode", {}, [0, 1, 2]),
        ("decode", {}, [0, 2]),
        ("decode", {}, [0]),
    ]
    assert [p[7] for p in plain] == [10.0, 20.0, 30.0, 40.0, 41.0, 42.0, 43.0]


def test_the_reference_profile_mixes_too() -> None:
    """The option is SGLang's server flag, not a version switch: the reference admission
    (``two_phase_admission`` off) shrinks its budgets by the running batch the same way."""
    engine = _engine(1000, 1, profile="reference", chunked_prefill_size=64, enable_mixed_chunk=True)
    passes = _passes(engine, SMALL)
    assert [p[:4] for p in passes[:4]] == [
        ("prefill", {0: 20}, [], 20),
        ("mixed", {1: 63}, [0], 64),
        ("mixed", {1: 63}, [0], 64),
        ("mixed", {1: 24, 2: 10}, [0], 35),
    ]


def test_decodes_that_do_not_fit_after_the_prefill_sit_out_the_step() -> None:
    """Page 16, a pool of 20 pages: four one-page requests decode, then a 200-token prompt
    takes 13 pages and leaves 3, where the decodes need 4 (each one's sampled token starts a
    page). SGLang's mixed block skips them (no retraction): the step is a plain prefill,
    the running batch keeps its four, and they decode at the next step. SGLang 0.5.23's
    scheduler gives these three steps too (checked with its oracle: free tokens 256, 64, 64)."""
    arrivals = {0: [(i, 16, 2) for i in range(4)], 1: [(4, 200, 1)]}
    passes = _passes(_engine(20, 16, chunked_prefill_size=256, enable_mixed_chunk=True), arrivals)
    assert passes == [
        ("prefill", {0: 16, 1: 16, 2: 16, 3: 16}, [], 64, 0, [0, 1, 2, 3], [], 10.0),
        ("prefill", {4: 200}, [], 200, 4, [4], [4], 20.0),
        ("decode", {}, [0, 1, 2, 3], 0, 4, [0, 1, 2, 3], [0, 1, 2, 3], 21.0),
    ]


class _Shapes(FixedTiming):
    """Prices through the default adapter and keeps every pass shape."""

    def __init__(self) -> None:
        super().__init__(FixedTimingConfig(prefill_ms=10.0, decode_ms=1.0))
        self.shapes: list[Any] = []

    def predict_pass_ms(self, shape: Any) -> float:
        self.shapes.append(shape)
        return super().predict_pass_ms(shape)


def test_a_mixed_pass_is_priced_as_one_shape_with_its_chunks_and_decodes() -> None:
    timing = _Shapes()
    passes = _passes(_engine(1000, 1, timing, chunked_prefill_size=64, enable_mixed_chunk=True), SMALL)
    # the default adapter prices a shape as the two methods do
    assert [p[7] for p in passes] == [10.0, 21.0, 32.0, 43.0, 44.0, 45.0]
    mixed = timing.shapes[1:4]
    assert [[(c.tokens, c.cached_prefix) for c in s.prefill] for s in mixed] == \
        [[(63, 0)], [(63, 63)], [(24, 126), (10, 0)]]
    # request 0's context: prompt 20 + outputs so far (its newest token's slot comes now)
    assert [s.decode for s in mixed] == [(21,), (22,), (23,)]
    assert [s.active_kv_tokens for s in mixed] == [21, 22, 23]


def test_the_option_is_sglangs_and_off_with_chunked_prefill_off() -> None:
    config = EngineConfig(backend="sglang", num_gpu_blocks=100)
    assert not SglangConfig().enable_mixed_chunk
    assert "enable_mixed_chunk" in SglangConfig.report_omits_defaults
    assert scheduler_params(config, SglangConfig(enable_mixed_chunk=True), 1).mixed_chunk
    # Scheduler.is_mixed_chunk needs chunked prefill
    off = SglangConfig(enable_mixed_chunk=True, chunked_prefill_size=-1)
    assert not scheduler_params(config, off, 1).mixed_chunk
    assert SglangOracleOptions(enable_mixed_chunk=True).backend_settings()["enable_mixed_chunk"] is True
    assert "--enable-mixed-chunk" in SglangOracleOptions(enable_mixed_chunk=True).argv()
    assert "--enable-mixed-chunk" not in SglangOracleOptions().argv()


def test_bad_settings_name_their_key() -> None:
    with pytest.raises(ConfigError, match=r"engine\.sglang\.enable_mixed_chunk.*true or false"):
        config = EngineConfig(backend="sglang", num_gpu_blocks=100)
        scheduler_params(config, SglangConfig(enable_mixed_chunk="yes"), 1)
    nextn = EngineConfig(backend="sglang", num_gpu_blocks=100, aic_nextn=1)
    problems = SglangRank.validate_config(nextn, SglangConfig(enable_mixed_chunk=True))
    assert ("engine.sglang.enable_mixed_chunk",
            "is not modelled with speculative decoding (engine.aic_nextn)") in problems


def test_disaggregated_workers_and_runs_of_passes_do_not_mix(monkeypatch: pytest.MonkeyPatch) -> None:
    prefill = _engine(1000, 1, worker=WorkerType.PREFILL, chunked_prefill_size=64,
                      enable_mixed_chunk=True)
    assert not prefill.ranks[0].sched.mix
    asked: list[tuple[bool, int]] = []
    monkeypatch.setattr(runs_module, "execute_run",
                        lambda rank, *a: asked.append((rank.sched.mix, len(rank.sched.waiting))))
    for mix in (True, False):
        engine = _engine(1000, 1, profile="reference", chunked_prefill_size=64, enable_mixed_chunk=mix)
        assert engine.ranks[0].sched.mix is mix
        engine.ranks[0].execute_run(0.0, 1e9, 8)
        engine.apply(0, Submit(Request(0, Tokens(list(range(20))), 50)), 0.0)
        engine.ranks[0].execute_run(0.0, 1e9, 8)
    # runs of steady decode passes are declined with mixed steps on while a request waits
    # (their held queue head does not model the shrunken budgets); with nothing waiting a
    # pass cannot mix, and runs are asked for as without the option
    assert asked == [(True, 0), (False, 0), (False, 1)]


class _WholePassesOnly(TimingModel):
    """A model that prices whole passes only (as the overhead model does): 10 ms with a
    prefill chunk, 1 ms without, plus 0.5 ms per decode."""

    def predict_pass_ms(self, shape: Any) -> float:
        return (10.0 if shape.prefill else 1.0) + 0.5 * len(shape.decode)


def test_a_mixed_pass_is_priced_whole_by_a_model_without_the_two_methods() -> None:
    passes = _passes(_engine(1000, 1, _WholePassesOnly(), chunked_prefill_size=64,
                             enable_mixed_chunk=True), SMALL)
    # the same passes as above, each priced once as a whole: the three mixed ones carry
    # request 0's decode (10 + 0.5 ms), then two decode passes of two requests and of one
    ends = [p[7] for p in passes]
    assert [round(b - a, 6) for a, b in zip([0.0, *ends[:-1]], ends, strict=True)] == \
        [10.0, 10.5, 10.5, 10.5, 2.0, 1.5]
