"""benchmarks/silicon_rows.py: how a silicon-sample row becomes a servesim replay, and the
predictions of a few rows (plain ``aic`` and the default ``overhead`` wrapper), pinned.

Accuracy is the benchmark's business (benchmarks/silicon.py); these pin behaviour."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


rows_mod = _bench("silicon_rows")
silicon = _bench("silicon")
RAW = {r["id"]: r for r in rows_mod.load_rows()}

# (row id, plain aic (TTFT, TPOT), overhead defaults (TTFT, TPOT)), ms, replayed without the
# runs' own settings (launch=False: the InferenceMAX client, servesim's engine defaults)
PINNED = [
    ("qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1",
     (101.572186, 16.774374), (90.672041, 16.53169)),
    ("qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp2_epnone_1",
     (118.8332, 20.782922), (118.8332, 20.788818)),
    ("meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg_1024x128_c8_tp1_epnone_1",
     (43.056256, 8.256465), (37.597678, 7.934819)),
]


def test_row_mapping():
    row = rows_mod.parse(RAW["2026_04_06_kimi_k2_5_b200_sxm_vllm_fp4_agg_1024x8192_c32_tp4_ep4_1318"])
    assert (row.concurrency, row.batch_size, row.precision) == (32, 8, "fp4")
    cfg = rows_mod.sim_config(row, "client.yaml")
    tm = cfg["engine"]["timing_model"]
    # encoded TP 4 x attention DP 4 (16 GPUs); the launch script ran attention DP 4 with
    # expert parallelism 4 on 4 GPUs, --max-num-seqs per DP rank
    assert tm["kv_cache_dtype"] == "fp8" and tm["attention_dp"] == 4 and cfg["engine"]["dp_size"] == 4
    assert (tm["tp"], tm["moe_tp"], tm["moe_ep"]) == (1, 1, 4)
    assert cfg["engine"]["max_num_seqs"] == 32 and cfg["workload"]["concurrency"] == 32
    # MiniMax-M2.5 FP8: the script has no attention-DP branch, so TP 4 with expert parallelism
    fp8 = rows_mod.parse(RAW["2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_8192x1024_c32_tp4_ep4_1322"])
    eng = rows_mod.sim_config(fp8, "c.yaml")["engine"]
    tm = eng["timing_model"]
    assert (tm["tp"], tm["attention_dp"], tm["moe_tp"], tm["moe_ep"]) == (4, 1, 1, 4)
    assert (eng["dp_size"], eng["max_num_seqs"]) == (1, 32)
    assert rows_mod.client_options(row) == {
        "client": "inferencemax", "random_input_len": 1024, "random_output_len": 8192, "random_range_ratio": 0.8,
        "num_prompts": 320, "max_concurrency": 32, "request_rate": "inf", "ignore_eos": True}
    replicas = rows_mod.parse(RAW["qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_4000x1000_c8_tp2_epnone_11"])
    assert replicas.roles["agg"].workers == 4
    assert rows_mod.sim_config(replicas, "c.yaml")["cluster"] == {"workers": 4}
    assert rows_mod.parse(RAW[next(iter(RAW))]).problem is None
    assert (row.source, replicas.source) == ("inferencemax", "gap-analysis")


def test_kv_fallback_sizes_the_pool_for_the_load():
    row = rows_mod.parse(RAW["2026_04_06_kimi_k2_5_b200_sxm_vllm_fp4_agg_1024x8192_c32_tp4_ep4_1318"])
    assert rows_mod.sim_config(row, "c.yaml")["engine"]["num_gpu_blocks"] == "auto"
    # 32 requests per rank of up to 1,024 + 8,192 tokens in vLLM's 64-token blocks
    assert rows_mod.sim_config(row, "c.yaml", kv_fallback=True)["engine"]["num_gpu_blocks"] == 32 * 144 + 1


def test_model_halves_are_disjoint_and_documented():
    fit, held = rows_mod.model_halves(list(RAW.values()))
    assert not fit & held
    assert {"Qwen/Qwen3-32B", "meta-llama/Meta-Llama-3.1-70B"} <= fit
    assert {"meta-llama/Meta-Llama-3.1-8B", "Qwen/Qwen3-235B-A22B-FP8"} <= held


@pytest.mark.parametrize(("row_id", "plain", "wrapped"), PINNED, ids=[p[0][-40:] for p in PINNED])
def test_pinned_predictions(row_id, plain, wrapped):
    row = rows_mod.parse(RAW[row_id])
    assert silicon._replay(row, None, launch=False) == pytest.approx(plain, rel=1e-9)
    assert silicon._replay(row, {"type": "overhead"}, launch=False) == pytest.approx(wrapped, rel=1e-9)


# The same rows replayed as AIConfigurator's tooling deployed and loaded them (fixed lengths,
# plus the chat template's tokens; TensorRT-LLM: batch + ISL + 1,500 tokens per pass, contexts
# whole, the overlap scheduler on; SGLang: ISL + 1,500 prefill tokens). Measured: vLLM 154.2 / 18.04 ms, SGLang
# 840.8 / 16.54, TensorRT-LLM 191.0 / 7.94.
GENERATED = [
    ("qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1", (353.895405, 15.05479)),
    ("qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp2_epnone_1", (505.472756, 17.800748)),
    ("meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg_1024x128_c8_tp1_epnone_1",
     (113.376857, 7.718779)),
]


@pytest.mark.parametrize(("row_id", "wrapped"), GENERATED, ids=[p[0][-40:] for p in GENERATED])
def test_generated_rows_replay_the_tooling_load(row_id, wrapped):
    row = rows_mod.parse(RAW[row_id])
    assert row.generated and row.source == "gap-analysis"
    assert silicon._replay(row, {"type": "overhead"}) == pytest.approx(wrapped, rel=1e-9)


def test_generated_rows_settings():
    """aiconfigurator eval's client (genai-perf/AIPerf, stddev 0) and its generator's agg
    engine settings, for the aic-auto-gap-analysis rows only."""
    trt = rows_mod.parse(RAW[GENERATED[2][0]])
    assert rows_mod.client_options(trt)["random_range_ratio"] == 1.0
    assert rows_mod.client_options(trt, launch=False)["random_range_ratio"] == 0.8
    # the chat endpoint wraps the ISL tokens in the model's template: Llama-3.1 about 37, Qwen3 8
    assert rows_mod.client_options(trt)["random_input_len"] == 1024 + 37
    assert rows_mod.client_options(rows_mod.parse(RAW[GENERATED[0][0]]))["random_input_len"] == 1024 + 8
    assert rows_mod.client_options(trt, launch=False)["random_input_len"] == 1024
    eng = rows_mod.sim_config(trt, "c.yaml")["engine"]
    # 8 + 1,024 + 1,500 rounded up to 32 tokens; contexts are not chunked; 80 % of free memory
    # TensorRT-LLM's overlap scheduler on, as the generator writes for agg workers
    assert (eng["enable_chunked_prefill"], eng["trtllm"]) == (
        False, {"max_num_tokens": 2560, "disable_overlap_scheduler": False})
    assert eng["timing_model"]["gpu_memory_utilization"] == 0.8
    sg = rows_mod.sim_config(rows_mod.parse(RAW[GENERATED[1][0]]), "c.yaml", {"type": "overhead"})["engine"]
    # SGLang's default loop: the overlap loop with its read lag
    assert sg["sglang"] == {"max_prefill_tokens": 1024 + 1500, "overlap_schedule": True,
                            "overlap_read_lag": True}
    assert sg["timing_model"]["cuda_graph_padding"] is False
    vllm = rows_mod.sim_config(rows_mod.parse(RAW[GENERATED[0][0]]), "c.yaml")["engine"]
    assert vllm["max_num_batched_tokens"] == 8192 and "vllm" not in vllm
    assert "trtllm" not in rows_mod.sim_config(trt, "c.yaml", launch=False)["engine"]
    # the other gap-analysis files name no deployment tooling: InferenceMAX replay
    kimi_id = "kimi_k2_5_gap_analysis_kimi_k2_5_gap_analysis_b200_sxm_vllm_fp4_agg_1024x1024_c4_tp8_ep1_1"
    kimi = rows_mod.parse(RAW[kimi_id])
    assert kimi.source == "gap-analysis" and not kimi.generated
    assert rows_mod.client_options(kimi)["random_range_ratio"] == 0.8


def test_script_token_limits():
    """Llama-3.1-70B TensorRT-LLM scripts: 16,384 tokens, contexts whole, padded CUDA graphs;
    Qwen3.5 SGLang scripts: their prefill limits."""
    row = rows_mod.parse(RAW["2026_04_06_llama_3_1_70b_b200_sxm_trtllm_fp8_agg_1024x1024_c4_tp8_ep1_626"])
    eng = rows_mod.sim_config(row, "c.yaml", {"type": "overhead"})["engine"]
    assert (eng["enable_chunked_prefill"], eng["trtllm"]) == (
        False, {"max_num_tokens": 16384, "disable_overlap_scheduler": False})
    assert eng["timing_model"]["cuda_graph_padding"] is True
    assert "enable_chunked_prefill" not in rows_mod.sim_config(row, "c.yaml", launch=False)["engine"]
    waits = rows_mod.sim_config(rows_mod.parse(RAW[BATCH_WAIT_ROW]), "c.yaml")["engine"]["trtllm"]
    assert waits == {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9,
                     "max_num_tokens": 16384, "disable_overlap_scheduler": False}
    qwen = rows_mod.sim_config(rows_mod.parse(RAW["qwen3_5_b200_sglang_fp8_agg_1024x1024_c4_cfg618"]),
                               "c.yaml")
    assert qwen["engine"]["sglang"] == {"scheduler_recv_interval": 10, "chunked_prefill_size": 32768,
                                        "max_prefill_tokens": 32768, "overlap_schedule": True,
                                        "overlap_read_lag": True}


BATCH_WAIT_ROW = "2026_04_06_llama_3_1_70b_b200_sxm_trtllm_fp8_agg_1024x1024_c4_tp2_ep1_615"


def test_launch_script_options():
    """InferenceMAX's Llama-3.1-70B TensorRT-LLM scripts turn batch waiting on for 1k/1k
    below TP 8 only, its SGLang Blackwell scripts set a receive interval; ``launch=False``
    leaves them out."""
    row = rows_mod.parse(RAW[BATCH_WAIT_ROW])
    assert rows_mod.backend_options(row, row.roles["agg"]) == {"trtllm": {
        "batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}}
    assert "trtllm" not in rows_mod.sim_config(row, "c.yaml", launch=False)["engine"]
    tp8 = rows_mod.parse(RAW["2026_04_06_llama_3_1_70b_b200_sxm_trtllm_fp8_agg_1024x1024_c4_tp8_ep1_626"])
    assert rows_mod.backend_options(tp8, tp8.roles["agg"]) == {}
    # SGLang on Blackwell: --scheduler-recv-interval 10, 30 from concurrency 16
    for row_id, interval in (("qwen3_5_b200_sglang_fp8_agg_1024x1024_c4_cfg618", 10),
                             ("qwen3_5_b200_sglang_fp8_agg_1024x1024_c32_cfg615", 30)):
        cfg = rows_mod.sim_config(rows_mod.parse(RAW[row_id]), "c.yaml")
        assert cfg["engine"]["sglang"]["scheduler_recv_interval"] == interval
    h100 = rows_mod.parse(RAW["qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp2_epnone_1"])
    assert rows_mod.backend_options(h100, h100.roles["agg"]) == {}


def test_batch_waiting_delays_the_first_token_not_the_decode():
    # Measured: TTFT 256 ms, TPOT 9.7 ms; each new context waits 20 decode steps (and, with
    # the overlap scheduler, is read a step late).
    row = rows_mod.parse(RAW[BATCH_WAIT_ROW])
    assert silicon._replay(row, None) == pytest.approx((330.303636, 13.435315), rel=1e-9)
    assert silicon._replay(row, None, launch=False) == pytest.approx((66.59063, 13.434078), rel=1e-9)


def test_disagg_handoff_is_priced_on_the_system_links():
    """Kimi-K2.5 (MLA: 61 layers x 576 values, one byte in fp8) on GB200's 900 GB/s NVLink."""
    row = rows_mod.parse(RAW["kimik2_5_gb200_trtllm_fp4_disagg_1024x1024_c4_cfg759"])
    cfg = rows_mod.sim_config(row, "c.yaml")
    for engine in (cfg["engine"], cfg["cluster"]["decode_engine"]):
        assert (engine["kv_bytes_per_token"], engine["kv_transfer_bandwidth"]) == (61 * 576, 900.0)
    # TensorRT-LLM's overlap scheduler: off on prefill workers, on on decode workers
    assert cfg["engine"]["trtllm"]["disable_overlap_scheduler"] is True
    assert cfg["cluster"]["decode_engine"]["trtllm"]["disable_overlap_scheduler"] is False
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import silicon_kv
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert (silicon_kv.link_gb_s("h100_sxm"), silicon_kv.link_gb_s("b200_sxm")) == (50.0, 100.0)


