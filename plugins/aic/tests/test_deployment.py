"""``aic`` through the real loader and replay: config errors list the valid names, the KV
pool can be sized from the GPU, specs are cached on disk, and a replay's token times are the
priced passes."""

from __future__ import annotations

import json

import pytest
from servesim.config.loader import load_config
from servesim.errors import ConfigError
from servesim.replay.runner import simulate
from servesim_aic import catalog, deployment
from servesim_aic.config import AicTimingConfig

MODEL = "Qwen/Qwen3-32B"


def _config(tmp_path, timing: str, engine: str = "", workload: str = "") -> str:
    path = tmp_path / "sim.yaml"
    path.write_text(f"engine:\n  timing_model: {{type: aic, {timing}}}\n{engine}{workload}")
    return str(path)


@pytest.mark.parametrize(("key", "value", "listed"), [
    ("model", "acme/NotAModel", "Qwen/Qwen3-32B"),
    ("system", "h999_sxm", "h200_sxm"),
    ("kv_cache_dtype", "fp3", "bfloat16, int8, fp8"),
])
def test_unknown_names_are_config_errors_listing_the_valid_ones(tmp_path, key, value, listed):
    options = {"model": MODEL, key: value}
    timing = ", ".join(f"{k}: {v}" for k, v in options.items())
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, timing))
    assert info.value.path == f"engine.timing_model.{key}"
    assert repr(value) in str(info.value) and listed in str(info.value)


def test_unknown_backend_lists_the_systems_backends(tmp_path):
    path = _config(tmp_path, f"model: {MODEL}, backend: tensorflow-serving")
    with pytest.raises(ConfigError) as info:
        load_config(path).timing_model()
    assert info.value.path == "engine.timing_model"
    assert "'tensorflow-serving'" in str(info.value) and "sglang, trtllm, vllm" in str(info.value)


def test_catalog_has_the_documented_systems_and_models():
    assert {"h100_sxm", "h200_sxm", "b200_sxm", "a100_sxm", "l40s", "gb200"} <= set(catalog.systems())
    assert {"Qwen/Qwen3-32B", "meta-llama/Meta-Llama-3.1-8B"} <= set(catalog.models())
    assert catalog.backends("h200_sxm") == ("sglang", "trtllm", "vllm")


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_auto_pool_is_aiconfigurators_kv_estimate(tmp_path, backend):
    from aiconfigurator_core.sdk.memory import estimate_num_gpu_blocks

    engine = f"  backend: {backend}\n  num_gpu_blocks: auto\n  block_size: 64\n"
    loaded = load_config(_config(tmp_path, f"model: {MODEL}, gpu_memory_utilization: 0.8", engine))
    expected = estimate_num_gpu_blocks(
        MODEL, "h200_sxm", backend, "current", scheduler_block_size=64, max_num_tokens=8192,
        max_batch_size=256, memory_fraction_kind=deployment.FRACTION_KIND[backend],
        memory_fraction_value=0.8)
    assert loaded.sim.engine.num_gpu_blocks == expected
    assert 1000 < expected < 10**5  # ~250k tokens of Qwen3-32B KV beside its 64 GB of weights
    assert loaded.resolved()["engine"]["num_gpu_blocks"] == expected


def test_more_gpus_hold_more_kv(tmp_path):
    one = load_config(_config(tmp_path, f"model: {MODEL}", "  num_gpu_blocks: auto\n")).sim.engine
    two = load_config(_config(tmp_path, f"model: {MODEL}, tp: 2", "  num_gpu_blocks: auto\n")).sim.engine
    assert two.num_gpu_blocks > 2 * one.num_gpu_blocks  # the weights are split too


