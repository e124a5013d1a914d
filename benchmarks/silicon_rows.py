"""The silicon sample's rows, and the servesim configuration that replays each one.

``aiconfigurator_core/systems/silicon_sample.csv`` (aiconfigurator-core 0.12.0) holds one
benchmark run per row: backend and version, model, system, precision, agg/disagg, ISL, OSL,
the client's concurrency, each role's parallelism, and the measured mean TTFT and TPOT.

The load is the InferenceMAX client's (``utils/bench_serving/benchmark_serving.py`` of
InferenceX, called by ``benchmarks/benchmark_lib.sh``): random dataset,
``--random-range-ratio 0.8`` (lengths from ``[int(0.8 L), L]``), ``--num-prompts`` 10 x
concurrency, ``--max-concurrency``, ``--request-rate inf``, ``--ignore-eos``; the servers run
with ``max-num-seqs`` = concurrency, 8,192 batched tokens and prefix caching off.

The servers' launch scripts (InferenceX ``benchmarks/*.sh``, e.g. ``70b_fp8_b200_docker.sh``:
``kv-cache-dtype: fp8``; ``70b_fp4_b200_trt_slurm.sh``: ``kv_cache_config: dtype: fp8``;
``gptoss_fp4_b200_trt.sh``: ``free_gpu_memory_fraction: 0.85``) keep the KV cache in fp8 for
fp8 and fp4 runs and give TRT-LLM 85 % of the free memory (vLLM and SGLang 90 %), so the rows
are replayed with those settings.

Scheduler options a launch script sets for some runs only are in :func:`backend_options`, a
token budget other than 8,192 in :func:`batched_tokens`, other token limits and chunking in
:func:`script_limits`. AIConfigurator's own gap-analysis runs were deployed and loaded by its
own tooling, not InferenceMAX's: :func:`aic_generated`, :func:`generated_engine`,
:func:`client_options`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROMPTS_PER_SLOT = 10
RANGE_RATIO = 0.8
MAX_BATCHED_TOKENS = 8192
FP8_KV_PRECISIONS = ("fp8", "fp4")
GPU_MEMORY_FRACTION = {"vllm": 0.9, "sglang": 0.9, "trtllm": 0.85}
BLACKWELL = ("b200", "b300", "gb200", "gb300")
GENERATED_TRTLLM_MEMORY_FRACTION = 0.8  # AIConfigurator's TensorRT-LLM template default

# Checkpoint names in the sample that AIConfigurator catalogues under another id with the
# same architecture (the precision comes from the row's quant columns).
MODEL_ALIASES = {
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Qwen3-32B-NVFP4": "Qwen/Qwen3-32B",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-ai/DeepSeek-R1",
    "zhipuai/GLM-5": "zai-org/GLM-5",
}


def csv_path() -> Path:
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv"


def load_rows() -> list[dict[str, Any]]:
    import csv

    with open(csv_path(), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _int(v: Any) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)


@dataclass
class Role:
    """One role's deployment (the whole engine in agg)."""

    tp: int
    pp: int
    attention_dp: int
    moe_tp: int | None
    moe_ep: int | None
    workers: int = 1
    max_num_seqs: int | None = None


@dataclass
class Row:
    id: str
    backend: str
    version: str
    model: str
    system: str
    mode: str
    isl: int
    osl: int
    concurrency: int
    gemm: str | None
    moe: str | None
    precision: str
    measured_ttft: float
    measured_tpot: float
    batch_size: int | None = None  # the sample's own batch_size (AIConfigurator's convention)
    source: str = ""  # data_source(): "inferencemax" or "gap-analysis"
    generated: bool = False  # aic_generated(): deployed and benchmarked by AIConfigurator's tooling
    roles: dict[str, Role] = field(default_factory=dict)
    problem: str | None = None  # why servesim cannot express the row

    @property
    def group(self) -> str:
        return f"{self.backend}/{self.system}/{self.mode}"

    @property
    def model_family(self) -> str:
        return self.model