def test_attention_dp_row_replays_on_the_gpus_it_ran_on():
    """MiniMax-M2.5 FP4 on B300, c32, encoded TP 4 x attention DP 4 (16 GPUs): replayed as
    attention DP 4 with expert parallelism 4 (measured TTFT 77.2 ms, TPOT 9.8 ms; as 16 GPUs
    the replay gave 874 ms and 40.0 ms)."""
    row = rows_mod.parse(RAW["minimaxm2_5_b300_vllm_fp4_agg_1024x1024_c32_cfg729"])
    role = row.roles["agg"]
    assert (role.tp, role.attention_dp, role.moe_tp, role.moe_ep, role.max_num_seqs) == (1, 4, 1, 4, 128)
    # with the launch script's 2,048 tokens per pass and 0.19.0's async scheduling (without it
    # (36.129061, 9.161014)); 8,192 tokens and no async scheduling gave (36.892462, 9.153499)
    assert silicon._replay(row, {"type": "overhead"}) == pytest.approx((54.569068, 9.135353), rel=1e-9)
    assert silicon._replay(row, {"type": "overhead"}, launch=False) == pytest.approx((36.892462, 9.153499),
                                                                                   rel=1e-9)


BUDGET_ROW = "2026_04_06_minimax_m2_5_b200_sxm_vllm_fp8_agg_1024x1024_c64_tp4_ep1_1336"


