"""The benchmark cases of issue 8 and how each maps onto servesim and onto the reference.

Both sides get every knob that shapes the simulation set explicitly to the same value,
instead of trusting that their defaults agree: engine block size, ``num_gpu_blocks``,
``max_num_seqs``, ``max_num_batched_tokens``, ``speedup_ratio``, prefix caching, chunked
prefill, preemption mode, trace block size, worker count and router. After a run,
:func:`config_mismatches` compares what each side reports it actually used.
"""

from __future__ import annotations

from typing import Any

import attrs
from attrs import frozen
from perf_trace import TraceSpec

#: Engine block size per backend: each engine's native default (dynamo-mocker.md §1), which
#: servesim's backends and the reference both resolve to when ``block_size`` is unset.
BACKEND_BLOCK_SIZE = {"vllm": 64, "sglang": 1, "trtllm": 32}

#: The reference's router names for servesim's ``cluster.router`` values.
PEER_ROUTER = {"round_robin": "round_robin", "kv": "kv_router"}

TRACE_BLOCK_SIZE = 512
DEFAULT_GPU_BLOCKS = 16384


@frozen(kw_only=True)
class Case:
    """One benchmark case: a trace and a deployment, plus the targets it is judged by.

    ``kv_tokens`` None keeps the default pool of 16384 blocks of the backend's block size.
    ``targets``: ``"speed"`` (servesim req/s >= 0.5x the reference's) and/or ``"memory"``
    (servesim peak RSS <= the reference's).
    """

    name: str
    n: int
    rate: float
    backend: str = "vllm"
    workers: int = 1
    router: str = "round_robin"
    kv_tokens: int | None = None
    #: A prefill/decode split ``(prefill workers, decode workers)``; ``workers`` is then unused.
    split: tuple[int, int] | None = None
    targets: tuple[str, ...] = ()
    note: str = ""

    @property
    def block_size(self) -> int:
        return BACKEND_BLOCK_SIZE[self.backend]

    @property
    def num_gpu_blocks(self) -> int:
        if self.kv_tokens is None:
            return DEFAULT_GPU_BLOCKS
        return self.kv_tokens // self.block_size

    @property
    def trace(self) -> TraceSpec:
        return TraceSpec(n=self.n, rate=self.rate, block_size=TRACE_BLOCK_SIZE)

    def engine_knobs(self) -> dict[str, Any]:
        """The engine arguments both sides are given (the reference's key names)."""
        return {
            "block_size": self.block_size,
            "num_gpu_blocks": self.num_gpu_blocks,
            "max_num_seqs": 256,
            "max_num_batched_tokens": 8192,
            "speedup_ratio": 1.0,
            "enable_prefix_caching": True,
            "enable_chunked_prefill": True,
            "preemption_mode": "lifo",
        }

    def servesim_sets(self) -> list[str]:
        """``servesim run --set`` overrides (the trace path is added by the caller)."""
        sets = [f"engine.backend={self.backend}"]
        sets += [f"engine.{k}={_yaml(v)}" for k, v in self.engine_knobs().items()]
        sets += [f"cluster.workers={self.workers}", f"cluster.router={self.router}",
                 f"workload.trace.trace_block_size={TRACE_BLOCK_SIZE}"]
        if self.split is not None:
            sets += [f"cluster.prefill_workers={self.split[0]}",
                     f"cluster.decode_workers={self.split[1]}"]
        return sets

    def peer_sets(self) -> list[str]:
        """``peer_dynamo.py --set`` overrides (values are JSON there)."""
        sets = [f"engine_type={self.backend}"]
        sets += [f"engine.{k}={_json(v)}" for k, v in self.engine_knobs().items()]
        sets += [f"num_workers={self.workers}", f"router_mode={PEER_ROUTER[self.router]}",
                 f"trace_block_size={TRACE_BLOCK_SIZE}"]
        if self.split is not None:
            sets += ["mode=disagg", f"num_prefill_workers={self.split[0]}",
                     f"num_decode_workers={self.split[1]}"]
        return sets

    def sized(self, n: int) -> Case:
        return attrs.evolve(self, n=n)


