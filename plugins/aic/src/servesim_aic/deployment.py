"""One resolved AIC deployment, its compiled engine (cached in memory and on disk) and its
KV capacity.

Compiling a model into an ``EngineSpec`` walks the model's operations against the measured
database and takes seconds; the spec bytes depend only on the deployment and the installed
aiconfigurator-core, so they are kept on disk keyed by both, and one ``AicEngine`` is kept
per deployment in this process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

from attrs import asdict, frozen
from servesim.config.engine import EngineConfig

from servesim_aic import catalog
from servesim_aic.config import AicTimingConfig, normalize_dtype

# Which memory fraction each backend's KV sizing means (aiconfigurator_core.sdk.memory):
# vLLM and SGLang take a fraction of total GPU memory, TRT-LLM a fraction of free memory.
FRACTION_KIND = {"vllm": "of_total", "sglang": "of_total", "trtllm": "of_free"}

_ENGINES: dict[str, Any] = {}


@frozen
class Deployment:
    """Everything that identifies a compiled engine (the disk and memory cache key)."""

    model: str
    system: str
    backend: str
    backend_version: str
    tp: int
    pp: int
    attention_dp: int
    moe_tp: int | None
    moe_ep: int | None
    gemm_dtype: str | None
    moe_dtype: str | None
    fmha_dtype: str | None
    kv_cache_dtype: str | None
    comm_dtype: str | None

    def key(self) -> str:
        ident = {**asdict(self), "aiconfigurator_core": version("aiconfigurator-core")}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]

    def compile_kwargs(self) -> dict[str, Any]:
        return {
            "tp_size": self.tp,
            "pp_size": self.pp,
            "attention_dp_size": self.attention_dp,
            "moe_tp_size": self.moe_tp,
            "moe_ep_size": self.moe_ep,
            "gemm_quant_mode": self.gemm_dtype,
            "moe_quant_mode": self.moe_dtype,
            "fmha_quant_mode": self.fmha_dtype,
            "kvcache_quant_mode": self.kv_cache_dtype,
            "comm_quant_mode": self.comm_dtype,
        }


def resolve(cfg: AicTimingConfig, engine: EngineConfig) -> Deployment:
    """The deployment ``cfg`` names on ``engine`` (backend and attention DP default to the
    engine's); ValueError naming the option for a backend or version the system lacks."""
    backend = cfg.backend or engine.backend
    valid = catalog.backends(cfg.system)
    if backend not in valid:
        raise ValueError(f"backend {backend!r} has no AIConfigurator data on {cfg.system}; "
                         f"expected one of: {catalog.one_of(valid)}")
    try:
        literal = catalog.resolve_version(cfg.system, backend, cfg.backend_version)
    except ValueError:
        slots = catalog.backend_versions(cfg.system, backend)
        raise ValueError(f"backend_version {cfg.backend_version!r} is not available for {backend} on "
                         f"{cfg.system}; expected one of: {catalog.one_of(sorted({*slots, *slots.values()}))}"
                         ) from None
    adp = cfg.attention_dp if cfg.attention_dp is not None else engine.dp_size
    if adp % engine.dp_size:
        raise ValueError(f"attention_dp ({adp}) must be a multiple of engine.dp_size ({engine.dp_size})")
    return Deployment(
        cfg.model, cfg.system, backend, literal, cfg.tp, cfg.pp, adp, cfg.moe_tp, cfg.moe_ep,
        *(normalize_dtype(getattr(cfg, n)) for n in
          ("gemm_dtype", "moe_dtype", "fmha_dtype", "kv_cache_dtype", "comm_dtype")),
    )


@contextlib.contextmanager
def quiet() -> Any:
    """aiconfigurator-core logs each low-fidelity data file it falls back to while compiling;
    a replay's report, not its log, is where fidelity belongs."""
    log = logging.getLogger("aiconfigurator_core")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def cache_dir(cfg: AicTimingConfig) -> Path:
    if cfg.cache_dir:
        return Path(cfg.cache_dir)
    env = os.environ.get("SERVESIM_AIC_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "servesim" / "aic"


def compiled_spec(dep: Deployment, directory: Path) -> bytes:
    """The deployment's ``EngineSpec`` bytes, from ``directory`` or compiled and stored."""
    path = directory / f"{dep.key()}.spec"
    try:
        return path.read_bytes()
    except OSError:
        pass
    from aiconfigurator_core.sdk.engine import compile_engine

    with quiet():
        spec = bytes(compile_engine(dep.model, dep.system, dep.backend, dep.backend_version,
                                    **dep.compile_kwargs()))
    try:  # a cache that cannot be written only costs the next run a compile
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(spec)
        os.replace(tmp, path)
    except OSError:
        pass
    return spec


def engine_for(dep: Deployment, directory: Path) -> Any:
    """One ``AicEngine`` per deployment in this process."""
    key = dep.key()
    eng = _ENGINES.get(key)
    if eng is None:
        from aiconfigurator_core import AicEngine

        eng = _ENGINES[key] = AicEngine.from_spec(compiled_spec(dep, directory), None)
    return eng


def num_gpu_blocks(dep: Deployment, cfg: AicTimingConfig, engine: EngineConfig, block_size: int) -> int:
    """KV blocks per rank that fit beside the weights and activations in
    ``gpu_memory_utilization`` of the GPU's memory (aiconfigurator's KV-cache estimate, for
    the engine's token and sequence budgets)."""
    from aiconfigurator_core.sdk.memory import estimate_num_gpu_blocks

    with quiet():
        blocks = estimate_num_gpu_blocks(
            dep.model, dep.system, dep.backend, dep.backend_version,
            scheduler_block_size=block_size,
            max_num_tokens=engine.max_num_batched_tokens or 8192,
            max_batch_size=engine.max_num_seqs or 256,
            memory_fraction_kind=FRACTION_KIND[dep.backend],
            memory_fraction_value=cfg.gpu_memory_utilization,
            **dep.compile_kwargs(),
        )
    if blocks < 1 or not math.isfinite(blocks):
        raise ValueError(f"{dep.model} leaves no room for a KV cache on {dep.tp * dep.pp} x {dep.system}")
    return int(blocks)