def test_minimax_vllm_0_19_rows_run_with_twice_the_isl_per_pass():
    """InferenceMAX's MiniMax-M2.5 vLLM 0.19.0 scripts on B200/B300 set
    ``--max-num-batched-tokens $((ISL * 2))``; the 0.17.0 rows, other models, systems and
    backends keep 8,192, and ``launch=False`` leaves it out."""
    row = rows_mod.parse(RAW[BUDGET_ROW])
    assert rows_mod.batched_tokens(row) == 2048
    assert rows_mod.sim_config(row, "c.yaml")["engine"]["max_num_batched_tokens"] == 2048
    assert rows_mod.sim_config(row, "c.yaml", launch=False)["engine"]["max_num_batched_tokens"] == 8192
    eight_k = rows_mod.parse(RAW["2026_04_06_minimax_m2_5_b200_sxm_vllm_fp8_agg_8192x1024_c32_tp2_ep1_1371"])
    assert rows_mod.batched_tokens(eight_k) == 16384
    for row_id in ("2026_03_25_minimax_m2_5_b200_sxm_vllm_fp8_agg_1024x1024_c16_tp2_0_ep1_0_552",  # 0.17.0
                   "2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_8192x1024_c32_tp4_ep4_1322",  # H100
                   "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp2_epnone_1",
                   BATCH_WAIT_ROW):
        assert rows_mod.batched_tokens(rows_mod.parse(RAW[row_id])) == 8192