def _role(raw: dict[str, Any], prefix: str, concurrency: int) -> Role:
    tp = _int(raw[f"{prefix}tp_size"]) or 1
    adp = _int(raw[f"{prefix}attention_dp_size"]) or 1
    moe_tp = _int(raw[f"{prefix}moe_tp_size"]) or None
    moe_ep = _int(raw[f"{prefix}moe_ep_size"]) or None
    workers = _int(raw.get(f"{prefix}num_workers")) or 1
    seqs = _int(raw.get(f"{prefix}batch_size"))
    seqs = seqs * adp if seqs else concurrency
    return Role(tp, _int(raw[f"{prefix}pp_size"]) or 1, adp, moe_tp, moe_ep, workers, seqs)


def parse(raw: dict[str, Any]) -> Row:
    """The row, with ``problem`` set when it cannot be replayed (and why)."""
    from servesim_aic import catalog

    # The client's concurrency is the source's silicon_concurrency; batch_size is per
    # attention-DP rank where the engine has several (c32 with attention DP 4: batch_size 8).
    m = re.search(r"silicon_concurrency=(\d+)", raw["silicon_data_source"] or "")
    conc = int(m.group(1)) if m else _int(raw["batch_size"])
    model = MODEL_ALIASES.get(raw["model_path"], raw["model_path"])
    gemm, moe = checkpoint_quant(raw, model)
    row = Row(raw["id"], raw["backend"], raw["backend_version"], model, raw["system"], raw["mode"],
              int(raw["isl"]), int(raw["osl"]), conc or 0, gemm, moe, raw["precision"] or "bf16",
              float(raw["silicon_ttft_ms"] or "nan"), float(raw["silicon_tpot_ms"] or "nan"),
              _int(raw["batch_size"]), source=data_source(raw), generated=aic_generated(raw))
    if conc is None:
        row.problem = "no concurrency"
    elif model not in catalog.models():
        row.problem = f"model {model} not in AIConfigurator's catalog"
    elif row.system not in catalog.systems() or row.backend not in catalog.backends(row.system):
        row.problem = f"no AIConfigurator data for {row.backend} on {row.system}"
    elif not (row.measured_ttft > 0 and row.measured_tpot > 0):
        row.problem = "no measurement"
    if row.mode == "agg":
        role = row.roles["agg"] = _role(raw, "", row.concurrency)
        if not row.generated:
            _expert_parallel_encoding(row, role)
        # batch_size counts one replica's requests per attention-DP rank (max_num_seqs, all
        # ranks'): a concurrency it does not reach is spread over replicas (c8 with
        # batch_size 2: four engines)
        per_engine = role.max_num_seqs if row.batch_size else 0
        if per_engine and row.concurrency > per_engine and row.concurrency % per_engine == 0:
            role.workers = row.concurrency // per_engine
        if row.backend == "vllm" and row.source == "inferencemax":
            _vllm_dp_attention(row, role)
    else:
        row.roles["prefill"] = _role(raw, "prefill_", row.concurrency)
        row.roles["decode"] = _role(raw, "decode_", row.concurrency)
    return row


GPT_OSS = ("openai/gpt-oss-120b", "openai/gpt-oss-20b")
KIMI_K2_5 = "moonshotai/Kimi-K2.5"


def checkpoint_quant(raw: dict[str, Any], model: str) -> tuple[str | None, str | None]:
    """The row's GEMM and MoE quantisation: its quant columns, except where they name a format
    the checkpoint does not hold.

    The sample labels InferenceMAX's gpt-oss ``fp4`` runs ``nvfp4`` for both. The checkpoint's
    MoE weights are MXFP4 and everything else is bf16 (its ``quantization_config``:
    ``quant_method: mxfp4`` with attention, router, embeddings and LM head not converted;
    ``aiconfigurator_core/model_configs/openai--gpt-oss-120b_config.json``), so the GEMMs keep
    the model's own dtype (None). The MoE runs with bf16 activations on Hopper and MXFP8 on
    Blackwell (TensorRT-LLM ``examples/models/core/gpt_oss/README.md``, "MoE Support
    Matrix"; InferenceX ``gptoss_fp4_b200_trt.sh`` picks its ``TRTLLM`` backend,
    ``gptoss_fp4_h200_trt.sh`` ``TRITON``; the vLLM scripts set
    ``VLLM_MXFP4_USE_MARLIN=1`` on Hopper and ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` on
    B200). AIConfigurator 0.12.0 measured vLLM's MXFP4 MoE with bf16 activations only
    (``w4a16_mxfp4``), so vLLM's B200 rows are priced with it: a kernel other than the one
    they ran.

    The Kimi-K2.5 ``int4`` rows are labelled ``int4_wo`` for both. Its checkpoint quantises the
    routed experts only (INT4 weights, group 32) and leaves attention, the shared experts, the
    dense MLP and the LM head in bf16 (``quantization_config.ignore`` in
    ``aiconfigurator_core/model_configs/moonshotai--Kimi-K2.5_config.json``), so its GEMMs keep
    the model's own dtype and its MoE ``int4_wo``."""
    gemm = raw["gemm_quant_mode"] or None
    moe = raw["moe_quant_mode"] or None
    if model in GPT_OSS and raw["precision"] == "fp4":
        blackwell_mxfp8 = raw["backend"] == "trtllm" and raw["system"].startswith(BLACKWELL)
        return None, "w4a8_mxfp4_mxfp8" if blackwell_mxfp8 else "w4a16_mxfp4"
    if model == KIMI_K2_5 and raw["precision"] == "int4":
        return None, moe
    return gemm, moe


