"""The ``overhead`` timing model: each term's effect on one pass, defaults, config errors."""

from __future__ import annotations

import pytest

from servesim.cli.main import main
from servesim.config.loader import load_config
from servesim.errors import ConfigError
from servesim.timing.pricing import ShapePricer
from servesim.timing.shape import PrefillChunk
from servesim_overhead.cuda_graphs import capture_sizes, padded


def _timing(overhead: str, backend: str = "vllm", seqs: int = 64):
    loaded = load_config(None, [f"engine.backend={backend}", "engine.num_gpu_blocks=4000",
                                f"engine.max_num_seqs={seqs}", f"engine.timing_model={overhead}"])
    return loaded.timing_model(), loaded.sim.engine


def _price(timing, engine, prefill, decode):
    pricer = ShapePricer(timing, engine, 0)
    return pricer.price(prefill, decode, sum(decode), 4000 * engine.bs)


BARE = "{type: overhead, inner: {type: polynomial}, step_ms: 0, per_request_ms: 0, cuda_graph_padding: false, mixed: sum}"


def test_zero_terms_price_as_the_inner_model():
    bare, engine = _timing(BARE)
    poly, _ = _timing("{type: polynomial}")
    for prefill, decode in (([PrefillChunk(512, 0)], []), ([], [700, 900, 1200]),
                            ([PrefillChunk(256, 1024)], [300, 400])):
        assert _price(bare, engine, prefill, decode) == _price(poly, engine, prefill, decode)


def test_step_and_request_terms_add_on_the_serial_backend():
    t, engine = _timing(BARE.replace("step_ms: 0", "step_ms: 2.5").replace("per_request_ms: 0",
                                                                          "per_request_ms: 0.125"))
    bare, _ = _timing(BARE)
    decode = [700, 900, 1200]
    assert _price(t, engine, [], decode) == pytest.approx(_price(bare, engine, [], decode) + 2.5 + 3 * 0.125)


def test_overlap_takes_the_longer_of_gpu_and_cpu():
    base = "{type: overhead, inner: {type: polynomial}, per_request_ms: 0, cuda_graph_padding: false, " \
           "mixed: sum, overlap: true, step_ms: %s}"
    t, engine = _timing(base % 50)
    assert _price(t, engine, [], [700, 900]) == pytest.approx(50.0)
    t2, _ = _timing(base % 0.5)
    bare, _ = _timing(BARE)
    assert _price(t2, engine, [], [700, 900]) == _price(bare, engine, [], [700, 900])


def test_vllm_capture_sizes_and_padding():
    sizes = capture_sizes("vllm", 64, False, False)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-1] == 128
    assert [padded(n, sizes) for n in (1, 3, 5, 9, 120, 129)] == [1, 4, 8, 16, 120, 129]
    assert capture_sizes("sglang", 32, False, False) == (1, 2, 4, 8, 16, 24, 32)
    # TRT-LLM pads only with cuda_graph_config.enable_padding (off by default): then
    # [1, 2, 4], multiples of 8 to 128, powers of two from 256
    assert capture_sizes("trtllm", 64, True, True) == (1, 2, 4, *range(8, 129, 8))
    assert capture_sizes("trtllm", 512, True, True)[-3:] == (128, 256, 512)
    assert [padded(n, capture_sizes("trtllm", 256, True, True)) for n in (3, 9, 130)] == [4, 16, 256]
    assert capture_sizes("ref", 64, True, True) == ()


def test_padding_prices_the_captured_batch():
    pad, engine = _timing(BARE.replace("cuda_graph_padding: false", "cuda_graph_padding: true"))
    bare, _ = _timing(BARE)
    # polynomial decode depends on KV use only: five requests padded to eight add three
    # rows at the mean context
    assert _price(pad, engine, [], [1000] * 5) == _price(bare, engine, [], [1000] * 8)


@pytest.mark.parametrize(("timing", "key"), [
    ("{type: overhead}", "engine.timing_model.inner"),
    ("{type: overhead, inner: {type: polynomial}, step_ms: -1}", "engine.timing_model.step_ms"),
    ("{type: overhead, inner: {type: polynomial}, mixed: both}", "engine.timing_model.mixed"),
    ("{type: overhead, inner: {type: nope}}", "engine.timing_model.inner.type"),
    ("{type: overhead, inner: {type: polynomial, prefill: [1, 2]}}", "engine.timing_model.inner.prefill"),
    ("{type: overhead, inner: {type: polynomial}, mixed: fused}", "engine.timing_model.mixed"),
    ("{type: overhead, inner: {type: overhead, inner: {type: polynomial}}}", "engine.timing_model.inner"),
])
def test_bad_options_name_the_key(tmp_path, capsys, timing, key):
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(f"engine:\n  timing_model: {timing}\n")
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert key in err and len(err.splitlines()) == 1, err


def test_same_config_same_report():
    sets = ["engine.timing_model={type: overhead, inner: {type: polynomial}, step_ms: 1.5}",
            "workload.synthetic={num_requests: 40, rate: 20}"]
    from servesim.replay.runner import simulate

    a = simulate(load_config(None, sets)).report
    b = simulate(load_config(None, sets)).report
    assert a == b and a["mean_tpot_ms"] > 0