def test_a_smaller_budget_delays_the_first_tokens_of_a_burst():
    # Measured: TTFT 160.1 ms, TPOT 15.9 ms. The 64 prompts sent at t = 0 take four times as
    # many passes at 2,048 tokens each; the decode is unchanged. (0.19.0 schedules
    # asynchronously: each later request is read a pass late; without it 122.152697 ms.)
    row = rows_mod.parse(RAW[BUDGET_ROW])
    assert silicon._replay(row, None) == pytest.approx((158.090555, 17.44732), rel=1e-9)
    assert silicon._replay(row, None, launch=False) == pytest.approx((89.194301, 17.423175), rel=1e-9)


def test_vllm_rows_schedule_asynchronously_from_0_14():
    """vLLM's async scheduling is on by default from 0.14.0: the 0.16-0.19 and nightly rows
    replay it, the 0.12.0 gap-analysis rows do not, the Llama-3.1-70B rows (no release named)
    do because their scripts ask for it, and ``launch=False`` leaves it out."""
    assert [rows_mod._vllm_async_by_default(v) for v in
            ("0.12.0", "0.13.1", "0.14.0", "0.19.0", "nightly-5b8c30d62b754b57", "", "dev")] == [
        False, False, True, True, True, False, False]
    row = rows_mod.parse(RAW[BUDGET_ROW])  # 0.19.0
    assert rows_mod.sim_config(row, "c.yaml")["engine"]["vllm"] == {"async_scheduling": True}
    assert "vllm" not in rows_mod.sim_config(row, "c.yaml", launch=False)["engine"]
    old = rows_mod.parse(RAW[GENERATED[0][0]])  # 0.12.0
    assert "vllm" not in rows_mod.sim_config(old, "c.yaml")["engine"]
    llama = [rows_mod.parse(r) for r in RAW.values() if r["backend"] == "vllm" and "Llama-3.1-70B" in r["model_path"]]
    assert llama and all(r.version == "" for r in llama)
    assert all(rows_mod.sim_config(r, "c.yaml")["engine"]["vllm"] == {"async_scheduling": True} for r in llama)
    # a split: its prefill workers schedule asynchronously, its decode workers say they do not
    split = rows_mod.sim_config(rows_mod.parse(RAW["kimik2_5_gb200_vllm_fp4_disagg_1024x1024_c64_cfg698"]),
                                "c.yaml")
    assert split["engine"]["vllm"] == {"async_scheduling": True}
    assert split["cluster"]["decode_engine"]["vllm"] == {"async_scheduling": False}