def kv_fp8(row: Row) -> bool:
    """Whether the row's KV cache is fp8: for fp8 and fp4 runs, as InferenceMAX's launch
    scripts set it, except gpt-oss on Hopper, whose scripts leave the KV cache at the model's
    dtype (InferenceX ``gptoss_fp4_h100.sh`` and ``gptoss_fp4_h200.sh`` pass no
    ``kv-cache-dtype``, ``gptoss_fp4_h200_trt.sh`` ``kv_cache_config: dtype: auto``; the B200
    scripts ``fp8``)."""
    if row.model in GPT_OSS and not row.system.startswith(BLACKWELL):
        return False
    return row.precision in FP8_KV_PRECISIONS


def _vllm_dp_attention(row: Row, role: Role) -> None:
    """InferenceMAX's vLLM runs with attention DP are encoded as TP ``t`` x attention DP ``t``
    with ``t * t`` expert-parallel ranks, ``t * t`` GPUs; they ran on ``t``. The launch
    scripts run them as ``--tensor-parallel-size 1 --data-parallel-size t
    --enable-expert-parallel`` (InferenceX ``benchmarks/single_node/fixed_seq_len/
    minimaxm2.5_fp4_b200.sh``, ``minimaxm2.5_fp4_b300.sh``, ``kimik2.5_fp4_b200.sh``:
    ``DP_ATTENTION``); the MiniMax-M2.5 FP8 scripts (``minimaxm2.5_fp8_{b200,b300,h100}.sh``)
    have no attention-DP branch and run ``--tensor-parallel-size t --enable-expert-parallel``.
    The row is replayed as the script ran it."""
    t = role.tp
    if not (t > 1 and role.attention_dp == t and (role.moe_ep or 1) == t * t):
        return
    role.moe_tp, role.moe_ep = 1, t
    if row.model == "MiniMaxAI/MiniMax-M2.5" and row.gemm == "fp8":  # one engine of c slots
        role.attention_dp, role.max_num_seqs = 1, row.concurrency
    else:  # vLLM's --max-num-seqs (the concurrency, or its default) holds per DP rank
        role.tp, role.max_num_seqs = 1, row.concurrency * t


# GPUs in one node of the systems InferenceMAX ran single-node (aiconfigurator_core/systems/
# <system>.yaml: num_gpus_per_node 8); the rack-scale GB200/GB300 are left out.
GPUS_PER_NODE = {"h100_sxm": 8, "h200_sxm": 8, "b200_sxm": 8, "b300_sxm": 8}


def _expert_parallel_encoding(row: Row, role: Role) -> None:
    """Some InferenceMAX runs with expert parallelism are encoded with their TP (or attention
    DP) multiplied by the EP size: a run whose id says ``tp4_ep4`` (``--tensor-parallel-size 4
    --ep-size 4`` in InferenceX ``benchmarks/single_node/qwen3.5_fp8_b200.sh``: four GPUs,
    the experts split four ways) has ``tp_size`` 16, ``moe_tp_size`` 4 and ``moe_ep_size`` 4,
    where the sample's other dump of the same run (same measurements) has 4, 1 and 4. No
    single-node run has more GPUs than its node, so a role wider than the node whose width is
    ``moe_tp x moe_ep`` is replayed as it ran: that width divided by the EP size, with the
    experts split by EP across it."""
    node = GPUS_PER_NODE.get(row.system)
    ep, mtp = role.moe_ep or 1, role.moe_tp or 1
    if node is None or ep < 2 or mtp < 2:
        return
    if role.attention_dp == 1 and role.tp > node and role.tp == mtp * ep:
        role.tp, role.moe_tp = mtp, mtp // ep
    elif role.tp == 1 and role.attention_dp > node and role.attention_dp == mtp * ep:
        # the engine's requests (batch_size per encoded rank, so max_num_seqs) stay as they were
        role.attention_dp, role.moe_tp = mtp, mtp // ep