def _yaml(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _json(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else (
        f'"{v}"' if isinstance(v, str) else str(v))


#: KV capacity given to SGLang: vLLM's default pool (16384 blocks x 64 tokens). SGLang's own
#: default, 16384 one-token blocks, holds about six of these prompts and would make the case
#: a second saturated case instead of a backend comparison at the same load.
SGLANG_KV_TOKENS = DEFAULT_GPU_BLOCKS * BACKEND_BLOCK_SIZE["vllm"]

CASES: tuple[Case, ...] = (
    Case(name="vllm-1w", n=10_000, rate=8.0, targets=("speed",)),
    Case(name="vllm-1w-100k", n=100_000, rate=8.0, targets=("memory",)),
    Case(name="vllm-4w-rr", n=10_000, rate=32.0, workers=4,
         note="4 workers at 32 req/s: each loaded like one worker at 8 req/s"),
    Case(name="vllm-4w-kv", n=10_000, rate=32.0, workers=4, router="kv", targets=("speed",)),
    Case(name="sglang-1w", n=10_000, rate=8.0, backend="sglang", kv_tokens=SGLANG_KV_TOKENS),
    Case(name="trtllm-1w", n=10_000, rate=8.0, backend="trtllm"),
    Case(name="vllm-1w-sat", n=10_000, rate=40.0,
         note="saturated: 40 req/s on one worker, the queue grows for the whole run"),
    Case(name="vllm-disagg-2p4d-kv", n=10_000, rate=32.0, router="kv", split=(2, 4),
         note="prefill/decode split: 2 prefill and 4 decode workers, KV-aware router"),
)

QUICK_N = 1000


def select_cases(names: list[str] | None, quick: bool, n_override: int | None) -> list[Case]:
    """The cases to run, in table order; unknown names raise ``KeyError`` naming them.

    ``quick`` runs ``QUICK_N``-request versions and drops cases that then duplicate another
    (the 100,000-request case becomes the 10,000-request one).
    """
    by_name = {c.name: c for c in CASES}
    unknown = [n for n in names or [] if n not in by_name]
    if unknown:
        raise KeyError(", ".join(unknown))
    chosen = [by_name[n] for n in names] if names else list(CASES)
    n_new = n_override if n_override is not None else (QUICK_N if quick else None)
    if n_new is None:
        return chosen
    out: list[Case] = []
    seen: set[tuple[Any, ...]] = set()
    for case in chosen:
        sized = case.sized(n_new)
        key = attrs.astuple(attrs.evolve(sized, name="", targets=(), note=""))
        if key not in seen:
            seen.add(key)
            out.append(sized)
    return out


#: Resolved engine keys that must agree between the two sides' reported configurations.
CHECKED_ENGINE_KEYS = (
    "backend", "block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens",
    "speedup_ratio", "decode_speedup_ratio", "enable_prefix_caching", "enable_chunked_prefill",
    "preemption_mode", "prefill_schedule_interval", "timing_model",
)
CHECKED_BACKEND_KEYS = {
    "sglang": ("max_prefill_tokens", "chunked_prefill_size", "clip_max_new_tokens",
               "schedule_conservativeness"),
    "trtllm": ("capacity_scheduler_policy",),
}


def config_mismatches(case: Case, servesim_report: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """``key: servesim value != reference value`` for every checked setting that differs.

    A prefill/decode split is checked role by role: the reference reports one launch
    configuration per role (``engine_args.prefill`` / ``.decode``) and its worker counts by
    role, and both roles run servesim's one ``engine`` section."""
    mine = servesim_report.get("config", {})
    engine = mine.get("engine", {})
    args = peer.get("engine_args", {})
    roles = (("prefill", "decode") if case.split is not None else ("",))
    pairs: list[tuple[str, Any, Any]] = []
    for role in roles:
        theirs = (args.get(role, {}) if role else args).get("engine", {})
        label = f"{role}." if role else ""
        pairs += [(label + k, engine.get(k), theirs.get(k)) for k in CHECKED_ENGINE_KEYS]
        for k in CHECKED_BACKEND_KEYS.get(case.backend, ()):
            pairs.append((f"{label}{case.backend}.{k}", engine.get(case.backend, {}).get(k),
                          theirs.get(case.backend, {}).get(k)))
    cluster = mine.get("cluster", {})
    workers = peer.get("workers", {})
    for role in roles:
        key = f"{role}_workers" if role else "workers"
        pairs.append((key, cluster.get(key), workers.get(role or "aggregated")))
    pairs.append(("router", PEER_ROUTER.get(cluster.get("router", "")), peer.get("router_mode")))
    trace = mine.get("workload", {}).get("trace") or {}
    pairs.append(("trace_block_size", trace.get("trace_block_size"), TRACE_BLOCK_SIZE))
    return [f"{k}: {a!r} != {b!r}" for k, a, b in pairs if a != b]