def test_the_llama_70b_vllm_scripts_async_scheduling_delays_first_tokens():
    # Measured: TTFT 202.8 ms, TPOT 21.5 ms (H200, TP 1, c = 4, 1k/1k). The script's
    # async-scheduling reads each new request a pass late; without it 178.4 ms.
    row = rows_mod.parse(RAW["2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x1024_c4_tp1_ep1_621"])
    assert silicon._replay(row, None) == pytest.approx((219.538477, 22.885036), rel=1e-9)
    assert silicon._replay(row, None, launch=False) == pytest.approx((178.403964, 22.882989), rel=1e-9)


def test_generated_sglang_rows_mix_chunks_where_their_template_passes_the_flag():
    """AIConfigurator's rule sets enable_mixed_chunk; the 0.5.1.post1 template drops it (it
    looks for a key enable-mix-chunk), the 0.5.6.post2 template renders it."""
    old = rows_mod.parse(RAW[GENERATED[1][0]])  # 0.5.1.post1
    new_id = "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_sglang_agg_2000x100_c3_tp2_epnone_10"
    new = rows_mod.parse(RAW[new_id])
    assert (old.version, new.version) == ("0.5.1.post1", "0.5.6.post2")
    assert "enable_mixed_chunk" not in rows_mod.generated_engine(old)["sglang"]
    assert rows_mod.generated_engine(new)["sglang"] == {"max_prefill_tokens": 2000 + 1500,
                                                       "enable_mixed_chunk": True}