def data_source(raw: dict[str, Any]) -> str:
    """Where the row was measured: ``inferencemax`` (InferenceMAX runs, ``source_file=2026-...``
    and ``db-dump/...``; client and launch scripts public in InferenceX) or ``gap-analysis``
    (AIConfigurator's own runs, ``aic-auto-gap-analysis`` and ``*-gap-analysis.csv``; the
    former deployed and loaded by AIConfigurator's tooling, :func:`aic_generated`).
    docs/fidelity.md compares the two."""
    src = (raw.get("silicon_data_source") or "").split(";")[0]
    return "inferencemax" if src.startswith(("source_file=2026-", "db-dump/")) else "gap-analysis"


def aic_generated(raw: dict[str, Any]) -> bool:
    """Whether the row is one of AIConfigurator's own gap-analysis runs
    (``source_file=.../aic-auto-gap-analysis/data/<system>/<backend>/<version>/<model>.csv``).

    The sources that carry an image name them as Dynamo runtime containers
    (``nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.9.0``), and their backend versions are
    the ones AIConfigurator's generator kept engine templates for (TensorRT-LLM 1.0.0rc3 and
    1.2.0rc6.post1, vLLM 0.12.0, SGLang 0.5.1.post1 and 0.5.6.post2,
    ``src/aiconfigurator/generator/config/backend_templates/``): they are replayed as that
    tooling deploys and loads an engine (:func:`generated_engine`, :func:`client_options`).
    The ``qwen3.5-397b-gap-analysis.csv`` and ``kimi-k2.5-gap-analysis.csv`` rows name no
    deployment tooling and keep the InferenceMAX replay."""
    return "aic-auto-gap-analysis/" in (raw.get("silicon_data_source") or "")