def test_auto_pool_needs_a_timing_model_that_knows_the_gpu(tmp_path):
    path = tmp_path / "sim.yaml"
    path.write_text("engine:\n  num_gpu_blocks: auto\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert info.value.path == "engine.num_gpu_blocks" and "'polynomial'" in str(info.value)


def test_compiled_specs_are_reused_from_disk(tmp_path, monkeypatch):
    from servesim.config.engine import EngineConfig

    dep = deployment.resolve(AicTimingConfig(model="meta-llama/Meta-Llama-3.1-8B"), EngineConfig())
    spec = deployment.compiled_spec(dep, tmp_path)
    assert (tmp_path / f"{dep.key()}.spec").read_bytes() == spec

    def no_compile(*_a, **_k):
        raise AssertionError("compiled again")

    monkeypatch.setattr("aiconfigurator_core.sdk.engine.compile_engine", no_compile)
    assert deployment.compiled_spec(dep, tmp_path) == spec
    other = deployment.resolve(AicTimingConfig(model="meta-llama/Meta-Llama-3.1-8B", tp=2), EngineConfig())
    assert other.key() != dep.key()


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_one_request_replay_follows_the_priced_passes(tmp_path, backend):
    """One 1024-token prompt, 6 output tokens: TTFT is one prefill forward, and every later
    gap is one decode step at the growing context (1025, 1026, ...)."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 1024, "output_length": 6,
                                 "hash_ids": [1, 2]}) + "\n")
    engine = f"  backend: {backend}\n  block_size: 64\n"
    workload = f"workload:\n  trace: {{path: {trace}}}\n"
    loaded = load_config(_config(tmp_path, f"model: {MODEL}", engine, workload))
    result = simulate(loaded, record_token_times=True)
    timing = loaded.timing_model()
    times = result.log.token_times[0]
    prefill = timing.predict_prefill_ms(1, 1024, 0)
    assert times[0] == pytest.approx(prefill, abs=1e-6)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    priced = [timing.predict_decode_ms(1, c, c, 1) for c in range(1025, 1030)]
    assert gaps == pytest.approx(priced, abs=1e-5)
    again = simulate(load_config(_config(tmp_path, f"model: {MODEL}", engine, workload)))
    assert json.dumps(again.report, sort_keys=True) == json.dumps(result.report, sort_keys=True)


@pytest.mark.parametrize("model", ["interpolated", "polynomial"])
def test_calibration_round_trip_from_an_aic_run(tmp_path, model):
    """FPMs of an AIC-timed run, fitted and layered over the same base, give a report whose
    means agree within 5 %."""
    import servesim.cli.main as cli

    fpm = tmp_path / "fpm.jsonl"
    engine = "  backend: vllm\n  num_gpu_blocks: 4000\n"
    workload = ("workload:\n  synthetic: {num_requests: 120, rate: 3.0, input_length: 'uniform:256:2048', "
                "output_length: 'uniform:32:160'}\n")
    base = _config(tmp_path, f"model: {MODEL}", engine, workload)
    measured = simulate(load_config(base, [f"sinks.fpm=[{{type: jsonl, path: {fpm}}}]"])).report
    fitted = tmp_path / "fitted.yaml"
    args = ["calibrate", str(fpm), "--model", model, "-o", str(fitted)]
    assert cli.main(args + (["--kv-tokens", str(4000 * 64)] if model == "polynomial" else [])) == 0
    again = simulate(load_config([base, str(fitted)])).report
    assert again["config"]["engine"]["timing_model"]["type"] == model
    for key in ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms"):
        assert again[key] == pytest.approx(measured[key], rel=0.05), key


def test_pools_on_two_gpus_count_their_gpus(tmp_path):
    """2 workers on H200 with TP 2 beside 4 on H100 with TP 1: 4 GPUs each, the faster
    deployment decodes faster, and each pool sizes its own KV pool."""
    cluster = ("cluster:\n  pools:\n"
               "    - {name: h200-tp2, workers: 2, engine: {timing_model: {tp: 2}}}\n"
               "    - {name: h100-tp1, workers: 4, engine: {timing_model: {system: h100_sxm}}}\n")
    workload = "workload:\n  synthetic: {num_requests: 60, rate: 6.0}\n"
    path = _config(tmp_path, f"model: {MODEL}", "  num_gpu_blocks: auto\n", cluster + workload)
    loaded = load_config(path)
    h200, h100 = simulate(loaded).report["pools"]
    assert (h200["workers"], h200["gpus"], h100["workers"], h100["gpus"]) == (2, 4, 4, 4)
    assert (h200["completed"], h100["completed"]) == (20, 40)  # round robin over 6 workers
    assert h200["mean_tpot_ms"] < h100["mean_tpot_ms"]
    blocks = [loaded.engine_factory(p.engine).config.num_gpu_blocks for p in loaded.sim.cluster.pools]
    assert blocks[0] > 2 * blocks[1]


def test_one_prefill_one_decode_worker(tmp_path):
    """A 1P1D split prices both roles with the deployment; the report keeps its split keys."""
    workload = "workload:\n  synthetic: {num_requests: 40, rate: 4.0}\n"
    cluster = "cluster: {prefill_workers: 1, decode_workers: 1}\n"
    path = _config(tmp_path, f"model: {MODEL}", "  num_gpu_blocks: auto\n", cluster + workload)
    report = simulate(load_config(path)).report
    assert report["num_handoffs"] == report["completed"] == 40
    agg = simulate(load_config(_config(tmp_path, f"model: {MODEL}", "  num_gpu_blocks: auto\n",
                                       workload))).report
    assert report["mean_ttft_prefill_ms"] > 0 and 15.0 < report["mean_tpot_ms"] < agg["mean_tpot_ms"] + 5.0


def test_docs_table_is_what_the_model_predicts():
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("aic_table", root / "benchmarks" / "aic_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.table() in (root / "docs" / "timing.md").read_text()


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_runs_of_passes_equal_stepping(tmp_path, monkeypatch, backend):
    """Decode prices change with the context pass by pass; runs (DESIGN.md §7) price them
    through predict_decode_ms_many and must give the stepped report byte for byte."""
    workload = "workload:\n  synthetic: {num_requests: 50, rate: 2.0, output_length: 'uniform:64:300'}\n"
    path = _config(tmp_path, f"model: {MODEL}", f"  backend: {backend}\n  num_gpu_blocks: 3000\n", workload)
    with_runs = json.dumps(simulate(load_config(path)).report, sort_keys=True)
    monkeypatch.setenv("SERVESIM_RUNS", "0")
    stepped = json.dumps(simulate(load_config(path)).report, sort_keys=True)
    assert stepped == with_runs


@pytest.mark.parametrize(("model", "tp", "message"), [
    ("Qwen/Qwen3-32B", 3, "tp 3 does not divide the 64 attention heads of Qwen/Qwen3-32B; "
                          "expected one of: 1, 2, 4, 8, 16, 32, 64"),
    # 24 attention heads, 4 KV heads: 3 and 6 divide the heads but split 4 KV heads unevenly
    ("Qwen/Qwen3.5-27B", 6, "tp 6 neither divides nor is a multiple of the 4 KV heads of "
                            "Qwen/Qwen3.5-27B; expected one of: 1, 2, 4, 8, 12, 24"),
])
def test_tp_that_cannot_split_the_heads_is_a_config_error(tmp_path, model, tp, message):
    """Caught while loading (servesim validate and run), not by aiconfigurator-core's
    assertion in the first priced pass."""
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, f"model: {model}, tp: {tp}"))
    assert info.value.path == "engine.timing_model.tp"
    assert str(info.value) == f"{tmp_path / 'sim.yaml'}: engine.timing_model.tp: {message}"


@pytest.mark.parametrize(("model", "tp"), [("Qwen/Qwen3-32B", 8), ("Qwen/Qwen3.5-27B", 8),
                                           ("meta-llama/Meta-Llama-3.1-8B", 16)])
def test_tp_that_splits_the_heads_loads(tmp_path, model, tp):
    """8 of 4 KV heads replicates each twice; 16 of Llama's 8 KV heads likewise."""
    loaded = load_config(_config(tmp_path, f"model: {model}, tp: {tp}"))
    assert loaded.resolved()["engine"]["timing_model"]["tp"] == tp