sweep_mod = _bench("silicon_sweep")


def test_row_config_sizes_the_pool_for_the_load_where_memory_leaves_none(tmp_path):
    row = rows_mod.parse(RAW["2026_04_06_kimi_k2_5_b200_sxm_vllm_fp4_agg_1024x8192_c32_tp4_ep4_1318"])
    cfg, loaded = sweep_mod.row_config(row, str(tmp_path / "c.yaml"), None, True)
    assert cfg["engine"]["num_gpu_blocks"] == 32 * 144 + 1
    assert loaded.sim.engine.num_gpu_blocks == 32 * 144 + 1
    fits = rows_mod.parse(RAW[PINNED[2][0]])
    cfg, loaded = sweep_mod.row_config(fits, str(tmp_path / "c.yaml"), None, False)
    assert cfg["engine"]["num_gpu_blocks"] == "auto" and loaded.sim.engine.num_gpu_blocks > 0


def test_rows_swept_as_points_give_the_pinned_predictions(tmp_path):
    """benchmarks/silicon.py --executor local: every row a point of one servesim sweep; the
    records come back to their rows by client file, with the same numbers as a replay here,
    and a row that fails to load or to run says why."""
    row_id, _plain, wrapped = PINNED[2]
    unknown = rows_mod.parse(RAW[row_id])
    unknown.id, unknown.model = "no-such-model", "no/such-model"
    no_data = "2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c128_tp4_0_ep4_0_291"
    rows = [rows_mod.parse(RAW[row_id]), unknown, rows_mod.parse(RAW[no_data])]
    got = sweep_mod.sweep_rows(rows, {"type": "overhead"}, False, "local", 1, tmp_path)
    assert got[row_id] == pytest.approx(wrapped, rel=1e-9)
    assert "no/such-model" in got["no-such-model"]  # refused before the sweep
    assert "context MLA data missing" in got[no_data]  # failed as a point
    assert len(list((tmp_path / "sweep" / "out" / "points").iterdir())) == 2
    assert {p.name for p in (tmp_path / "sweep" / "clients").iterdir()} == {f"{r.id}.yaml" for r in rows}


GPT_OSS_ROWS = {
    "vllm_h200": "2026_03_25_gpt_oss_120b_h200_sxm_vllm_fp4_agg_1024x1024_c4_tp1_0_ep1_0_199",
    "vllm_b200": "2026_03_25_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x1024_c4_tp2_0_ep1_0_621",
    "trtllm_b200": "2026_03_25_gpt_oss_120b_b200_sxm_trtllm_fp4_agg_1024x1024_c16_tp2_0_ep1_0_998",
}