def model_halves(rows: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    """(fitting half, held-out half) of the models: the distinct (aliased) models of the agg
    rows sorted by name, taken alternately. Any constant fitted on the sample is fitted on
    the first half and reported on the second."""
    ordered = sorted({MODEL_ALIASES.get(r["model_path"], r["model_path"]) for r in rows if r["mode"] == "agg"})
    return set(ordered[0::2]), set(ordered[1::2])


# Tokens a chat template adds around one user message with the generation prompt: Qwen3's
# "<|im_start|>user\n" ... "<|im_end|>\n<|im_start|>assistant\n" (8); Llama-3.1 Instruct's
# begin-of-text, system header with its knowledge-cutoff and date lines, user and assistant
# headers (about 37).
CHAT_TEMPLATE_TOKENS = {"Qwen/Qwen3-32B": 8, "Qwen/Qwen3-235B-A22B-FP8": 8,
                        "meta-llama/Meta-Llama-3.1-8B": 37}


def client_options(row: Row, launch: bool = True) -> dict[str, Any]:
    """The client file (servesim-benchclient's ``bench_client`` format) for the row.

    AIConfigurator's own runs (:func:`aic_generated`) are loaded by its evaluation pipeline's
    client, ``aiconfigurator eval``'s ``genai_perf`` runner
    (``src/aiconfigurator/eval/benchmarks/genai_perf_runner.py``, genai-perf until commit
    ``4361371a6`` of 2025-10-14, AIPerf after, removed in ``c0c44d911`` of 2026-03-03):
    ``--synthetic-input-tokens-mean ISL --synthetic-input-tokens-stddev 0
    --output-tokens-mean OSL --output-tokens-stddev 0`` with ``min_tokens`` = ``max_tokens``
    = OSL and ``ignore_eos``, ``--concurrency c --request-count 10c
    --warmup-request-count 2c``: every prompt has exactly ISL tokens and every answer OSL,
    which is range ratio 1. The runner posts to ``/v1/chat/completions``, so the server wraps
    the ISL tokens in the model's chat template (:data:`CHAT_TEMPLATE_TOKENS`): a burst of
    eight 1,024-token prompts no longer fits one 8,192-token pass. ``launch`` False replays
    them with the InferenceMAX client.

    Both clients also send 2 x concurrency warm-ups first (copies of the first prompt) and wait
    for them; they are left out here (``num_warmups`` unset). With prefix caching off the timed
    run starts on an idle, empty engine either way: replaying them (``num_warmups`` with
    ``workload.warmup: {requests: N, wait: true}``) left all of 24 rows drawn at random
    unchanged and took 45 % longer."""
    fixed = launch and row.generated
    template = CHAT_TEMPLATE_TOKENS.get(row.model, 0) if fixed else 0
    return {
        "client": "inferencemax", "random_input_len": row.isl + template, "random_output_len": row.osl,
        "random_range_ratio": 1.0 if fixed else RANGE_RATIO,
        "num_prompts": PROMPTS_PER_SLOT * row.concurrency,
        "max_concurrency": row.concurrency, "request_rate": "inf", "ignore_eos": True,
    }


def _timing(row: Row, role: Role, timing: dict[str, Any] | None, launch: bool = True) -> dict[str, Any]:
    aic: dict[str, Any] = {"type": "aic", "model": row.model, "system": row.system, "tp": role.tp,
                           "pp": role.pp, "attention_dp": role.attention_dp}
    if role.moe_tp:
        aic["moe_tp"] = role.moe_tp
    if role.moe_ep:
        aic["moe_ep"] = role.moe_ep
    if row.gemm:
        aic["gemm_dtype"] = row.gemm
    if row.moe:
        aic["moe_dtype"] = row.moe
    if kv_fp8(row):
        aic["kv_cache_dtype"] = "fp8"
    aic["gpu_memory_utilization"] = GPU_MEMORY_FRACTION.get(row.backend, 0.9)
    if launch and row.generated and row.backend == "trtllm":
        aic["gpu_memory_utilization"] = GENERATED_TRTLLM_MEMORY_FRACTION
    if timing is None:
        return aic
    wrapped = {**timing, "inner": aic}
    if launch and timing.get("type") == "overhead":
        if row.generated and row.backend == "sglang":
            # the generator captures a CUDA graph for every batch size up to the row's: no padding
            wrapped.setdefault("cuda_graph_padding", False)
        elif script_limits(row).get("trtllm"):
            # the Llama-3.1-70B and gpt-oss scripts' cuda_graph_config: enable_padding: true
            wrapped.setdefault("cuda_graph_padding", True)
    return wrapped


def backend_options(row: Row, role: Role) -> dict[str, Any]:
    """The backend section (``engine.<backend>``) the row's launch script implies, or {}.

    InferenceMAX's Llama-3.1-70B TensorRT-LLM scripts (InferenceX
    ``benchmarks/70b_fp8_b200_trt_slurm.sh``, ``70b_fp8_h200_trt_slurm.sh``,
    ``70b_fp4_b200_trt_slurm.sh``) turn on TensorRT-LLM's batch waiting for 1k/1k runs below
    TP 8 (``batch_wait_timeout_iters: 20``, ``batch_wait_max_tokens_ratio: 0.9``; "by default
    they are all zeros").

    InferenceMAX's SGLang scripts for Qwen3.5 and DeepSeek-R1/V3 on Blackwell (InferenceX
    ``benchmarks/single_node/qwen3.5_fp8_b200.sh``, the DeepSeek-R1 FP4 B200 scripts) set
    ``--scheduler-recv-interval`` to 10, and to 30 from concurrency 16 ("relax to ~30
    requests between scheduler recv polls"); the H200 Qwen3.5 script does not.
    """
    if (row.backend == "sglang" and row.system.startswith(BLACKWELL)
            and row.model in ("Qwen/Qwen3.5-397B-A17B", "deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")):
        return {"sglang": {"scheduler_recv_interval": 30 if row.concurrency >= 16 else 10}}
    if (row.backend == "trtllm" and row.model == "meta-llama/Meta-Llama-3.1-70B" and row.isl == 1024
            and row.osl == 1024 and role.tp < 8):
        return {"trtllm": {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}}
    return {}


def batched_tokens(row: Row, launch: bool = True) -> int:
    """The row's ``--max-num-batched-tokens``: 8,192, or twice the ISL where the launch script
    says so.

    InferenceMAX's MiniMax-M2.5 vLLM scripts for B200 and B300 set
    ``--max-num-batched-tokens "$((ISL * 2 ))"`` from the commit that moved them to vLLM 0.19.0
    (InferenceX ``bddbf4031``, "B200 Minimax FP8 vllm upgrade", then the FP4 and B300 scripts;
    ``benchmarks/single_node/fixed_seq_len/minimaxm2.5_{fp8,fp4}_{b200,b300}.sh``), so the
    0.19.0 rows ran with 2,048 tokens per pass at ISL 1,024 and 16,384 at 8,192. Before, the
    scripts set none, and vLLM's default for a GPU of 70 GiB or more was 8,192
    (``EngineArgs.get_batch_defaults``; 16,384 on GPUs of 160 GiB only from vLLM PR #51726,
    after these releases). ``launch`` False keeps 8,192.
    """
    if (launch and row.backend == "vllm" and row.source == "inferencemax" and row.version == "0.19.0"
            and row.model == "MiniMaxAI/MiniMax-M2.5" and row.system.startswith(("b200", "b300"))):
        return 2 * row.isl
    return MAX_BATCHED_TOKENS


LLAMA_70B = "meta-llama/Meta-Llama-3.1-70B"

# (model, system prefix, gemm precision) -> (--chunked-prefill-size, --max-prefill-tokens) of
# InferenceMAX's SGLang scripts while the rows ran (InferenceX benchmarks/single_node/, from
# their first commit to April 2026): qwen3.5_fp8_b200.sh, qwen3.5_fp4_b200.sh and
# qwen3.5_fp4_b300.sh 32,768 and 32,768; qwen3.5_fp8_b300.sh 16,384 and 16,384;
# qwen3.5_fp8_h200.sh --chunked-prefill-size 16,384 only (SGLang's default
# --max-prefill-tokens is 16,384). The bf16 scripts set none at first and 32,768 later, so
# their rows keep the defaults.
SGLANG_PREFILL_LIMITS = {
    ("Qwen/Qwen3.5-397B-A17B", "b200", "fp8"): (32768, 32768),
    ("Qwen/Qwen3.5-397B-A17B", "b200", "nvfp4"): (32768, 32768),
    ("Qwen/Qwen3.5-397B-A17B", "b300", "nvfp4"): (32768, 32768),
    ("Qwen/Qwen3.5-397B-A17B", "b300", "fp8"): (16384, 16384),
    ("Qwen/Qwen3.5-397B-A17B", "h200", "fp8"): (16384, 16384),
}


def script_limits(row: Row) -> dict[str, Any]:
    """Token limits and chunking the row's InferenceMAX launch script sets, or {}.

    The Llama-3.1-70B TensorRT-LLM scripts (InferenceX ``benchmarks/70b_fp8_b200_trt_slurm.sh``,
    ``70b_fp8_h200_trt_slurm.sh``, ``70b_fp4_b200_trt_slurm.sh``, until their removal in
    ``026d16b82``) start ``trtllm-serve ... --max_num_tokens 16384`` without
    ``--enable_chunked_prefill`` (off by default, ``tensorrt_llm/commands/serve.py``), so a
    context is scheduled whole and up to 16,384 tokens run per pass; their
    ``cuda_graph_config: enable_padding: true`` is the ``overhead`` model's
    ``cuda_graph_padding`` (:func:`_timing`).

    The Qwen3.5 SGLang scripts set ``--chunked-prefill-size`` and ``--max-prefill-tokens``
    (:data:`SGLANG_PREFILL_LIMITS`).

    The gpt-oss TensorRT-LLM scripts (InferenceX ``benchmarks/gptoss_fp4_b200_trt_docker.sh``
    from November 2025, then ``gptoss_fp4_b200_trt.sh`` and ``gptoss_fp4_h200_trt.sh``) pass
    ``--max_num_tokens 20000`` without chunking and ``cuda_graph_config: enable_padding:
    true``."""
    if row.mode != "agg":
        return {}
    if row.backend == "trtllm" and row.model == LLAMA_70B and not row.generated:
        return {"enable_chunked_prefill": False, "trtllm": {"max_num_tokens": 16384}}
    if row.backend == "trtllm" and row.model in GPT_OSS and row.source == "inferencemax":
        return {"enable_chunked_prefill": False, "trtllm": {"max_num_tokens": 20000}}
    if row.backend == "sglang":
        limits = SGLANG_PREFILL_LIMITS.get((row.model, row.system.split("_")[0], row.gemm or ""))
        if limits:
            return {"sglang": {"chunked_prefill_size": limits[0], "max_prefill_tokens": limits[1]}}
    return {}


# SGLang versions whose generator template renders --enable-mixed-chunk from the mapped key
# (``backend_templates/sglang/cli_args.0.5.6.post2.j2``).
MIXED_CHUNK_TEMPLATES = frozenset({"0.5.6.post2"})


def generated_engine(row: Row) -> dict[str, Any]:
    """The engine settings AIConfigurator's generator writes for an agg deployment, for its own
    runs (:func:`aic_generated`), or {}.

    TensorRT-LLM (``cli/backends/trtllm.py`` from September 2025, then
    ``generator/rule_plugin/trtllm.rule``; template ``extra_engine_args.1.0.0rc3.yaml.j2``):
    ``max_num_tokens`` = batch size + ISL + 1,500 (rounded up to 32 tokens in the rule
    plugin), ``enable_chunked_prefill: false`` ("we're assuming no chunked prefill"),
    ``free_gpu_memory_fraction`` 0.80, CUDA graphs captured for every batch size from 1 to
    the batch size (so a decode batch is never padded: the ``overhead`` model's TensorRT-LLM
    default). A context is scheduled whole, so a pass holds one ISL-4,096 prompt or two of
    1,024 tokens, not eight.

    SGLang (``generator/rule_plugin/sglang.rule``, template ``cli_args.0.5.1.post1.j2``):
    ``--max-prefill-tokens`` ISL + 1,500 and CUDA graphs for every batch size. The rule also
    sets ``enable_mixed_chunk`` for agg, which ``backend_config_mapping.yaml`` names
    ``enable-mixed-chunk``; the 0.5.1.post1 template renders the flag only for a key
    ``enable-mix-chunk``, so those servers ran without it, and only the templates of
    :data:`MIXED_CHUNK_TEMPLATES` pass it (a prefill pass then carries the running decodes).

    vLLM: the 0.12.0 template (``cli_args.0.12.0.j2``) passes no ``--max-num-batched-tokens``,
    so vLLM's default (8,192 here) stands and nothing changes."""
    if not row.generated or row.mode != "agg":
        return {}
    if row.backend == "trtllm":
        bs = row.batch_size or row.concurrency
        return {"enable_chunked_prefill": False,
                "trtllm": {"max_num_tokens": -(-(bs + row.isl + 1500) // 32) * 32}}
    if row.backend == "sglang":
        sglang: dict[str, Any] = {"max_prefill_tokens": row.isl + 1500}
        if row.version in MIXED_CHUNK_TEMPLATES:
            sglang["enable_mixed_chunk"] = True
        return {"sglang": sglang}
    return {}


# The backends' native KV block sizes (servesim's defaults: core/src/servesim/config/engine.py).
NATIVE_BLOCK = {"vllm": 64, "sglang": 1, "trtllm": 32}


def _blocks_for_load(row: Row, seqs: int) -> int:
    """KV blocks that hold ``seqs`` requests at full length: the pool of a row whose run
    completed where AIConfigurator's memory estimate leaves no room for the KV cache."""
    block = NATIVE_BLOCK.get(row.backend, 16)
    return seqs * -(-(row.isl + row.osl) // block) + 1


def _engine(row: Row, role: Role, timing: dict[str, Any] | None, launch: bool = True,
            kv_fallback: bool = False) -> dict[str, Any]:
    seqs = max(1, -(-(role.max_num_seqs or row.concurrency) // role.attention_dp))
    return {
        "backend": row.backend, "num_gpu_blocks": _blocks_for_load(row, seqs) if kv_fallback else "auto",
        "dp_size": role.attention_dp, "max_num_seqs": seqs,
        "max_num_batched_tokens": batched_tokens(row, launch), "enable_prefix_caching": False,
        "timing_model": _timing(row, role, timing, launch), **(_launch_options(row, role) if launch else {}),
    }


def engine_loop(row: Row, role: Role) -> dict[str, Any]:
    """How the row's engine loop overlaps scheduling with execution, or {}.

    TensorRT-LLM runs its overlap scheduler unless ``disable_overlap_scheduler`` is set
    (``TorchLlmArgs``: false by default). InferenceMAX's TensorRT-LLM scripts leave it unset
    (InferenceX ``benchmarks/70b_fp8_b200_trt_slurm.sh`` and its siblings), and
    AIConfigurator's generator writes ``disable_overlap_scheduler`` false for agg and decode
    workers and true for prefill workers (``generator/rule_plugin/trtllm.rule`` in
    ai-dynamo/aiconfigurator). servesim's own default steps without the overlap, as the
    reference does, so every TensorRT-LLM row sets it here.

    vLLM schedules asynchronously by default from 0.14.0 (its release notes: "Async
    scheduling is now enabled by default", PR #27614), except with pipeline parallelism
    (``VllmConfig.__post_init__`` in ``vllm/config/vllm.py``); the rows of those releases (and
    of nightlies after them) set ``engine.vllm.async_scheduling``, on agg and prefill
    workers (servesim does not model it on decode workers). InferenceMAX's Llama-3.1-70B vLLM
    scripts, whose rows name no release, turn it on themselves (``async-scheduling: true`` in
    the config file of InferenceX ``benchmarks/70b_fp8_b200_docker.sh``,
    ``70b_fp4_b200_docker.sh``, ``70b_fp8_h200_slurm.sh`` and ``70b_fp8_h100_slurm.sh``), as
    do the gpt-oss scripts (:func:`_script_async`); other rows that name no release keep it
    off."""
    if row.backend == "trtllm":
        return {"trtllm": {"disable_overlap_scheduler": role is row.roles.get("prefill")}}
    if row.backend == "vllm" and role.pp == 1 and (_vllm_async_by_default(row.version) or _script_async(row)):
        # said on the decode role too: a split's decode engine inherits the base engine's keys
        return {"vllm": {"async_scheduling": role is not row.roles.get("decode")}}
    if row.backend == "sglang":
        return {"sglang": {"overlap_schedule": True, "overlap_read_lag": True}}
    return {}


def _script_async(row: Row) -> bool:
    """Whether the row's launch script asks vLLM for async scheduling (:func:`engine_loop`):
    the Llama-3.1-70B scripts, and the gpt-oss ones from their first (``async-scheduling:
    true`` in InferenceX ``benchmarks/gptoss_fp4_h100_slurm.sh`` of September 2025, then
    ``gptoss_fp4_{b200,h100,h200}.sh``)."""
    return row.source == "inferencemax" and (row.model == LLAMA_70B or row.model in GPT_OSS)


def _vllm_async_by_default(version: str) -> bool:
    """Whether vLLM ``version`` (a release such as ``0.16.0`` or ``nightly-...``) schedules
    asynchronously by default: from 0.14.0 on."""
    if version.startswith("nightly"):
        return True
    parts = version.split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= (0, 14)
    except (ValueError, IndexError):
        return False


def _launch_options(row: Row, role: Role) -> dict[str, Any]:
    out = backend_options(row, role)
    for extra in (script_limits(row), generated_engine(row), engine_loop(row, role)):
        for key, value in extra.items():
            out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def sim_config(row: Row, client_path: str, timing: dict[str, Any] | None = None,
               launch: bool = True, kv_fallback: bool = False) -> dict[str, Any]:
    """servesim's configuration for the row; ``timing`` wraps ``aic`` (its ``inner``);
    ``launch`` False leaves out the launch scripts' scheduler options (:func:`backend_options`);
    ``kv_fallback`` sizes the KV pool for the row's load instead of from memory
    (:func:`_blocks_for_load`)."""
    workload = {"trace": {"format": "bench_client", "path": client_path}, "concurrency": row.concurrency}
    if row.mode == "agg":
        role = row.roles["agg"]
        return {"engine": _engine(row, role, timing, launch, kv_fallback),
                "cluster": {"workers": role.workers}, "workload": workload}
    import silicon_kv

    pre, dec = row.roles["prefill"], row.roles["decode"]
    link = silicon_kv.transfer_options(row, kv_fp8(row))
    base = {**_engine(row, pre, timing, launch, kv_fallback), **link}
    return {
        "engine": base,
        "cluster": {"prefill_workers": pre.workers, "decode_workers": dec.workers,
                    "prefill_engine": {},
                    "decode_engine": {**_engine(row, dec, timing, launch, kv_fallback), **link}},
        "workload": workload,
    }