def test_rows_run_the_checkpoint_formats_and_their_scripts_settings():
    """The sample labels gpt-oss ``fp4`` runs ``nvfp4``; the checkpoint holds MXFP4 experts
    and bf16 elsewhere, the MoE runs bf16 activations on Hopper and MXFP8 ones under
    TensorRT-LLM on Blackwell, and the Hopper scripts leave the KV cache in bf16."""
    h200, b200, trt = (rows_mod.parse(RAW[GPT_OSS_ROWS[k]]) for k in ("vllm_h200", "vllm_b200", "trtllm_b200"))
    assert (h200.gemm, h200.moe, rows_mod.kv_fp8(h200)) == (None, "w4a16_mxfp4", False)
    assert (b200.gemm, b200.moe, rows_mod.kv_fp8(b200)) == (None, "w4a16_mxfp4", True)
    assert (trt.gemm, trt.moe, rows_mod.kv_fp8(trt)) == (None, "w4a8_mxfp4_mxfp8", True)
    tm = rows_mod.sim_config(h200, "c.yaml")["engine"]["timing_model"]
    assert "gemm_dtype" not in tm and "kv_cache_dtype" not in tm and tm["moe_dtype"] == "w4a16_mxfp4"
    # vLLM: the scripts ask for async scheduling; TensorRT-LLM: 20,000 tokens, contexts whole,
    # padded CUDA graphs
    assert rows_mod.sim_config(h200, "c.yaml")["engine"]["vllm"] == {"async_scheduling": True}
    eng = rows_mod.sim_config(trt, "c.yaml", {"type": "overhead"})["engine"]
    assert (eng["enable_chunked_prefill"], eng["trtllm"]["max_num_tokens"]) == (False, 20000)
    assert eng["timing_model"]["cuda_graph_padding"] is True
    # Kimi-K2.5 int4: only the routed experts are INT4; its GEMMs keep the model's dtype
    kimi = next(rows_mod.parse(r) for r in RAW.values() if "Kimi" in r["model_path"] and r["precision"] == "int4")
    assert (RAW[kimi.id]["gemm_quant_mode"], kimi.gemm, kimi.moe) == ("int4_wo", None, "int4_wo")
    # other models keep the sample's columns
    llama = rows_mod.parse(RAW["2026_04_06_llama_3_1_70b_b200_sxm_trtllm_fp8_agg_1024x1024_c4_tp8_ep1_626"])
    assert (llama.gemm, llama.moe, rows_mod.kv_fp8(llama)) == ("fp8", "fp8", True)


def test_expert_parallel_runs_encoded_wider_than_their_node_replay_on_the_gpus_they_ran_on():
    """Two dumps of one Qwen3.5 SGLang run (TP 4, EP 4 on four B200s; the same measurements):
    one encodes it as TP 4 with MoE EP 4, the other as TP 16 with MoE TP 4 x EP 4. Both
    replay on four GPUs; a gap-analysis row of TP 4 with MoE TP 2 x EP 2 keeps its encoding."""
    def agg(row_id):
        role = rows_mod.parse(RAW[row_id]).roles["agg"]
        return (role.tp, role.attention_dp, role.moe_tp, role.moe_ep, role.max_num_seqs, role.workers)

    wide = "2026_04_06_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c32_tp4_ep4_1972"
    assert (RAW[wide]["tp_size"], RAW[wide]["moe_tp_size"], RAW[wide]["moe_ep_size"]) == ("16", "4", "4")
    assert agg(wide) == agg("2026_03_25_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c32_tp4_0_ep4_0_342") \
        == (4, 1, 1, 4, 32, 1)
    assert agg("qwen3_5_b200_sglang_fp8_agg_1024x1024_c32_cfg615") == (4, 1, 1, 4, 32, 1)
    # attention DP 8 with EP 8 on eight B200s, encoded as attention DP 64: 256 requests, 32 a rank
    assert agg("dsr1_b200_trtllm_fp4_agg_1024x8192_c256_cfg191") == (1, 8, 1, 8, 256, 1)
    narrow = next(i for i, r in RAW.items() if i.startswith("qwen_qwen3_235") and r["mode"] == "agg"
                  and (r["tp_size"], r["moe_tp_size"], r["moe_ep_size"]) == ("4", "2", "2"))
    assert agg(narrow)[:4] == (4, 1, 2, 2)
